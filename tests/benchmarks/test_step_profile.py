"""benchmarks.step_profile: each traced operation is named with the model code it comes from (the op_name XLA keeps),
and the operations are summed by that source with the layers merged."""

import jax
import jax.numpy as jnp
import pytest

from benchmarks import step_profile


def _layers(x):
  for i in range(2):
    with jax.named_scope(f"layer_{i}"):
      x = jnp.sort(jnp.tanh(x @ x + 1.0), axis=-1)  # A sort: XLA fuses nothing across it.
  return x.sum()


def test_operations_are_attributed_to_their_source_with_layers_merged(tmp_path):
  f = jax.jit(_layers)
  x = jnp.ones((256, 256)) / 256
  sources = step_profile.op_sources([f.lower(x).compile().as_text()])
  assert all("layer_0" not in s and "layer_1" not in s for s in sources.values())
  assert any(s.startswith("layer_N/") for s in sources.values())
  assert all(s for s in sources.values())  # An op XLA kept no op_name for is named by its shape.
  f(x).block_until_ready()
  with jax.profiler.trace(str(tmp_path)):
    for _ in range(3):
      f(x).block_until_ready()
  top, by_source, traced_ms = step_profile.top_ops(tmp_path, 50, 3, sources)
  assert top and traced_ms > 0 and abs(sum(share for _, _, share in by_source) - 1) < 0.01
  # The two layers' operations are summed into their shared sources.
  layers = {source for _, _, _, source in top if source.startswith("layer_N/")}
  assert {"layer_N/dot_general", "layer_N/jit(sort)/sort"} <= layers
  # Both sides sum milliseconds rounded to 3 decimals (step_profile.top_ops): k of them differ by <= k x 0.0005.
  assert sum(ms for _, ms, _, source in top if source in layers) == pytest.approx(
      sum(ms for source, ms, _ in by_source if source in layers), abs=0.01)

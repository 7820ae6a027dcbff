"""MFU's FLOP count: the closed form of launch.flops matches the encoder's parameters and a hand count."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder import matmul
from encoder.config import preset
from encoder.model import Encoder
from launch import flops


def layer_kernel_entries(params) -> int:
  """Kernel entries of the encoder's transformer layers."""
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  return sum(int(np.prod(leaf.shape)) for path, leaf in flat
             if str(path[0].key).startswith("layer_") and path[-1].key == "kernel")


@pytest.mark.parametrize("name", ["tiny", "minilm", "base"])
def test_closed_form_matches_the_parameter_tree(name):
  cfg = preset(name, vocab_size=1000)
  ids = jnp.zeros((1, 8), jnp.int32)
  params = jax.eval_shape(lambda: Encoder(cfg).init(jax.random.key(0), ids))["params"]
  h, i = cfg.hidden_size, cfg.intermediate_size
  assert layer_kernel_entries(params) == cfg.num_layers * (4 * h * h + 2 * h * i)


@pytest.mark.parametrize("name", ["tiny", "modernbert-base"])
def test_closed_form_counts_a_gated_feed_forward(name):
  """A gated FFN's kernels (input and gate [H, 2, I], output [I, H]) are 3 H I entries per layer, as flops counts."""
  cfg = preset(name, vocab_size=1000, gated_feed_forward=True)
  params = jax.eval_shape(lambda: Encoder(cfg).init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32)))["params"]
  h, i = cfg.hidden_size, cfg.intermediate_size
  assert layer_kernel_entries(params) == cfg.num_layers * (4 * h * h + 3 * h * i)
  attention = 12 * cfg.num_layers * h * 8**2
  assert flops.encoder_train_flops(cfg, 1, 8) == 6 * layer_kernel_entries(params) * 8 + attention


def test_minilm_step_flops_by_hand():
  cfg = preset("minilm", vocab_size=30522)  # 6 x 384, FFN 1536: 1,769,472 kernel entries per layer.
  tokens = 32 * 128
  by_hand = 6 * 6 * 1_769_472 * tokens + 12 * 6 * 384 * 128**2 * 32
  assert flops.encoder_train_flops(cfg, 32, 128) == by_hand
  # The last block at 21 rows: keys and values (2 x 384^2) at all 128 tokens, the rest at 21 rows.
  h, i, rows = 384, 1536, 21
  last = 2 * h * h * 128 + (2 * h * h + 2 * h * i + 2 * h * 128) * rows
  by_hand = 6 * 32 * (5 * (1_769_472 * 128 + 2 * h * 128**2) + last)
  assert flops.encoder_train_flops(cfg, 32, 128, last_rows=rows) == by_hand


@pytest.mark.parametrize("units", [True, False])
def test_matmul_ceiling_times_the_operands_the_encoder_multiplies(units, monkeypatch):
  """bf16 compute's ceiling is that of the dots it runs: bf16 operands with bf16 units, float32 ones without."""
  monkeypatch.setattr(matmul, "bf16_dots", lambda: units)
  seen = []
  product = jnp.matmul
  monkeypatch.setattr(jnp, "matmul", lambda a, b, **kw: seen.append(a.dtype) or product(a, b, **kw))
  assert flops.matmul_ceiling(size=64, repeats=1, dtype=jnp.bfloat16) > 0
  assert flops.matmul_ceiling(size=64, repeats=1) > 0
  assert seen == [jnp.dtype(jnp.bfloat16 if units else jnp.float32), jnp.dtype(jnp.float32)]

"""launch.compile_ahead: shapes compiled on the background thread are not compiled again by the loop's own call."""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import monitoring
from jax.sharding import NamedSharding, PartitionSpec as P

from launch import compile_ahead, sharding
from tasks import finetune_data

COMPILES, TRACES = collections.Counter(), collections.Counter()
monitoring.register_event_duration_secs_listener(
    lambda event, duration, **_: COMPILES.update([event]) if event.endswith("backend_compile_duration") else None)
monitoring.register_event_duration_secs_listener(
    lambda event, duration, fun_name="", **_: TRACES.update([fun_name]) if event.endswith("jaxpr_trace_duration")
    else None)
# The counts below are of this process's compilations: no program comes from the session's compilation cache.
pytestmark = pytest.mark.usefixtures("no_compilation_cache")


def _step(state, batch):
  return state + batch["x"].sum()


def test_loop_finds_the_steps_compiled_ahead():
  mesh = sharding.make_mesh(1)
  replicated = NamedSharding(mesh, P())
  step = jax.jit(_step, in_shardings=(replicated, NamedSharding(mesh, P("data"))), out_shardings=replicated,
                 donate_argnums=(0,))
  batches = [{"x": jax.device_put(np.ones((4, n), np.float32), NamedSharding(mesh, P("data")))} for n in (3, 5, 7)]
  state = jax.device_put(jnp.zeros(()), replicated)
  ahead = compile_ahead.CompileAhead(step, state, batches)
  for batch in batches:
    ahead.wait(batch)
  before = sum(COMPILES.values())
  for batch in batches + batches:  # A donated state: the loop's own calls hit the compiled steps.
    state = step(state, batch)
  assert sum(COMPILES.values()) == before and float(state) == 2 * 4 * (3 + 5 + 7)
  ahead.close()


def _grads(state, batch):
  return batch["x"].sum(), state * batch["x"].mean()


def _update(state, acc, loss, grads):
  return state - grads, acc + loss


def test_the_update_program_compiles_once_and_a_shape_traced_first_is_not_traced_again():
  """The engine's two programs: the gradient program per shape and the update program once (after the first shape,
  on the gradient program's outputs). A shape the caller traced first (launch.train does, for the metric sums) is
  lowered without tracing again, and the loop's own calls trace and compile nothing."""
  mesh = sharding.make_mesh(1)
  replicated, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
  grads = jax.jit(_grads, in_shardings=(replicated, rows), out_shardings=(replicated, replicated))
  update = jax.jit(_update, in_shardings=(replicated,) * 4, out_shardings=(replicated, replicated),
                   donate_argnums=(0, 1))
  batches = [{"x": jax.device_put(np.ones((4, n), np.float32), rows)} for n in (3, 5)]
  state, acc = jax.device_put(jnp.ones(()), replicated), jax.device_put(jnp.zeros(()), replicated)
  grads.eval_shape(state, batches[0])
  traces, compiles = TRACES["_grads"], sum(COMPILES.values())
  ahead = compile_ahead.CompileAhead(grads, state, batches, update=(update, acc))
  for batch in batches:
    ahead.wait(batch)
  assert TRACES["_grads"] - traces == 1 and TRACES["_update"] == 1  # The second shape's; the update's.
  assert sum(COMPILES.values()) - compiles == 3
  traces, compiles = dict(TRACES), sum(COMPILES.values())
  for batch in batches + batches:
    state, acc = update(state, acc, *grads(state, batch))
  assert dict(TRACES) == traces and sum(COMPILES.values()) == compiles
  assert float(acc) == 2 * 4 * (3 + 5)
  ahead.close()


def test_a_compilation_error_surfaces_in_the_loop():
  bad = jax.jit(lambda state, batch: state @ batch["x"])  # [3] @ [4, n]: a shape error when lowered.
  ahead = compile_ahead.CompileAhead(bad, jnp.zeros(3), [{"x": jnp.ones((4, 2))}])
  with pytest.raises(TypeError):
    ahead.wait({"x": jnp.ones((4, 2))})
  ahead.close()


def test_added_programs_are_compiled_ahead_once_per_shape():
  """`add`: the evaluation program, one compilation per shape of `first_eval_batch_of_each_shape` (dev and test
  together), and the caller's own calls over every batch of both splits compile nothing more."""
  mesh = sharding.make_mesh(1)
  rows = NamedSharding(mesh, P("data"))
  program = jax.jit(lambda params, batch: params * batch["input_ids"].sum(axis=1), in_shardings=(None, rows))
  example = lambda n, label: {"input_ids": np.arange(1, n + 1, dtype=np.int32), "label": np.int32(label)}
  dev = finetune_data.Split("dev", [], [example(n, 0) for n in (3, 9, 4, 20, 5)])
  test = finetune_data.Split("test", [], [example(n, 1) for n in (2, 30, 7)])
  options = dict(batch_size=2, buckets=(8, 16, 32), widths={})
  firsts = finetune_data.first_eval_batch_of_each_shape((dev, None, test), **options)
  every = [batch for split in (dev, test) for _, batch in finetune_data.eval_batches(split, **options)]
  assert sorted(b["input_ids"].shape for b in firsts) == [(2, 8), (2, 16), (2, 32)]
  assert {compile_ahead.batch_key(b) for b in every} == {compile_ahead.batch_key(b) for b in firsts}
  to_device = lambda batch: jax.device_put(batch, rows)
  params = jax.device_put(np.float32(2), NamedSharding(mesh, P()))
  ahead = compile_ahead.CompileAhead(program, params, [])
  before = sum(COMPILES.values())
  ahead.add(program, params, lambda: map(to_device, firsts))
  ahead.wait_added()
  assert sum(COMPILES.values()) - before == 3
  for batch in every:
    np.testing.assert_array_equal(program(params, to_device(batch)), 2 * batch["input_ids"].sum(axis=1))
  assert sum(COMPILES.values()) - before == 3
  ahead.close()

"""launch.compile_ahead: shapes compiled on the background thread are not compiled again by the loop's own call."""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import monitoring
from jax.sharding import NamedSharding, PartitionSpec as P

from launch import compile_ahead, sharding

COMPILES = collections.Counter()
monitoring.register_event_duration_secs_listener(
    lambda event, duration, **_: COMPILES.update([event]) if event.endswith("backend_compile_duration") else None)


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


def test_a_compilation_error_surfaces_in_the_loop():
  bad = jax.jit(lambda state, batch: state @ batch["x"])  # [3] @ [4, n]: a shape error when lowered.
  ahead = compile_ahead.CompileAhead(bad, jnp.zeros(3), [{"x": jnp.ones((4, 2))}])
  with pytest.raises(TypeError):
    ahead.wait({"x": jnp.ones((4, 2))})
  ahead.close()

"""The step's programs for config.parallelism, and how trees move between the host, their layout and checkpoints.

`jit`: one program over the (data, model) mesh with the state's shardings; `pmap`: the same step replicated per
device with a psum over "data". Either way a step is two programs (DESIGN, "Two programs per step"): the gradients
(compiled per batch shape) and the optimizer update (compiled once). The training loop and the workloads'
evaluations use only what `Programs` holds, so neither asks which parallelism runs.
"""

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from launch import sharding, steps
from launch.compile_ahead import Jitted
from launch.model import EncoderWithHeads
from tasks import evaluation
from tasks.family import TaskFamily


class Programs(NamedTuple):
  grad_step: Jitted  # (state, batch) -> (loss, metric sums, summed gradients); compiled per batch shape.
  apply_step: Jitted  # (state, acc, loss, metrics, grads) -> (state, acc); the state and acc are donated.
  eval_step: Jitted  # (params, batch, acc) -> acc: the objectives' metric sums of a held-out batch added.
  to_device: Callable  # (this process's rows, accum=) -> the global batch in the steps' layout.
  place: Callable  # host tree (metric sums) -> a fresh device copy in the steps' layout.
  fetch: Callable  # device metric sums -> host numpy (the first copy under pmap).
  to_layout: Callable  # state in `state_shardings` -> the steps' layout.
  canonical: Callable  # state in the steps' layout -> `state_shardings` (checkpoints, task evaluation).
  mesh: Mesh
  state_shardings: Any  # The train state's NamedShardings (launch.sharding.state_shardings).

  def train_step(self, state: Any, batch: dict[str, jax.Array], acc: dict[str, jax.Array]) -> tuple[Any, Any]:
    """One optimizer step: the gradient program, then the update program."""
    return self.apply_step(state, acc, *self.grad_step(state, batch))


def build_programs(fns: steps.StepFns, mesh: Mesh, state_shardings: Any, *, parallelism: str, accum: int) -> Programs:
  """The step's programs under `parallelism` ("jit" or "pmap") with `accum` micro-batches a step."""
  replicated = NamedSharding(mesh, P())
  if parallelism == "jit":
    grads = steps.trained(fns, state_shardings.params)  # The trainable part's (all of them without a regime).
    grad_step = jax.jit(functools.partial(steps.grad_step, fns, accum=accum, grad_shardings=grads),
                        in_shardings=(state_shardings, NamedSharding(mesh, sharding.batch_spec(accum))),
                        out_shardings=(replicated, replicated, grads))
    apply_step = jax.jit(functools.partial(steps.apply_step, fns),
                         in_shardings=(state_shardings, replicated, replicated, replicated, grads),
                         out_shardings=(state_shardings, replicated), donate_argnums=(0, 1))
    eval_step = jax.jit(functools.partial(steps.eval_step, fns),
                        in_shardings=(state_shardings.params, NamedSharding(mesh, P("data")), replicated),
                        out_shardings=replicated, donate_argnums=(2,))
    place = lambda tree: jax.device_put(tree, replicated)
    first_copy = lambda host: host
    to_layout = canonical = lambda state: state
  else:
    grad_step = jax.pmap(functools.partial(steps.grad_step, fns, axis_name="data", accum=accum),
                         axis_name="data")
    apply_step = jax.pmap(functools.partial(steps.apply_step, fns), axis_name="data", donate_argnums=(0, 1))
    eval_step = jax.pmap(functools.partial(steps.eval_step, fns, axis_name="data"), axis_name="data",
                         donate_argnums=(2,))
    place = to_layout = lambda tree: sharding.to_pmap(tree, mesh)
    first_copy = lambda host: {k: v[0] for k, v in host.items()}
    canonical = lambda state: sharding.from_pmap(state, state_shardings)
  fetch = lambda acc: first_copy(jax.device_get(acc))
  to_device = functools.partial(sharding.global_batch, mesh=mesh, parallelism=parallelism)
  return Programs(grad_step, apply_step, eval_step, to_device, place, fetch, to_layout, canonical, mesh,
                  state_shardings)


def outputs_program(model: EncoderWithHeads, family: TaskFamily, mesh: Mesh, params_shardings: Any) -> Callable:
  """The task's jitted (params, batch) -> per-row outputs (tasks.evaluation.device_outputs) over `mesh`: the batch
  split on "data", the outputs replicated. The run's evaluation and launch.predict build it alike, so that on one
  device predict finds the programs the run compiled ahead (each dev and test shape) in the persistent cache."""
  batch = NamedSharding(mesh, P("data"))
  return jax.jit(evaluation.device_outputs(model, family), in_shardings=(params_shardings, batch),
                 out_shardings=NamedSharding(mesh, P()))


def zero_sums(step_fn: Callable, *args) -> dict[str, np.ndarray]:
  """The all-zero metric sums of `step_fn(*args, acc)` on the host (launch.steps.zero_metrics), for `place`."""
  return jax.device_get(steps.zero_metrics(step_fn, *args))

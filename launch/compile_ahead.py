"""Compile the gradient step for every batch shape of a run on a background thread while training goes on.

Fine-tuning pads batches to a few length buckets, so the gradient step (launch.steps.grad_step) compiles once per
bucket, several seconds each on a CPU. The schedule of batches is known in advance (a pure function of the step),
so each shape is compiled before it is first needed, using the cores that training and the previous compilation
leave idle; the loop waits only for a shape still compiling. The update program (launch.steps.apply_step), the same
for every shape, compiles once, after the first shape. jit's caches are shared, so the loop's own calls find the
compiled programs, and a shape the caller traced already (launch.train does, for the metric sums) is not traced
again. The evaluation's program (`add`) is compiled next, for each shape of the dev and test batches, so the first
evaluation does not stop training to compile; with the persistent compilation cache (launch.compilation_cache) a
later run loads all of them instead.
"""

import concurrent.futures
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import jax


class Jitted(Protocol):
  """What jax.jit returns (jax's own name for its type is private): called, lowered for given arguments
  (`lower(...).compile()` compiles ahead), or traced (`trace(...)`: its outputs' shapes are `.out_info`;
  `eval_shape`). jit keeps a trace for the arguments' shapes, so these and a call trace the function once. jax.pmap's
  functions lower too, but neither trace nor eval_shape (the loop asks for them under jit only)."""

  def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

  def lower(self, *args: Any, **kwargs: Any) -> jax.stages.Lowered: ...

  def trace(self, *args: Any, **kwargs: Any) -> jax.stages.Traced: ...

  def eval_shape(self, *args: Any, **kwargs: Any) -> Any: ...


def _abstract(tree: Any) -> Any:
  """Arrays -> ShapeDtypeStructs with their shardings (lowering needs no data; a donated state may be gone)."""
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)


def batch_key(batch: dict[str, Any]) -> tuple:
  """What makes two batches need different compilations: their fields' shapes."""
  return tuple(sorted((k, tuple(v.shape)) for k, v in batch.items()))


class CompileAhead:
  """`CompileAhead(step, state, batches, update=)` starts compiling the jitted `step(state, batch)` for each batch
  shape (in the order given: the order the run first needs them) and, after the first, `update` = (the jitted
  update program, acc) on (state, acc, *that step's outputs): the engine's second program (launch.programs), which
  every shape shares. `wait(batch)` blocks until both programs of a step on that batch are compiled."""

  def __init__(self, step: Jitted, state: Any, batches: Sequence[dict[str, Any]],
               update: tuple[Jitted, Any] | None = None):
    # One thread: compilations in parallel gained little on 2 cores (32 vs 37 s for 5 shapes) and slow training more.
    self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="compile_ahead")
    state = _abstract(state)
    self._futures, self._update = {}, None
    for batch in map(_abstract, batches):
      self._futures[batch_key(batch)] = self._pool.submit(
          lambda b=batch: step.lower(state, b).compile())  # type: ignore[misc]  # mypy infers no lambda with defaults
      if update is not None and self._update is None:
        program, acc = update[0], _abstract(update[1])
        self._update = self._pool.submit(
            lambda b=batch, program=program, acc=acc:  # type: ignore[misc]  # mypy infers no lambda with defaults
            program.lower(state, acc, *step.eval_shape(state, b)).compile())
    self._added: list[concurrent.futures.Future] = []

  def wait(self, batch: dict[str, Any]) -> None:
    future = self._futures.pop(batch_key(batch), None)
    for done in (future, self._update):
      if done is not None:
        done.result()  # Re-raises a compilation error here, in the training loop.
    self._update = None

  def add(self, program: Jitted, first: Any, batches: Callable[[], Iterable[dict[str, Any]]]) -> None:
    """Compiles the jitted `program(first, batch)` for each batch of `batches()` (one per shape; called on the
    thread, as collating a whole split takes a while) after everything submitted before."""
    first = _abstract(first)
    self._added.append(self._pool.submit(
        lambda: [program.lower(first, _abstract(batch)).compile() for batch in batches()]))

  def wait_added(self) -> None:
    """Blocks until the programs of `add` are compiled (so the caller's own call does not compile them again)."""
    while self._added:
      self._added.pop().result()

  def close(self) -> None:
    """Drops compilations not started yet (a run stopped early) and waits for the running one."""
    self._pool.shutdown(wait=True, cancel_futures=True)

"""The train state and the pure train/eval steps: state, batch, metric sums -> new state, new metric sums.

The loss of a step is sum_t w_t * S_t / C_t with S_t, C_t the sum and count of loss term t's per-token losses over
the whole global batch, all devices and micro-batches together. The counts depend on the batch alone (computed before
any micro-batch runs when there are several; one micro-batch takes them from its own forward pass, psummed over
devices), so every device and micro-batch adds its exact share and gradients are summed. Data-parallel jit, pmap
and gradient accumulation therefore give the large-batch gradient up to float rounding.
Metrics are (sum, count) pairs accumulated on device ([2] float32, `acc`) and fetched every N steps, so no step waits
for the host. `nonfinite_step` keeps the first step whose loss or gradient norm was NaN/inf.
"""

from collections.abc import Callable, Sequence
from typing import Any, cast

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from launch.model import EncoderWithHeads, objective_metrics, weighted_loss
from objectives.objective import Objective, loss_terms
from tasks import regimes

NO_STEP = 2**31 - 1  # `nonfinite_step` while every step was finite.


@flax.struct.dataclass
class TrainState:
  """The only mutable thing of a run (checkpointed whole)."""
  step: jax.Array  # int32 scalar: optimizer steps done.
  params: Any
  opt_state: Any
  rng: jax.Array  # uint32 [2]: the dropout key, folded with the step.


@flax.struct.dataclass
class StepFns:
  """What a step needs besides state and batch (static under jit)."""
  model: EncoderWithHeads = flax.struct.field(pytree_node=False)
  objectives: Sequence[Objective] = flax.struct.field(pytree_node=False)
  weights: dict = flax.struct.field(pytree_node=False)  # {loss term: weight} (launch.model.term_weights).
  tx: optax.GradientTransformation = flax.struct.field(pytree_node=False)
  # Per-parameter bools like the params, False for frozen ones (fine-tuning regimes: tasks.regimes.trainable); None:
  # every parameter trains. The gradients and `tx`'s state and updates then cover the trainable part alone.
  trainable: Any = flax.struct.field(pytree_node=False, default=None)


def trained(fns: StepFns, tree: Any) -> Any:
  """The trainable part of a params-shaped tree (params, their shardings): the tree of the step's gradients and of
  the optimizer's state; the whole tree when every parameter trains."""
  return tree if fns.trainable is None else regimes.select(tree, fns.trainable)


def with_trained(fns: StepFns, params: Any, part: Any) -> Any:
  """`params` with its trainable part replaced by `part` (`trained`'s shape)."""
  return part if fns.trainable is None else regimes.merge(params, part)


def init_state(fns: StepFns, example_batch: dict[str, jax.Array], pretrained: dict | None = None, *,
               seed: int) -> TrainState:
  """Fresh parameters and optimizer state (traceable: jit it with out_shardings to create sharded state);
  `pretrained` ({"encoder": tree, head name: tree, ...}) replaces the random trees the model also has."""
  init_key, dropout_key = jax.random.split(jax.random.PRNGKey(seed))
  params = fns.model.init(init_key, example_batch, train=False)["params"]
  trees = pretrained or {}
  for name in trees.keys() & params.keys():
    params = {**params, name: _overlay(params[name], trees[name])}
  return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=fns.tx.init(trained(fns, params)),
                    rng=dropout_key)


def _overlay(fresh: Any, loaded: Any) -> Any:
  """`fresh` with each array `loaded` also has replaced by it (in fresh's dtype); subtrees the checkpoint lacks (the
  lora_* and adapter_* modules of those regimes) keep their initialisation."""
  if isinstance(fresh, dict):
    return {k: _overlay(v, loaded[k]) if k in loaded else v for k, v in fresh.items()}
  return jnp.asarray(loaded, fresh.dtype)


def _pairs(metrics: dict[str, tuple]) -> dict[str, jax.Array]:
  """{name: (sum, count)} -> {name: [2] float32}."""
  return {k: jnp.stack([jnp.asarray(s, jnp.float32), jnp.asarray(c, jnp.float32)]) for k, (s, c) in metrics.items()}


def _padding(batch: dict[str, jax.Array]) -> dict[str, tuple]:
  """The batch's padding (tokens in no sequence; of the encoder's rows when packed) as a (sum, count) pair."""
  segments = batch.get("packed_segments", batch["attention_segments"])
  return {"padding": ((segments == 0).sum(), segments.size)}


def _add(acc: dict[str, jax.Array], metrics: dict[str, jax.Array]) -> dict[str, jax.Array]:
  return acc | {k: acc[k] + v if k in acc else v for k, v in metrics.items()}


def _loss_counts(fns: StepFns, params: Any, micro_batches: dict[str, jax.Array]) -> dict[str, jax.Array]:
  """{loss term: count of its per-token losses} over all micro-batches, from the batch alone (the objectives' losses
  on dummy predictions: counts depend only on the batch's weights; XLA drops the unused arithmetic)."""
  first = jax.tree.map(lambda x: x[0], micro_batches)
  shapes = jax.eval_shape(lambda: fns.model.apply({"params": params}, first, train=False))
  dummy = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
  counts = jax.vmap(lambda micro: {term: objective_metrics([o], dummy, micro)[f"{term}_loss"][1]
                                   for o in fns.objectives for term in loss_terms(o)})(micro_batches)
  return jax.tree.map(lambda c: c.sum(0), counts)


def grad_step(fns: StepFns, state: TrainState, batch: dict[str, jax.Array], *, accum: int,
              axis_name: str | None = None, grad_shardings: Any = None) -> tuple[jax.Array, dict[str, jax.Array], Any]:
  """Loss, metric sums and summed gradients of one step over `accum` micro-batches (a leading batch axis when
  accum > 1) and, under pmap, devices. Compiled once per batch shape. The gradients are those of the trainable part
  (`trained`): the frozen parameters enter the loss as constants, so the program computes no gradient for them
  (no weight-gradient dot, and no backward at all below the lowest trainable parameter). `grad_shardings` (jit; the
  gradients'): the gradient sums are kept in them, so that under FSDP each device adds only its shard
  (reduce-scatter), never a whole copy."""
  keep = (lambda g: g) if grad_shardings is None else (lambda g: jax.lax.with_sharding_constraint(g, grad_shardings))
  micro_batches = batch if accum > 1 else jax.tree.map(lambda x: x[None], batch)
  copies = max(o.train_copies for o in fns.objectives)
  if copies > 1:  # Each example `copies` times, adjacent (a per-device repeat: no resharding of the batch axis).
    micro_batches = jax.tree.map(lambda x: jnp.repeat(x, copies, axis=1), micro_batches)
    rows = micro_batches["input_ids"].shape[:2]
    micro_batches["train_copy"] = jnp.broadcast_to(jnp.arange(rows[1], dtype=jnp.int32) % copies, rows)
  # One micro-batch: its loss terms' counts come from its own forward pass (psummed under pmap); several: from the
  # batch alone, before any of them runs.
  counts = _loss_counts(fns, state.params, micro_batches) if accum > 1 else None
  if counts is not None and axis_name is not None:
    counts = jax.lax.psum(counts, axis_name)
  key = jax.random.fold_in(state.rng, state.step)
  if axis_name is not None:
    key = jax.random.fold_in(key, jax.lax.axis_index(axis_name))

  def loss_fn(part, micro, micro_key):
    params = with_trained(fns, state.params, part)  # The frozen rest: constants of the differentiated function.
    # Without mutable=, apply returns the module's output alone (not an (output, variables) pair).
    predictions = cast(dict[str, Any],
                       fns.model.apply({"params": params}, micro, train=True, rngs={"dropout": micro_key}))
    metrics = objective_metrics(fns.objectives, predictions, micro)
    own = {term: jax.lax.stop_gradient(metrics[f"{term}_loss"][1]) for term in fns.weights}  # The batch's.
    if counts is None and axis_name is not None:
      own = jax.lax.psum(own, axis_name)
    share = weighted_loss(fns.weights, {term: metrics[f"{term}_loss"][0] for term in fns.weights},
                          own if counts is None else counts)
    return share, _pairs(metrics | _padding(micro))

  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
  # The first micro-batch starts the sums (so the gradient is traced once when accum is 1), the rest add to them.
  first = jax.tree.map(lambda x: x[0], micro_batches)
  part = trained(fns, state.params)
  (loss, metrics), grads = grad_fn(part, first, jax.random.fold_in(key, 0))
  grads = keep(grads)
  if accum > 1:
    def micro_step(carry, xs):
      micro, index = xs
      (share, metrics), grads = grad_fn(part, micro, jax.random.fold_in(key, index))
      loss, metric_sums, grad_sums = carry
      return (loss + share, _add(metric_sums, metrics), keep(jax.tree.map(jnp.add, grad_sums, keep(grads)))), None

    rest = jax.tree.map(lambda x: x[1:], micro_batches)
    (loss, metrics, grads), _ = jax.lax.scan(micro_step, (loss, metrics, grads), (rest, jnp.arange(1, accum)))
  if axis_name is not None:
    loss, metrics, grads = jax.lax.psum((loss, metrics, grads), axis_name)
  return loss, metrics, grads


def apply_step(fns: StepFns, state: TrainState, acc: dict[str, jax.Array], loss: jax.Array,
               metrics: dict[str, jax.Array], grads: Any) -> tuple[TrainState, dict[str, jax.Array]]:
  """Clipping + optimizer update of the trainable part (`grads`' tree; the frozen parameters pass through untouched),
  and the step's metrics added to `acc`. Independent of the batch shape, so a run with several length buckets
  compiles it once (on a CPU ~1.5 s of the fused step's ~6 s per bucket)."""
  grad_norm = optax.tree.norm(grads)
  part = trained(fns, state.params)
  updates, opt_state = fns.tx.update(grads, state.opt_state, part)
  new_state = state.replace(  # type: ignore[attr-defined]  # flax.struct.dataclass adds .replace at run time
      step=state.step + 1, params=with_trained(fns, state.params, optax.apply_updates(part, updates)),
      opt_state=opt_state)
  finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
  metrics = metrics | _pairs({"grad_norm": (grad_norm, 1)})
  acc = _add(acc, metrics) | {
      "nonfinite_step": jnp.where(finite, acc["nonfinite_step"], jnp.minimum(acc["nonfinite_step"], state.step))}
  return new_state, acc


def train_step(fns: StepFns, state: TrainState, batch: dict[str, jax.Array], acc: dict[str, jax.Array], *,
               accum: int, axis_name: str | None = None) -> tuple[TrainState, dict[str, jax.Array]]:
  """`grad_step` then `apply_step` in one function (the engine jits or pmaps them as two programs)."""
  return apply_step(fns, state, acc, *grad_step(fns, state, batch, accum=accum, axis_name=axis_name))


def eval_step(fns: StepFns, params: Any, batch: dict[str, jax.Array], acc: dict[str, jax.Array], *,
              axis_name: str | None = None) -> dict[str, jax.Array]:
  """Adds one evaluation batch's (sum, count) metrics to `acc`."""
  # Without mutable=, apply returns the module's output alone (not an (output, variables) pair).
  predictions = cast(dict[str, Any], fns.model.apply({"params": params}, batch, train=False))
  metrics = _pairs(objective_metrics(fns.objectives, predictions, batch) | _padding(batch))
  if axis_name is not None:
    metrics = jax.lax.psum(metrics, axis_name)
  return _add(acc, metrics)


def zero_step_sums(metrics: dict[str, Any]) -> dict[str, np.ndarray]:
  """The all-zero metric sums (`acc`) of train steps whose gradient program returns metric sums shaped like
  `metrics` (arrays or ShapeDtypeStructs): those, apply_step's grad_norm, and nonfinite_step = NO_STEP."""
  zeros = {k: np.zeros(s.shape, s.dtype) for k, s in metrics.items()} | {"grad_norm": np.zeros(2, np.float32)}
  return zeros | {"nonfinite_step": np.asarray(NO_STEP, np.int32)}


def zero_metrics(step_fn: Callable, *args) -> dict[str, jax.Array]:
  """All-zero metric sums with the keys `step_fn(*args, acc)` produces (nonfinite_step = NO_STEP)."""
  empty = {"nonfinite_step": jnp.asarray(NO_STEP, jnp.int32)}
  shapes = jax.eval_shape(step_fn, *args, empty)
  shapes = shapes[1] if isinstance(shapes, tuple) else shapes
  return {k: (empty[k] if k in empty else jnp.zeros(s.shape, s.dtype)) for k, s in shapes.items()}

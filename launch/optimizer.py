"""The optimizer: AdamW or LAMB with BERT's linear warmup + polynomial (by default linear) decay, global-norm
clipping, and weight decay masked off biases and LayerNorm parameters; optionally per-parameter update scales
(fine-tuning regimes: the optimizer then sees the trainable part alone, and layer-wise LR decay scales each layer's
update), and optionally an exponential moving average of the parameters that evaluation uses."""

from typing import Any, NamedTuple

import flax.traverse_util
import jax
import ml_collections
import optax

from encoder import errors
from tasks import regimes


def warmup_steps(opt: ml_collections.ConfigDict, num_train_steps: int) -> int:
  """opt.warmup_fraction of the steps when the config has a positive one (fine-tuning), else opt.warmup_steps."""
  fraction = opt.get("warmup_fraction", 0.0)
  return round(fraction * num_train_steps) if fraction > 0 else opt.warmup_steps


def learning_rate_schedule(opt: ml_collections.ConfigDict, num_train_steps: int) -> optax.Schedule:
  """0 -> learning_rate linearly over warmup_steps, then lr_end + (lr - lr_end) * (1 - p)^decay_power, p the fraction
  of the post-warmup steps done (power 1: BERT's linear decay; 0.5: the power of NVIDIA's LAMB recipe,
  PolyWarmUpScheduler in DeepLearningExamples' PyTorch BERT schedulers.py, whose p counts from step 0 instead, so its
  rate drops to lr * (1 - warmup fraction)^0.5 at the end of warm-up where this one decays from lr)."""
  warmup = min(warmup_steps(opt, num_train_steps), num_train_steps)
  power = opt.get("decay_power", 1.0)
  if power <= 0:
    raise errors.ConfigError(f"config.optimizer.decay_power={power}: expected a positive power (1: linear decay)")
  power = int(power) if float(power).is_integer() else power  # An integer power: x ** 1 is x, bit for bit.
  return optax.join_schedules(
      [optax.linear_schedule(0.0, opt.learning_rate, max(warmup, 1)),
       optax.polynomial_schedule(opt.learning_rate, opt.end_learning_rate, power, max(num_train_steps - warmup, 1))],
      boundaries=[warmup])


def decay_mask(params) -> dict:
  """True for the weights that get weight decay: everything but biases and LayerNorm (incl. the embeddings' LN)."""
  flat = flax.traverse_util.flatten_dict(params)
  decays = lambda path: not (path[-1] in ("bias", "output_bias") or any("layer_norm" in p for p in path)
                             or path[-1] == "scale")
  return flax.traverse_util.unflatten_dict({path: decays(path) for path in flat})


def make_optimizer(opt: ml_collections.ConfigDict, num_train_steps: int,
                   scales: Any = None) -> optax.GradientTransformation:
  """Clipping -> AdamW/LAMB with the schedule; weight decay masked by `decay_mask`; each update times its factor in
  `scales` (a tree like the params, `tasks.regimes.update_scales`). When some factors are 0 (frozen parameters), the
  optimizer works on the trainable part alone, `tasks.regimes.select(tree, scales > 0)`, the tree of the step's
  gradients (launch/steps.py): frozen parameters get no state, no clipping share and no update."""
  schedule = learning_rate_schedule(opt, num_train_steps)
  if opt.name == "adamw":
    base = optax.adamw(schedule, b1=opt.b1, b2=opt.b2, eps=opt.eps, weight_decay=opt.weight_decay, mask=decay_mask)
  elif opt.name == "lamb":
    base = optax.lamb(schedule, b1=opt.b1, b2=opt.b2, eps=opt.eps, weight_decay=opt.weight_decay, mask=decay_mask)
  else:
    raise errors.ConfigError(f"config.optimizer.name={opt.name!r} is not 'adamw' or 'lamb'")
  clip = optax.clip_by_global_norm(opt.clip_norm) if opt.clip_norm > 0 else optax.identity()
  if scales is not None and 0.0 in set(jax.tree.leaves(scales)):
    scales = regimes.select(scales, jax.tree.map(lambda s: s > 0, scales))
  if scales is None or set(jax.tree.leaves(scales)) == {1.0}:  # Nothing to scale: no extra passes over the params.
    tx = optax.chain(clip, base)
  else:
    tx = optax.chain(clip, base, regimes.scale_updates(scales))
  decay = opt.get("ema_decay", 0.0)
  if not 0.0 <= decay < 1.0:
    raise errors.ConfigError(f"config.optimizer.ema_decay={decay} must be in [0, 1) (0 = no average)")
  return with_parameter_ema(tx, decay) if decay > 0 else tx


class EmaState(NamedTuple):
  """The wrapped optimizer's state and the moving average of the parameters after each update."""
  inner: Any
  ema: Any


def with_parameter_ema(tx: optax.GradientTransformation, decay: float) -> optax.GradientTransformation:
  """`tx` that also keeps ema <- decay * ema + (1 - decay) * (params after the update), starting at the initial
  parameters (a fine-tuning start is a trained model, so no bias correction)."""

  def init(params):
    return EmaState(tx.init(params), params)

  def update(updates, state, params=None):
    updates, inner = tx.update(updates, state.inner, params)
    new = optax.apply_updates(params, updates)
    return updates, EmaState(inner, jax.tree.map(lambda e, p: decay * e + (1.0 - decay) * p, state.ema, new))

  return optax.GradientTransformation(init, update)


def evaluation_params(state: Any) -> Any:
  """The parameters to evaluate, select and test with: the moving average when the optimizer keeps one (of the
  trainable part only when a regime freezes some: the frozen rest is the state's)."""
  if not isinstance(state.opt_state, EmaState):
    return state.params
  ema = state.opt_state.ema
  whole = len(jax.tree.leaves(ema)) == len(jax.tree.leaves(state.params))
  return ema if whole else regimes.merge(state.params, ema)


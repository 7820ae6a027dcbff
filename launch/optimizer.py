"""The optimizer: AdamW or LAMB with BERT's linear warmup + linear decay, global-norm clipping, and weight decay
masked off biases and LayerNorm parameters; optionally per-parameter update scales (fine-tuning regimes: frozen
parts get 0 and no gradient in the clipping norm, layer-wise LR decay scales each layer's update)."""

from typing import Any

import flax.traverse_util
import jax
import ml_collections
import optax

from tasks import regimes


def warmup_steps(opt: ml_collections.ConfigDict, num_train_steps: int) -> int:
  """opt.warmup_fraction of the steps when the config has a positive one (fine-tuning), else opt.warmup_steps."""
  fraction = opt.get("warmup_fraction", 0.0)
  return round(fraction * num_train_steps) if fraction > 0 else opt.warmup_steps


def learning_rate_schedule(opt: ml_collections.ConfigDict, num_train_steps: int) -> optax.Schedule:
  """0 -> learning_rate linearly over warmup_steps, then linearly to end_learning_rate at num_train_steps."""
  warmup = min(warmup_steps(opt, num_train_steps), num_train_steps)
  return optax.join_schedules(
      [optax.linear_schedule(0.0, opt.learning_rate, max(warmup, 1)),
       optax.linear_schedule(opt.learning_rate, opt.end_learning_rate, max(num_train_steps - warmup, 1))],
      boundaries=[warmup])


def decay_mask(params) -> dict:
  """True for the weights that get weight decay: everything but biases and LayerNorm (incl. the embeddings' LN)."""
  flat = flax.traverse_util.flatten_dict(params)
  decays = lambda path: not (path[-1] in ("bias", "output_bias") or any("layer_norm" in p for p in path)
                             or path[-1] == "scale")
  return flax.traverse_util.unflatten_dict({path: decays(path) for path in flat})


def make_optimizer(opt: ml_collections.ConfigDict, num_train_steps: int,
                   scales: Any = None) -> optax.GradientTransformation:
  """Clipping -> AdamW/LAMB with the schedule; weight decay masked by `decay_mask`. `scales` (a tree like the params,
  `tasks.regimes.update_scales`) zeroes frozen gradients before clipping and scales every update after."""
  schedule = learning_rate_schedule(opt, num_train_steps)
  if opt.name == "adamw":
    base = optax.adamw(schedule, b1=opt.b1, b2=opt.b2, eps=opt.eps, weight_decay=opt.weight_decay, mask=decay_mask)
  elif opt.name == "lamb":
    base = optax.lamb(schedule, b1=opt.b1, b2=opt.b2, eps=opt.eps, weight_decay=opt.weight_decay, mask=decay_mask)
  else:
    raise ValueError(f"config.optimizer.name={opt.name!r} is not 'adamw' or 'lamb'")
  clip = optax.clip_by_global_norm(opt.clip_norm) if opt.clip_norm > 0 else optax.identity()
  factors = set(jax.tree.leaves(scales))
  if scales is None or factors == {1.0}:  # Nothing to scale: no extra passes over the parameters.
    return optax.chain(clip, base)
  if 0.0 not in factors:
    return optax.chain(clip, base, regimes.scale_updates(scales))
  live = jax.tree.map(lambda s: float(s > 0), scales)
  return optax.chain(regimes.scale_updates(live), clip, base, regimes.scale_updates(scales))


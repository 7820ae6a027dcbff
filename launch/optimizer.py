"""The optimizer: AdamW or LAMB with BERT's linear warmup + linear decay, global-norm clipping, and weight decay
masked off biases and LayerNorm parameters."""

import flax.traverse_util
import ml_collections
import optax


def learning_rate_schedule(opt: ml_collections.ConfigDict, num_train_steps: int) -> optax.Schedule:
  """0 -> learning_rate linearly over warmup_steps, then linearly to end_learning_rate at num_train_steps."""
  warmup = min(opt.warmup_steps, num_train_steps)
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


def make_optimizer(opt: ml_collections.ConfigDict, num_train_steps: int) -> optax.GradientTransformation:
  """Clipping -> AdamW/LAMB with the schedule; weight decay masked by `decay_mask`."""
  schedule = learning_rate_schedule(opt, num_train_steps)
  if opt.name == "adamw":
    base = optax.adamw(schedule, b1=opt.b1, b2=opt.b2, eps=opt.eps, weight_decay=opt.weight_decay, mask=decay_mask)
  elif opt.name == "lamb":
    base = optax.lamb(schedule, b1=opt.b1, b2=opt.b2, eps=opt.eps, weight_decay=opt.weight_decay, mask=decay_mask)
  else:
    raise ValueError(f"config.optimizer.name={opt.name!r} is not 'adamw' or 'lamb'")
  clip = optax.clip_by_global_norm(opt.clip_norm) if opt.clip_norm > 0 else optax.identity()
  return optax.chain(clip, base)


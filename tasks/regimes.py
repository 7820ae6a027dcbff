"""Fine-tuning regimes: full, frozen encoder (head only), top-k layers only; optional layer-wise LR decay.

The spec notes that minimal changes to the pretrained model often suffice; these regimes scale each parameter's
update by a static factor (0 freezes it), chained after the optimizer: `optax.chain(adamw, scale_updates(scales))`.
Depth is read from parameter paths: embeddings 0, `layer_{i}` i + 1, anything above the encoder (pooler, final
LayerNorm, task heads) num_layers + 1.
"""

import re
from typing import Any

import jax
import numpy as np
import optax

from encoder import errors

REGIMES = ("full", "frozen", "top_k")
_LAYER = re.compile(r"layer_(\d+)$")


def _depth(path: tuple, num_layers: int) -> tuple[int, bool]:
  """(depth, inside the encoder body) of a parameter path."""
  names = [getattr(k, "key", getattr(k, "name", str(k))) for k in path]
  for name in names:
    if name == "embeddings":
      return 0, True
    match = _LAYER.match(str(name))
    if match:
      return int(match.group(1)) + 1, True
  return num_layers + 1, False


def update_scales(params: Any, *, num_layers: int, regime: str = "full", top_k: int = 0,
                  layer_decay: float = 1.0) -> Any:
  """A pytree like `params` of per-parameter update factors for the regime and layer-wise decay."""
  if regime not in REGIMES:
    raise errors.ConfigError(f"config.regime={regime!r}: expected one of {', '.join(map(repr, REGIMES))}")
  if regime == "top_k" and not 0 < top_k <= num_layers:
    raise errors.ConfigError(f"config.top_k={top_k}: regime 'top_k' needs 0 < top_k <= num_layers ({num_layers})")

  def scale(path, _):
    depth, in_body = _depth(path, num_layers)
    if regime == "frozen" and in_body:
      return 0.0
    if regime == "top_k" and in_body and depth <= num_layers - top_k:
      return 0.0
    return float(layer_decay ** (num_layers + 1 - depth))
  return jax.tree_util.tree_map_with_path(scale, params)


def scale_updates(scales: Any) -> optax.GradientTransformation:
  """Multiply each update by its static factor (see `update_scales`)."""
  def update(updates, state, params=None):
    return jax.tree.map(lambda u, s: u * np.asarray(s, u.dtype), updates, scales), state
  return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def trainable_fraction(params: Any, scales: Any) -> float:
  """Share of parameters that receive updates (reported at start of a fine-tuning run)."""
  sizes = jax.tree.leaves(jax.tree.map(lambda p, s: (np.size(p), s > 0), params, scales),
                          is_leaf=lambda x: isinstance(x, tuple))
  total = sum(n for n, _ in sizes)
  return sum(n for n, live in sizes if live) / max(total, 1)

"""Pieces shared by the pretraining heads: config lookup, gathering at positions, the dense-GELU-LayerNorm transform."""

from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp


def option(config: Mapping[str, Any] | None, key: str, default: Any) -> Any:
  """config[key] if the (ConfigDict or dict) config has it, else default."""
  if config is None:
    return default
  return config.get(key, default)


def gather(hidden: jax.Array, positions: jax.Array) -> jax.Array:
  """hidden [batch, length, width], positions [batch, P] -> [batch, P, width]."""
  return jnp.take_along_axis(hidden, positions[..., None].astype(jnp.int32), axis=1)


def dense_gelu_norm(x: jax.Array, features: int, *, initializer_range: float, layer_norm_eps: float,
                    approximate_gelu: bool, dense_name: str, norm_name: str) -> jax.Array:
  """dense -> GELU -> LayerNorm, created in the calling compact module (BERT's MLM transform, SpanBERT's SBO layer)."""
  x = nn.Dense(features, kernel_init=nn.initializers.normal(initializer_range), dtype=x.dtype, name=dense_name)(x)
  x = nn.gelu(x, approximate=approximate_gelu)
  return nn.LayerNorm(layer_norm_eps, dtype=x.dtype, name=norm_name)(x)


def output_bias(module: nn.Module, logits: jax.Array) -> jax.Array:
  """logits [..., V] + a learned bias [V] named `output_bias` (the tied decoder's bias)."""
  bias = module.param("output_bias", nn.initializers.zeros_init(), (logits.shape[-1],), jnp.float32)
  return logits.astype(jnp.float32) + bias


def cross_entropy(logits: jax.Array, labels: jax.Array, weights: jax.Array, name: str):
  """Weighted mean cross-entropy and (sum, count) metrics `{name}_loss`, `{name}_accuracy`."""
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  nll = -jnp.take_along_axis(log_probs, labels[..., None].astype(jnp.int32), axis=-1)[..., 0]
  weights = weights.astype(jnp.float32)
  count = weights.sum()
  total = (nll * weights).sum()
  correct = ((jnp.argmax(logits, axis=-1) == labels) * weights).sum()
  return total / jnp.maximum(count, 1.0), {f"{name}_loss": (total, count), f"{name}_accuracy": (correct, count)}

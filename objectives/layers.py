"""Pieces shared by the pretraining heads: config lookup, gathering at positions, the dense-GELU-LayerNorm transform."""

import dataclasses
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from encoder.config import EncoderConfig


def option(config: Mapping[str, Any] | None, key: str, default: Any) -> Any:
  """config[key] if the (ConfigDict or dict) config has it, else default (an option the objective alone reads)."""
  if config is None:
    return default
  return config.get(key, default)


_MODEL_DEFAULTS = {field.name: field.default for field in dataclasses.fields(EncoderConfig)}


def model_option(config: Mapping[str, Any] | None, key: str) -> Any:
  """An encoder field a head reads (initializer_range, layer_norm_eps, hidden_act, ...): config[key] if the config
  (config.model's fields) has it, else EncoderConfig's default, declared there once."""
  return option(config, key, _MODEL_DEFAULTS[key])


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


def _at_labels(logits: jax.Array, labels: jax.Array) -> jax.Array:
  return jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]


@jax.custom_vjp
def softmax_nll(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """-log softmax(logits)[label] per row (f32 logits [..., C], int labels [...]).

  The custom gradient, softmax - one_hot, is one fused elementwise pass over the logits, where autodiff transposes
  the log-softmax and scatters into a zero tensor of their size (with the max-based accuracy: ~2% of a MiniLM step).
  """
  return _softmax_nll_fwd(logits, labels)[0]


def _softmax_nll_fwd(logits: jax.Array, labels: jax.Array):
  lse = jax.nn.logsumexp(logits, axis=-1)
  return lse - _at_labels(logits, labels), (logits, labels, lse)


def _softmax_nll_bwd(residuals, g: jax.Array):
  logits, labels, lse = residuals
  one_hot = labels[..., None] == jax.lax.broadcasted_iota(labels.dtype, logits.shape, logits.ndim - 1)
  return (jnp.exp(logits - lse[..., None]) - one_hot) * g[..., None], None


softmax_nll.defvjp(_softmax_nll_fwd, _softmax_nll_bwd)


def cross_entropy(logits: jax.Array, labels: jax.Array, weights: jax.Array, name: str):
  """Weighted mean cross-entropy and (sum, count) metrics `{name}_loss`, `{name}_accuracy`.

  A prediction counts as correct when the label's logit is the largest (a max, not an argmax: an argmax over a
  30k vocabulary is a slow variadic reduction on CPU; the two differ only on exact ties).
  """
  logits, labels = logits.astype(jnp.float32), labels.astype(jnp.int32)
  nll = softmax_nll(logits, labels)
  weights = weights.astype(jnp.float32)
  count = weights.sum()
  total = (nll * weights).sum()
  correct = ((_at_labels(logits, labels) >= logits.max(axis=-1)) * weights).sum()
  return total / jnp.maximum(count, 1.0), {f"{name}_loss": (total, count), f"{name}_accuracy": (correct, count)}

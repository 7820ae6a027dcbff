"""SpanBERT's span boundary objective (spec, "Masking Spans": s_i = FFN([z_{s-1}; z_{e+1}; p_{i-s+1}]),
y_i = softmax(W_V s_i), L_SBO(x_i) = -log P(x_i | x_{s-1}, x_{e+1}, p_{i-s+1})).

The FFN has two dense-GELU-LayerNorm layers (SpanBERT); W_V is the tied input embedding (`attend`) plus a bias.
Reads span_left (s-1), span_right (e+1), span_offset (i-s) [batch, P] from `masking.mask_example(mode="span")`.
"""

from collections.abc import Callable, Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from encoder.model import per_token
from objectives import layers
from objectives.objective import Objective, Requirement


class SpanBoundaryHead(nn.Module):
  """Predicts each masked span token from the span's outside boundary vectors and its relative position."""
  max_span_tokens: int = 32  # Relative position embeddings p_1..p_max; longer offsets share the last one.
  initializer_range: float = 0.02
  layer_norm_eps: float = 1e-12
  approximate_gelu: bool = False

  @nn.compact
  def __call__(self, outputs, batch: dict[str, jax.Array], attend: Callable[[jax.Array], jax.Array],
               train: bool = False) -> jax.Array:
    """-> logits [batch, P, vocab]."""
    left = outputs.at(batch["span_left"])  # z_{s-1}: [batch, P, H]
    right = outputs.at(batch["span_right"])  # z_{e+1}
    width = left.shape[-1]
    offset = jnp.minimum(batch["span_offset"], self.max_span_tokens - 1)  # p_{i-s+1}, 0-based.
    position = nn.Embed(self.max_span_tokens, width, embedding_init=nn.initializers.normal(self.initializer_range),
                        dtype=left.dtype, name="position_embeddings")(offset)
    x = jnp.concatenate([left, right, position], axis=-1)  # [batch, P, 3H]
    layer = lambda h, i: layers.dense_gelu_norm(
        h, width, initializer_range=self.initializer_range, layer_norm_eps=self.layer_norm_eps,
        approximate_gelu=self.approximate_gelu, dense_name=f"layer_{i}", norm_name=f"layer_norm_{i}")
    return layers.output_bias(self, per_token(lambda h: attend(layer(layer(h, 0), 1)), x))


def sbo_loss(logits: jax.Array, batch: dict[str, jax.Array]):
  """Mean cross-entropy over the masked span tokens (masked_weights), with sbo_loss/sbo_accuracy."""
  return layers.cross_entropy(logits, batch["masked_ids"], batch["masked_weights"], "sbo")


def build(config: Mapping[str, Any] | None = None) -> Objective:
  """Objective "sbo" (optional keys: max_span_tokens, initializer_range, layer_norm_eps, hidden_act)."""
  head = SpanBoundaryHead(max_span_tokens=layers.option(config, "max_span_tokens", 32),
                          initializer_range=layers.model_option(config, "initializer_range"),
                          layer_norm_eps=layers.model_option(config, "layer_norm_eps"),
                          approximate_gelu=layers.model_option(config, "hidden_act") == "gelu_tanh")
  return Objective(name="sbo", head=head, loss=sbo_loss,
                   reads=lambda batch: jnp.concatenate([batch["span_left"], batch["span_right"]], axis=1),
                   masking=Requirement("span", "span boundaries"))

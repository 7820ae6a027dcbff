"""Masked language modeling head and loss (spec, "Masking Words": u_i = h_i E^T, y_i = softmax(u_i), L_MLM mean -log P).

The head gathers the final hidden states at `masked_positions` first, so the vocabulary projection runs on
[batch, P] positions only. Parameter names match the HuggingFace import: transform/{kernel,bias},
layer_norm/{scale,bias}, output_bias.
"""

from typing import Any, Callable, Mapping

import flax.linen as nn
import jax

from encoder.model import per_token
from objectives import layers
from objectives.objective import Objective


class MaskedLMHead(nn.Module):
  """dense + GELU + LayerNorm, then the tied embedding decoder (`attend`) plus an output bias [V]."""
  initializer_range: float = 0.02
  layer_norm_eps: float = 1e-12
  approximate_gelu: bool = False
  features: int = 0  # Width of the transform: the embeddings' (factorized: ELECTRA's generator, ALBERT); 0 = hidden.

  @nn.compact
  def __call__(self, outputs, batch: dict[str, jax.Array], attend: Callable[[jax.Array], jax.Array],
               train: bool = False) -> jax.Array:
    """-> logits [batch, P, vocab] at batch["masked_positions"] [batch, P]."""
    hidden = outputs.at(batch["masked_positions"])  # [batch, P, H]
    transform = lambda h: layers.dense_gelu_norm(
        h, self.features or h.shape[-1], initializer_range=self.initializer_range, layer_norm_eps=self.layer_norm_eps,
        approximate_gelu=self.approximate_gelu, dense_name="transform", norm_name="layer_norm")
    return layers.output_bias(self, per_token(lambda h: attend(transform(h)), hidden))


def mlm_loss(logits: jax.Array, batch: dict[str, jax.Array]):
  """Mean cross-entropy over the real masked tokens of the batch (masked_weights), with mlm_loss/mlm_accuracy."""
  return layers.cross_entropy(logits, batch["masked_ids"], batch["masked_weights"], "mlm")


def build(config: Mapping[str, Any] | None = None) -> Objective:
  """Objective "mlm" from a config block (optional keys: initializer_range, layer_norm_eps, hidden_act,
  embedding_size)."""
  head = MaskedLMHead(initializer_range=layers.option(config, "initializer_range", 0.02),
                      layer_norm_eps=layers.option(config, "layer_norm_eps", 1e-12),
                      approximate_gelu=layers.option(config, "hidden_act", "gelu") == "gelu_tanh",
                      features=layers.option(config, "embedding_size", 0))
  return Objective(name="mlm", head=head, loss=mlm_loss, reads=lambda batch: batch["masked_positions"])

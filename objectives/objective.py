"""The contract every pretraining objective and fine-tuning task follows (DESIGN, "Contracts between parts").

An objective is a head (a linen module applied to the encoder's output and the batch) and a loss over the head's
predictions. Metrics are (sum, count) pairs so they aggregate exactly across devices, steps and hosts.
"""

from typing import Any, Callable, NamedTuple

import flax.linen as nn
import jax

# {"accuracy": (sum of correct, count), ...}: averaged as sum(sums) / sum(counts) by the engine.
Metrics = dict[str, tuple[jax.Array, jax.Array]]


class Objective(NamedTuple):
  """A head and its loss, looked up by name from the config.

  head(outputs: EncoderOutput, batch: dict[str, Array], attend: Callable, train: bool) -> predictions (pytree);
    `attend` maps hidden [..., H] to vocabulary logits with the tied input embeddings.
  loss(predictions, batch) -> (scalar mean loss, Metrics).
  cls_only: the head reads the last layer at [CLS] alone (outputs.cls / pooled), so when every head does, the
    encoder's last block runs for that row only (Encoder's `last_rows`).
  """
  name: str
  head: nn.Module
  loss: Callable[[Any, dict[str, jax.Array]], tuple[jax.Array, Metrics]]
  cls_only: bool = False

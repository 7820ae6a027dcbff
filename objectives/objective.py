"""The contract every pretraining objective and fine-tuning task follows (DESIGN, "Contracts between parts").

An objective is a head (a linen module applied to the encoder's output and the batch) and a loss over the head's
predictions. Metrics are (sum, count) pairs so they aggregate exactly across devices, steps and hosts.
"""

from typing import Any, Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

# {"accuracy": (sum of correct, count), ...}: averaged as sum(sums) / sum(counts) by the engine.
Metrics = dict[str, tuple[jax.Array, jax.Array]]


class Objective(NamedTuple):
  """A head and its loss, looked up by name from the config.

  head(outputs: EncoderOutput, batch: dict[str, Array], attend: Callable, train: bool) -> predictions (pytree);
    `attend` maps hidden [..., H] to vocabulary logits with the tied input embeddings.
  loss(predictions, batch) -> (scalar mean loss, Metrics).
  reads(batch) -> positions [batch, k] of the last layer the head reads through outputs.at (besides [CLS], always
    there), or None for all of them: when every head names its positions, the encoder's last block computes only
    those rows (Encoder's `last_positions`), ~3/4 of that block's work saved for the rest.
  train_copies: training batches repeat each example this many times, copies adjacent ([a, a, b, b, ...]), so the
    loss can compare predictions under different dropout masks (R-Drop); the batch's `train_copy` [batch] then
    says which copy each row is. Evaluation batches hold each example once and no `train_copy`.
  """
  name: str
  head: nn.Module
  loss: Callable[[Any, dict[str, jax.Array]], tuple[jax.Array, Metrics]]
  reads: Callable[[dict[str, jax.Array]], jax.Array] | None = None
  train_copies: int = 1


def cls_only(batch: dict[str, jax.Array]) -> jax.Array:
  """`reads` of a head that needs the last layer at [CLS] alone (outputs.cls, outputs.pooled)."""
  return jnp.zeros((batch["input_ids"].shape[0], 0), jnp.int32)

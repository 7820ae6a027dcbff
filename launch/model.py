"""The trained model: the encoder plus every objective's (or task's) head in one linen module, and the weighted loss.

Parameters: params/encoder/... (the Encoder tree) and params/<objective name>/... (each head's tree).
"""

from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from encoder.config import EncoderConfig, from_fields
from encoder.model import Encoder
from objectives.objective import Metrics, Objective

ENCODER_INPUTS = ("input_ids", "type_ids", "positions", "attention_segments")


def encoder_config(model: ml_collections.ConfigDict, vocab_size: int) -> EncoderConfig:
  """EncoderConfig from config.model (encoder.config.from_fields); vocab_size 0 takes the tokenizer's."""
  return from_fields(model.to_dict(), vocab_size)


class EncoderWithHeads(nn.Module):
  """Encoder -> each head; apply returns {objective name: predictions}."""
  cfg: EncoderConfig
  objectives: Sequence[Objective]

  @nn.compact
  def __call__(self, batch: dict[str, jax.Array], train: bool = False) -> dict[str, Any]:
    encoder = Encoder(self.cfg, name="encoder")
    outputs = encoder(*(batch.get(k) for k in ENCODER_INPUTS), train=train, last_positions=last_positions(
        self.objectives, batch))
    return {o.name: o.head.clone(parent=self, name=o.name)(outputs, batch, encoder.attend, train)
            for o in self.objectives}


def last_positions(objectives: Sequence[Objective], batch: dict[str, jax.Array]) -> jax.Array | None:
  """[CLS] and every position the heads read ([batch, R]), when they all name theirs and R < length; else None."""
  if any(o.reads is None for o in objectives):
    return None
  ids = batch["input_ids"]
  positions = jnp.concatenate([jnp.zeros((ids.shape[0], 1), jnp.int32)]
                              + [o.reads(batch).astype(jnp.int32) for o in objectives], axis=1)
  return positions if positions.shape[1] < ids.shape[1] else None


def objective_metrics(objectives: Sequence[Objective], predictions: dict[str, Any],
                      batch: dict[str, jax.Array]) -> Metrics:
  """Every objective's (sum, count) metrics; each must report its loss as `<name>_loss` = (sum, count) (the engine
  normalizes by the global count, so the loss is exact however the batch is split over devices and micro-batches)."""
  metrics = {}
  for objective in objectives:
    _, objective_metrics_ = objective.loss(predictions[objective.name], batch)
    if f"{objective.name}_loss" not in objective_metrics_:
      raise ValueError(f"objective {objective.name!r} must return a '{objective.name}_loss' (sum, count) metric; "
                       f"it returned {sorted(objective_metrics_)}")
    metrics.update(objective_metrics_)
  return metrics


def weighted_loss(weights: dict[str, float], sums: dict[str, Any], counts: dict[str, Any]) -> jax.Array:
  """Total loss sum_o w_o * sums[o] / counts[o]: each objective's mean over its (global) count, weighted."""
  return sum(w * sums[name] / jnp.maximum(counts[name], 1.0) for name, w in weights.items())

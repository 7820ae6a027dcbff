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
from objectives.objective import Metrics, Objective, loss_terms

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
    heads = {o.name: o.head.clone(parent=self, name=o.name) for o in self.objectives}
    for o in self.objectives:
      if o.replaces_inputs:  # ELECTRA: the generator's samples replace the masked tokens.
        batch = heads[o.name].replace_inputs(batch, encoder, train)
    outputs = encoder(*(batch.get(k) for k in ENCODER_INPUTS), train=train, last_positions=last_positions(
        self.objectives, batch))
    return {name: head(outputs, batch, encoder.attend, train) for name, head in heads.items()}


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
  """Every objective's (sum, count) metrics; each must report each loss term t (`loss_terms`) as `<t>_loss` =
  (sum, count) (the engine normalizes by the global count, so the loss is exact however the batch is split over
  devices and micro-batches)."""
  metrics = {}
  for objective in objectives:
    _, objective_metrics_ = objective.loss(predictions[objective.name], batch)
    missing = [f"{term}_loss" for term in loss_terms(objective) if f"{term}_loss" not in objective_metrics_]
    if missing:
      raise ValueError(f"objective {objective.name!r} must return {missing} (sum, count) metrics; it returned "
                       f"{sorted(objective_metrics_)}")
    metrics.update(objective_metrics_)
  return metrics


def term_weights(objectives: Sequence[Objective], weights: dict[str, float]) -> dict[str, float]:
  """{loss term: weight}: each objective's weight times its terms' own (`loss_terms`)."""
  return {term: weights[o.name] * w for o in objectives for term, w in loss_terms(o).items()}


def weighted_loss(weights: dict[str, float], sums: dict[str, Any], counts: dict[str, Any]) -> jax.Array:
  """Total loss sum_t w_t * sums[t] / counts[t] over loss terms: each term's mean over its (global) count,
  weighted."""
  return sum(w * sums[name] / jnp.maximum(counts[name], 1.0) for name, w in weights.items())

"""The trained model: the encoder plus every objective's (or task's) head in one linen module, and the weighted loss.

Parameters: params/encoder/... (the Encoder tree) and params/<objective name>/... (each head's tree).
"""

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from encoder import peft_format, runs
from encoder.config import EncoderConfig, from_fields
from encoder.errors import ConfigError
from encoder.model import Encoder, EncoderOutput
from objectives.objective import Metrics, Objective, loss_terms

ENCODER_INPUTS = ("input_ids", "type_ids", "positions", "attention_segments")
PACKED_INPUTS = ("input_ids", "type_ids", "positions", "segments")  # packed_<name>: the same inputs, packed.


def encoder_config(model: ml_collections.ConfigDict, vocab_size: int) -> EncoderConfig:
  """EncoderConfig from config.model (encoder.config.from_fields); vocab_size 0 takes the tokenizer's."""
  return from_fields(model.to_dict(), vocab_size)


def run_encoder_config(config: ml_collections.ConfigDict, vocab_size: int, starting: bool = False) -> EncoderConfig:
  """The encoder a run trains: config.model's (`encoder_config`) with the LoRA branches or adapters of its regime.
  starting: the run starts from config.init now (a PEFT adapter there must agree with config.lora)."""
  cfg = encoder_config(config.model, vocab_size)
  return cfg.replace(**regime_fields(config, cfg, starting))


def regime_fields(config: ml_collections.ConfigDict, cfg: EncoderConfig, starting: bool = False) -> dict[str, Any]:
  """EncoderConfig's LoRA fields from config.lora (regime "lora") or its adapter fields from config.adapters (regime
  "adapters"), as encoder.runs.regime_fields reads them for every reader of a run; {} for every other regime.
  starting from init=peft:DIR: the adapter must agree with config.lora."""
  fields = runs.regime_fields(config, cfg.num_layers)
  if fields and starting and config.regime == "lora" and str(config.get("init", "")).startswith("peft:"):
    adapter, _ = peft_format.read_adapter(config.init[len("peft:"):], cfg)
    names = {"lora_rank": "rank", "lora_alpha": "alpha", "lora_targets": "targets", "lora_layers": "layers"}
    for field, name in names.items():
      if fields[field] != adapter[field]:
        raise ConfigError(f"config.lora.{name}={getattr(config.lora, name)!r}: the adapter of config.init="
                          f"{config.init!r} has {adapter[field]!r}; set config.lora.{name} to the adapter's")
  return fields


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
    if "packed_input_ids" in batch:  # Packed fine-tuning (tasks.batching.pack): the heads read unpacked examples.
      packed = (batch[f"packed_{k}"] for k in PACKED_INPUTS)
      outputs = encoder(*packed, train=train,  # type: ignore[misc,arg-type]  # mypy cannot count a generator's 4 items
                        last_positions=batch["packed_cls"] if all(_cls_only(o, batch) for o in self.objectives)
                        else None)
      outputs = unpacked(outputs, batch, encoder.pool)
    else:
      rows = encoder_rows(batch)
      inputs = (rows.get(k) for k in ENCODER_INPUTS)  # input_ids always there; a missing other: None, its default.
      outputs = encoder(*inputs, train=train,  # type: ignore[misc,arg-type]  # mypy cannot count a generator's 4 items
                        last_positions=last_positions(self.objectives, rows))
      outputs = example_outputs(outputs, batch["input_ids"].shape[:-1])
    return {name: head(outputs, batch, encoder.attend, train) for name, head in heads.items()}


def encoder_rows(batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
  """The encoder's inputs as [rows, length]: a batch whose examples are several rows of tokens ([batch, k, length],
  a family's `layout`: multiple choice's row per choice) flattened to [batch * k, length], as HF's BertForMultipleChoice
  does (the heads' `reads` then name positions per row: [CLS] only, `objective.cls_only`); a [batch, length] batch as
  it is."""
  if batch["input_ids"].ndim == 2:
    return batch
  length = batch["input_ids"].shape[-1]
  return {k: batch[k].reshape(-1, length) for k in ENCODER_INPUTS if k in batch}


def example_outputs(outputs: EncoderOutput, shape: tuple[int, ...]) -> EncoderOutput:
  """The encoder's outputs over `encoder_rows` back in the examples' shape (`shape`: input_ids' leading axes): states
  [*shape, length, hidden], cls and pooled [*shape, hidden]; one row per example: as they are."""
  if len(shape) == 1:
    return outputs
  back = lambda x: x.reshape(*shape, *x.shape[1:])
  positions = outputs.last_positions
  return EncoderOutput(hidden_states=tuple(map(back, outputs.hidden_states)), cls=back(outputs.cls),
                       pooled=back(outputs.pooled), last_positions=None if positions is None else back(positions))


def _cls_only(objective: Objective, batch: dict[str, jax.Array]) -> bool:
  """Whether the objective's head reads the last layer at [CLS] alone (`reads` names no other position)."""
  return objective.reads is not None and objective.reads(batch).shape[1] == 0


def unpacked(outputs: EncoderOutput, batch: dict[str, jax.Array], pool) -> EncoderOutput:
  """The encoder's output over packed rows -> each example's, as its own row of the batch's width would give it:
  every layer's states at positions example_start + 0..width-1 of row example_row (the example's segment; past its
  end, states the heads mask out as they mask padding), its [CLS] vector and `pool`ed [CLS]. When the encoder computed
  the last layer only at each row's example starts (`packed_cls`), `last` holds the examples' [CLS] alone."""
  rows, starts = batch["example_row"], batch["example_start"]
  width = batch["input_ids"].shape[1]
  index = starts[:, None] + jnp.arange(width)[None]
  take = lambda states: states[rows[:, None], jnp.minimum(index, states.shape[1] - 1)]
  if outputs.last_positions is None:
    states = tuple(map(take, outputs.hidden_states))
    cls, last_positions = states[-1][:, 0], None
  else:
    slot = jnp.argmax(outputs.last_positions[rows] == starts[:, None], axis=-1)
    cls = outputs.last[rows, slot]
    states = tuple(map(take, outputs.hidden_states[:-1])) + (cls[:, None],)
    last_positions = jnp.zeros((len(rows), 1), jnp.int32)
  return EncoderOutput(hidden_states=states, cls=cls, pooled=pool(cls), last_positions=last_positions)


def last_positions(objectives: Sequence[Objective], batch: dict[str, jax.Array]) -> jax.Array | None:
  """[CLS] and every position the heads read ([batch, R]), when they all name theirs and R < length; else None."""
  if any(o.reads is None for o in objectives):
    return None
  ids = batch["input_ids"]
  positions = jnp.concatenate([jnp.zeros((ids.shape[0], 1), jnp.int32)]
                              + [o.reads(batch).astype(jnp.int32) for o in objectives if o.reads is not None], axis=1)
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

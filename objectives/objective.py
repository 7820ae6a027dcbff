"""The contract every pretraining objective and fine-tuning task follows (DESIGN, "Contracts between parts").

An objective is a head (a linen module applied to the encoder's output and the batch) and a loss over the head's
predictions. Metrics are (sum, count) pairs so they aggregate exactly across devices, steps and hosts.
"""

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from encoder.config import EncoderConfig
from encoder.hf.tensors import Found

# {"accuracy": (sum of correct, count), ...}: averaged as sum(sums) / sum(counts) by the engine.
Metrics = dict[str, tuple[jax.Array, jax.Array]]


class HfHead(NamedTuple):
  """An objective's head as HuggingFace's classes hold it (import and export; objectives.hf_heads composes the
  registered objectives' into a checkpoint's heads). Layouts are encoder.hf's: "bert", "electra", "modernbert"."""
  # (tensors left after the encoder's, in found.layout's names; the directory; the encoder's params) -> the head's
  # tree ({name: ...}'s value) popped from `found`, or None when the checkpoint has no such head.
  read: Callable[[Found, Path, dict], Any]
  # (cfg, layout, {name: tree}, remote: for launch/hf_modeling's classes) -> ({HF name: array} without the encoder's
  # prefix, config.json fields), or None when `layout` has no place for the head.
  write: Callable[[EncoderConfig, str, Mapping, bool], tuple[dict[str, np.ndarray], dict[str, Any]] | None]
  # {(layout, names of the heads it holds, sorted): HF class}, e.g. {("bert", ("mlm", "nsp")): "BertForPreTraining"}.
  classes: Mapping[tuple[str, tuple[str, ...]], str]
  pooler: bool = False  # Whether the head reads BERT's pooler (a class holding it then holds the pooler).
  layout: str | None = None  # The layout its class puts the encoder in (ELECTRA's discriminator: "electra").
  # (cfg, layout, tree) -> whether HF's own class holds the tree exactly (else launch.export uses a remote class).
  exact: Callable[[EncoderConfig, str, Mapping], bool] | None = None
  # (directory, cfg, encoder params, tree, tokenizer files) -> None: what the head writes beside (ELECTRA's generator).
  beside: Callable[..., None] | None = None
  # {(layout, names of the heads it holds, sorted): launch/hf_modeling's class} where HF's own classes cannot hold the
  # heads (exactly), e.g. {("modernbert", ("mlm", "nsp")): "EncoderlabModernBertForPreTraining"}; None: none.
  remote: Mapping[tuple[str, tuple[str, ...]], str] | None = None


class Requirement(NamedTuple):
  """What an objective needs of the data (a `config.data.packing`, a `config.masking.mode`) or the objectives it
  cannot share a batch with, and why, as the one-line error says it (objectives.data.check)."""
  value: str | tuple[str, ...]
  why: str


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
  terms: {term: weight}: the objective's loss is sum_t w_t * (mean of its metric `{t}_loss`), each term averaged
    over its own (sum, count), e.g. ELECTRA's generator MLM + 50 * replaced-token detection; None: the one term
    `{name}_loss` with weight 1 (`loss_terms`).
  replaces_inputs: the head rewrites the encoder's input before the encoder runs (ELECTRA's generator puts its
    samples in the masked positions): EncoderWithHeads first calls head.replace_inputs(batch, encoder, train) ->
    batch, and the encoder and every head read the batch it returns.
  encoders: encoder config -> the configs of further encoders the head runs over every token of every row (ELECTRA's
    generator), counted in the step's FLOPs (encoder.flops.step_flops); None: none.
  hf: the head's HuggingFace layout (`HfHead`); None: no HF class holds it (launch.export saves it beside).
  packing, masking: the `config.data.packing` / `config.masking.mode` the head needs (NSP: sentence pairs; SBO: span
    boundaries), None: any; excludes: the objectives it cannot share a batch with (ELECTRA: MLM, SBO), None: none.
  mask_defaults: {config.masking field: value} the objective trains with unless the config says otherwise (ELECTRA:
    85% [MASK], no random tokens), None: masking's own defaults (`objectives.data.defaults` gathers them).
  best: (held-out metric, "max" or "min") a run keeps its best checkpoint by (MLM: its accuracy, higher is better);
    None: none of its own (`objectives.registry.best_checkpoint` then falls back to the loss).
  check: the run's encoder config -> None, or a ConfigError naming the field when the head cannot run on that encoder
    (ELECTRA: its generator's shape); configs.checks calls it before a run reads or writes anything. None: nothing
    to check.
  """
  name: str
  head: nn.Module
  loss: Callable[[Any, dict[str, jax.Array]], tuple[jax.Array, Metrics]]
  reads: Callable[[dict[str, jax.Array]], jax.Array] | None = None
  train_copies: int = 1
  terms: Mapping[str, float] | None = None
  replaces_inputs: bool = False
  encoders: Callable[[EncoderConfig], tuple[EncoderConfig, ...]] | None = None
  hf: HfHead | None = None
  packing: Requirement | None = None
  masking: Requirement | None = None
  excludes: Requirement | None = None
  mask_defaults: Mapping[str, Any] | None = None
  best: tuple[str, str] | None = None
  check: Callable[[EncoderConfig], None] | None = None


def loss_terms(objective: Objective) -> dict[str, float]:
  """{term: weight} of the objective's loss: `terms`, or {name: 1.0}."""
  return dict(objective.terms) if objective.terms is not None else {objective.name: 1.0}


def extra_encoders(objectives: Sequence[Objective], cfg: EncoderConfig) -> tuple[EncoderConfig, ...]:
  """The configs of the encoders the objectives' heads run besides the model's (`encoders`), for FLOP counts."""
  return tuple(e for o in objectives if o.encoders for e in o.encoders(cfg))


def cls_only(batch: dict[str, jax.Array]) -> jax.Array:
  """`reads` of a head that needs the last layer at [CLS] alone (outputs.cls, outputs.pooled)."""
  return jnp.zeros((batch["input_ids"].shape[0], 0), jnp.int32)

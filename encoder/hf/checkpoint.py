"""An HF checkpoint directory <-> our encoder's (cfg, params): read config.json and the weights, take the encoder's
tensors in its layout (BERT, ELECTRA or ModernBERT), hand what is left to the caller's head reader, refuse the rest;
and write an encoder with the HF tensors of whatever heads the class holds. The heads' layouts are their objectives'
(objectives/hf_heads.py composes them) or their task family's (`TaskFamily.hf_head`): this layer knows none."""

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from encoder.config import EncoderConfig
from encoder.hf import bert, config, files as hf_files, modernbert
from encoder.hf.tensors import Found, put, state

# (tensors left once the encoder's are taken, the directory, the encoder's params) -> {head name: tree}, popping what
# it takes from the tensors.
HeadReader = Callable[[Found, Path, dict], dict[str, Any]]


class Heads(NamedTuple):
  """The heads an HF class holds on top of the encoder, as `save_hf_checkpoint` writes them."""
  architecture: str  # config.json's class, e.g. BertForPreTraining, BertForTokenClassification (or a remote class).
  tensors: Mapping[str, np.ndarray]  # The heads' tensors, HF names (e.g. {"classifier.weight": ..., ...}).
  config: Mapping[str, Any]  # Their config.json fields (id2label, classifier_bias, ...).
  pooler: bool  # Whether the class holds the encoder's pooler (HF's token-level classes do not).


def load_hf_checkpoint(directory: str | os.PathLike, init_missing_pooler: bool = False,
                       heads: HeadReader | None = None) -> tuple[EncoderConfig, dict, dict]:
  """(cfg, params, heads) from an HF BERT, ELECTRA or ModernBERT directory: Encoder(cfg).apply({"params": params},
  ...) runs it.

  heads: reads the pretraining heads from the tensors left after the encoder's (objectives.hf_heads.read_heads:
  each objective's layout); None: the encoder alone (`without_heads`: what lies outside the encoder's modules, e.g.
  BertForPreTraining's cls.* heads, is left out unread; a stray tensor inside them is still refused).
  Leaves are numpy arrays. init_missing_pooler: a checkpoint without the pooler (BertForMaskedLM) gets a zero pooler
  instead of raising MissingTensorError; ELECTRA and HF's ModernBERT have none: always a zero one. A fine-tuned
  checkpoint (a *ForSequenceClassification, *ForTokenClassification or *ForQuestionAnswering, HF's or an encoderlab
  export's remote class) gives its encoder: its task head is left out, a pooler it lacks (heads that never read it)
  comes back as zeros.
  """
  directory = hf_files.checked_directory(directory)
  cfg, layout, architecture = config.read(directory)
  task = architecture.endswith(config.TASK_CLASS_SUFFIXES)
  weights = hf_files.weight_files(directory)
  found = Found(*hf_files.read_tensors(weights), hf_files.source_of(directory, weights), cfg, layout)
  params = _take_encoder(found, init_missing_pooler or task)
  # A task class's head (what is left outside the encoder's modules) and any prediction head are not imported.
  trees = (without_heads if task or heads is None else heads)(found, directory, params)
  found.refuse_rest()
  return cfg, params, trees


def without_heads(found: Found, directory: Path, params: dict) -> dict:
  """The HeadReader of a caller that uses the encoder alone (a task class's import, the embedder): every tensor
  outside the encoder's modules is dropped unread; a stray one inside them is still refused."""
  found.tensors = {name: array for name, array in found.tensors.items() if name.split(".")[0] in config.ENCODER_ROOTS}
  return {}


def _take_encoder(found: Found, init_missing_pooler: bool) -> dict:
  """Our encoder's params popped from `found` (a zero pooler where the layout or init_missing_pooler says)."""
  cfg = found.cfg
  if found.layout == "modernbert":
    return modernbert.take_encoder(found)
  tensors = bert.encoder_tensors(cfg)
  pooler = [t for t in tensors if t.path[0] == "pooler"]
  zero_pooler = found.layout == "electra" or (init_missing_pooler and not found.holds(pooler))
  if zero_pooler:
    tensors = [t for t in tensors if t.path[0] != "pooler"]
  params = found.take(tensors)
  if zero_pooler:
    for t in pooler:
      put(params, t.path, np.zeros(t.shape, cfg.param_dtype))
  return params


def hf_state(cfg: EncoderConfig, params: Mapping, *, pooler: bool | None = None, prefix: str = "",
             electra: bool = False) -> dict[str, np.ndarray]:
  """{HF tensor name: array} for our encoder params, in `hf_layout(cfg)`'s names (electra: ELECTRA's, no pooler)
  after `prefix` (a class with heads: "bert.", "electra.", "model."). pooler: whether the pooler is written (default:
  BERT's always, ELECTRA's and ModernBERT's never); a ModernBERT pooler is an encoderlab export's (`pooler.dense`,
  outside the prefix, launch/hf_modeling): HF's ModernBERT has none."""
  modernbert_layout = config.hf_layout(cfg) == "modernbert"
  pooler = (not modernbert_layout and not electra) if pooler is None else pooler
  if not modernbert_layout:
    return state(bert.encoder_tensors(cfg, pooler=pooler), params, "params", prefix)
  out = state(modernbert.encoder_tensors(cfg), params, "params", prefix)
  return out | (state(modernbert.pooler_tensors(cfg), params, "params") if pooler else {})


def save_hf_checkpoint(directory: str | os.PathLike, cfg: EncoderConfig, params: Mapping, heads: Heads | None = None,
                       tokenizer_files: Iterable[str | os.PathLike] | None = None, *,
                       config_fields: Mapping[str, Any] | None = None, files: Mapping[str, str] | None = None) -> Path:
  """Write config.json + model.safetensors (+ copies of tokenizer_files, e.g. vocab.txt, tokenizer.json).

  Without heads the result loads with transformers' BertModel.from_pretrained, or ModernBertModel for an encoder of
  `hf_layout` "modernbert". heads: what a class holds on top of the encoder, e.g. Heads("BertForTokenClassification",
  {"classifier.weight": ..., ...}, {"id2label": ...}, pooler=False), or pretraining heads (objectives.hf_heads.heads);
  the encoder's tensors then get the class's "bert." ("model.": ModernBERT, "electra.": an Electra* class) prefix.
  config_fields: merged into config.json last (a class of launch/hf_modeling, with the remote code's model_type and
  auto_map); files: {name: text} written beside (remote code, a model card, a tokenizer_config.json replacing the
  copied one). Every file is written to a temporary name first and renamed into place only once all are complete.
  """
  layout = config.hf_layout(cfg)
  architecture = heads.architecture if heads else config.ENCODER_CLASSES[layout]
  electra = architecture.startswith("Electra")
  if heads is None:
    hf_state_ = hf_state(cfg, params)
  else:
    prefix = "model." if layout == "modernbert" else "electra." if electra else "bert."
    hf_state_ = hf_state(cfg, params, pooler=heads.pooler, prefix=prefix, electra=electra) | dict(heads.tensors)
  hf_config = config.config_to_hf(cfg, architecture) | dict(heads.config if heads else {}) | dict(config_fields or {})
  return hf_files.write(Path(directory), hf_state_, hf_config, tokenizer_files, dict(files or {}))

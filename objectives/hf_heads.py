"""Pretraining heads in HuggingFace checkpoints: the registered objectives' HF layouts (`Objective.hf`) composed over
encoder.hf, which reads and writes the encoder alone. Import reads the encoder's tensors, then lets each objective
take its head's from what is left (anything still left is refused); export asks each head for its tensors and the
objectives' declared classes for the class that holds them together (BertForPreTraining, ElectraForPreTraining, ...).
An objective a forker registers (objectives.registry.OBJECTIVES) takes part with no change here."""

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from encoder.config import EncoderConfig
from encoder.hf import checkpoint, config
from encoder.hf.files import UnexpectedTensorError
from encoder.hf.tensors import Found
from objectives import registry
from objectives.objective import HfHead


def layouts() -> dict[str, HfHead]:
  """{objective name: its HF layout} of the registered objectives that have one."""
  built = {name: registry.build(name) for name in registry.OBJECTIVES}
  return {name: objective.hf for name, objective in built.items() if objective.hf is not None}


def read_heads(found: Found, directory: Path, params: dict) -> dict[str, Any]:
  """{objective name: head tree} of every registered objective's head the checkpoint holds (encoder.hf.HeadReader)."""
  trees = {}
  for name, head in layouts().items():
    tree = head.read(found, directory, params)
    if tree is not None:
      trees[name] = tree
  return trees


def load_hf_checkpoint(directory: str | os.PathLike, init_missing_pooler: bool = False
                       ) -> tuple[EncoderConfig, dict, dict]:
  """(cfg, params, heads) of an HF checkpoint with its pretraining heads (encoder.hf.load_hf_checkpoint with
  `read_heads`): {"mlm": ..., "nsp": ...} of BertForPreTraining, {"electra": {"discriminator", "generator"}} of an
  ElectraForPreTraining (the generator from its `generator/` subdirectory), {} of a BertModel."""
  return checkpoint.load_hf_checkpoint(directory, init_missing_pooler, read_heads)


def layout_of(cfg: EncoderConfig, names: Iterable[str]) -> str:
  """The HF layout an encoder with these heads exports to: the one a head's class puts it in (ELECTRA's), else
  `hf_layout(cfg)`."""
  hf = layouts()
  forced = {head.layout for head in (hf[name] for name in names if name in hf) if head.layout}
  return forced.pop() if len(forced) == 1 else config.hf_layout(cfg)


def classes() -> dict[tuple[str, tuple[str, ...]], str]:
  """{(layout, heads): HF class} over the registered objectives' declarations."""
  return {key: name for head in layouts().values() for key, name in head.classes.items()}


def remote_classes(layout: str) -> dict[tuple[str, ...], str]:
  """{heads: launch/hf_modeling's class} on a `layout` encoder over the registered objectives' declarations
  (`HfHead.remote`)."""
  return {heads: name for head in layouts().values() for (where, heads), name in (head.remote or {}).items()
          if where == layout}


def architecture_of(names: Iterable[str], layout: str = "bert") -> str:
  """The HF class that holds exactly these heads on a `layout` encoder (the bare encoder's without heads)."""
  key = tuple(sorted(names))
  if not key:
    return config.ENCODER_CLASSES[layout]
  known = {heads: name for (where, heads), name in classes().items() if where == layout}
  if key not in known:
    raise UnexpectedTensorError(f"no HuggingFace class holds the heads {list(key)} together (known: "
                                f"{', '.join(f'{list(k)} -> {v}' for k, v in known.items())})")
  return known[key]


def held(names: Iterable[str], layout: str, remote: bool = False) -> tuple[str, ...]:
  """The most of `names` one HF class of `layout` holds together (() when none holds any); `remote`: one of
  launch/hf_modeling's classes (`remote_classes`)."""
  names = set(names)
  declared = remote_classes(layout) if remote else [heads for (where, heads) in classes() if where == layout]
  fits = [heads for heads in declared if set(heads) <= names]
  return max(fits, key=len, default=())


def exact(cfg: EncoderConfig, layout: str, heads: Mapping) -> bool:
  """Whether HF's own classes hold every head exactly (`HfHead.exact`)."""
  hf = layouts()
  for name, tree in heads.items():
    holds = hf[name].exact
    if holds is not None and not holds(cfg, layout, tree):
      return False
  return True


def heads(cfg: EncoderConfig, trees: Mapping, architecture: str | None = None, remote: bool = False
          ) -> checkpoint.Heads:
  """The pretraining heads `trees` as their class holds them (`architecture`, default `architecture_of`): their HF
  tensors and config.json fields; a head with no place in the layout is refused."""
  hf, layout = layouts(), layout_of(cfg, trees)
  written = {name: hf[name].write(cfg, layout, {name: tree}, remote) if name in hf else None
             for name, tree in trees.items()}
  unknown = sorted(name for name, out in written.items() if out is None)
  if unknown:
    exportable = tuple(sorted({name for (where, names) in classes() if where == layout for name in names}))
    raise UnexpectedTensorError(f"heads has unknown entries {unknown}; only {exportable} export")
  tensors: dict[str, np.ndarray] = {}
  fields: dict[str, Any] = {}
  for head_tensors, head_fields in (out for out in written.values() if out is not None):
    tensors |= head_tensors
    fields |= head_fields
  pooler = layout == "bert" or any(hf[name].pooler for name in trees)
  return checkpoint.Heads(architecture or architecture_of(trees, layout), tensors, fields, pooler)


def hf_state(cfg: EncoderConfig, params: Mapping, trees: Mapping) -> dict[str, np.ndarray]:
  """{HF tensor name: array} of the encoder and its pretraining heads as `save_hf_checkpoint` writes them."""
  if not trees:
    return checkpoint.hf_state(cfg, params)
  held_ = heads(cfg, trees)
  layout = config.hf_layout(cfg)
  electra = held_.architecture.startswith("Electra")
  prefix = "model." if layout == "modernbert" else "electra." if electra else "bert."
  return checkpoint.hf_state(cfg, params, pooler=held_.pooler, prefix=prefix, electra=electra) | dict(held_.tensors)


def save_hf_checkpoint(directory: str | os.PathLike, cfg: EncoderConfig, params: Mapping,
                       trees: Mapping | None = None, tokenizer_files: Iterable[str | os.PathLike] | None = None, *,
                       config_fields: Mapping[str, Any] | None = None, files: Mapping[str, str] | None = None) -> Path:
  """encoder.hf.save_hf_checkpoint with pretraining heads `trees` in their objectives' layouts and class (config_fields'
  architectures when given: a remote class, whose ModernBERT MLM head keeps every bias), and what a head writes
  beside first (ELECTRA's generator, in `generator/`)."""
  if not trees:
    return checkpoint.save_hf_checkpoint(directory, cfg, params, None, tokenizer_files, config_fields=config_fields,
                                         files=files)
  config_fields = dict(config_fields or {})
  remote = config_fields.get("model_type") in config.REMOTE_MODEL_TYPES
  held_ = heads(cfg, trees, config_fields.get("architectures", [None])[0], remote)
  hf = layouts()
  for name, tree in trees.items():
    beside = hf[name].beside
    if beside is not None:
      beside(Path(directory), cfg, params, tree, tokenizer_files)
  return checkpoint.save_hf_checkpoint(directory, cfg, params, held_, tokenizer_files, config_fields=config_fields,
                                       files=files)

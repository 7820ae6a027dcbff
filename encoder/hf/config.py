"""config.json <-> EncoderConfig for the three HF layouts ("bert", "electra", "modernbert"), which layout an
EncoderConfig exports to (`hf_layout`), and the class names that say what a checkpoint is."""

import os
from pathlib import Path
from typing import Any

from encoder.config import EncoderConfig
from encoder.hf import bert, modernbert
from encoder.hf.files import MissingConfigError, UnsupportedArchitectureError, read_config, weight_files

LAYOUTS = ("bert", "electra", "modernbert")  # ELECTRA's is BERT's encoder with its own names and no pooler.
ENCODER_CLASSES = {"bert": "BertModel", "electra": "ElectraModel", "modernbert": "ModernBertModel"}  # No heads.
# model_type of exports whose heads need remote code (launch/hf_modeling's config classes) -> the encoder's.
REMOTE_MODEL_TYPES = {"encoderlab-bert": "bert", "encoderlab-modernbert": "modernbert"}
# Suffixes of fine-tuned (task) classes: their head tensors are not imported, a missing pooler comes back as zeros.
TASK_CLASS_SUFFIXES = ("ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering")
ENCODER_ROOTS = ("embeddings", "embeddings_project", "encoder", "pooler", "layers", "final_norm")  # Tensor roots.


def hf_layout(cfg: EncoderConfig) -> str:
  """"bert" or "modernbert": the HF architecture that computes what Encoder(cfg) does (pooler aside, which ModernBERT
  lacks); an UnsupportedArchitectureError names the fields that keep `cfg` out of both."""
  def conflicts(switches):
    return [f"{field}={getattr(cfg, field)!r}" for field, value in switches.items() if getattr(cfg, field) != value]
  bert_conflicts = conflicts(bert.SWITCHES) + (
      [f"hidden_act={cfg.hidden_act!r}"] if cfg.hidden_act not in bert.HF_ACTIVATION else []) + (
          ["type_vocab_size=0"] if not cfg.type_vocab_size else [])
  if not bert_conflicts:
    return "bert"
  modernbert_conflicts = conflicts(modernbert.SWITCHES)
  if not modernbert_conflicts:
    return "modernbert"
  raise UnsupportedArchitectureError(
      f"an encoder with {', '.join(bert_conflicts)} has no HuggingFace BERT equivalent (BERT is post-LN with learned "
      f"absolute positions, biases and a dense feed-forward), nor a ModernBERT one ({', '.join(modernbert_conflicts)}"
      f"; ModernBERT needs {', '.join(f'{k}={v!r}' for k, v in modernbert.SWITCHES.items())}); export only those")


def config_from_hf(hf_config: dict, source: str) -> EncoderConfig:
  """EncoderConfig from a parsed HF config.json; anything but a post-LN absolute-position BERT or ELECTRA, or a
  ModernBERT, is refused."""
  def unsupported(field, why):
    return UnsupportedArchitectureError(f"{source}: field {field!r} = {hf_config.get(field)!r}: {why}; only BERT "
                                        "encoders (model_type 'bert', e.g. BertModel/BertForPreTraining), ELECTRA "
                                        "('electra') and ModernBERT ('modernbert') import")
  model_type = hf_config.get("model_type")
  if isinstance(model_type, str):
    hf_config = hf_config | {"model_type": REMOTE_MODEL_TYPES.get(model_type, model_type)}
  if hf_config.get("model_type") == "modernbert":
    return modernbert.config_from_hf(hf_config, source)
  if hf_config.get("model_type") not in ("bert", "electra"):
    raise unsupported("model_type", "not a BERT, ELECTRA or ModernBERT checkpoint (RoBERTa/XLM-R/DistilBERT use "
                      "other layouts)")
  return bert.config_from_hf(hf_config, source, unsupported)


def config_to_hf(cfg: EncoderConfig, architecture: str = "BertModel") -> dict[str, Any]:
  """The config.json dict that transformers' BertConfig (ModernBertConfig for `hf_layout` "modernbert", ElectraConfig
  for an Electra* architecture) reads back as `cfg`."""
  electra = architecture.startswith("Electra")
  if cfg.embedding_width != cfg.hidden_size and not electra:
    raise UnsupportedArchitectureError(f"embedding_size={cfg.embedding_size} (factorized embeddings) has no place in "
                                       "HuggingFace's BERT and ModernBERT classes; only ELECTRA pretraining runs "
                                       "(objectives=electra) export them, in ELECTRA's layout")
  layout = hf_layout(cfg)
  if electra and layout != "bert":
    raise UnsupportedArchitectureError(f"{architecture} is a BERT-layout encoder; this one has ModernBERT's switches")
  if layout == "modernbert":
    return modernbert.config_to_hf(cfg, architecture)
  return bert.config_to_hf(cfg, architecture, electra)


def read(directory: Path) -> tuple[EncoderConfig, str, str]:
  """(the EncoderConfig of directory's config.json, its layout (LAYOUTS), its class: the first of its
  architectures, "" when it names none)."""
  hf_config, path = read_config(directory)
  cfg = config_from_hf(hf_config, path)
  layout = "electra" if hf_config["model_type"] == "electra" else hf_layout(cfg)
  architectures = hf_config.get("architectures") or [""]
  return cfg, layout, (architectures[0] if isinstance(architectures, list) and isinstance(architectures[0], str)
                       else "")


def checked_config(directory: str | os.PathLike) -> EncoderConfig:
  """The EncoderConfig of a checkpoint directory, once it is known to hold a usable config.json and safetensors
  weights (not read): what a config file needs to fail early, naming the file, instead of when the weights load."""
  directory = Path(directory)
  if not directory.is_dir():
    raise MissingConfigError(f"{directory} is not a directory: expected a HuggingFace checkpoint directory")
  cfg, _, _ = read(directory)
  weight_files(directory)
  return cfg

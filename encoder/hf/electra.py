"""ELECTRA as Google released it: the discriminator (ElectraForPreTraining: BERT's encoder in ELECTRA's names, with
factorized embeddings and no pooler, encoder.hf.bert) and, in its `generator/` subdirectory, the generator
(ElectraForMaskedLM), whose embeddings are the discriminator's. What the generator's tree is and how it is read and
written beside is the "electra" objective's (objectives/electra.py); this module says where it lives and its shape."""

from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from encoder.config import EncoderConfig
from encoder.hf.files import UnsupportedArchitectureError

GENERATOR_DIRECTORY = "generator"  # ELECTRA's generator (ElectraForMaskedLM) beside its discriminator.


def generator_config(cfg: EncoderConfig, generator_encoder: Mapping) -> EncoderConfig:
  """The EncoderConfig of a generator's encoder tree (without embeddings), from its shapes and the discriminator's
  `cfg`."""
  qkv = np.shape(generator_encoder["layer_0"]["attention"]["qkv"]["kernel"])  # [hidden, 3, heads, head_dim]
  intermediate = np.shape(generator_encoder["layer_0"]["mlp"]["intermediate"]["kernel"])[1]
  layers = sum(1 for key in generator_encoder if key.startswith("layer_"))
  return cfg.replace(hidden_size=qkv[0], num_heads=qkv[2], intermediate_size=intermediate, num_layers=layers,
                     embedding_size=cfg.embedding_width)


def check_shared_embeddings(directory: Path, discriminator: Mapping, generator: Mapping) -> None:
  """Refuse a generator (read from `directory`) whose embeddings differ from the discriminator's."""
  for path, ours, theirs in _leaves(discriminator, generator):
    if ours.shape != theirs.shape or not np.array_equal(ours, theirs):
      raise UnsupportedArchitectureError(f"{directory}: embeddings/{path} differs from the discriminator's; ELECTRA's "
                                         "generator shares the discriminator's embeddings")


def _leaves(a: Mapping, b: Mapping, prefix: str = "") -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
  """(path, a's leaf, b's leaf) of two trees with the same keys."""
  for key, value in a.items():
    if isinstance(value, Mapping):
      yield from _leaves(value, b[key], f"{prefix}{key}/")
    else:
      yield f"{prefix}{key}", np.asarray(value), np.asarray(b[key])

"""The real MiniLM WordPiece tokenizer for the corpus and packing tests (the package `make install` installs)."""

import pytest

from encoder.pretrained import minilm_path
from encoder.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
  """Found wherever the package is installed; a missing package is an error that names what to install."""
  return load_tokenizer(minilm_path() / "vocab.txt")

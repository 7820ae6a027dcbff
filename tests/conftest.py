"""Shared fixtures: the real-data directory (skip locally when absent, fail in CI)."""

import os

import jax
import pytest

from configs import paths

# The tests check the math against numpy and torch in full float32: no TF32 matmuls when they run on a recent GPU.
jax.config.update("jax_default_matmul_precision", "float32")


def require_data(relative: str):
  """Path to a shared data file; skips with a reason when absent, fails when CI=true."""
  try:
    return paths.data_file(relative)
  except FileNotFoundError as err:
    if os.environ.get("CI", "").lower() == "true":
      pytest.fail(f"CI must have the shared data: {err}")
    pytest.skip(f"shared data absent: {err}")


@pytest.fixture
def data(request):
  """`data("wikitext-2/raw/wiki.valid.raw")` -> Path (skip/fail as in `require_data`)."""
  return require_data


def conll_tags(relative: str) -> list[list[str]]:
  """NER tags per sentence of a shared CoNLL-2003 file, read by the library's reader (skip/fail as above)."""
  from tasks.readers import read_conll
  return [record["tags"] for record in read_conll(require_data(relative))]

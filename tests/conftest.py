"""Shared fixtures, the skip rule (data or a reference package that is absent skips locally, fails under CI), and how
`make test`'s pytest-xdist workers share the files out."""

import importlib
import os

import jax
import pytest

from configs import paths
from launch import compilation_cache

# The tests check the math against numpy and torch in full float32: no TF32 matmuls when they run on a recent GPU.
jax.config.update("jax_default_matmul_precision", "float32")
# No test reads or writes the user's compilation cache: entry points called in-process (launch.predict.main) would turn
# it on for the rest of the session, and a loaded program is not compiled (tests count compilations). A test that
# wants a cache gives its subprocess one (test_compilation_cache, test_sweep).
os.environ[compilation_cache.ENV] = "off"

TRUE_SPELLINGS = ("1", "true", "yes", "on", "y")


def in_ci() -> bool:
  """CI mode: $CI set to a true spelling (CI=true, CI=1, CI=yes, CI=True, ...), as CI services set it."""
  return os.environ.get("CI", "").strip().lower() in TRUE_SPELLINGS


def missing(what: str, why: str) -> None:
  """Skip the test with the reason; under CI fail it instead, naming what CI must have."""
  if in_ci():
    pytest.fail(f"CI must have {what}: {why}", pytrace=False)
  pytest.skip(f"{what} is absent: {why}", allow_module_level=True)  # Also from a module-level import.


def require_package(name: str):
  """The imported module `name` (a test reference: torch, sklearn.linear_model, ...); skip/fail as in `missing`."""
  try:
    return importlib.import_module(name)
  except ImportError as err:
    missing(f"the reference package {name!r}", f"{err} (pip install -e '.[test,ref]')")


def require_data(relative: str):
  """Path to a shared data file; skip/fail as in `missing`."""
  try:
    return paths.data_file(relative)
  except FileNotFoundError as err:
    missing("the shared data", str(err))


@pytest.fixture
def data(request):
  """`data("wikitext-2/raw/wiki.valid.raw")` -> Path (skip/fail as in `require_data`)."""
  return require_data


def conll_tags(relative: str) -> list[list[str]]:
  """NER tags per sentence of a shared CoNLL-2003 file, read by the library's reader (skip/fail as above)."""
  from tasks.readers import read_conll
  return [record["tags"] for record in read_conll(require_data(relative))]


# The test files that use tests/launch/conftest.py's session-wide `trained` runs: one worker runs them all, so that
# each run is trained once (a file missing here still passes, on whichever worker, training its runs again).
TRAINED_RUN_USERS = frozenset(f"tests/launch/test_{name}.py" for name in (
    "continued_pretraining", "export", "finetune", "mrpc", "pinned_results", "predict", "question_answering"))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
  """Whole files to each worker (module fixtures, such as a compiled model or a trained run, are made once), as
  --dist loadfile does, the files in TRAINED_RUN_USERS together."""
  from xdist.scheduler import LoadScopeScheduling

  class Scheduling(LoadScopeScheduling):
    def _split_scope(self, nodeid: str) -> str:
      path = nodeid.split("::", 1)[0]
      return "trained runs" if path in TRAINED_RUN_USERS else path

  return Scheduling(config, log)

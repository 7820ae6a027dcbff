"""Shared fixtures, the skip rule (data or a reference package that is absent skips locally, fails under CI), the
fresh-clone guard (a test sees the data directory only after asking for it), and how `make test`'s pytest-xdist
workers share the files out."""

import atexit
import contextlib
import functools
import importlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import jax
import pytest
from jax.experimental.compilation_cache import compilation_cache as jax_compilation_cache

from encoder import paths
from launch import compilation_cache

# The tests check the math against numpy and torch in full float32: no TF32 matmuls when they run on a recent GPU.
jax.config.update("jax_default_matmul_precision", "float32")

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


# The fresh-clone guard. Every test runs as on a user's fresh clone: $ENCODERLAB_DATA names an empty folder, which
# its subprocesses inherit, so neither ../shared/data nor the fetch folder is looked up. A test (or a fixture it uses)
# asks for the data with `require_data`, which skips without it (fails under CI) and otherwise points
# $ENCODERLAB_DATA at the real directory until that test ends. So a test that reads data without asking fails, on
# CI too, where the data is beside the clone (tests/test_fresh_clone_guard.py). The real directory is found once, by
# the first process (`make test`'s pytest), and handed to its xdist workers in REAL_DATA_ENV.
REAL_DATA_ENV = "ENCODERLAB_TESTS_REAL_DATA"
NO_DATA_ENV = "ENCODERLAB_TESTS_NO_DATA"
if NO_DATA_ENV not in os.environ:
  os.environ[REAL_DATA_ENV] = str(paths.data_dir() or "")
  os.environ[NO_DATA_ENV] = tempfile.mkdtemp(prefix="encoderlab-tests-no-data-")
  atexit.register(shutil.rmtree, os.environ[NO_DATA_ENV], ignore_errors=True)
os.environ[paths.DATA_ENV] = os.environ[NO_DATA_ENV]

# One compilation cache for the whole session (JAX's persistent cache, launch.compilation_cache): the first process
# makes an empty folder that its xdist workers and every subprocess a test starts inherit, so a tiny program that many
# tests build (the same encoder, step or run) is compiled once per session, not once per test or process. The user's
# cache is never read or written, and each `pytest` invocation starts cold (the numerics lane compiles for another
# ISA). A loaded program is the same executable (tests/launch/test_compilation_cache.py); a test that counts
# compilations turns the cache off for itself (`no_compilation_cache`), and one that tests the cache gives its
# subprocess its own.
SESSION_CACHE_ENV = "ENCODERLAB_TESTS_COMPILATION_CACHE"
if SESSION_CACHE_ENV not in os.environ:
  os.environ[SESSION_CACHE_ENV] = tempfile.mkdtemp(prefix="encoderlab-tests-xla-")
  atexit.register(shutil.rmtree, os.environ[SESSION_CACHE_ENV], ignore_errors=True)
os.environ[compilation_cache.ENV] = os.environ[SESSION_CACHE_ENV]
compilation_cache.enable("")

# Compiled at XLA's lowest optimisation level (`jax_disable_most_optimizations`: the CPU backend at -O0, cheap LLVM
# passes), inherited by the workers and every subprocess: most tests check behaviour (shapes, errors, bitwise resume,
# equal runs under equal settings), and -O0 cuts the suite's CPU time by about a sixth (docs/testing.md). Where the
# float results are the point, the code users run is compiled: each test marked `numerics` (its bounds, and the lane's
# rerun under the AVX2 cap) with every fixture it uses (the two hooks below; the rest of its file at -O0), and the
# session's trained runs (`optimised`; pinned scores, HF parity).
OPTIMISATIONS_ENV = "JAX_DISABLE_MOST_OPTIMIZATIONS"
os.environ.setdefault(OPTIMISATIONS_ENV, "1")
jax.config.update("jax_disable_most_optimizations", os.environ[OPTIMISATIONS_ENV] == "1")
# JAX keys its in-memory caches (jit, lowering, executables) without the level: a program compiled at -O0, e.g. by an
# unmarked test through a module fixture's jitted function, would be reused inside `optimised`. So `optimised` empties
# those caches when anything was compiled or loaded at -O0 since they were last emptied (the persistent cache keys on
# the level: what it holds stays valid). These are the events of jax._src.compiler.compile_or_get_cached.
_COMPILE_EVENTS = ("/jax/core/compile/backend_compile_duration", "/jax/compilation_cache/compile_requests_use_cache")
_compiled_at_o0 = [True]


def _note_compile(event: str, *_, **__) -> None:
  if event in _COMPILE_EVENTS and jax.config.values["jax_disable_most_optimizations"]:
    _compiled_at_o0[0] = True


jax.monitoring.register_event_listener(_note_compile)
jax.monitoring.register_event_duration_secs_listener(_note_compile)


@contextlib.contextmanager
def optimised():
  """Compiles as a user's run does (XLA's default optimisations) inside, in this process and its subprocesses; no
  program compiled at -O0 before is reused inside."""
  before = os.environ[OPTIMISATIONS_ENV]
  os.environ[OPTIMISATIONS_ENV] = "0"
  jax.config.update("jax_disable_most_optimizations", False)
  if _compiled_at_o0[0]:
    jax.clear_caches()
    _compiled_at_o0[0] = False
  try:
    yield
  finally:
    os.environ[OPTIMISATIONS_ENV] = before
    jax.config.update("jax_disable_most_optimizations", before == "1")


def _for_numerics(item: pytest.Item) -> bool:
  return item.get_closest_marker("numerics") is not None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
  """A test marked `numerics` runs at XLA's default optimisations."""
  with optimised() if _for_numerics(item) else contextlib.nullcontext():
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
  """A fixture that a test marked `numerics` uses is built at the default optimisations, whichever test needs it
  first: a module fixture's programs and outputs are what the marked test compares."""
  with optimised() if _used_by_numerics(fixturedef, request.node) else contextlib.nullcontext():
    yield


def _used_by_numerics(fixturedef, node) -> bool:
  """Whether a selected test marked `numerics` under `node` (the fixture's scope: the test itself, or its class,
  module, package or session) uses this definition of the fixture: in its signature or autouse (one it asks for by
  `request.getfixturevalue` is at the default level only when the marked test builds it)."""
  if isinstance(node, pytest.Item):
    return _uses(node, fixturedef)
  return _used_under(node, fixturedef)


def _uses(item: pytest.Item, fixturedef) -> bool:
  return _for_numerics(item) and fixturedef in item._fixtureinfo.name2fixturedefs.get(fixturedef.argname, ())


@functools.cache
def _used_under(node: pytest.Collector, fixturedef) -> bool:
  return any(_uses(item, fixturedef) and node in item.listchain() for item in _numerics_items(node.session))


@functools.cache
def _numerics_items(session: pytest.Session) -> list[pytest.Item]:
  """The session's selected tests marked `numerics`."""
  return [item for item in session.items if _for_numerics(item)]


@pytest.fixture
def no_compilation_cache():
  """This test compiles every program it runs (it counts compilations): the session cache is off until it ends."""
  jax.config.update("jax_enable_compilation_cache", False)
  jax_compilation_cache.reset_cache()  # JAX decides at the first compilation whether a cache is used, then keeps it.
  yield
  compilation_cache.enable("")
  jax_compilation_cache.reset_cache()


def require_data(relative: str) -> Path:
  """Path to a file or folder under the real data directory, which this test's process and subprocesses then see
  until the test ends; skip/fail as in `missing` when it is absent."""
  real = os.environ[REAL_DATA_ENV]
  if not real:
    missing("the shared data", f"no data directory for {relative!r}: set ${paths.DATA_ENV}, place it at "
            f"../shared/data or run `{paths.FETCH_HINT}`")
  os.environ[paths.DATA_ENV] = real
  try:
    return paths.data_file(relative)
  except FileNotFoundError as err:
    missing("the shared data", str(err))


@pytest.fixture(autouse=True)
def fresh_clone():
  """After each test, the data directory is the empty folder again (the guard above)."""
  yield
  os.environ[paths.DATA_ENV] = os.environ[NO_DATA_ENV]


def pytest_collection_finish(session):
  """A `require_data` at import time (collection) does not open the data to the first tests."""
  del session
  os.environ[paths.DATA_ENV] = os.environ[NO_DATA_ENV]


def conll_tags(relative: str) -> list[list[str]]:
  """NER tags per sentence of a shared CoNLL-2003 file, read by the library's reader (skip/fail as above)."""
  from tasks.readers import read_conll
  return [record["tags"] for record in read_conll(require_data(relative))]


# Where the suite's time goes (docs/testing.md): with $ENCODERLAB_TEST_TIMES=FILE, each test's wall seconds and the
# seconds this process spent tracing, lowering and compiling XLA programs during it (JAX's own duration events; a
# subprocess's compilations are not seen) are appended to FILE as JSON lines.
TIMES_ENV = "ENCODERLAB_TEST_TIMES"
COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")
_compile_seconds = [0.0]


def _on_duration(event: str, duration: float, **_) -> None:
  if event in COMPILE_EVENTS:
    _compile_seconds[0] += duration


if os.environ.get(TIMES_ENV):
  jax.monitoring.register_event_duration_secs_listener(_on_duration)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
  """Records the test's times to $ENCODERLAB_TEST_TIMES when it is set (setup, call and teardown together)."""
  del nextitem
  started, compiled = time.perf_counter(), _compile_seconds[0]
  yield
  if os.environ.get(TIMES_ENV):
    with open(os.environ[TIMES_ENV], "a", encoding="utf-8") as out:
      out.write(json.dumps({"test": item.nodeid, "seconds": round(time.perf_counter() - started, 3),
                            "compile_seconds": round(_compile_seconds[0] - compiled, 3)}) + "\n")


# The test files that use tests/launch/conftest.py's session-wide `trained` runs: one worker runs them all, so that
# each run is trained once (a file missing here still passes, on whichever worker, training its runs again).
TRAINED_RUN_USERS = frozenset(f"tests/launch/test_{name}.py" for name in (
    "continued_pretraining", "damaged_checkpoint", "export", "finetune", "mrpc", "nested_spans", "pinned_results",
    "predict", "question_answering"))


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

"""The fresh-clone guard (tests/conftest.py): a test that reads the data directory without asking for it fails, here
and on CI, where the data lies beside the clone; asking (`require_data`) opens it for that test only."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from encoder import paths
from tests import conftest

REPO = Path(__file__).resolve().parents[1]
WIKITEXT = "wikitext-2/raw/wiki.valid.raw"
# What a subprocess finds: the data directory, and whether a preset's file is under it.
PROBE = ("from encoder import paths\n"
         "print(paths.data_dir())\n"
         f"print((paths.data_dir() / {WIKITEXT!r}).is_file())\n")


def _probe() -> list[str]:
  """Runs PROBE from the repository root, where ../shared/data is found on CI and on a developer's checkout."""
  done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, check=True,
                        env=os.environ | {"PYTHONPATH": str(REPO)})
  return done.stdout.split()


def test_an_undeclared_read_finds_an_empty_data_directory_here_and_in_subprocesses():
  empty = os.environ[conftest.NO_DATA_ENV]
  assert paths.data_dir() == Path(empty) and not any(Path(empty).iterdir())
  try:
    paths.data_file(WIKITEXT)
  except FileNotFoundError as err:
    assert empty in str(err)
  else:
    raise AssertionError("an undeclared read found the data")
  assert _probe() == [empty, "False"]  # Not ../shared/data, though it is beside the repository on CI.


def test_an_undeclared_read_fails_a_test_and_a_declared_one_passes(tmp_path):
  """An inner pytest session with this suite's conftest: the test that reads without asking fails (with CI unset:
  locally too), the one that asks passes or skips, and a test after it is back on the empty folder."""
  (tmp_path / "conftest.py").write_text("from tests.conftest import *  # noqa: F401,F403  (the guard's fixtures)\n")
  (tmp_path / "test_inner.py").write_text(textwrap.dedent(f"""
      from encoder import paths
      from tests.conftest import require_data

      def test_undeclared():
        assert paths.data_file({WIKITEXT!r}).is_file()

      def test_declared():
        assert require_data({WIKITEXT!r}) == paths.data_file({WIKITEXT!r})

      def test_after_a_declared_one():
        assert not (paths.data_dir() / {WIKITEXT!r}).exists()
      """))
  env = {k: v for k, v in os.environ.items() if k not in ("CI", conftest.TIMES_ENV)} | {"PYTHONPATH": str(REPO)}
  done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", str(tmp_path)],
                        cwd=tmp_path, capture_output=True, text=True, env=env, check=False)
  report = done.stdout
  assert "FAILED test_inner.py::test_undeclared" in report, report
  assert "does not exist" in report  # The paths error: the empty folder has no WikiText.
  declared = "PASSED test_inner.py::test_declared" if os.environ[conftest.REAL_DATA_ENV] else \
      "the shared data is absent: no data directory for 'wikitext-2/raw/wiki.valid.raw'"  # A skip, with its reason.
  assert declared in report, report
  assert "PASSED test_inner.py::test_after_a_declared_one" in report, report


def test_a_declared_read_reaches_the_data_for_this_test_and_its_subprocesses():
  path = conftest.require_data(WIKITEXT)  # Skips without the data (fails under CI).
  assert path.is_file() and paths.data_file(WIKITEXT) == path
  assert _probe() == [str(path.parents[2]), "True"]

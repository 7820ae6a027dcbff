"""A benchmark whose child run is refused passes the child's own `error: ...` line on, not only its exit status:
benchmarks.startup, benchmarks.accelerator's parts and benchmarks.determinism's runs (fsdp_large's), each against a
stand-in child that refuses at once (no JAX: milliseconds)."""

import re
import sys

import pytest

from benchmarks import accelerator, determinism, startup
from encoder import cli, errors

REFUSAL = "config.batch_size=0: expected an integer >= 1"
REFUSING_CHILD = f"import sys; print('starting up'); sys.exit('error: {REFUSAL}')"  # errors.run's: stderr, status 1.


def test_child_error_is_the_last_error_line():
  assert cli.child_error("a\nerror: first\nb\nerror: last\nc\n") == "last"
  assert cli.child_error(["no error here"]) is None


def test_startup_passes_the_child_line_on(tmp_path):
  (tmp_path / "launch").mkdir()
  (tmp_path / "launch" / "main.py").write_text(REFUSING_CHILD, encoding="utf-8")  # The stand-in `-m launch.main`.
  with pytest.raises(errors.UserError, match=re.escape("exited with 1 before step 3: " + REFUSAL)):
    startup.timed_start(tmp_path, "configs/finetune.py:task=sick", tmp_path / "cache", steps=3)


def test_accelerator_part_passes_the_child_line_on():
  with pytest.raises(accelerator.PartFailed, match=re.escape(f"exit status 1: {REFUSAL}")):
    accelerator.run_child([sys.executable, "-c", REFUSING_CHILD], timeout=60, env={})


def test_determinism_run_passes_the_child_line_on(tmp_path, monkeypatch):
  monkeypatch.setattr(determinism, "command", lambda *args, **kwargs: [sys.executable, "-c", REFUSING_CHILD])
  with pytest.raises(errors.UserError, match=re.escape("was refused: " + REFUSAL)):
    determinism.run(tmp_path / "run", cache=tmp_path / "cache")

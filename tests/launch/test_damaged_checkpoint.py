"""A checkpoint damaged after training (a file truncated or overwritten) is one line naming the step and the file when
the run is exported, predicted with or embedded (issue 71; `encoder.damaged_checkpoint`), instead of orbax's and
TensorStore's traceback; the run and the output location are byte for byte as before (fingerprints)."""

import gc
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from encoder import damaged_checkpoint, errors
from launch import export, predict
from tasks.embeddings import embed

pytestmark = pytest.mark.slow  # It needs a trained run (the session's shared ud_sample run, tests/launch/conftest.py).

REPO = Path(__file__).resolve().parents[2]


def fingerprint(root: Path) -> dict[str, str]:
  """Every file under `root` (relative path -> sha256 of its bytes), directories included as ''."""
  return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
          for p in sorted(root.rglob("*"))}


def damaged_copy(workdir: Path, tmp_path: Path, damage: str) -> tuple[Path, Path]:
  """A copy of the run with one checkpoint file cut to half its length: "data" the largest array file (the word
  embeddings), "metadata" orbax's tree metadata; -> (the copy, the damaged file)."""
  run = tmp_path / "run"
  shutil.copytree(workdir, run)
  step = max((p for p in (run / "checkpoints").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
  files = [p for p in step.rglob("*") if p.is_file()]
  target = (max(files, key=lambda p: p.stat().st_size) if damage == "data" else step / "default" / "_METADATA")
  data = target.read_bytes()
  target.write_bytes(data[:len(data) // 2])
  return run, target


def one_line(main, argv: list[str]) -> str:
  """The `error: ...` line `errors.run(main)` exits with (asserted: one line, no traceback)."""
  with pytest.raises(SystemExit) as exit_info:
    errors.run(main, argv)
  line = str(exit_info.value.code)
  assert line.startswith("error: ") and "\n" not in line and "Traceback" not in line
  return line


@pytest.mark.parametrize("damage", ["data", "metadata"])
def test_export_predict_and_embed_of_a_damaged_checkpoint_are_one_line(trained, tmp_path, capfd, damage):
  run, damaged = damaged_copy(trained("ud_sample"), tmp_path / "work", damage)
  (tmp_path / "in.txt").write_text("EU rejects German call\n", encoding="utf-8")
  out = tmp_path / "out"
  out.mkdir()
  before = fingerprint(tmp_path)
  commands = {"export": (export.main, ["--workdir", str(run), "--out", str(out / "export")]),
              "predict": (predict.main, ["--workdir", str(run), "--input", str(tmp_path / "in.txt"), "--out",
                                         str(out / "pred.jsonl")]),
              "embed": (embed.main, ["--init", f"run:{run}", "--input", str(tmp_path / "in.txt"), "--out",
                                     str(out / "store"), "--quiet"])}
  for name, (main, argv) in commands.items():
    line = one_line(main, argv)
    step = damaged.relative_to(run / "checkpoints").parts[0]
    assert line.startswith(f"error: {damaged}: checkpoint step {step} cannot be read"), (name, line)
    assert line.endswith("the file is damaged (truncated or overwritten since the run wrote it): copy the run's "
                         "checkpoints again from where it trained, or train the run again"), (name, line)
    assert "Traceback" not in capfd.readouterr().err, name
  assert fingerprint(tmp_path) == before  # Nothing written: no export, predictions or store; the run untouched.


def test_the_command_line_prints_that_line_alone(trained, tmp_path):
  """Through the process boundary: orbax's background reads print nothing more (no asyncio traceback at exit)."""
  run, damaged = damaged_copy(trained("ud_sample"), tmp_path, "data")
  before = fingerprint(tmp_path)
  done = subprocess.run([sys.executable, "-m", "launch.export", "--workdir", str(run), "--out", str(tmp_path / "x")],
                        cwd=REPO, capture_output=True, text=True, check=False)
  assert done.returncode == 1 and done.stdout == ""
  assert done.stderr.startswith(f"error: {damaged}: checkpoint step ") and done.stderr.count("\n") == 1, done.stderr
  assert fingerprint(tmp_path) == before


def test_after_the_line_orbax_coroutines_failing_at_collection_print_nothing_and_others_still_do(capfd, monkeypatch):
  """The hook behind the test above, made to fire on purpose: a read coroutine of orbax's collected while suspended,
  whose cleanup raises (as orbax's sibling reads do after the first failure), prints nothing; another still prints."""
  monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)
  with pytest.raises(OSError), damaged_checkpoint.quiet_reads():  # The read fails: the hook stays for the process.
    raise OSError("unreadable")
  source = ("async def read(pause):\n  try:\n    await pause\n  finally:\n"
            "    raise RuntimeError('Event loop is closed')\n")

  class Pause:
    def __await__(self):
      yield

  for filename in ("/site-packages/orbax/checkpoint/_src/serialization/serialization.py",
                   "/lib/python3.11/asyncio/base_events.py", "/site-packages/mine.py"):
    namespace: dict = {}
    exec(compile(source, filename, "exec"), namespace)  # A coroutine whose code lives in a file named like orbax's.
    running = namespace["read"](Pause())
    running.send(None)
    del running  # Closed when collected: its `finally` raises, which Python can only report as unraisable.
    gc.collect()
  err = capfd.readouterr().err
  assert err.count("Exception ignored") == 1 and "mine.py" in err and "serialization.py" not in err, err
  assert "base_events.py" not in err

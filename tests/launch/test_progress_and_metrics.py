"""Progress lines (terminal vs log) and metric summaries/JSONL."""

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from launch import metrics_writer
from launch.progress import Progress


class _Tty(io.StringIO):
  def isatty(self):
    return True


def test_plain_lines_when_not_a_terminal():
  stream = io.StringIO()
  progress = Progress(0, 100, stream=stream)
  progress.update(10, {"loss": 2.5})
  progress.update(20, {"loss": 2.0})
  lines = stream.getvalue().splitlines()
  assert len(lines) == 2 and lines[1].startswith("step 20/100 (20%) loss=2") and "ETA" in lines[1]
  assert "\r" not in stream.getvalue()


def test_one_rewritten_line_on_a_terminal():
  stream = _Tty()
  progress = Progress(0, 10, stream=stream)
  progress.update(5, {"loss": 1.0})
  assert stream.getvalue().startswith("\r\033[K") and "\n" not in stream.getvalue()


def test_summarize_divides_sums_and_weights_the_loss():
  sums = {"mlm_loss": np.array([30.0, 10.0]), "nsp_loss": np.array([4.0, 8.0]), "empty": np.array([0.0, 0.0]),
          "nonfinite_step": np.array(7)}
  out = metrics_writer.summarize(sums, "train", {"mlm": 1.0, "nsp": 0.5})
  assert out == {"train/mlm_loss": 3.0, "train/nsp_loss": 0.5, "train/loss": 3.25}


def test_jsonl_and_tensorboard(tmp_path):
  writer = metrics_writer.MetricsWriter(tmp_path)
  writer.write(3, {"train/loss": 1.5, "train/bad": float("nan")})
  writer.close()
  assert metrics_writer.read_jsonl(tmp_path / "metrics.jsonl") == [{"step": 3, "train/loss": 1.5, "train/bad": "nan"}]
  assert any((tmp_path / "tensorboard").iterdir())


@pytest.mark.slow
def test_the_engine_starts_without_importing_torch():
  """tensorboardX imports torch wherever it is installed (2.2 s of every run's start on a 2-core VM) only to accept
  its tensors; the writer hides it while importing, and torch still imports afterwards."""
  pytest.importorskip("torch")
  code = ("import sys; from launch import train; assert 'torch' not in sys.modules, 'torch imported';"
          "import torch; torch.zeros(1)")
  subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], check=True, timeout=300)

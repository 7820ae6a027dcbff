"""Metric logs: workdir/metrics.jsonl (one JSON object per line) and TensorBoard event files (tensorboardX, no TF).

Only process 0 writes; on the others every method does nothing. Locally metrics.jsonl is appended to and the event
files are written in place. Objects in a bucket cannot be appended to, so for a gs:// workdir metrics.jsonl is
uploaded whole (earlier lines included) and the event files, written to a local temporary directory, are uploaded
after every write: each upload replaces the object at once.
"""

import json
import math
import pathlib
import sys
import tempfile
import types

import jax
import numpy as np

from encoder import files
from encoder.files import Path


def _import_tensorboardx() -> types.ModuleType:
  """tensorboardX, imported with torch hidden: where torch is installed tensorboardX imports it only to accept its
  tensors (2.2 s of every run's start on a 2-core Zen 3 VM), and this writer passes floats."""
  hidden = "torch" not in sys.modules
  if hidden:
    # `import torch` raises ImportError, which tensorboardX expects without torch.
    sys.modules["torch"] = None  # type: ignore[assignment]  # None blocks an import (typeshed allows modules only)
  try:
    import tensorboardX  # pylint: disable=import-outside-toplevel
  finally:
    if hidden:
      del sys.modules["torch"]
  return tensorboardX


tensorboardX = _import_tensorboardx()  # noqa: N816  (the module's own name)


class MetricsWriter:
  """write(step, {"train/loss": 2.3, ...}) -> a JSONL line and TensorBoard scalars."""

  def __init__(self, workdir: Path):
    self._active = jax.process_index() == 0
    if self._active:
      workdir = files.path(workdir)
      self._path, self._events = workdir / "metrics.jsonl", workdir / "tensorboard"
      self._remote = files.is_remote(workdir)
      if self._remote:
        self._lines = self._path.read_text(encoding="utf-8") if self._path.exists() else ""
        self._staging = tempfile.TemporaryDirectory(prefix="encoderlab-tensorboard-")
      else:
        self._jsonl = open(self._path, "a", encoding="utf-8")  # noqa: SIM115  (open until close())
      self._tensorboard = tensorboardX.SummaryWriter(self._staging.name if self._remote else str(self._events))

  def write(self, step: int, scalars: dict[str, float]) -> None:
    if not self._active:
      return
    clean = {k: float(v) for k, v in scalars.items()}
    line = json.dumps({"step": step, **{k: (v if math.isfinite(v) else str(v)) for k, v in clean.items()}}) + "\n"
    if self._remote:
      self._lines += line
      files.atomic_write(self._path, self._lines)
    else:
      self._jsonl.write(line)
      self._jsonl.flush()
    for key, value in clean.items():
      self._tensorboard.add_scalar(key, value, step)
    self._tensorboard.flush()
    self._upload_events()

  def _upload_events(self) -> None:
    if self._remote:
      for event_file in pathlib.Path(self._staging.name).iterdir():
        files.upload(event_file, self._events / event_file.name)

  def close(self) -> None:
    if self._active:
      self._tensorboard.close()
      if self._remote:
        self._upload_events()
        self._staging.cleanup()
      else:
        self._jsonl.close()


def summarize(sums: dict[str, np.ndarray], prefix: str, weights: dict[str, float]) -> dict[str, float]:
  """{name: [sum, count]} fetched from device -> {prefix/name: sum / count} (count 0: skipped), plus prefix/loss =
  sum_o w_o * mean loss of objective o (the total loss over all the steps or batches summed)."""
  out = {f"{prefix}/{k}": float(v[0] / v[1]) for k, v in sums.items() if np.ndim(v) == 1 and v[1] > 0}
  out[f"{prefix}/loss"] = sum(w * out.get(f"{prefix}/{name}_loss", math.nan) for name, w in weights.items())
  return out


def read_jsonl(path: Path) -> list[dict]:
  """The records of a metrics.jsonl file (for tests, benchmarks and reports)."""
  return files.read_json_lines(path)

"""Metric logs: workdir/metrics.jsonl (one JSON object per line) and TensorBoard event files (tensorboardX, no TF).

Only process 0 writes; on the others every method does nothing.
"""

import json
import math
from pathlib import Path

import jax
import numpy as np
import tensorboardX


class MetricsWriter:
  """write(step, {"train/loss": 2.3, ...}) -> a JSONL line and TensorBoard scalars."""

  def __init__(self, workdir: Path):
    self._active = jax.process_index() == 0
    if self._active:
      self._jsonl = open(workdir / "metrics.jsonl", "a", encoding="utf-8")
      self._tensorboard = tensorboardX.SummaryWriter(str(workdir / "tensorboard"))

  def write(self, step: int, scalars: dict[str, float]) -> None:
    if not self._active:
      return
    clean = {k: float(v) for k, v in scalars.items()}
    self._jsonl.write(json.dumps({"step": step, **{k: (v if math.isfinite(v) else str(v)) for k, v in clean.items()}})
                      + "\n")
    self._jsonl.flush()
    for key, value in clean.items():
      self._tensorboard.add_scalar(key, value, step)
    self._tensorboard.flush()

  def close(self) -> None:
    if self._active:
      self._jsonl.close()
      self._tensorboard.close()


def summarize(sums: dict[str, np.ndarray], prefix: str, weights: dict[str, float]) -> dict[str, float]:
  """{name: [sum, count]} fetched from device -> {prefix/name: sum / count} (count 0: skipped), plus prefix/loss =
  sum_o w_o * mean loss of objective o (the total loss over all the steps or batches summed)."""
  out = {f"{prefix}/{k}": float(v[0] / v[1]) for k, v in sums.items() if np.ndim(v) == 1 and v[1] > 0}
  out[f"{prefix}/loss"] = sum(w * out.get(f"{prefix}/{name}_loss", math.nan) for name, w in weights.items())
  return out


def read_jsonl(path: Path) -> list[dict]:
  """The records of a metrics.jsonl file (for tests, benchmarks and reports)."""
  return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]

"""Results pinned across refactoring: every fine-tuning preset at runlocal size gives the same dev/test scores
(results.json), the same predictions (predictions/<split>.jsonl) and the same `launch.predict` outputs as the pinned
run; on the processor that wrote the pins, the prediction files are the same byte for byte too.

The pins (pinned_results.json) were written before the task families were restructured. Other processors order
float32 sums differently (AVX2 vs AVX-512 dot kernels), so elsewhere floats are compared to 1e-5 relative and
labels, tags and spans exactly; scores (percentages) also to a hundredth of a point absolute, the digits the docs
print: a runlocal run's predictions are nearly constant (SICK relatedness: std 0.001 around 3.39), so one float32
ulp of one prediction moves its Pearson by ~7e-4 points (test 20.91268 on an AMD Zen 5, 20.91160 where pinned).
These off-CPU bounds are measured, not derived: they held on an AMD Zen 5, and on an AMD EPYC Zen 3 (AVX2 only) the
floats differed by at most 1.8e-6 relative (0.18 of the bound) and the scores by 7e-4 points (0.07 of theirs) over
the 8 runs. `make test`'s numerics lane checks them on the pinning machine itself with XLA capped at AVX2 (XLA_FLAGS'
--xla_cpu_max_isa: another summation order, so the off-CPU comparison applies).
A change that moves a result on purpose regenerates them:
`ENCODERLAB_PIN=write pytest tests/launch/test_pinned_results.py`, and says why in its commit message.
"""

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from benchmarks.encoder_speed import cpu_name
from launch import predict
from tests.launch.conftest import RUNS

PINS = Path(__file__).with_name("pinned_results.json")
# Its off-CPU bounds are checked under the ISA cap too (docs/testing.md); every preset is trained (slow).
pytestmark = [pytest.mark.numerics, pytest.mark.slow]


def _as_pinned(pins: dict) -> bool:
  """Whether this process computes as the pinning one did: the same processor, XLA's kernels not capped."""
  return pins["cpu"] == cpu_name() and "--xla_cpu_max_isa" not in os.environ.get("XLA_FLAGS", "")


def _digest(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


def _observed(workdir: Path) -> dict:
  """The scores, predictions, prediction files' digests and predictor outputs (on the dev records) of a run."""
  results = json.loads((workdir / "results.json").read_text())
  rows = {path.stem: [json.loads(line) for line in path.read_text().splitlines()]
          for path in sorted((workdir / "predictions").glob("*.jsonl"))}  # dev, and test where the preset has one.
  inputs = [{"words": r["words"]} if "words" in r else {"text_a": r["text_a"], "text_b": r["text_b"]}
            for r in rows["dev"]]
  return {"dev": results["dev"], "test": results["test"], "threshold": results.get("threshold"),
          "predictions": {split: [r["prediction"] for r in split_rows] for split, split_rows in rows.items()},
          "predict": predict.Predictor.from_workdir(workdir).predict_records(inputs),
          "files": {p.name: _digest(p.read_bytes()) for p in sorted((workdir / "predictions").iterdir())}}


def _close(observed: Any, pinned: Any, where: str = "", abs_tol: float = 1e-6) -> list[str]:
  """Where `observed` differs from `pinned`: floats beyond 1e-5 relative and `abs_tol` absolute, anything else
  unequal."""
  if isinstance(pinned, dict) and isinstance(observed, dict):
    if observed.keys() != pinned.keys():
      return [f"{where}: keys {sorted(observed)} != {sorted(pinned)}"]
    return [d for key in pinned for d in _close(observed[key], pinned[key], f"{where}.{key}", abs_tol)]
  if isinstance(pinned, list) and isinstance(observed, list):
    if len(observed) != len(pinned):
      return [f"{where}: {len(observed)} items != {len(pinned)}"]
    return [d for i, (o, p) in enumerate(zip(observed, pinned)) for d in _close(o, p, f"{where}[{i}]", abs_tol)]
  if isinstance(pinned, float) and isinstance(observed, (int, float)) and not isinstance(observed, bool):
    close = math.isclose(observed, pinned, rel_tol=1e-5, abs_tol=abs_tol)
    return [] if close else [f"{where}: {observed} != {pinned}"]
  return [] if observed == pinned else [f"{where}: {observed!r} != {pinned!r}"]


@pytest.mark.parametrize("name", sorted(RUNS))
def test_scores_and_predictions_are_the_pinned_ones(trained, name):
  observed = json.loads(json.dumps(_observed(trained(name))))  # Tuples as lists, as the pins hold them.
  pins = json.loads(PINS.read_text()) if PINS.exists() else {"runs": {}}
  if os.environ.get("ENCODERLAB_PIN") == "write":
    pins = {"cpu": cpu_name(), "runs": pins["runs"] | {name: observed}}
    PINS.write_text(json.dumps(pins, indent=None, sort_keys=True, separators=(",", ":")) + "\n")
    pytest.skip(f"wrote the pin of {name}")
  assert name in pins["runs"], f"no pin for {name}: run with ENCODERLAB_PIN=write"
  pinned = pins["runs"][name]
  if _as_pinned(pins):  # The pinning processor: everything to the bit.
    assert observed == pinned
  else:
    files = (observed.pop("files"), pinned.pop("files"))
    assert files[0].keys() == files[1].keys()
    scores = [{split: run.pop(split) for split in ("dev", "test")} for run in (observed, pinned)]
    assert _close(*scores, abs_tol=1e-2) == []  # Percentages: a hundredth of a point.
    assert _close(observed, pinned) == []

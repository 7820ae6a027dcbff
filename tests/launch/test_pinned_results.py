"""Results pinned across refactoring: every fine-tuning preset at runlocal size gives the same dev/test scores
(results.json), the same prediction files byte for byte, and the same `launch.predict` outputs as the pinned run.

The pins (pinned_results.json) were written before the task families were restructured. A change that moves a result
on purpose regenerates them: `ENCODERLAB_PIN=write pytest tests/launch/test_pinned_results.py`, and says why in its
commit message.
"""

import hashlib
import json
import os
from pathlib import Path

import pytest

from launch import predict
from tests.launch.conftest import RUNS

PINS = Path(__file__).with_name("pinned_results.json")


def _digest(text: str | bytes) -> str:
  return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def _observed(workdir: Path) -> dict:
  """The scores, prediction files and predictor outputs (on the dev records) of a run."""
  results = json.loads((workdir / "results.json").read_text())
  files = {path.name: _digest(path.read_bytes()) for path in sorted((workdir / "predictions").iterdir())}
  dev = [json.loads(line) for line in (workdir / "predictions" / "dev.jsonl").read_text().splitlines()]
  inputs = [{"words": r["words"]} if "words" in r else {"text_a": r["text_a"], "text_b": r["text_b"]} for r in dev]
  outputs = predict.Predictor.from_workdir(workdir).predict_records(inputs)
  return {"dev": results["dev"], "test": results["test"], "threshold": results.get("threshold"), "files": files,
          "predict": _digest(json.dumps(outputs, sort_keys=True))}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_scores_and_predictions_are_the_pinned_ones(trained, name):
  observed = _observed(trained(name))
  pins = json.loads(PINS.read_text()) if PINS.exists() else {}
  if os.environ.get("ENCODERLAB_PIN") == "write":
    PINS.write_text(json.dumps(pins | {name: observed}, indent=1, sort_keys=True) + "\n")
    pytest.skip(f"wrote the pin of {name}")
  assert name in pins, f"no pin for {name}: run with ENCODERLAB_PIN=write"
  assert observed == pins[name]

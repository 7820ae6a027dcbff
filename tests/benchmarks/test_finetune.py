"""benchmarks.finetune flags a --reference run whose machine changed speed between the two sides, refuses a
--reference it cannot mirror, and tests the two runs' prediction files through the scoring kinds."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import finetune
from configs import finetune as configs_finetune
from tasks import evaluation, finetune_data, registry
from tasks.scoring import bootstrap


@pytest.mark.parametrize("ceilings", [[940.0, 940.0, 940.0], [940.0, 830.0, 950.0], [500.0, 575.0]])
def test_no_warning_within_fifteen_percent(ceilings):
  assert finetune.drift_warning(ceilings) is None


@pytest.mark.parametrize("ceilings, listed", [([940.0, 520.0, 930.0], "940, 520, 930"), ([400.0, 461.0], "400, 461")])
def test_warning_names_the_ceilings(ceilings, listed):
  warning = finetune.drift_warning(ceilings)
  assert warning.startswith("warning: the matmul ceiling moved") and f"({listed} GFLOP/s" in warning
  assert "\n" not in warning


def test_reference_refuses_nested_span_ner():
  """HF's side of --reference is a tagger of the same entities: nested ones it cannot hold, so it is refused before
  anything trains."""
  result = subprocess.run([sys.executable, "-m", "benchmarks.finetune", "--task", "genia_nested", "--reference"],
                          capture_output=True, text=True, cwd=Path(__file__).parents[2], timeout=300, check=False)
  assert result.returncode == 1 and "cannot hold nested ones (task.nested)" in result.stderr
  assert result.stderr.splitlines()[-1].startswith("error: python -m benchmarks.finetune: --reference")


def _task(spec: str, labels: list[str]):
  return registry.family(finetune_data.task_mapping(configs_finetune.get_config(f"task={spec},runlocal").task, labels))


def _write(workdir: Path, family, records: list[dict], ours: list, theirs: list) -> None:
  split = finetune_data.Split("dev", records, [])
  evaluation.write_predictions(workdir / "predictions", family, split, ours)
  evaluation.write_predictions(workdir / "reference_predictions", family, split, theirs)


def test_p_values_come_from_the_prediction_files_as_the_bootstrap_functions_count_them(tmp_path):
  """The benchmark's p-values read both runs' prediction files through the family's scoring kind; they equal the
  bootstrap of the same gold and predictions through tasks.scoring.bootstrap's own functions (same samples, seed)."""
  rng = np.random.default_rng(0)
  gold = [["B-PER", "I-PER", "O", "B-LOC"][: 1 + i % 4] for i in range(60)]
  noisy = lambda p: [[t if rng.random() > p else "O" for t in tags] for tags in gold]
  ours, theirs = noisy(0.1), noisy(0.3)
  tagger = _task("conll2003", ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"])
  _write(tmp_path / "tags", tagger, [{"words": [f"w{j}" for j in range(len(g))], "tags": g} for g in gold], ours,
         theirs)
  expected = bootstrap.entity_f1_bootstrap(gold, ours, theirs, scheme="IOB2").p_value
  assert finetune.p_value(tagger, tmp_path / "tags", "dev", "f1") == expected
  assert finetune.p_value(tagger, tmp_path / "tags", "dev", "f1", reverse=True) == \
      bootstrap.entity_f1_bootstrap(gold, theirs, ours, scheme="IOB2").p_value

  labels = [str(i % 2) for i in range(80)]
  flip = lambda p: [label if rng.random() > p else str(1 - int(label)) for label in labels]
  ours, theirs = flip(0.1), flip(0.2)
  pairs = _task("mrpc", ["0", "1"])
  _write(tmp_path / "labels", pairs, [{"text_a": "a", "text_b": "b", "label": label} for label in labels], ours,
         theirs)
  assert finetune.p_value(pairs, tmp_path / "labels", "dev", "accuracy") == \
      bootstrap.accuracy_bootstrap([[g] for g in labels], [[p] for p in ours], [[p] for p in theirs]).p_value
  assert finetune.p_value(pairs, tmp_path / "labels", "dev", "f1") == \
      bootstrap.positive_f1_bootstrap(labels, ours, theirs, "1").p_value
  assert 0.0 <= finetune.p_value(pairs, tmp_path / "labels", "dev", "f1") < 0.5  # Ours is the better one here.
  assert finetune.p_value(pairs, tmp_path / "labels", "dev", "macro_f1") is None  # No additive statistics.

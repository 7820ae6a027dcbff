"""The MRPC preset end to end at runlocal size: GLUE's pair of scores (accuracy and the paraphrase class's F1) in
results.json equal scikit-learn's on the written predictions, and the best checkpoint is chosen by dev F1."""

import json

import pytest
from sklearn.metrics import accuracy_score, f1_score

from encoder import errors
from tasks import registry


@pytest.fixture(scope="module")
def mrpc_run(trained):
  workdir = trained("mrpc")
  return workdir, json.loads((workdir / "results.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("split", ["dev", "test"])
def test_accuracy_and_positive_f1_equal_scikit_learn(mrpc_run, split):
  workdir, results = mrpc_run
  rows = [json.loads(line) for line in (workdir / "predictions" / f"{split}.jsonl").read_text().splitlines()]
  assert len(rows) == 32  # runlocal's slices of dev and test.
  gold, pred = [r["label"] for r in rows], [r["prediction"] for r in rows]
  assert results[split]["accuracy"] == pytest.approx(100 * accuracy_score(gold, pred), abs=1e-9)  # Float64, counts.
  assert results[split]["f1"] == pytest.approx(100 * f1_score(gold, pred, pos_label="1", zero_division=0), abs=1e-9)
  assert (workdir / "predictions" / f"{split}.labels").read_text().split() == pred


def test_best_checkpoint_is_chosen_by_dev_f1(mrpc_run):
  _, results = mrpc_run
  assert results["metric"] == "f1" and results["best"]["metric"] == "eval/f1" and results["labels"] == ["0", "1"]
  assert results["best"]["value"] == pytest.approx(results["dev"]["f1"] / 100, abs=1e-9)  # Float64 both sides.


def test_a_positive_label_outside_the_labels_is_a_config_error():
  family = registry.family({"name": "classification", "labels": ["0", "1"], "positive_label": "yes"})
  with pytest.raises(errors.ConfigError, match="positive_label='yes' is not one of the task's labels"):
    family.train_fields([{"text_a": "a", "label": "0"}])

"""A task family added from this file alone (no edit to library code): `WordCount` regresses the number of words of
each text (in units of its own config field, `task.unit`) from its [CLS] vector. Registered at run time, it trains,
evaluates and predicts through `launch.main` and `launch.predict` like the built-in families, and its field is set,
checked and saved like theirs (`--config.task.unit=2`), which shows that nothing outside a family's module names it
or its fields."""

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import checks
from encoder import errors
from encoder.fields import POSITIVE, Field
from objectives import objective
from objectives.objective import Objective
from tasks import classification, registry
from tasks.family import TaskFamily
from tasks.scoring import metrics
from tests.conftest import require_data

REPO = Path(__file__).resolve().parents[2]
# launch.main and launch.predict with the toy family registered first (what a forker's registry line does).
LAUNCH = ("import sys, runpy; from tests.launch.test_toy_family import register; register(); "
          "runpy.run_module(sys.argv.pop(1), run_name='__main__')")


class CountHead(nn.Module):
  """[CLS] -> one number."""

  @nn.compact
  def __call__(self, outputs, batch: dict[str, jax.Array], attend: Callable | None = None,
               train: bool = False) -> jax.Array:
    return nn.Dense(1, name="count")(outputs.cls)[:, 0].astype(jnp.float32)


def count_loss(predictions: jax.Array, batch: dict[str, jax.Array]):
  """Mean squared error against the word count in units (`word_count_loss` = (sum, count), as the engine expects)."""
  weights = batch["example_mask"].astype(jnp.float32)
  total = (jnp.square(predictions - batch["words"]) * weights).sum()
  return total / jnp.maximum(weights.sum(), 1.0), {"word_count_loss": (total, weights.sum())}


class WordCount(TaskFamily):
  """A toy target, how many whitespace-separated words text_a has (divided by `task.unit`): the members TaskFamily
  leaves abstract, its own config field, and TaskFamily's defaults for the rest (no labels, nothing to tune or check,
  no prediction files, no HF class)."""
  name = "word_count"
  formats = ("tsv",)
  config_fields = (Field("unit", 1.0, POSITIVE, "words per unit of the target (the count is divided by it)."),)

  def target(self, record: dict) -> float:
    return len(record["text_a"].split()) / self.task["unit"]

  def objective(self) -> Objective:
    return Objective(name=self.name, head=CountHead(), loss=count_loss, reads=objective.cls_only)

  def encode(self, tokenizer, record: dict, lookup: Callable[[str], int]) -> dict[str, np.ndarray]:
    encoding = tokenizer.encode(record["text_a"], max_length=self.task["max_length"])
    return {"input_ids": np.asarray(encoding.input_ids, np.int32), "type_ids": np.asarray(encoding.type_ids, np.int32),
            "words": np.asarray(self.target(record), np.float32)}

  def outputs(self, predictions: jax.Array, batch: dict[str, jax.Array]) -> jax.Array:
    return predictions

  def decode(self, raw: np.ndarray, example: dict, threshold: float | None) -> float:
    return float(raw)

  def metric_names(self) -> tuple[str, ...]:
    return ("pearson", "spearman", "mse")

  def score(self, records: Sequence[dict], predictions: Sequence[Any]) -> dict[str, float]:
    return metrics.regression_scores([self.target(r) for r in records], list(predictions))

  def unlabelled(self, record: dict) -> dict:
    return {"text_a": record["text_a"]}

  def output(self, record: dict, example: dict, raw: np.ndarray, prediction: Any) -> dict:
    return classification.texts(record) | {"words": prediction}


def register() -> None:
  """The registry line a forker would add to tasks/registry.py."""
  registry.FAMILIES[WordCount.name] = WordCount


def _run(module: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-c", LAUNCH, module, *args], input=stdin, capture_output=True, text=True,
                        cwd=REPO, env=os.environ | {"PYTHONPATH": str(REPO)}, timeout=600, check=False)


@pytest.mark.slow
def test_a_family_registered_from_a_test_file_trains_evaluates_and_predicts(tmp_path):
  require_data("sick/SICK_train.txt")
  workdir = tmp_path / "run"
  trained = _run("launch.main", "--config=configs/finetune.py:task=sick_relatedness,runlocal",
                 f"--workdir={workdir}", "--config.task.name=word_count", "--config.task.metric=pearson",
                 "--config.task.unit=2.5", "--config.epochs=4")
  assert trained.returncode == 0, trained.stderr[-3000:]
  assert json.loads((workdir / "config.json").read_text())["task"]["unit"] == 2.5  # Saved as the built-in fields.
  results = json.loads((workdir / "results.json").read_text())
  rows = [json.loads(line) for line in (workdir / "predictions" / "dev.jsonl").read_text().splitlines()]
  words, predicted = [len(r["text_a"].split()) for r in rows], [r["prediction"] for r in rows]
  gold = np.divide(words, 2.5)  # The family trained and scored on its field's value, not its default (1.0).
  # Float64 scores of the same predictions on both sides: rounding only.
  assert results["dev"]["mse"] == pytest.approx(float(np.mean(np.square(np.subtract(gold, predicted)))))
  assert results["dev"]["mse"] != pytest.approx(float(np.mean(np.square(np.subtract(words, predicted)))))
  assert results["dev"]["pearson"] == pytest.approx(100 * np.corrcoef(gold, predicted)[0, 1], abs=1e-6)
  assert {"dev", "test", "best_step"} <= set(results)
  text = "".join(f"{r['text_a']}\t{r['text_b']}\n" for r in rows[:3])  # The run's data are SICK's pairs.
  labelled = _run("launch.predict", "--workdir", str(workdir), "--input", "-", stdin=text)
  assert labelled.returncode == 0, labelled.stderr[-3000:]
  outputs = [json.loads(line) for line in labelled.stdout.splitlines()]
  assert [o["text_a"] for o in outputs] == [r["text_a"] for r in rows[:3]]
  # The same float32 model on another batch shape (summation order only), as QA's predict test: measured there
  # 4.9e-7 on Zen 3; a wrong input row changes a prediction by O(1).
  assert [o["words"] for o in outputs] == pytest.approx(predicted[:3], abs=1e-5)


def test_the_toy_familys_field_is_in_the_task_block_checked_by_its_rule_and_at_its_default(monkeypatch):
  """Registered (what its registry line does), its field joins every task block at its default, and a value its
  rule refuses is one line naming the field before anything is read, as a built-in field's."""
  monkeypatch.setitem(registry.FAMILIES, WordCount.name, WordCount)
  spec = "configs/finetune.py:task=sick_relatedness,runlocal"
  config = checks.load_config_file(spec)
  assert config.task.unit == 1.0 and WordCount({"name": "word_count"}).task["unit"] == 1.0
  with config.unlocked():
    config.task.unit = 0.0
  with pytest.raises(SystemExit) as refused:
    errors.run(lambda: checks.check_config(config))
  assert str(refused.value.code) == "error: config.task.unit=0.0: expected a number > 0"


def test_the_toy_family_gets_the_defaults_and_a_missing_abstract_member_fails_when_built():
  family = WordCount({"name": "word_count", "max_length": 16, "labels": []})
  records = [{"text_a": "one two"}]
  assert (family.label_vocabulary(records), family.file_labels("tsv"), family.usable(records),
          family.reader_checks(), family.train_fields(records), family.widths(), family.tune(records, [], []),
          family.has_labels(records), family.prediction_files(records, [2.0]), family.word_level,
          family.scoring) == ([], None, True, {}, {}, {}, None, True, {}, False, None)
  with pytest.raises(errors.UserError, match="--output conll is for word-level tasks; a word_count run"):
    family.conll({"text_a": "one two", "words": 2.0})
  params = {"count": {"kernel": np.ones((4, 1)), "bias": np.zeros(1)}}
  head = family.hf_head(params)
  assert (head.task, head.native, head.tensors, head.beside) == (None, None, {}, params)
  assert "word_count" in head.note

  class NoScore(WordCount):
    score = TaskFamily.score  # As if the family had not written it.

  with pytest.raises(TypeError, match=r"abstract method.*score"):
    NoScore({"name": "word_count"})

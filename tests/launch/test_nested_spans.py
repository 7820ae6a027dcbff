"""Nested span NER end to end (config.task.nested): JSON-lines spans where entities contain others, trained through
the engine, scored as exact-match span sets (never rendered as tags), predicted with overlaps kept; without
task.nested the same data is refused before training at its file and line.

The data: CoNLL-2003 sentences (real text and entities) with a nested "HEAD" span on the first word of every
multi-word entity, so about a third of the entities sit inside another; and real nested data, GENIA (the
genia_nested preset at runlocal size), where a head that only learns the NULL prior used to predict nothing.
"""

import itertools
import json
import math

import numpy as np
import pytest

from configs import finetune
from encoder import errors
from launch import predict, train
from tasks import finetune_data, readers, registry, span_ner
from tasks.scoring import metrics
from tests.conftest import require_data
from tests.launch.conftest import run_config

pytestmark = pytest.mark.slow  # Every test here trains or runs a model end to end (docs/testing.md).


def _nested(records: list[dict]) -> list[dict]:
  out = []
  for record in records:
    spans = readers.tagging_to_spans(record)["spans"]
    heads = [{"start": s["start"], "end": s["start"] + 1, "label": "HEAD"} for s in spans if s["end"] - s["start"] > 1]
    if spans:
      out.append({"words": record["words"], "spans": spans + heads})
  return out


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  directory = tmp_path_factory.mktemp("nested_data")
  paths = {}
  for split, name in (("train", "train"), ("validation", "valid"), ("test", "test")):
    records = _nested(list(readers.read_conll(require_data(f"conll2003/bio/{name}.txt"), tag_column="ner"))[:400])
    paths[split] = directory / f"{split}.jsonl"
    paths[split].write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
  return paths


def _config(files: dict, nested: bool):
  config = finetune.get_config("task=conll2003_spans,runlocal")
  config.update_from_flattened_dict({
      "task.dataset": "", "task.format": "spans", "task.nested": nested,
      "task.files": ",".join(f"{split}:{path}" for split, path in files.items())})
  return config


@pytest.fixture(scope="module")
def nested_run(files, tmp_path_factory):
  workdir = tmp_path_factory.mktemp("nested_run")
  return workdir, train.train_and_evaluate(_config(files, True), workdir)


def _span_prf(gold: list[set], predicted: list[set]) -> tuple[float, float, float]:
  true = sum(len(g & p) for g, p in zip(gold, predicted))
  n_gold, n_pred = sum(map(len, gold)), sum(map(len, predicted))
  precision, recall = (true / n_pred if n_pred else 0.0), (true / n_gold if n_gold else 0.0)
  return precision, recall, (2 * precision * recall / (precision + recall) if precision + recall else 0.0)


def test_the_data_is_nested(files):
  records = [json.loads(line) for line in files["train"].read_text().splitlines()]
  entities = sum(len(r["spans"]) for r in records)
  inside = sum(1 for r in records for s in r["spans"]
               if any(o is not s and o["start"] <= s["start"] and s["end"] <= o["end"] for o in r["spans"]))
  assert entities > 500 and 0.15 < inside / entities < 0.5


def test_nested_run_scores_span_sets_and_writes_overlapping_predictions(nested_run):
  workdir, results = nested_run
  for split in ("dev", "test"):
    rows = [json.loads(line) for line in (workdir / "predictions" / f"{split}.jsonl").read_text().splitlines()]
    assert len(rows) == 32 and not (workdir / "predictions" / f"{split}.conll").exists()
    gold = [{(s["label"], s["start"], s["end"]) for s in r["spans"]} for r in rows]
    predicted = [{(label, start, end) for start, end, label in r["prediction"]} for r in rows]
    precision, recall, f1 = _span_prf(gold, predicted)
    assert results[split]["precision"] == pytest.approx(100 * precision, abs=1e-9)  # Float64 counts ratios.
    assert results[split]["recall"] == pytest.approx(100 * recall, abs=1e-9)
    assert results[split]["f1"] == pytest.approx(100 * f1, abs=1e-9)
    assert "accuracy" not in results[split] and "f1_HEAD" in results[split]  # Scored as spans, never as tags.


def test_nested_scores_and_decoding_against_brute_force():
  """The family's scores of nested gold and predictions (per type too) equal exact set matching."""
  family = registry.family({"name": "span_ner", "nested": True, "labels": ["ORG", "LOC"], "scheme": "IOB2"})
  records = [{"words": list("abcde"), "spans": [{"start": 0, "end": 3, "label": "ORG"},
                                               {"start": 1, "end": 2, "label": "LOC"},
                                               {"start": 3, "end": 5, "label": "LOC"}]}]
  predictions = [[(0, 3, "ORG"), (1, 2, "LOC"), (1, 3, "LOC"), (0, 1, "ORG")]]
  scores = family.score(records, predictions)
  assert (scores["precision"], scores["recall"], scores["f1"]) == pytest.approx(  # Float64 ratios of counts.
      _span_prf([{("ORG", 0, 3), ("LOC", 1, 2), ("LOC", 3, 5)}],
                [{("ORG", 0, 3), ("LOC", 1, 2), ("LOC", 1, 3), ("ORG", 0, 1)}]))
  assert scores["f1_ORG"] == pytest.approx(2 / 3) and scores["f1_LOC"] == pytest.approx(0.5)
  # Outer spans: gold (0,3) ORG, (3,5) LOC; predicted (0,3) ORG. Inner: gold (1,2) LOC; predicted (1,2), (1,3) LOC
  # and (0,1) ORG, all inside the predicted (0,3).
  assert scores["outer_f1"] == pytest.approx(_span_prf([{("ORG", 0, 3), ("LOC", 3, 5)}], [{("ORG", 0, 3)}])[2])
  assert scores["inner_f1"] == pytest.approx(_span_prf([{("LOC", 1, 2)}],
                                                       [{("LOC", 1, 2), ("LOC", 1, 3), ("ORG", 0, 1)}])[2])
  assert scores["inner_recall"] == 1.0
  alone = family.score(records, [[(1, 2, "LOC")]])  # Found, but nothing predicted around it: outer there.
  assert (alone["inner_recall"], alone["inner_f1"], alone["outer_f1"]) == (1.0, 0.0, 0.0)


def test_predict_returns_the_runs_nested_predictions(nested_run):
  workdir, _ = nested_run
  rows = [json.loads(line) for line in (workdir / "predictions" / "dev.jsonl").read_text().splitlines()]
  predictor = predict.Predictor.from_workdir(workdir)
  outputs = predictor.predict_records([{"words": r["words"]} for r in rows])
  assert [[[e["start"], e["end"], e["label"]] for e in o["entities"]] for o in outputs] == [
      r["prediction"] for r in rows]
  with pytest.raises(errors.UserError, match="cannot hold nested spans"):
    predictor.conll(outputs[0])


def test_nested_gold_without_task_nested_is_refused_at_its_line(files, tmp_path):
  with pytest.raises(errors.UserError) as raised:
    train.train_and_evaluate(_config(files, False), tmp_path / "flat")
  first = next(n for n, line in enumerate(files["train"].read_text().splitlines(), 1)
               if any(s["label"] == "HEAD" for s in json.loads(line)["spans"]))  # A head nests in its entity.
  message = str(raised.value)
  assert message.startswith(f"{files['train']}:{first}: expected spans that do not overlap")
  assert "config.task.nested=true" in message and "\n" not in message
  assert not (tmp_path / "flat" / "checkpoints").exists()  # Refused before training.


# --- GENIA: real nested data ----------------------------------------------------------------------------------------

GENIA_STEPS = 40  # Ten passes over 64 sentences in batches of 16 (tests/launch/conftest.py's genia_nested run).


@pytest.fixture(scope="module")
def genia_run(trained):
  """(config, workdir, results) of the session's shared genia_nested run (test_export exports it too)."""
  workdir = trained("genia_nested")
  return run_config("genia_nested"), workdir, json.loads((workdir / "results.json").read_text())


def test_genia_learns_beyond_the_null_prior_within_a_few_steps(genia_run):
  """The training loss falls below the null-rate loss (the entropy of the labels of the training candidates: what a
  head that predicts the same distribution for every span can reach), and dev F1 above labelling every candidate
  with the commonest type. With the classifier's biases starting at 0 (task.prior_bias=False) the same run's loss
  was still 0.23 after these 40 steps, 2.6 times the null rate, and its dev F1 0.1%."""
  config, workdir, results = genia_run
  data = finetune_data.load(config)
  labels = np.concatenate([e["span_labels"] for e in data.train.examples])
  frequencies = np.bincount(labels) / len(labels)
  null_rate_loss = -sum(f * math.log(f) for f in frequencies if f > 0)
  assert frequencies[span_ner.NULL] > 0.97
  losses = [r["train/loss"] for r in map(json.loads, (workdir / "metrics.jsonl").read_text().splitlines())
            if "train/loss" in r]
  assert results["step"] == GENIA_STEPS and losses[-1] < null_rate_loss
  width = config.task.max_span_width
  types = [s["label"] for r in data.train.records for s in r["spans"]]
  commonest = max(data.task["labels"], key=types.count)
  gold = [{(s["label"], s["start"], s["end"]) for s in r["spans"]} for r in data.eval.records]
  everything = [{(commonest, i, j) for i, j in itertools.combinations(range(len(r["words"]) + 1), 2) if j - i <= width}
                for r in data.eval.records]
  trivial = 100 * _span_prf(gold, everything)[2]
  assert results["dev"]["f1"] > 3 * trivial > 0


def test_genia_predictions_nest_and_predict_returns_them(genia_run):
  """The run's dev predictions hold entities inside others, scored as span sets (outer and inner parts too), and
  launch.predict gives back the same entities for the dev sentences."""
  _, workdir, results = genia_run
  rows = [json.loads(line) for line in (workdir / "predictions" / "dev.jsonl").read_text().splitlines()]
  predicted = [{(label, start, end) for start, end, label in r["prediction"]} for r in rows]
  assert any(metrics.nesting_parts(p)[1] for p in predicted)
  gold = [{(s["label"], s["start"], s["end"]) for s in r["spans"]} for r in rows]
  parts = [(metrics.nesting_parts(g), metrics.nesting_parts(p)) for g, p in zip(gold, predicted)]
  for key, side in (("outer_f1", 0), ("inner_f1", 1)):
    expected = _span_prf([g[side] for g, _ in parts], [p[side] for _, p in parts])[2]
    assert results["dev"][key] == pytest.approx(100 * expected, abs=1e-9)
  outputs = predict.Predictor.from_workdir(workdir).predict_records([{"words": r["words"]} for r in rows])
  assert [[[e["start"], e["end"], e["label"]] for e in o["entities"]] for o in outputs] == [
      r["prediction"] for r in rows]

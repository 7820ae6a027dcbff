"""Nested span NER end to end (config.task.nested): JSON-lines spans where entities contain others, trained through
the engine, scored as exact-match span sets (never rendered as tags), predicted with overlaps kept; without
task.nested the same data is refused before training at its file and line.

The data: CoNLL-2003 sentences (real text and entities) with a nested "HEAD" span on the first word of every
multi-word entity, so about a third of the entities sit inside another.
"""

import json
import pytest

from configs import finetune
from encoder import errors
from launch import predict, train
from tasks import readers, registry
from tests.conftest import require_data


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

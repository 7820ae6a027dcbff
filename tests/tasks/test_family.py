"""Each task family: records -> examples -> (gold) predictions -> scores and files, on real CoNLL-2003 and SICK with the
MiniLM vocab."""

import itertools
import json
import subprocess
import sys

import numpy as np
import pytest

from tasks import evaluation, finetune_data, readers, registry
from tests.conftest import require_data


@pytest.fixture(scope="module")
def tokenizer():
  from encoder.pretrained import minilm_path
  from encoder.tokenizer import load_tokenizer
  return load_tokenizer(minilm_path())


@pytest.fixture(scope="module")
def conll():
  path = require_data("conll2003/iob1/eng.testa")
  return list(itertools.islice(readers.read_conll(path), 300))


NER = {"name": "tagging", "scheme": "BIOES", "source_scheme": "IOB1", "max_length": 24, "labels": []}


def family(task: dict, labels=None):
  """The family of `task`, with `labels` (else the task's own)."""
  return registry.family(task if labels is None else {**task, "labels": list(labels)})


def encode(task: dict, tokenizer, records: list, labels) -> list:
  return finetune_data.encode(family(task, labels), tokenizer, records)


def test_tag_vocabulary_and_encoding_from_iob1(conll, tokenizer):
  tags = family(NER).label_vocabulary(conll)
  assert tags[0] == "O" and "S-PER" in tags and "E-MISC" in tags and len(tags) == 17
  encoded = encode(NER, tokenizer, conll, tags)
  assert len(encoded) == len(conll)
  truncated = sum(len(e["word_positions"]) < len(r["words"]) for e, r in zip(encoded, conll))
  assert truncated > 0  # max_length 24 cuts some sentences: scoring must still see every word.
  for e in encoded:
    assert len(e["input_ids"]) <= 24
    labelled = e["label_ids"] >= 0
    np.testing.assert_array_equal(e["label_ids"][labelled], e["word_labels"])


def test_gold_predictions_score_perfectly_except_truncation(conll, tokenizer, tmp_path):
  tags = family(NER).label_vocabulary(conll)
  encoded = encode(NER, tokenizer, conll, tags)
  predictions = [[tags[i] for i in e["word_labels"]] for e in encoded]
  scores = family(NER).score(conll, predictions)
  full = {**NER, "max_length": 512}
  full_predictions = [[tags[i] for i in e["word_labels"]] for e in encode(full, tokenizer, conll, tags)]
  assert family(full).score(conll, full_predictions)["f1"] == 1.0
  assert scores["f1"] < 1.0  # Truncated words are predicted "O" (an entity cut in two also costs precision).
  written = evaluation.write_predictions(tmp_path, family(NER, tags), finetune_data.Split("validation", conll, encoded),
                                         predictions)
  assert [p.name for p in written] == ["validation.jsonl", "validation.conll"]
  assert json.loads(written[0].read_text().splitlines()[0])["prediction"] == predictions[0]
  # Re-scoring the written file independently gives the same F1.
  gold, pred = tmp_path / "gold.conll", tmp_path / "pred.conll"
  rows = [block.splitlines() for block in written[1].read_text().split("\n\n")]
  gold.write_text("\n\n".join("\n".join(" ".join(line.split()[:2]) for line in b) for b in rows) + "\n")
  pred.write_text("\n\n".join("\n".join(" ".join(line.split()[::2]) for line in b) for b in rows) + "\n")
  result = subprocess.run([sys.executable, "-m", "tasks.scoring.score", "conll", "--gold", str(gold),
                           "--pred", str(pred), "--scheme", "BIOES"], capture_output=True, text=True, check=True)
  last = json.loads(result.stdout.strip().splitlines()[-1])
  # Both float64 fractions of the same counts (JSON keeps every digit): rounding only.
  assert 0.5 < last["f1"] < 1.0 and last["f1"] == pytest.approx(scores["f1"], abs=1e-6)


def test_span_task_from_tagging_records(conll, tokenizer):
  task = {"name": "span_ner", "scheme": "IOB2", "source_scheme": "IOB1", "max_length": 512, "max_span_width": 10,
          "labels": []}
  labels = family(task).label_vocabulary(conll)
  assert labels == ["LOC", "MISC", "ORG", "PER"]
  encoded = encode(task, tokenizer, conll, labels)
  predictions = []
  for e in encoded:
    gold = e["span_labels"] > 0
    predictions.append(sorted((int(w[0]), int(w[1]) + 1, labels[label - 1])
                              for w, label in zip(e["span_words"][gold], e["span_labels"][gold])))
  assert family(task).score(conll, predictions)["f1"] == 1.0


def test_tagging_task_from_flat_span_records(conll, tokenizer):
  """A tagger reads span records (e.g. GENIA's outermost entities) as the tags of their spans in the trained scheme:
  the same examples and scores as the tagging records they came from; overlapping spans it cannot use."""
  bioes = {**NER, "source_scheme": None}
  spans = [readers.tagging_to_spans(r, "IOB1") for r in conll]
  tags = family(bioes).label_vocabulary(spans)
  assert tags == family(NER).label_vocabulary(conll)
  from_spans, from_tags = encode(bioes, tokenizer, spans, tags), encode(NER, tokenizer, conll, tags)
  assert all(a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a) for a, b in zip(from_spans, from_tags))
  predicted = [family(bioes, tags).gold_tags(r)[:-1] for r in spans]  # Each sentence's last word left untagged.
  assert family(bioes, tags).score(spans, predicted) == family(NER, tags).score(conll, predicted)
  nested = [{"words": ["a", "b"],
             "spans": [{"start": 0, "end": 2, "label": "X"}, {"start": 0, "end": 1, "label": "Y"}]}]
  assert family(bioes, tags).usable(spans) and not family(bioes, tags).usable(nested)
  assert family(bioes, tags).reader_checks() == {"flat": True}


def test_classification_examples_on_sick(tokenizer):
  path = require_data("sick/SICK_trial.txt")
  records = list(readers.read_tsv(path, text_a="sentence_A", text_b="sentence_B", label="entailment_judgment"))
  task = {"name": "classification", "max_length": 128, "labels": ["ENTAILMENT", "NEUTRAL", "CONTRADICTION"]}
  encoded = encode(task, tokenizer, records, task["labels"])
  first = encoded[0]
  assert first["input_ids"][0] == tokenizer.cls_id and list(first["input_ids"]).count(tokenizer.sep_id) == 2
  assert set(first["type_ids"]) == {0, 1}
  gold = [r["label"] for r in records]
  assert family(task).score(records, gold) == {"accuracy": 1.0, "macro_f1": 1.0}
  assert family(task).score(records, ["NEUTRAL"] * len(gold))["accuracy"] == pytest.approx(282 / 500)  # Float64.
  with pytest.raises(ValueError, match=r"record 0: label '[A-Z]+' is not in"):
    encode({**task, "labels": ["ENTAILMENT"]}, tokenizer, records[:5], ["ENTAILMENT"])


def test_scores_are_encoded_when_the_task_trains_on_them(tokenizer):
  """Regression examples and classification with score_weight carry the record's score; plain classification and
  unscored splits do not; regression splits score by Pearson, Spearman and MSE."""
  path = require_data("sick/SICK_trial.txt")
  records = list(readers.read_tsv(path, text_a="sentence_A", text_b="sentence_B", label="entailment_judgment",
                                  score="relatedness_score"))[:20]
  labels = ["ENTAILMENT", "NEUTRAL", "CONTRADICTION"]
  plain = {"name": "classification", "max_length": 128, "labels": labels}
  assert "score" not in encode(plain, tokenizer, records, labels)[0]
  auxiliary = encode({**plain, "score_weight": 0.5}, tokenizer, records, labels)
  # Scores with one decimal stored as float32: within u = 6e-8 relative (approx allows 1e-6).
  assert [float(e["score"]) for e in auxiliary] == pytest.approx([r["score"] for r in records])
  regression = {"name": "regression", "max_length": 128, "labels": []}
  assert family(regression).label_vocabulary(records) == []
  encoded = encode(regression, tokenizer, records, [])
  assert [float(e["score"]) for e in encoded] == pytest.approx([r["score"] for r in records])  # As above.
  assert all(int(e["label"]) == -1 for e in encoded)
  unscored = [{k: v for k, v in r.items() if k != "score"} for r in records]
  assert "score" not in encode(regression, tokenizer, unscored, [])[0]  # An unlabeled test split.
  gold = [r["score"] for r in records]
  # Float64 correlations of a list with itself: 1 up to rounding.
  assert family(regression).score(records, gold) == {"pearson": pytest.approx(1.0), "spearman": pytest.approx(1.0),
                                                         "mse": 0.0}

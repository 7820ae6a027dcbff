"""The jsonl format (tasks/readers/jsonl.py): a format added as one object and a registry line. A JSON-lines dataset
loads, and is checked and encoded, exactly as the equivalent TSV one; a bad line is one error naming file:line and
the key."""

import json
from pathlib import Path

import numpy as np
import pytest

from configs import checks, finetune
from encoder import errors
from tasks import finetune_data, readers
from tasks.readers import ReaderError, read_jsonl, read_tsv
from tasks.tfds_builders import custom, load_split

# SICK-like pairs: a label and a relatedness score each; TSV fields are stripped, and so are JSON texts.
PAIRS = [("A man plays a guitar ", "A man is playing", "ENTAILMENT", 4.5),
         ("A cat sleeps", "A dog runs", "NEUTRAL", 1.25),
         ("Nobody is here", "A man is here", "CONTRADICTION", 3.0)] * 12
COLUMNS = "text_a:s1,text_b:s2,label:gold,score:rel"


def _write(tmp_path, name: str, pairs) -> tuple[str, str]:
  """The same pairs as TSV (header s1, s2, gold, rel) and as JSON lines (HF's GLUE keys for the texts, a blank line
  and an extra key, as such files have); the paths."""
  tsv, jsonl = tmp_path / f"{name}.tsv", tmp_path / f"{name}.jsonl"
  tsv.write_text("s1\ts2\tgold\trel\n" + "".join(f"{a}\t{b}\t{g}\t{r}\n" for a, b, g, r in pairs), encoding="utf-8")
  lines = [json.dumps({"idx": i, "sentence1": a, "sentence2": b, "label": g, "score": r})
           for i, (a, b, g, r) in enumerate(pairs)]
  jsonl.write_text("\n".join(lines[:1] + [""] + lines[1:]) + "\n", encoding="utf-8")
  return str(tsv), str(jsonl)


def _config(tmp_path, data_format: str, train: str, dev: str, columns: str, **overrides):
  config = finetune.get_config("task=sick,runlocal")
  config.update_from_flattened_dict({
      "task.dataset": "", "task.format": data_format, "task.files": f"train:{train},validation:{dev}",
      "task.columns": columns, "task.train_split": "train", "task.eval_split": "validation", "task.test_split": "",
      "task.score_weight": 1.0, "data.cache_dir": str(tmp_path / "tfds"),
      **overrides})
  return config


def test_a_jsonl_dataset_loads_and_encodes_as_its_tsv(tmp_path):
  """Records (read directly and through tfds), the labels found and every encoded example are equal."""
  tsv, jsonl = _write(tmp_path, "train", PAIRS)
  tsv_dev, jsonl_dev = _write(tmp_path, "dev", PAIRS[:5])
  keys = {"text_a": "sentence1", "text_b": "sentence2"}
  assert list(read_jsonl(jsonl, **keys)) == list(read_tsv(tsv, text_a="s1", text_b="s2", label="gold", score="rel"))
  by_tsv = finetune_data.load(_config(tmp_path, "tsv", tsv, tsv_dev, COLUMNS))
  config = _config(tmp_path, "jsonl", jsonl, jsonl_dev, "text_a:sentence1,text_b:sentence2")
  checks.check_config(config)  # The sentence families read jsonl as they read tsv: their records are alike.
  by_jsonl = finetune_data.load(config)
  assert by_jsonl.task["labels"] == by_tsv.task["labels"] == ["CONTRADICTION", "ENTAILMENT", "NEUTRAL"]
  for split in ("train", "eval"):
    mine, theirs = getattr(by_jsonl, split), getattr(by_tsv, split)
    assert mine.records == theirs.records and mine.records[0]["score"] == 4.5
    assert len(mine.examples) == len(theirs.examples) == len(PAIRS if split == "train" else PAIRS[:5])
    for a, b in zip(mine.examples, theirs.examples, strict=True):
      assert a.keys() == b.keys() and all(np.array_equal(a[key], b[key]) for key in a)


def test_single_texts_unlabelled_lines_and_integer_labels(tmp_path):
  path = tmp_path / "single.jsonl"
  path.write_text('{"text_a": "good", "label": 1}\n{"text_a": " bad ", "label": null, "score": 2}\n{"text_a": "ok"}\n',
                  encoding="utf-8")
  assert list(read_jsonl(path, label_names=("0", "1"))) == [
      {"text_a": "good", "text_b": None, "label": "1"}, {"text_a": "bad", "text_b": None, "label": None, "score": 2.0},
      {"text_a": "ok", "text_b": None, "label": None}]
  source = load_split(custom("jsonl", {"train": path}), "train", cache_dir=tmp_path / "tfds")
  assert source.__getitems__([0, 1, 2]) == list(read_jsonl(path))  # tfds stores None and scores exactly.
  assert readers.same_records(["tsv"]) == ("tsv", "jsonl")


@pytest.mark.parametrize("line, expected", [
    ('{"text_a": "A", "label": "MAYBE"}', "expected a label at key 'label' that is one of ['YES', 'NO'], got 'MAYBE'"),
    ('{"text": "A", "label": "YES"}', "expected a non-empty string at key 'text_a', found no such key (keys: text, "
                                      "label)"),
    ('{"text_a": "A", "text_b": "", "label": "NO"}', "expected a non-empty string at key 'text_b', found \"\""),
    ('{"text_a": "A", "label": true}', "expected a non-empty string or an integer at key 'label', found true"),
    ('{"text_a": "A", "score": "high"}', "expected a finite number at key 'score', found \"high\""),
    ('{"text_a": "A", "score": NaN}', "expected a finite number at key 'score', found NaN"),
    ('{"text_a": "A", "label": "YES",}', "expected a JSON object, found invalid JSON (Expecting property name enclosed "
                                         "in double quotes at column 32)"),
    ('["A", "YES"]', 'expected a JSON object such as {"text_a": "...", "label": "..."}, found a list'),
], ids=["label", "no text_a", "empty text_b", "bool label", "text score", "NaN score", "invalid JSON", "a list"])
def test_a_bad_line_is_one_error_naming_file_line_and_key(tmp_path, line, expected):
  path = tmp_path / "bad.jsonl"
  path.write_text('{"text_a": "fine", "label": "YES"}\n\n' + line + "\n", encoding="utf-8")
  with pytest.raises(ReaderError) as raised:
    list(read_jsonl(path, label_names=("YES", "NO")))
  assert str(raised.value) == f"{path}:3: {expected}"  # One line (docs/errors.md): what errors.run prints.


def test_the_engine_refuses_a_bad_line_before_preparing_and_a_family_of_other_records(tmp_path):
  """finetune_data.load parses the files before tfds stores anything: the user's labels are checked at their line."""
  _, jsonl = _write(tmp_path, "train", PAIRS[:3])
  bad = tmp_path / "bad.jsonl"
  bad.write_text(Path(jsonl).read_text(encoding="utf-8") + '{"sentence1": "A", "sentence2": "B", "label": 7}\n',
                 encoding="utf-8")
  config = _config(tmp_path, "jsonl", str(bad), str(bad), "text_a:sentence1,text_b:sentence2",
                   **{"task.labels": ("CONTRADICTION", "ENTAILMENT", "NEUTRAL"), "task.score_weight": 0.0})
  with pytest.raises(errors.UserError, match=rf"^{bad}:5: expected a label at key 'label' that is one of \["):
    finetune_data.load(config)
  assert not (tmp_path / "tfds").exists()
  config = _config(tmp_path, "jsonl", jsonl, jsonl, "", **{"task.name": "tagging", "task.metric": "f1"})
  with pytest.raises(errors.ConfigError, match="task family 'tagging' reads conll or conllu or spans files, not jsonl"):
    checks.check_config(config)

"""WiC reader: the shared data's counts (SOURCE.md) and one-line `path:line:` errors for malformed input."""

import collections
import re

import pytest

from tasks.readers.lines import ReaderError
from tasks.readers.wic import read_wic, read_wic_split, wic_files
from tests.conftest import require_data

LINE = "carry\tV\t2-1\tYou must carry your camping gear .\tSound carries well over water .\n"


def _write(tmp_path, data: str, gold: str | None = None):
  data_path = tmp_path / "x.data.txt"
  data_path.write_text(data, encoding="utf-8")
  if gold is None:
    return data_path, None
  gold_path = tmp_path / "x.gold.txt"
  gold_path.write_text(gold, encoding="utf-8")
  return data_path, gold_path


def _error(tmp_path, data, gold=None) -> str:
  with pytest.raises(ReaderError) as info:
    list(read_wic(*_write(tmp_path, data, gold)))
  message = str(info.value)
  assert "\n" not in message
  return message


def test_record_fields(tmp_path):
  (record,) = read_wic(*_write(tmp_path, LINE, "T\n"))
  assert record == {"lemma": "carry", "pos": "V", "line": 1, "label": True,
                    "words_a": ["You", "must", "carry", "your", "camping", "gear", "."], "index_a": 2,
                    "words_b": ["Sound", "carries", "well", "over", "water", "."], "index_b": 1}
  (unlabelled,) = read_wic(_write(tmp_path, LINE)[0])
  assert unlabelled["label"] is None


def test_shared_data_counts_match_source_md():
  root = require_data("wic")
  expected = {"train": (5428, 2714, 2794), "dev": (638, 319, 395)}
  for split, (total, true, nouns) in expected.items():
    records = read_wic_split(root, split)
    assert len(records) == total
    assert collections.Counter(r["label"] for r in records)[True] == true
    assert collections.Counter(r["pos"] for r in records)["N"] == nouns
    assert sum(r["words_a"][r["index_a"]].lower().startswith(r["lemma"][:3].lower()) for r in records) > 0.9 * total


@pytest.mark.parametrize("data, gold, expected", [
    (LINE.replace("2-1", "2-6"), "T\n", r"x\.data\.txt:1: expected word index 6 of sentence 2 inside its 6 words"),
    (LINE.replace("2-1", "7-1"), "T\n", r"x\.data\.txt:1: expected word index 7 of sentence 1 inside its 7 words"),
    (LINE.replace("2-1", "2"), "T\n", r"x\.data\.txt:1: expected two 0-based word indices 'i-j'.*'2'"),
    (LINE.replace("2-1", "a-1"), "T\n", r"x\.data\.txt:1: expected two 0-based word indices"),
    (LINE.replace("\tSound carries well over water .", "\t "), "T\n", r"x\.data\.txt:1: expected a non-empty "
                                                                          r"sentence 2 \(field 5\)"),
    (LINE.replace("\tSound carries well over water .", ""), "T\n", r"x\.data\.txt:1: expected 5 tab-separated"),
    (LINE.replace("\tV\t", "\tADJ\t"), "T\n", r"x\.data\.txt:1: expected a part of speech in \['N', 'V'\]"),
    (LINE + LINE, "T\n", r"x\.gold\.txt:2: expected a T/F label for .*x\.data\.txt line 2, but the gold file ended"),
    (LINE, "T\nF\n", r"x\.gold\.txt:2: expected no more labels: .* has 1 lines"),
    (LINE + LINE, "T\nyes\n", r"x\.gold\.txt:2: expected T or F, got 'yes'"),
])
def test_malformed_input_names_file_and_line(tmp_path, data, gold, expected):
  message = _error(tmp_path, data, gold)
  assert re.search(expected, message), message


def test_missing_split_names_the_expected_layout(tmp_path):
  with pytest.raises(FileNotFoundError, match=r"DIR/test/test\.data\.txt"):
    wic_files(tmp_path, "test")

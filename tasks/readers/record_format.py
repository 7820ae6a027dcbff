"""What a reader format is: a `RecordFormat` (its name, its reader and the kind of records the reader yields), and the
`RecordKind`s (what tfds stores of a record, and the record's labels).

A format is one object beside its reader, e.g. `JSONL = RecordFormat("jsonl", read_jsonl, TEXTS)`, and one line in
`tasks.readers.FORMATS`. Formats whose records are of one kind (tsv and jsonl: texts) are prepared with the same tfds
features, encoded by the same task families and checked alike. Features are plain data, so that reading needs no
tfds: `str` (text), `int` (int32), `bool`, `[feature]` (a sequence) and `{field: feature}`; `tasks.tfds_builders`
makes them tfds features.
"""

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any


def _same(record: dict) -> dict:
  return record


@dataclasses.dataclass(frozen=True)
class RecordKind:
  """Records of one shape: their tfds features (the module docstring), their labels as the files write them (what is
  checked against the task's labels), and how a record is stored (tfds has no None) and read back."""
  name: str
  features: Mapping[str, Any]
  labels: Callable[[dict], list[str]]
  store: Callable[[dict], dict] = _same  # A record -> the fields tfds stores.
  restore: Callable[[dict], dict] = _same  # The stored fields (str, int, bool, lists, dicts) -> the record.


def _always(options: Mapping[str, Any]) -> bool:
  return True


@dataclasses.dataclass(frozen=True)
class RecordFormat:
  """A reader format: `read(path, **options)` yields its `records`, and raises ReaderError (`path:line: expected
  ...`) at a malformed line. `takes_label_names(options)`: whether the reader, given these options, takes
  `label_names` (a label outside them then fails at its line). `ud_words`: its words are split as UD's ("Al - Zaman"),
  so raw text given to a run trained on it is split the same way (`launch.predict.split_words`)."""
  name: str
  read: Callable[..., Iterator[dict]]
  records: RecordKind
  takes_label_names: Callable[[Mapping[str, Any]], bool] = _always
  ud_words: bool = False


# A record's labels (module-level functions: a kind is pickled with the data sources of grain's worker processes).
def _text_labels(record: dict) -> list[str]:
  return [] if record.get("label") is None else [record["label"]]


def _tags(record: dict) -> list[str]:
  return record["tags"]


def _span_labels(record: dict) -> list[str]:
  return [span["label"] for span in record["spans"]]


def _no_labels(record: dict) -> list[str]:
  return []


def _store_texts(record: dict) -> dict:
  """None (no text_b / label / score) as "" (readers reject empty texts and labels); a score as its repr (tfds stores
  floats in 32 bits: the text keeps the reader's value exactly)."""
  score = record.get("score")
  return {key: record[key] or "" for key in ("text_a", "text_b", "label")} | {"score": "" if score is None
                                                                              else repr(score)}


def _restore_texts(stored: dict) -> dict:
  return ({key: stored[key] or None for key in ("text_a", "text_b", "label")}
          | ({"score": float(stored["score"])} if stored["score"] else {}))


# Sentence(-pair) records {"text_a", "text_b", "label"} (+ "score"); text_b and label may be None.
TEXTS = RecordKind("texts", {"text_a": str, "text_b": str, "label": str, "score": str}, _text_labels,
                   _store_texts, _restore_texts)
# Tagging records {"words", "tags", "doc_index"}.
TAGGED_WORDS = RecordKind("tagged_words", {"words": [str], "tags": [str], "doc_index": int}, _tags)
# Span records {"words", "spans": [{"start", "end", "label"}]} (token offsets, end exclusive).
SPANS = RecordKind("spans", {"words": [str], "spans": [{"start": int, "end": int, "label": str}]},
                   _span_labels)
# Extractive QA records {"id", "title", "question", "context", "answers": [{"text", "start"}], "is_impossible"}.
QUESTIONS = RecordKind("questions", {"id": str, "title": str, "question": str, "context": str,
                                     "answers": [{"text": str, "start": int}], "is_impossible": bool},
                       _no_labels)

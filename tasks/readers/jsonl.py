"""JSON-lines files -> classification records {"text_a", "text_b", "label"} (+ "score"), as the TSV reader's.

One JSON object per line: `{"text_a": "A man plays", "text_b": "A man is playing", "label": "ENTAILMENT",
"score": 4.5}`. "text_a" is a non-empty string; "text_b" (a pair's second text), "label" (a string, or an integer
such as GLUE's 0 / 1, read as its decimal string) and "score" (a finite number) may be absent or null: None, and no
"score" in the record. Texts and labels are stripped, as TSV fields are. Other keys ("idx") are ignored, blank lines
skipped. The keys are options (`text_a="sentence1"`, HF's GLUE JSON), like the TSV reader's columns.
"""

import json
import math
import os
from collections.abc import Iterator, Sequence
from typing import Any

from encoder import errors
from tasks.readers.lines import ReaderError, json_objects
from tasks.readers.record_format import TEXTS, RecordFormat


def read_jsonl(path: str | os.PathLike, *, text_a: str = "text_a", text_b: str | None = "text_b",
               label: str | None = "label", score: str | None = "score",
               label_names: Sequence[str] | None = None) -> Iterator[dict]:
  """Yields {"text_a", "text_b", "label"} per line, plus "score" (a float) when the line has one; a key given as
  None is not read. A label must be one of `label_names` when they are given."""
  keys = {"text_a": text_a, "text_b": text_b, "label": label, "score": score}
  for role, key in keys.items():
    if key is not None and not isinstance(key, str):
      raise errors.UserError(f"{path}: key {role}={key!r} is not a JSON key: give a name such as {role!r}")
  allowed = None if label_names is None else list(label_names)
  for number, value in json_objects(path, f'{{"{text_a}": "...", "{label}": "..."}}'):
    record: dict[str, Any] = {role: _text(path, number, value, key, role) for role, key in keys.items()
                              if role != "score"}
    if record["text_a"] is None:
      raise ReaderError(path, number, f"a non-empty string at key {text_a!r}, found no such key (keys: "
                        f"{', '.join(value) or 'none'})")
    if allowed is not None and record["label"] is not None and record["label"] not in allowed:
      raise ReaderError(path, number, f"a label at key {label!r} that is one of {allowed}, got {record['label']!r}")
    if score is not None and value.get(score) is not None:
      record["score"] = _number(path, number, value[score], score)
    yield record


def _text(path, number: int, value: dict, key: str | None, role: str) -> str | None:
  """The stripped string at `key` (a label may be an integer), None when absent or null."""
  found = None if key is None else value.get(key)
  if found is None:
    return None
  if role == "label" and isinstance(found, int) and not isinstance(found, bool):
    return str(found)
  if not isinstance(found, str) or not found.strip():
    expected = "a non-empty string or an integer" if role == "label" else "a non-empty string"
    raise ReaderError(path, number, f"{expected} at key {key!r}, found {json.dumps(found, ensure_ascii=False)}")
  return found.strip()


def _number(path, number: int, found: Any, key: str) -> float:
  """A finite float from a score value, else a ReaderError naming the key."""
  try:
    value = math.nan if isinstance(found, bool) or not isinstance(found, int | float) else float(found)
  except OverflowError:  # An integer beyond float's range.
    value = math.inf
  if not math.isfinite(value):
    raise ReaderError(path, number, f"a finite number at key {key!r}, found {json.dumps(found)}")
  return value


JSONL = RecordFormat("jsonl", read_jsonl, TEXTS)

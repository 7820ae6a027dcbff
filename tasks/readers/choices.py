"""Multiple-choice JSON lines -> records {"context", "choices", "label"} (`tasks.multiple_choice`).

One JSON object per line (blank lines skipped):

  {"context": "The man turned on the faucet.", "choices": ["The toilet filled with water.",
   "Water flowed from the spout."], "label": 1}

`context` is a non-empty string (the premise, question or sentence start), `choices` a list of at least two
non-empty strings (the candidate answers or endings, each read as the second text after the context), `label` the
0-based index of the right choice, or null / absent for data without answers (a test split). SWAG, HellaSwag and
COPA convert to it line by line: SWAG's `sent1 + " " + sent2` and `ending0..3`, HellaSwag's `ctx` and `endings`,
COPA's premise (with "What was the cause?" / "What happened as a result?") and its two alternatives.
"""

import os
from collections.abc import Iterator

from tasks.readers.lines import ReaderError, json_objects
from tasks.readers.record_format import RecordFormat, RecordKind


def read_choices(path: str | os.PathLike) -> Iterator[dict]:
  """Yields {"context": str, "choices": [str, ...], "label": int | None} per non-blank line (records may have
  different numbers of choices); a malformed line is a ReaderError naming the field."""
  for number, record in json_objects(path, '{"context": ..., "choices": [...], "label": ...}'):
    context, options, label = record.get("context"), record.get("choices"), record.get("label")
    if not isinstance(context, str) or not context.strip():
      raise ReaderError(path, number, f'a non-empty string in field "context", got {context!r}')
    if (not isinstance(options, list) or len(options) < 2
        or not all(isinstance(text, str) and text.strip() for text in options)):
      raise ReaderError(path, number, f'a list of at least two non-empty strings in field "choices", got {options!r}')
    if label is not None and (isinstance(label, bool) or not isinstance(label, int)
                              or not 0 <= label < len(options)):
      raise ReaderError(path, number, f'field "label": the 0-based index of a choice (0 to {len(options) - 1}) or '
                        f"null, got {label!r}")
    yield {"context": context, "choices": list(options), "label": label}


# Module-level functions: a kind is pickled with the data sources of grain's worker processes.
def _no_labels(record: dict) -> list[str]:
  """None to check against the task's labels: a label is a choice's index, checked by the reader."""
  return []


def _store(record: dict) -> dict:
  """No label (None) as -1: tfds has no None."""
  return record | {"label": -1 if record["label"] is None else record["label"]}


def _restore(stored: dict) -> dict:
  return stored | {"label": None if stored["label"] < 0 else stored["label"]}


# Multiple-choice records {"context", "choices", "label"}.
CHOICE_RECORDS = RecordKind("choices", {"context": str, "choices": [str], "label": int}, _no_labels, _store, _restore)
CHOICES = RecordFormat("choices", read_choices, CHOICE_RECORDS)

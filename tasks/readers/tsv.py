"""GLUE-style tab-separated files -> classification records {"text_a", "text_b", "label"} (+ "score").

One reader for single sentences (SST-2) and pairs (SICK, MRPC, RTE, STS-B, ...): which columns hold the texts, the
label and an optional real-valued score (SICK relatedness, STS-B similarity) is configuration, by header name or
0-based index. Fields are split on tabs only (no quoting, as GLUE's own reader)
and stripped, which removes SST-2's trailing spaces; CRLF line ends (SICK test) are removed by `numbered_lines`.
"""

import math
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from encoder import errors
from tasks.readers.lines import ReaderError, numbered_lines
from tasks.readers.record_format import TEXTS, RecordFormat


def _resolve(path, number: int, column: str | int | None, role: str, header: list[str] | None) -> int | None:
  """Index of a column given by name (needs a header) or index."""
  if isinstance(column, int) and not isinstance(column, bool) and column < 0:
    raise errors.UserError(f"{path}: column {role}={column} is negative; give a 0-based index or a header name")
  if column is None or (isinstance(column, int) and not isinstance(column, bool)):
    return column
  if header is None:
    raise errors.UserError(f"{path}: column {role}={column!r} is a name but header=False; give a 0-based index instead")
  if column not in header:
    raise ReaderError(path, number, f"a header with a column named {column!r} for {role} (header: {header})")
  return header.index(column)


def read_tsv(path: str | os.PathLike, *, text_a: str | int, text_b: str | int | None = None,
             label: str | int | None = None, score: str | int | None = None, header: bool = True,
             label_names: Sequence[str] | None = None) -> Iterator[dict]:
  """Yields {"text_a", "text_b" (None without `text_b`), "label" (None without `label`)} per data row, plus
  "score" (a finite float) when a `score` column is given.

  Every row must have as many fields as the header (or the first row without a header); texts and labels must be
  non-empty, a label must be one of `label_names` when they are given, and a score a finite number. Blank lines are
  skipped.
  """
  if label_names is not None and label is None:
    raise errors.UserError(f"{path}: label_names {list(label_names)} given without a label column")
  allowed = None if label_names is None else list(label_names)
  roles = {"text_a": text_a, "text_b": text_b, "label": label} | ({} if score is None else {"score": score})
  indices: dict[str, int | None] | None = None  # Column of each role, from the first row.
  width = first = 0  # Fields per row and the first row's line number, set with `indices`.
  for number, line in numbered_lines(path):
    if not line.strip():
      continue
    fields = line.split("\t")
    if indices is None:
      names = [field.strip() for field in fields] if header else None
      indices = {role: _resolve(path, number, column, role, names) for role, column in roles.items()}
      first, width, needed = number, len(fields), 1 + max(i for i in indices.values() if i is not None)
      if needed > width:
        raise ReaderError(path, number, f"at least {needed} tab-separated columns for {roles}, got {width}")
      if header:
        continue
    if len(fields) != width:
      raise ReaderError(path, number, f"{width} tab-separated columns as in line {first}, got {len(fields)} "
                        f"({'a tab inside a text?' if len(fields) > width else 'a missing field?'})")
    record: dict[str, Any] = {role: None if i is None else fields[i].strip() for role, i in indices.items()}
    for role, value in record.items():
      if value == "":
        raise ReaderError(path, number, f"a non-empty {role} in column {roles[role]!r}")
    if allowed is not None and record["label"] not in allowed:
      raise ReaderError(path, number, f"a label in column {label!r} that is one of {allowed}, "
                        f"got {record['label']!r}")
    if score is not None:
      record["score"] = _number(path, number, record["score"], score)
    yield record


def _number(path, number: int, text: str, column: str | int) -> float:
  """A finite float from a score field, else a ReaderError naming the column."""
  try:
    value = float(text)
  except ValueError:
    value = math.nan
  if not math.isfinite(value):
    raise ReaderError(path, number, f"a finite number in score column {column!r}, got {text!r}")
  return value


def _has_label_column(options: Mapping[str, Any]) -> bool:
  """Labels are read (and checked against label_names) from a label column only."""
  return options.get("label") is not None


TSV = RecordFormat("tsv", read_tsv, TEXTS, takes_label_names=_has_label_column)

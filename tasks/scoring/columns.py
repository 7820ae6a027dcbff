"""Readers of the files `tasks.scoring.score` scores, each checked as it is read: CoNLL tag columns, label and score
lines, a run's span predictions and the .conll files of a run (gold and predicted tags side by side).

CoNLL files: one token per line, the tag in the LAST whitespace-separated column, blank lines between sentences,
`-DOCSTART-` lines skipped. Label files: one example per non-blank line, the label in the last column; score files
(regression) the same with a number there. A file that holds no examples, is misaligned with gold or has a tag that
is not O or B-, I-, E-, S- + a type (strict mode: a tag of the scheme) is a UserError naming the file and line.
"""

import json
import math
import os
from collections.abc import Sequence
from typing import Any

from encoder import errors
from tasks.readers.lines import ReaderError, numbered_lines
from tasks.scoring import tag_schemes

Column = tuple[list[list[str]], list[list[int]]]  # (sentences of tags, their 1-based line numbers)
LENIENT_SCHEME = "BIOES"  # conlleval mode reads any scheme: O or B-, I-, E-, S- + a type.


def read_tag_column(path: str) -> Column:
  """Sentences of last-column tags from a CoNLL file, with the line number of every tag; none is an error, and so
  is a token line whose number of columns differs from the first one's (conlleval refuses such a file too)."""
  sentences, lines, tags, numbers = [], [], [], []
  width = first = None
  for number, line in numbered_lines(path):
    fields = line.split()
    if fields and not fields[0].startswith("-DOCSTART-"):
      width, first = (len(fields), number) if width is None else (width, first)
      if len(fields) != width:
        raise ReaderError(path, number, f"{width} whitespace-separated columns as in line {first}, got "
                          f"{len(fields)}: {line.strip()!r}")
      tags.append(fields[-1])
      numbers.append(number)
    elif tags:  # A blank (or -DOCSTART-) line closes the sentence.
      sentences.append(tags)
      lines.append(numbers)
      tags, numbers = [], []
  if tags:
    sentences.append(tags)
    lines.append(numbers)
  if not sentences:
    raise errors.UserError(f"{path}: expected sentences (token lines 'word ... TAG', a blank line between "
                        "sentences), found none")
  return sentences, lines


def read_label_column(path: str) -> Column:
  """Labels (last column of each non-blank line) as one-token 'sentences', with their line numbers; none is an
  error."""
  rows = [(line.split()[-1], n) for n, line in numbered_lines(path) if line.strip()]
  if not rows:
    raise errors.UserError(f"{path}: expected one example per line (the label or score in the last column), found none")
  return [[label] for label, _ in rows], [[n] for _, n in rows]


def read_score_column(path: str) -> tuple[list[float], list[int]]:
  """Numbers (last column of each non-blank line) with their line numbers; a non-number, or one that is not finite
  (nan, inf: they would make every correlation nan), names its line."""
  labels, lines = read_label_column(path)
  values = []
  for (text,), (number,) in zip(labels, lines):
    try:
      values.append(float(text))
    except ValueError:
      raise ReaderError(path, number, f"a number in the last column, got {text!r}") from None
    if not math.isfinite(values[-1]):
      raise ReaderError(path, number, f"a finite number in the last column, got {text!r}")
  return values, [n for (n,) in lines]


def load_scores(gold_path: str, pred_paths: Sequence[str]) -> tuple[list[float], list[list[float]]]:
  """Gold and predicted numbers, one per example; files of different lengths fail naming both."""
  gold, _ = read_score_column(gold_path)
  preds = []
  for path in pred_paths:
    pred, lines = read_score_column(path)
    if len(pred) != len(gold):
      raise errors.UserError(f"{path}: {len(pred)} scores but {gold_path} has {len(gold)}"
                          + (f" (line {lines[len(gold)]} is the first extra)" if len(pred) > len(gold) else "")
                          + ": the files must have the same examples")
    preds.append(pred)
  return gold, preds


def check_aligned(gold_path: str, gold: Column, pred_path: str, pred: Column, unit: str = "token") -> None:
  """Raises a UserError at the first sentence (or label) boundary where pred does not line up with gold."""
  (gold_tags, gold_lines), (pred_tags, pred_lines) = gold, pred
  for i, (g, p) in enumerate(zip(gold_lines, pred_lines)):
    if len(g) != len(p):
      j = min(len(g), len(p))
      at = lambda lines: lines[j] if j < len(lines) else lines[-1] + 1  # noqa: B023  (used before the loop moves on)
      raise errors.UserError(f"{pred_path}:{at(p)}: sentence {i + 1} has {len(p)} {unit}s but in {gold_path} "
                          f"(line {at(g)}) it has {len(g)}: pred needs the same {unit}s and blank lines as gold")
  if len(gold_tags) != len(pred_tags):
    longer, lines = (gold_path, gold_lines) if len(gold_tags) > len(pred_tags) else (pred_path, pred_lines)
    short, groups = min(len(gold_tags), len(pred_tags)), "sentences" if unit == "token" else "labels"
    raise errors.UserError(f"{longer}:{lines[short][0]}: {gold_path} has {len(gold_tags)} {groups} and "
                        f"{pred_path} has {len(pred_tags)}: the files must have the same {groups}")


def check_scheme(path: str, column: Column, scheme: str, mode: str = "strict") -> None:
  """Raises a ReaderError at the first tag that is not of the scheme: strict mode needs `scheme`'s tags, conlleval
  mode O or B-, I-, E-, S- + a type (any scheme); a word ('Peter') or another prefix ('X-PER') is never scored."""
  for tags, lines in zip(*column):
    for tag, line in zip(tags, lines):
      if mode == "strict" and not tag_schemes.is_scheme_tag(tag, scheme):
        raise ReaderError(path, line, f"a tag of the {tag_schemes.canonical_scheme(scheme)} scheme in the last column, "
                          f"got {tag!r}; use --mode conlleval or the --scheme the file is written in")
      if mode != "strict" and not tag_schemes.is_scheme_tag(tag, LENIENT_SCHEME):
        raise ReaderError(path, line, f"a tag in the last column: O or B-, I-, E-, S- + a type (e.g. B-PER), got "
                          f"{tag!r}")


def load_tags(gold_path: str, pred_paths: Sequence[str], scheme: str, mode: str
              ) -> tuple[list[list[str]], list[list[list[str]]]]:
  """Gold and each prediction file's tags per sentence, every file's tags checked (`check_scheme`) and every
  prediction file aligned with gold."""
  gold = read_tag_column(gold_path)
  check_scheme(gold_path, gold, scheme, mode)
  preds = []
  for path in pred_paths:
    pred = read_tag_column(path)
    check_aligned(gold_path, gold, path, pred, "token")
    check_scheme(path, pred, scheme, mode)
    preds.append(pred[0])
  return gold[0], preds


def load_labels(gold_path: str, pred_paths: Sequence[str]) -> tuple[list[list[str]], list[list[list[str]]]]:
  """Gold and each prediction file's labels as [label] per example, every prediction file aligned with gold."""
  gold = read_label_column(gold_path)
  preds = []
  for path in pred_paths:
    pred = read_label_column(path)
    check_aligned(gold_path, gold, path, pred, "label")
    preds.append(pred[0])
  return gold[0], preds


def format_table(scores: dict[str, Any], first: str) -> str:
  """Per-class rows then micro/macro/weighted averages, as fractions."""
  head = f"{first:<14}{'precision':>10}{'recall':>10}{'f1':>10}{'gold':>8}{'pred':>8}{'tp':>8}"
  row = lambda name, r: (f"{name:<14}{r['precision']:>10.4f}{r['recall']:>10.4f}{r['f1']:>10.4f}"
                         f"{r.get('gold', r['support']):>8}{r.get('pred', ''):>8}{r.get('tp', ''):>8}")
  rows = [row(name, r) for name, r in scores["per_type"].items()]
  rows += [row(f"{avg} avg", scores[avg]) for avg in ("micro", "macro", "weighted")]
  return "\n".join([head] + rows + ([f"{'accuracy':<14}{scores['accuracy']:>10.4f}"] if "accuracy" in scores else []))


def _is_int(value: Any) -> bool:
  """An int and not a bool (JSON's true is an int to isinstance)."""
  return isinstance(value, int) and not isinstance(value, bool)


def _span_problem(prediction: list, words: int) -> str | None:
  """What is wrong with a run's predicted [[start, end, type], ...] (None when valid): the checks
  `tasks.readers.spans` makes of a gold span (offsets inside the sentence, a non-empty type, no duplicate), and the
  documented order of the fields."""
  seen = set()
  for i, span in enumerate(prediction):
    if isinstance(span, list) and len(span) == 3 and isinstance(span[0], str) and _is_int(span[2]):
      return (f"prediction[{i}] in the documented field order [start, end, type], got {span!r} (the type first: "
              f"write [{span[1]!r}, {span[2]!r}, {span[0]!r}])")
    if not (isinstance(span, list) and len(span) == 3 and _is_int(span[0]) and _is_int(span[1])
            and isinstance(span[2], str) and span[2]):
      return f"prediction[{i}] to be [start: int, end: int, type: non-empty str], got {span!r}"
    if not 0 <= span[0] < span[1] <= words:
      return f"prediction[{i}] to have 0 <= start < end <= {words} (the word count; end exclusive), got {span!r}"
    if tuple(span) in seen:
      return f"prediction[{i}] not to repeat an earlier span, got {span!r} twice"
    seen.add(tuple(span))
  return None


def read_predicted_spans(path: str, gold: Sequence[dict], gold_path: str, scheme: str) -> list[set]:
  """Each sentence's predicted (type, start, end) spans from a run's predictions/<split>.jsonl, checked line by line
  against the gold sentences and as the gold's spans are (`_span_problem`); a tagger's tags are at most one per word
  (words past max_length are untagged)."""
  rows = [(n, line) for n, line in numbered_lines(path) if line.strip()]
  if len(rows) != len(gold):
    raise errors.UserError(f"{path}: {len(rows)} sentences but {gold_path} has {len(gold)}: the files must have the "
                           "same sentences")
  predicted = []
  for (number, line), record in zip(rows, gold):
    try:
      row = json.loads(line)
    except json.JSONDecodeError as err:
      raise ReaderError(path, number, f"a JSON object (a run's prediction line); invalid JSON: {err.msg}") from None
    if not isinstance(row, dict) or row.get("words") != record["words"] or not isinstance(row.get("prediction"), list):
      raise ReaderError(path, number, 'a run\'s prediction line {"words", ..., "prediction"} with the words of '
                        f"the same sentence in {gold_path}")
    prediction, words = row["prediction"], len(record["words"])
    if prediction and all(isinstance(tag, str) for tag in prediction):  # A tagger's tags.
      if not all(tag_schemes.is_scheme_tag(tag, LENIENT_SCHEME) for tag in prediction):
        raise ReaderError(path, number, f"tags O or B-, I-, E-, S- + a type, got {prediction[:8]!r}")
      if len(prediction) > words:
        raise ReaderError(path, number, f'at most a tag per word ({words}) in "prediction", got {len(prediction)}')
      predicted.append(set(tag_schemes.spans_from_tags(prediction, scheme)))
    elif all(isinstance(s, list) for s in prediction):
      problem = _span_problem(prediction, words)
      if problem:
        raise ReaderError(path, number, problem)
      predicted.append({(label, start, end) for start, end, label in prediction})
    else:
      raise ReaderError(path, number, f'a "prediction" of [start, end, type] spans or of tags, got {prediction[:4]!r}')
  return predicted


def read_run_conll(path: str | os.PathLike) -> tuple[list[list[str]], list[list[str]]]:
  """(gold, predicted) tags per sentence of a run's prediction .conll file (word ... gold predicted)."""
  gold, pred, sentence = [], [], []
  for _, line in numbered_lines(path):
    fields = line.split()
    if fields:
      sentence.append(fields)
    elif sentence:
      gold.append([f[-2] for f in sentence])
      pred.append([f[-1] for f in sentence])
      sentence = []
  if sentence:
    gold.append([f[-2] for f in sentence])
    pred.append([f[-1] for f in sentence])
  return gold, pred

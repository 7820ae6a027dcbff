"""SQuAD's official metric (Rajpurkar et al., 2016; evaluate-v1.1.py and evaluate-v2.0.py): exact match and token F1
of each predicted answer after SQuAD's normalization (lowercase, no punctuation, no articles a/an/the, single spaces),
the best over the question's gold answers, averaged over every question (one without a prediction scores 0).

SQuAD 2.0 (unanswerable questions: no gold answer, predicted by the empty string) scores as evaluate-v2.0.py: a
question without gold answers has the gold [""], and an empty answer on either side has F1 = EM = (both empty).
v1.1 data keeps evaluate-v1.1.py's F1 of 0 there. Scores are fractions in [0, 1] (the official scripts print
percents); per-question values feed the paired bootstrap (`tasks.scoring.bootstrap`).
"""

import collections
import json
import re
import string
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from encoder import errors
from tasks.readers.lines import ReaderError
from tasks.readers.squad import _line_of

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
  """Lowercase, drop ASCII punctuation, replace the articles a/an/the by spaces, collapse whitespace (official)."""
  text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
  return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
  """1.0 when the normalized answers are equal."""
  return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str, empty_matches: bool = False) -> float:
  """F1 of the normalized answers' token multisets; with `empty_matches` (v2.0) an empty side scores (both empty)."""
  predicted, expected = normalize_answer(prediction).split(), normalize_answer(gold).split()
  if empty_matches and (not predicted or not expected):
    return float(predicted == expected)
  same = sum((collections.Counter(predicted) & collections.Counter(expected)).values())
  if same == 0:
    return 0.0
  precision, recall = same / len(predicted), same / len(expected)
  return 2 * precision * recall / (precision + recall)


def gold_texts(answers: Sequence[str], version2: bool) -> list[str]:
  """The answers a prediction is compared with: v2.0 drops those that normalize to nothing, and [""] when none is
  left (an unanswerable question)."""
  if not version2:
    return list(answers)
  return [a for a in answers if normalize_answer(a)] or [""]


def question_scores(golds: Sequence[Sequence[str]], predictions: Sequence[str | None], version2: bool = False
                    ) -> np.ndarray:
  """[questions, 2] (exact match, F1), each the best over the question's gold answers; None (no prediction) 0."""
  scores = np.zeros((len(golds), 2), np.float64)
  for i, (answers, prediction) in enumerate(zip(golds, predictions)):
    if prediction is None:
      continue
    answers = gold_texts(answers, version2)
    scores[i] = (max(exact_match(prediction, a) for a in answers),
                 max(token_f1(prediction, a, version2) for a in answers))
  return scores


def scores(golds: Sequence[Sequence[str]], predictions: Sequence[str | None], version2: bool = False
           ) -> dict[str, float]:
  """{"exact_match", "f1"}: the means over questions."""
  per_question = question_scores(golds, predictions, version2)
  mean = per_question.mean(axis=0) if len(per_question) else np.zeros(2)
  return {"exact_match": float(mean[0]), "f1": float(mean[1])}


def _question_problem(qa) -> str | None:
  """What is wrong with a gold question as the metric reads it (None when valid): an id and answer texts."""
  if not isinstance(qa, dict) or not isinstance(qa.get("id"), str) or not qa["id"]:
    return f'a question {{"id": non-empty str, "answers": [{{"text": str}}, ...]}}, got {_short(qa)}'
  answers = qa.get("answers")
  if not isinstance(answers, list):
    return f'question {qa["id"]!r} to have a list of "answers", got {_short(answers)}'
  for i, answer in enumerate(answers):
    if not isinstance(answer, dict) or not isinstance(answer.get("text"), str):
      return f'answers[{i}] of question {qa["id"]!r} to be {{"text": str, ...}}, got {_short(answer)}'
  return None


def read_gold(path: str | Path) -> tuple[list[str], list[list[str]], bool]:
  """(question ids, gold answer texts, whether it is SQuAD 2.0 data) of a SQuAD JSON file, or of a run's
  `predictions/<split>.jsonl` (records with "id" and "answers"); a malformed question or an id used twice is an
  error at its line."""
  text = _read(path)
  whole = _json_or_none(text)
  if isinstance(whole, dict) and "data" in whole:
    try:
      questions = [qa for article in whole["data"] for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    except (KeyError, TypeError) as err:
      raise errors.UserError(f'{path}: expected SQuAD JSON ({{"data": [{{"paragraphs": [{{"qas": [...]}}]}}]}}), '
                             f"found no {err} where the format has it") from None
    # The line of the i-th question: that of its id's occurrence (found only for an error: the search is slow).
    key = lambda qa: json.dumps(qa.get("id"), ensure_ascii=False) if isinstance(qa, dict) else "{"
    line_of = lambda i: _line_of(text, key(questions[i]), [key(q) for q in questions[:i + 1]].count(key(questions[i])))
  else:
    questions, lines = [], []  # The questions and their lines.
    for number, line in enumerate(text.splitlines(), start=1):
      if line.strip():
        try:
          questions.append(json.loads(line))
        except json.JSONDecodeError as err:
          raise ReaderError(path, number, f'SQuAD JSON ({{"data": [...]}}) or a JSON line per question with "id" and '
                            f'"answers", found invalid JSON at column {err.colno}: {err.msg}') from None
        lines.append(number)
    line_of = lambda i: lines[i]
  first: dict[str, int] = {}
  for i, qa in enumerate(questions):
    problem = _question_problem(qa)
    if problem is not None:
      raise ReaderError(path, line_of(i), problem)
    if qa["id"] in first:
      raise ReaderError(path, line_of(i), f"each question id once, found {qa['id']!r} again, first at line "
                        f"{line_of(first[qa['id']])}")
    first[qa["id"]] = i
  if not questions:
    raise errors.UserError(f"{path}: expected SQuAD questions, found none")
  ids = [qa["id"] for qa in questions]
  answers = [[a["text"] for a in qa["answers"]] for qa in questions]
  version2 = any(qa.get("is_impossible") or not qa["answers"] for qa in questions)
  return ids, answers, version2


def read_predictions(path: str | Path, ids: Sequence[str]) -> list[str | None]:
  """The official {question id: answer text} JSON, in the order of `ids` (None where a question has none). Checked as
  the gold is, each at its line: an answer that is not a string, an id given twice (JSON would keep the last one
  silently) and an id that is not a gold question are errors."""
  text = _read(path)
  try:
    whole = json.loads(text)
  except json.JSONDecodeError as err:
    raise ReaderError(path, err.lineno, f"the official {{question id: answer text}} JSON, found invalid JSON at "
                      f"column {err.colno}: {err.msg}") from None
  if not isinstance(whole, dict):
    raise ReaderError(path, 1, f"the official {{question id: answer text}} JSON object, found a "
                      f"{type(whole).__name__}")
  gold = set(ids)
  predicted: dict[str, str] = {}
  lines: dict[str, int] = {}  # The line of each id.
  for key, value, line in _members(text):
    if not isinstance(value, str):
      raise ReaderError(path, line, f"the answer text of question {key!r} to be a string, got {_short(value)}")
    if key in predicted:
      raise ReaderError(path, line, f"each question id once, found {key!r} again, first at line {lines[key]}")
    if key not in gold:
      raise ReaderError(path, line, f"question ids of the gold file, found {key!r}, which is not in it")
    predicted[key], lines[key] = value, line
  return [predicted.get(i) for i in ids]


def _members(text: str) -> Iterator[tuple[str, Any, int]]:
  """(key, value, 1-based line of the key) of each member of `text`, a valid JSON object, duplicates included (which
  json.loads would drop)."""
  decoder = json.JSONDecoder()
  at = _skip_space(text, text.index("{") + 1)
  line, counted = 1, 0  # The line of text[counted], counted forward as `at` moves (not from 0 for each member).
  while text[at] != "}":
    line, counted = line + text.count("\n", counted, at), at
    key, at = decoder.raw_decode(text, at)
    value, at = decoder.raw_decode(text, _skip_space(text, _skip_space(text, at) + 1))  # Past the ':'.
    yield key, value, line
    at = _skip_space(text, at)
    at = _skip_space(text, at + 1) if text[at] == "," else at


def _skip_space(text: str, at: int) -> int:
  """The index of the first character at or after `at` that is not JSON whitespace."""
  while at < len(text) and text[at] in " \t\n\r":
    at += 1
  return at


def _short(value: Any) -> str:
  """A value in an error line, cut to 80 characters."""
  text = repr(value)
  return text if len(text) <= 80 else text[:77] + "..."


def _json_or_none(text: str):
  """The text as one JSON value, None when it is not one (JSON lines)."""
  try:
    return json.loads(text)
  except json.JSONDecodeError:
    return None


def _read(path: str | Path) -> str:
  try:
    return Path(path).read_text(encoding="utf-8")
  except UnicodeDecodeError as err:
    raise errors.UserError(f"{path}: expected UTF-8 text ({err})") from None
  except OSError as err:
    raise errors.UserError(f"{path}: cannot be read ({err.strerror})") from None

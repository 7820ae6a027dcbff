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
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from encoder import errors

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


def read_gold(path: str | Path) -> tuple[list[str], list[list[str]], bool]:
  """(question ids, gold answer texts, whether it is SQuAD 2.0 data) of a SQuAD JSON file, or of a run's
  `predictions/<split>.jsonl` (records with "id" and "answers")."""
  text = _read(path)
  try:
    whole = _json_or_none(text)
    if isinstance(whole, dict) and "data" in whole:
      questions = [qa for article in whole["data"] for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    else:
      questions = [json.loads(line) for line in text.splitlines() if line.strip()]
    ids = [str(qa["id"]) for qa in questions]
    answers = [[a["text"] for a in qa["answers"]] for qa in questions]
    version2 = any(qa.get("is_impossible") or not qa["answers"] for qa in questions)
  except (json.JSONDecodeError, KeyError, TypeError) as err:
    raise errors.UserError(f'{path}: expected SQuAD JSON ({{"data": [articles with paragraphs and qas]}}) or JSON '
                           f"lines of questions with id and answers, found unreadable content ({err})") from None
  if not ids:
    raise errors.UserError(f"{path}: expected SQuAD questions, found none")
  return ids, answers, version2


def read_predictions(path: str | Path, ids: Sequence[str]) -> list[str | None]:
  """The official {question id: answer text} JSON, in the order of `ids` (None where a question has none); an id
  that is not a gold question is an error."""
  try:
    predicted = json.loads(_read(path))
  except json.JSONDecodeError as err:
    raise errors.UserError(f"{path}: expected the official {{question id: answer text}} JSON, found invalid JSON "
                           f"({err})") from None
  if not isinstance(predicted, dict) or not all(isinstance(v, str) for v in predicted.values()):
    raise errors.UserError(f"{path}: expected the official {{question id: answer text}} JSON object")
  unknown = next((key for key in predicted if key not in set(ids)), None)
  if unknown is not None:
    raise errors.UserError(f"{path}: question id {unknown!r} is not in the gold file")
  return [predicted.get(i) for i in ids]


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

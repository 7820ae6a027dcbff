"""SQuAD JSON (v1.1, and v2.0 with unanswerable questions) -> question records, one per question in file order:

  {"id", "title", "question", "context", "answers": [{"text", "start"}], "is_impossible"}

`start` is the answer's character offset in `context`; v2.0's unanswerable questions (`is_impossible`) have no
answers. `articles` ("start:stop", Python slice syntax over the file's articles) keeps some articles only: a file's
articles held out as a dev split ("40:") and the rest trained on (":40"). A malformed question, a question id used twice
in a file (predictions and the official metric are keyed by id) and, with `answerable` (a SQuAD v1.1 run), a v2.0
unanswerable question are errors naming the file, the line of the id and its place in the JSON
("data[3].paragraphs[0].qas[2]").
"""

import json
import os
from collections.abc import Iterator
from pathlib import Path

from encoder import errors
from tasks.readers.lines import ReaderError
from tasks.readers.record_format import QUESTIONS, RecordFormat


def article_slice(articles: str | None) -> slice:
  """'40:' -> slice(40, None); None or '' -> every article."""
  if not articles:
    return slice(None)
  parts = articles.split(":")
  if len(parts) != 2 or not all(p.strip().lstrip("-").isdigit() or not p.strip() for p in parts):
    raise errors.UserError(f"articles={articles!r}: expected 'start:stop' (Python slice syntax, e.g. ':40' or '40:')")
  return slice(*(int(p) if p.strip() else None for p in parts))


def _line_of(text: str, key: str, occurrence: int = 1) -> int:
  """The 1-based line of the `occurrence`-th (from 1) occurrence of `key` in `text` (1 when absent)."""
  at = -1
  for _ in range(occurrence):
    at = text.find(key, at + 1)
    if at < 0:
      return 1
  return text.count("\n", 0, at) + 1


def _check(qa, context: str) -> str | None:
  """What is wrong with one question (None when it is valid)."""
  if not isinstance(qa, dict) or not isinstance(qa.get("id"), str) or not isinstance(qa.get("question"), str):
    return 'a question {"id": str, "question": str, "answers": [...]}'
  answers = qa.get("answers")
  if not isinstance(answers, list):
    return f'question {qa["id"]!r} to have a list of "answers"'
  for i, answer in enumerate(answers):
    if not isinstance(answer, dict) or not isinstance(answer.get("text"), str) \
        or not isinstance(answer.get("answer_start"), int):
      return f'answers[{i}] of question {qa["id"]!r} to be {{"text": str, "answer_start": int}}, got {answer!r}'
    start = answer["answer_start"]
    if context[start:start + len(answer["text"])] != answer["text"]:
      return (f"answers[{i}] of question {qa['id']!r} to be the context's text at answer_start {start}: "
              f"{answer['text']!r} != {context[start:start + len(answer['text'])]!r}")
  if not answers and not qa.get("is_impossible"):
    return f"question {qa['id']!r} to have answers (or is_impossible: true, SQuAD 2.0)"
  return None


def read_squad(path: str | os.PathLike, articles: str | None = None, answerable: bool = False) -> Iterator[dict]:
  """Question records of a SQuAD JSON file (see the module docstring); `answerable`: refuse unanswerable ones."""
  text = Path(path).read_text(encoding="utf-8-sig")
  try:
    data = json.loads(text)
  except json.JSONDecodeError as err:
    raise ReaderError(path, err.lineno, f"SQuAD JSON, found invalid JSON at column {err.colno}: {err.msg}") from None
  if not isinstance(data, dict) or not isinstance(data.get("data"), list):
    raise ReaderError(path, 1, 'SQuAD JSON {"data": [{"title", "paragraphs": [{"context", "qas"}]}], "version"}')
  chosen = range(len(data["data"]))[article_slice(articles)]
  seen: dict[str, int] = {}  # Question id -> how often it occurred so far (ids count over the whole file).
  for a in chosen:
    article = data["data"][a]
    paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
    if not isinstance(paragraphs, list):
      raise ReaderError(path, 1, f'data[{a}] to be an article {{"title", "paragraphs": [...]}}')
    for p, paragraph in enumerate(paragraphs):
      if not isinstance(paragraph, dict) or not isinstance(paragraph.get("context"), str) \
          or not isinstance(paragraph.get("qas"), list):
        raise ReaderError(path, 1, f'data[{a}].paragraphs[{p}] to be {{"context": str, "qas": [...]}}')
      context = paragraph["context"]
      for q, qa in enumerate(paragraph["qas"]):
        problem = _check(qa, context)
        place = f"(data[{a}].paragraphs[{p}].qas[{q}])"
        if problem is not None:
          where = _line_of(text, f'"{qa["id"]}"') if isinstance(qa, dict) and isinstance(qa.get("id"), str) else 1
          raise ReaderError(path, where, f"{problem} {place}")
        key, seen[qa["id"]] = f'"{qa["id"]}"', seen.get(qa["id"], 0) + 1
        if seen[qa["id"]] > 1:
          raise ReaderError(path, _line_of(text, key, seen[qa["id"]]), f"each question id once (predictions are "
                            f"keyed by id), found {qa['id']!r} again, first at line {_line_of(text, key)} {place}")
        if answerable and qa.get("is_impossible"):
          raise ReaderError(path, _line_of(text, key, seen[qa["id"]]), f"answerable questions (a SQuAD v1.1 run), "
                            f"found {qa['id']!r} unanswerable (is_impossible, SQuAD 2.0): set "
                            f"config.task.unanswerable=True for SQuAD 2.0 {place}")
        yield {"id": qa["id"], "title": str(article.get("title", "")), "question": qa["question"],
               "context": context, "answers": [{"text": x["text"], "start": x["answer_start"]} for x in qa["answers"]],
               "is_impossible": bool(qa.get("is_impossible", False))}


SQUAD = RecordFormat("squad", read_squad, QUESTIONS)

"""Fine-tuning task families by config name (`config.task.name`); adding one is its module plus one line here
(docs/design.md, "Adding a task family")."""

import difflib
from typing import Any, Mapping

from encoder import errors
from tasks import classification, question_answering, regression, span_ner, tagging
from tasks.family import TaskFamily

FAMILIES: dict[str, type[TaskFamily]] = {
    "classification": classification.Classification,  # Sentence and sentence-pair ([CLS] A [SEP] B [SEP]) labels.
    "regression": regression.Regression,  # A real-valued score per sentence (pair): SICK relatedness, STS-B.
    "tagging": tagging.Tagging,  # BIO/IO/BIOES tagging (NER) or plain tags (POS), greedy or CRF.
    "span_ner": span_ner.SpanNER,  # Span classification with NULL, flat or nested.
    "question_answering": question_answering.QuestionAnswering,  # Extractive QA (SQuAD v1.1/v2.0) over windows.
}


def family_class(name: str) -> type[TaskFamily]:
  """The family registered as `name`; an error lists the registered names."""
  if name not in FAMILIES:
    close = difflib.get_close_matches(name, FAMILIES, n=1)
    raise errors.ConfigError(f"config.task.name={name!r} is not a task family"
                             f"{f'; did you mean {close[0]!r}?' if close else ''} (known: {', '.join(FAMILIES)})")
  return FAMILIES[name]


def family(task: Mapping[str, Any]) -> TaskFamily:
  """The family of a task's config mapping (`config.task` as a dict, with its "labels")."""
  return family_class(task["name"])(task)

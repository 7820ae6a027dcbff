"""Fine-tuning tasks by config name (`config.task.name`); adding one is a new module plus one line here."""

from typing import Any, Callable, Mapping

from objectives.objective import Objective
from tasks import classification, regression, span_ner, tagging

TASKS: dict[str, Callable[[Mapping[str, Any]], Objective]] = {
    "classification": classification.build,  # Sentence and sentence-pair ([CLS] A [SEP] B [SEP]) classification.
    "regression": regression.build,  # A real-valued score per sentence (pair): SICK relatedness, STS-B.
    "tagging": tagging.build,  # BIO/IO/BIOES tagging (NER, POS), greedy or CRF.
    "span_ner": span_ner.build,  # Span classification with NULL, flat or nested.
}


def get(name: str) -> Callable[[Mapping[str, Any]], Objective]:
  """The builder of task `name`; an error lists the registered names."""
  if name not in TASKS:
    raise ValueError(f"unknown task {name!r}; registered tasks: {sorted(TASKS)}")
  return TASKS[name]

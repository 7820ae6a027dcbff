"""Fine-tuning task families by config name (`config.task.name`); adding one is its module plus one line here
(docs/design.md, "Adding a task family")."""

import difflib
from collections.abc import Mapping
from typing import Any

from encoder import errors, fields
from encoder.fields import Field
from tasks import classification, multiple_choice, question_answering, regression, span_ner, tagging, task_fields
from tasks.family import TaskFamily

FAMILIES: dict[str, type[TaskFamily]] = {
    "classification": classification.Classification,  # Sentence and sentence-pair ([CLS] A [SEP] B [SEP]) labels.
    "regression": regression.Regression,  # A real-valued score per sentence (pair): SICK relatedness, STS-B.
    "tagging": tagging.Tagging,  # BIO/IO/BIOES tagging (NER) or plain tags (POS), greedy or CRF.
    "span_ner": span_ner.SpanNER,  # Span classification with NULL, flat or nested.
    "question_answering": question_answering.QuestionAnswering,  # Extractive QA (SQuAD v1.1/v2.0) over windows.
    "multiple_choice": multiple_choice.MultipleChoice,  # A context's right choice of k (SWAG, HellaSwag, COPA).
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


def _family_names() -> tuple[str, ...]:
  return tuple(FAMILIES)


def common_fields() -> tuple[Field, ...]:
  """task_fields.COMMON with `name`'s allowed values, the registered families (read when a value is checked)."""
  return tuple(field._replace(rule=fields.Choice(_family_names)) if field.name == "name" else field
               for field in task_fields.COMMON)


def declared_fields() -> dict[str, list[tuple[str, Field]]]:
  """Every config.task field -> [(who declares it, its declaration)]: `common_fields` ("every family") first, then
  each registered family's `config_fields` in registry order (a field several families read, each of them)."""
  declared: dict[str, list[tuple[str, Field]]] = {field.name: [("every family", field)] for field in common_fields()}
  for name, cls in FAMILIES.items():
    for field in cls.config_fields:
      declared.setdefault(field.name, []).append((name, field))
  return declared


def task_defaults(name: str) -> dict[str, Any]:
  """The task block of family `name` before a preset's values: every registered family's fields (so an override or
  a saved config naming any of them is read whatever the family; docs/design.md says why), each at `name`'s default
  when the family reads it, else at the last declaring family's (a value that family ignores)."""
  values = {field: declarations[-1][1].default for field, declarations in declared_fields().items()}
  own = FAMILIES[name].config_fields if name in FAMILIES else ()
  return values | fields.defaults(own) | {"name": name}


def complete_task(task: Mapping[str, Any]) -> dict[str, Any]:
  """A saved task block (a run's config.json, read back by `launch.predict`, `launch.export` and the reports) with
  each field it lacks, a run saved before the field existed, at its declared default for the run's family."""
  return task_defaults(task["name"]) | dict(task)


def field_rules() -> dict[str, fields.Rule]:
  """What each config.task field accepts (configs/rules.py): its declaration's rule; a field that families declare
  with different Choice rules accepts any of their choices (each family refuses the others' when it builds)."""
  rules = {}
  for name, declarations in declared_fields().items():
    distinct = list(dict.fromkeys(field.rule for _, field in declarations))
    choices = [rule for rule in distinct if isinstance(rule, fields.Choice)]
    if len(distinct) > 1 and len(choices) == len(distinct):
      distinct = [fields.Choice(tuple(dict.fromkeys(c for rule in choices for c in rule.options())))]
    if len(distinct) > 1:
      raise ValueError(f"config.task.{name}: declared with different rules by "
                       f"{', '.join(who for who, _ in declarations)}")
    rules[name] = distinct[0]
  return rules


def field_comments() -> dict[str, str]:
  """Each config.task field's comment (docs/config.md): COMMON's as written, a family's prefixed with the families
  that read it ("span_ner: ..."; one declaration per distinct comment)."""
  comments = {}
  for name, declarations in declared_fields().items():
    if declarations[0][0] == "every family":
      comments[name] = declarations[0][1].comment
      continue
    by_comment: dict[str, list[str]] = {}
    for who, field in declarations:
      by_comment.setdefault(field.comment, []).append(who)
    comments[name] = "; ".join(f"{', '.join(who)}: {comment}" for comment, who in by_comment.items())
  return comments

"""The fields of `config.task`, as data: each is declared once, with its default, what it accepts and its one-line
comment. The fields every family reads (what data, its splits and labels, the sequence length, the head's dropout,
the dev metric) are `COMMON` here; a family declares the fields only it reads as its `TaskFamily.config_fields`.
`tasks.registry.task_defaults` builds the task block from them (configs/finetune.py), `tasks.registry.field_rules`
their rules (configs/rules.py), `tasks.registry.field_comments` their docs (configs/reference.py, docs/config.md).
"""

from encoder.fields import PROBABILITY, Anything, Check, Choice, Field, Number

BOOL = Anything("true or false")


def _datasets() -> tuple[str, ...]:
  from tasks import tfds_builders  # pylint: disable=import-outside-toplevel  # It imports tensorflow_datasets.
  return ("", *tfds_builders.PRESETS)


def _formats() -> tuple[str, ...]:
  from tasks import readers  # pylint: disable=import-outside-toplevel
  return tuple(readers.FORMATS)


def _files_problem(value: str) -> str | None:
  items = [item.partition(":") for item in value.split(",")] if value else []
  bad = [split + colon + path for split, colon, path in items if not (split and colon and path)]
  return f"'split:path' items such as train:a.tsv,validation:b.tsv, got {bad[0]!r}" if bad else None


def _columns_problem(value: str) -> str | None:
  for item in filter(None, value.split(",")):
    key, colon, option = item.partition(":")
    if not (key and colon and option):
      return f"'name:value' items such as text_a:sentence1,label:2,header:true, got {item!r}"
    if option.lstrip("-").isdigit() and int(option) < 0:
      return f"column indices >= 0 (0 is the first column), got {item!r}"
  return None


COMMON: tuple[Field, ...] = (
    # No default: every preset names its family. Its choices, the registered families, are filled in by
    # tasks.registry (`common_fields`), which imports the families, which import this module.
    Field("name", "", Choice(()),
          "The task family: a name of tasks.registry.FAMILIES."),
    Field("dataset", "", Choice(_datasets),
          'tasks.tfds_builders.PRESETS name ("" = the files below).'),
    Field("format", "tsv", Choice(_formats),
          'Reader of `files` when dataset is "": a name of tasks.readers.FORMATS (docs/data.md, "File formats").'),
    Field("files", "", Check(_files_problem, "'split:path' items (the files must exist)", ("train.tsv",)),
          '"train:a.tsv,validation:b.tsv,test:c.tsv" (relative to the data dir or absolute).'),
    Field("columns", "", Check(_columns_problem, "'name:value' reader options", ("text_a", "label:-1")),
          'Reader options for `files`: "text_a:sentence1,text_b:sentence2,label:label,header:true".'),
    Field("train_split", "train", Anything("a split name of the data, tfds slicing allowed (checked when read)"),
          'Split names (tfds slicing allowed, e.g. "train[:10%]").'),
    Field("eval_split", "validation", Anything("a split name of the data (checked when read)"),
          "The dev split: periodic evaluation, best checkpoint, threshold tuning."),
    Field("test_split", "test", Anything("a split name of the data, or '' (checked when read)"),
          'Scored with the best-dev parameters ("" = none).'),
    Field("labels", (), Anything("any label names, in index order (checked against the data when read)"),
          "Labels / tags / entity types, index order (() = from train)."),
    Field("max_length", 128, Number(3, integer=True),
          "Subword tokens per example, specials included (truncation)."),
    Field("dropout", 0.1, PROBABILITY, "Dropout on the encoder output inside the head."),
    Field("metric", "accuracy", Anything("a score of the task's family (checked with it: configs.checks)"),
          "The dev metric that picks the best checkpoint (higher is better)."),
)

"""The config.task fields are declared once, by the families that read them (tasks/task_fields.py, each family's
`config_fields`): the task block, the rules and the comments are built from those declarations, and no family module
repeats a default as a `.get(name, default)` fallback."""

import re
import sys
from pathlib import Path

import pytest

from configs import finetune, rules
from encoder.fields import POSITIVE_INT, Choice, Field, Number
from tasks import classification, registry, span_ner


def test_every_preset_block_is_its_familys_defaults_and_the_preset():
  """Each preset's block holds every declared field; one the preset leaves is its family's declared default."""
  declared = registry.declared_fields()
  for name, preset in finetune.TASK_PRESETS.items():
    task = finetune.get_config(f"task={name}").task
    assert set(task) == set(declared), name
    own = registry.FAMILIES[preset["name"]].complete({})
    for field, value in task.items():
      if field not in preset and field in own:
        assert value == own[field], (name, field)


def test_a_field_two_families_read_holds_the_chosen_familys_default():
  assert registry.task_defaults("classification")["pooling"] == "cls"
  assert registry.task_defaults("regression")["pooling"] == "cls"
  assert registry.task_defaults("span_ner")["pooling"] == "mean"
  # Families that do not read it: the last declaring family's (span NER's), a value they ignore.
  assert registry.task_defaults("tagging")["pooling"] == registry.task_defaults("question_answering")["pooling"] \
      == "mean"


def test_rules_and_comments_come_from_the_declarations():
  field_rules = rules.rules(finetuning=True)
  assert field_rules["task.n_best"] == POSITIVE_INT and field_rules["task.max_length"] == Number(3, integer=True)
  # Different choices of the families that read `pooling`: any of them passes the config check (each family refuses
  # the others' when its head is built).
  assert field_rules["task.pooling"] == Choice(classification.POOLINGS + ("attention",))
  comments = registry.field_comments()
  assert comments["max_length"].startswith("Subword tokens per example")
  assert comments["scheme"].startswith("tagging, span_ner: trained and scored tag scheme")
  assert comments["pooling"] == ("classification, regression: " + classification.Classification.config_fields[0].comment
                                 + "; span_ner: " + next(f.comment for f in span_ner.SpanNER.config_fields
                                                         if f.name == "pooling"))


def test_one_field_declared_with_two_kinds_of_rule_is_refused(monkeypatch):
  class Clash(classification.Classification):
    name = "clash"
    config_fields = (Field("n_best", 20, Number(0.0), "n-best, as a float."),)

  monkeypatch.setitem(registry.FAMILIES, "clash", Clash)
  with pytest.raises(ValueError,
                     match=re.escape("config.task.n_best: declared with different rules by question_answering, clash")):
    registry.field_rules()


def test_a_family_built_from_a_partial_mapping_reads_its_declared_defaults():
  family = registry.family({"name": "question_answering"})
  assert (family.n_best, family.max_answer_length, family.task["doc_stride"], family.task["dropout"]) == (20, 30, 128,
                                                                                                         0.1)
  assert registry.complete_task({"name": "span_ner", "nested": True})["max_span_width"] == 8


def test_no_family_module_repeats_a_default():
  """Field defaults live in the declarations: a family reads `self.task[name]`, never `.get(name, fallback)` of a
  declared field (keys a family computes itself, such as `train_fields`' score_mean, are not fields)."""
  names = "|".join(registry.declared_fields())
  fallback = re.compile(rf"\.get\(\"({names})\"|layers\.option\(")
  paths = {Path(sys.modules[cls.__module__].__file__) for cls in registry.FAMILIES.values()}
  assert len(paths) == len(registry.FAMILIES)
  for path in paths:
    assert not fallback.findall(path.read_text(encoding="utf-8")), path
  assert fallback.findall('n = self.task.get("n_best", 20)') and not fallback.findall('config.get("score_mean", 0.0)')

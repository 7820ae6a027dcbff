"""A family checks its own relations (issue 73, part 3): configs.checks reaches them through the registry
(`TaskFamily.check`, `is_score`) and names no family itself; the defaults check nothing."""

import pytest

from configs import checks, finetune
from encoder.errors import ConfigError
from tasks import registry


def _family(name: str, **task):
  return registry.family({"name": name, "labels": ["B-PER", "O"], **task})


@pytest.mark.parametrize("name,task,metric,known", [
    ("classification", {}, "macro_f1", True), ("classification", {}, "f1", False),
    ("classification", {"positive_label": "O"}, "f1", True), ("tagging", {"scheme": "IOB2"}, "f1_PER", True),
    ("tagging", {"scheme": "IOB2"}, "F1", False), ("tagging", {"scheme": None}, "f1_PER", False),
    ("span_ner", {}, "f1_PER", True), ("question_answering", {}, "f1", True), ("question_answering", {}, "f1_x", False),
    ("multiple_choice", {}, "accuracy", True)])
def test_a_family_says_which_dev_scores_a_config_may_name(name, task, metric, known):
  assert _family(name, **task).is_score(metric) is known


def test_the_families_own_relations_are_checked_by_them():
  config = finetune.get_config("task=sst2,runlocal").unlock()
  config.task.labels, config.task.positive_label = ("0", "1"), "yes"
  with pytest.raises(ConfigError, match=r"^config.task.positive_label='yes': expected one of config.task.labels"):
    checks.check_config(config)
  registry.family({"name": "regression"}).check(config)  # A family that reads neither field: nothing to check.
  config.task.name = "regression"
  config.task.metric = "pearson"
  checks.check_config(config)

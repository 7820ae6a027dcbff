"""Config files and override checks: close matches for mistyped keys, types, string args, model-field comparison."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from configs import checks, common, pretrain
from encoder import errors
from encoder.config import PRESETS

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def config():
  return pretrain.get_config("runlocal")


def test_string_args_pick_preset_and_objectives():
  config = pretrain.get_config("size=mini,objectives=mlm+nsp,steps=7")
  assert config.model.num_layers == PRESETS["mini"]["num_layers"]
  assert config.model.hidden_size == PRESETS["mini"]["hidden_size"]
  assert config.num_train_steps == 7
  assert dict(config.objective_weights) == {"mlm": 1.0, "nsp": 1.0}
  assert config.data.packing == "nsp_pairs"
  assert pretrain.get_config("objectives=mlm+sbo").masking.mode == "span"
  with pytest.raises(ValueError, match=r"unknown config argument 'sise'.*size"):
    pretrain.get_config("sise=mini")


def test_config_is_locked(config):
  with pytest.raises(AttributeError):
    config.new_field = 1


def test_mistyped_key_names_close_matches(config):
  with pytest.raises(errors.ConfigError, match=r"'optimizer.learnig_rate'.*optimizer\.learning_rate"):
    checks.check_overrides(config, [("optimizer.learnig_rate", "0.1")], "test")
  with pytest.raises(errors.ConfigError, match=r"'num_train_step'.*num_train_steps"):
    checks.check_overrides(config, [("num_train_step", "3")], "test")


@pytest.mark.parametrize("key,value,expected", [("num_train_steps", "abc", "int"), ("num_train_steps", "1.5", "int"),
                                                ("optimizer.learning_rate", "fast", "float"),
                                                ("measure_mfu", "maybe", "bool")])
def test_wrong_type_names_key_value_and_type(config, key, value, expected):
  with pytest.raises(errors.ConfigError, match=rf"'{re.escape(key)}' got '{value}'.*valid {expected}"):
    checks.check_overrides(config, [(key, value)], "test")


def test_valid_overrides_pass(config):
  checks.check_overrides(config, [("num_train_steps", "3"), ("optimizer.learning_rate", "2e-4"),
                                         ("optimizer.learning_rate", "1"), ("parallelism", "pmap"),
                                         ("measure_mfu", "false"), ("measure_mfu", None)], "test")


def test_command_line_parsing():
  spec, overrides = checks.command_line_overrides(
      ["main", "--config", "c.py:x", "--config.a=1", "--config.b", "2", "--noconfig.c", "--workdir=w"])
  assert spec == "c.py:x"
  assert overrides == [("a", "1"), ("b", "2"), ("c", None)]


def test_main_reports_mistyped_key_in_one_line(tmp_path):
  result = subprocess.run([sys.executable, "-m", "launch.main", "--config=configs/pretrain.py:runlocal",
                           f"--workdir={tmp_path}", "--config.optimizer.warmup_step=3"],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
  assert result.returncode != 0
  assert "optimizer.warmup_step" in result.stderr and "optimizer.warmup_steps" in result.stderr
  assert "Traceback" not in result.stderr
  assert not any(tmp_path.iterdir())  # Nothing written for a rejected command line.


def test_incompatible_fields_lists_model_differences(config):
  saved = checks.to_dict(config)
  wanted = checks.to_dict(config)
  wanted["model"]["hidden_size"] = 128
  wanted["num_train_steps"] = 99  # Not a model field: resuming with more steps is fine.
  wanted["model"]["remat"] = "full"  # Changes how the step computes, not the parameters: resumable.
  assert checks.incompatible_fields(saved, wanted) == ["model.hidden_size: 64 -> 128"]


def _defined_fields(path: str) -> dict[str, tuple[str, str]]:
  """{field: (line, previous line)} of the first top-level assignment of each field in a config file."""
  source = (REPO / path).read_text().splitlines()
  fields = {}
  for i, line in enumerate(source):
    match = re.match(r"  ((?:config|opt)(?:\.\w+)+) = ", line)  # Function level, not inside `if` blocks.
    if match:
      name = match.group(1).replace("opt.", "config.optimizer.", 1)
      fields.setdefault(name, (line, source[i - 1]))
  return fields


def test_every_config_field_has_a_comment():
  """The first assignment of each field carries a comment (on the line or the line above)."""
  common_fields = _defined_fields("configs/common.py")
  fields = common_fields | {k: v for k, v in _defined_fields("configs/pretrain.py").items() if k not in common_fields}
  uncommented = [line for line, previous in fields.values() if "#" not in line and not previous.strip().startswith("#")]
  assert len(fields) > 30 and not uncommented


def test_model_config_comes_from_presets():
  assert common.model_config("base").intermediate_size == PRESETS["base"]["intermediate_size"]


def test_fields_added_since_a_run_was_saved_are_compatible_at_their_defaults(config):
  """A run saved before a field existed resumes when the field keeps the behaviour the run had (its default)."""
  wanted = checks.to_dict(config)
  saved = checks.to_dict(config)
  for field in ("embedding_size", "position_embedding", "use_bias"):
    del saved["model"][field]
  saved["task"] = {"name": "x"}
  wanted["task"] = {"name": "x", "positive_label": ""}
  assert checks.incompatible_fields(saved, wanted) == []
  wanted["model"]["embedding_size"] = 32  # Not the default: the saved run had no projection.
  assert checks.incompatible_fields(saved, wanted) == ["model.embedding_size: None -> 32"]

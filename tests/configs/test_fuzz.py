"""The config fuzz test: every field docs/config.md lists (configs.reference), given a value of the wrong type and each
value its rule refuses (configs.rules), on a runlocal config, is refused with one line naming the field, before any
data is read; a few of them through `python -m launch.main` against a finished run, whose files stay as they were.
Every entry point's flags (launch.main's --config, --workdir, ... included) are fuzzed by tests/test_cli_fuzz.py.
"""

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from configs import checks, reference, rules
from encoder import errors, fields

REPO = Path(__file__).resolve().parents[2]
SPECS = {"pretrain": "configs/pretrain.py:runlocal", "finetune": "configs/finetune.py:task=sst2,runlocal"}
NOT_A_VALUE = "not_a_value!"  # Parses as no int, float, bool or tuple.
NO_EVAL = "--config.data.eval_files="  # The finished run's: no held-out split, no evaluation programs to compile.


def _set(config, key: str, value) -> None:
  node, *parts = config, *key.split(".")
  for part in parts[:-1]:
    node = node[part]
  with config.unlocked():
    node[parts[-1]] = value


def _refusal(action) -> str:
  """The one line `errors.run` prints for the user error `action` raises (the test fails when none is raised)."""
  with pytest.raises(SystemExit) as exit_info:
    errors.run(action)
  return str(exit_info.value.code)


def _cases(name: str) -> list[tuple[str, str, object]]:
  """(field, how, bad value) of one experiment: a wrong type for every non-string field, every out-of-rule value."""
  field_rules = rules.rules(finetuning=name == "finetune")
  cases = []
  for field, (default, _) in reference.documented_fields(name).items():
    if not isinstance(default, str):
      cases.append((field, "type", NOT_A_VALUE))
    cases += [(field, "value", bad) for bad in field_rules[field].bad_values()]
  return cases


def test_every_documented_field_has_a_rule_and_what_it_accepts_is_said():
  for name in reference.EXPERIMENTS:
    field_rules = rules.rules(finetuning=name == "finetune")
    documented = reference.documented_fields(name)
    assert sorted(set(documented) - set(field_rules)) == [], f"{name}: fields without a rule in configs/rules.py"
    for field, rule in field_rules.items():
      if field in documented and isinstance(rule, fields.Anything):
        assert rule.describe(), f"{field}: an Anything rule says what the field accepts (docs/config.md)"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_field_refuses_bad_values_in_one_line_naming_it(name):
  """For each case: exit status 1 with `error: ...` on one line that names the field, no traceback, nothing read."""
  config_spec = SPECS[name]
  cases = _cases(name)
  assert len(cases) > 100  # Every field, not a sample (docs/errors.md gives the count).
  for field, how, bad in cases:
    if how == "type":
      line = _refusal(lambda: checks.check_overrides(checks.load_config_file(config_spec), [(field, bad)],  # noqa: B023  (called within the iteration)
                                                      config_spec))
    else:
      config = checks.load_config_file(config_spec)
      _set(config, field, bad)
      line = _refusal(lambda: checks.check_config(config))  # noqa: B023  (called within the iteration)
    assert line.startswith("error: ") and "\n" not in line, (field, bad, line)
    assert field.split(".")[-1] in line, f"{field}={bad!r}: the message does not name the field: {line}"


@pytest.mark.parametrize("spec,overrides,expected", [
    ("configs/finetune.py:task=sst2,runlocal", {"regime": "fozen"}, "config.regime='fozen': expected one of"),
    ("configs/pretrain.py:runlocal", {"objectives": "mlm+foo", "objective_weights": {"mlm": 1.0, "foo": 1.0}},
     "config.objectives='mlm+foo'"),
    ("configs/pretrain.py:runlocal", {"model.num_heads": 5}, "config.model.num_heads=5: expected a divisor of"),
    ("configs/pretrain.py:runlocal", {"model.remat": "ful"}, "config.model.remat='ful'"),
    ("configs/pretrain.py:runlocal", {"model.local_attention_window": -4}, "config.model.local_attention_window=-4"),
    ("configs/pretrain.py:runlocal", {"model.position_embedding": "rotary", "model.num_heads": 64},
     "head size hidden_size / num_heads must be even"),
    ("configs/pretrain.py:runlocal", {"model.intermediate_size": 0}, "config.model.intermediate_size=0"),
    ("configs/pretrain.py:runlocal", {"model.embedding_size": -1}, "config.model.embedding_size=-1"),
    ("configs/pretrain.py:runlocal", {"data.max_length": 100},
     "config.data.max_length=100: expected at most config.model.max_positions=64"),
    ("configs/pretrain.py:runlocal", {"objectives": "electra", "objective_weights": {"electra": 1.0},
                                      "electra.generator_size": 0.0}, "config.electra.generator_size=0.0"),
    ("configs/pretrain.py:runlocal", {"data.train_files": "no/such/corpus.txt"}, "no/such/corpus.txt"),
    ("configs/pretrain.py:runlocal", {"masking.mask_prob": 0.9, "masking.random_prob": 0.2},
     "expected at most 1"),
    ("configs/finetune.py:task=sst2,runlocal", {"task.dataset": "", "task.format": "tsv",
                                                 "task.files": "train:a.tsv", "task.columns": "text_a:-1"},
     "config.task.columns='text_a:-1'"),
    ("configs/finetune.py:task=sst2,runlocal", {"task.max_length": 600},
     "config.task.max_length=600: expected at most config.model.max_positions=64"),
    ("configs/finetune.py:task=conll2003_spans,runlocal", {"task.pooling": "cls"},
     "config.task.pooling='cls': expected one of 'mean', 'attention' for span_ner"),
    ("configs/finetune.py:task=sick,runlocal", {"regime": "top_k", "top_k": 5},
     "config.top_k=5: regime 'top_k' trains the top top_k layers, expected 1 to config.model.num_layers=2"),
    ("configs/finetune.py:task=mrpc,runlocal", {"task.labels": ("0", "1"), "task.positive_label": "yes"},
     "config.task.positive_label='yes'"),
    ("configs/finetune.py:task=sst2,runlocal", {"task.metric": "acuracy"},
     "config.task.metric='acuracy': expected a dev score of task family 'classification' (accuracy, macro_f1)"),
    ("configs/finetune.py:task=conll2003,runlocal", {"best_metric": "eval/F1"},
     "config.best_metric='eval/F1': expected 'eval/' and a dev score of task family 'tagging' (precision, recall, f1, "
     "accuracy or f1_<type>)"),
])
def test_relations_between_fields_are_checked_before_anything_is_read(spec, overrides, expected):
  config = checks.load_config_file(spec)
  for key, value in overrides.items():
    _set(config, key, value)
  line = _refusal(lambda: checks.check_config(config))
  assert expected in line and "\n" not in line, line


def test_a_bad_config_argument_is_one_line():
  refusal = _refusal(lambda: checks.load_config_file("configs/pretrain.py:size=foo"))
  assert "size='foo' is not an encoder size" in refusal


def _digests(workdir: Path) -> dict[str, str]:
  return {str(p.relative_to(workdir)): hashlib.sha256(p.read_bytes()).hexdigest()
          for p in sorted(workdir.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
  """A finished pretraining runlocal run (4 steps, no evaluation: its programs would only add compile time)."""
  workdir = tmp_path_factory.mktemp("finished") / "run"
  done = subprocess.run([sys.executable, "-m", "launch.main", "--config", "configs/pretrain.py:runlocal",
                         "--config.num_train_steps=4", "--config.eval_every_steps=0", "--config.measure_mfu=false",
                         NO_EVAL, "--workdir", str(workdir)], cwd=REPO, capture_output=True, text=True, timeout=600,
                        check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  return workdir


@pytest.mark.slow
@pytest.mark.parametrize("override", ["--config.optimizer.learning_rate=-1", "--config.data.max_length=100"])
def test_resuming_a_run_with_a_mistake_is_one_line_and_leaves_the_run_as_it_was(finished_run, override):
  before = _digests(finished_run)
  done = subprocess.run([sys.executable, "-m", "launch.main", "--config", "configs/pretrain.py:runlocal",
                         "--config.num_train_steps=4", NO_EVAL, override, "--workdir", str(finished_run)],
                        cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
  lines = done.stderr.strip().splitlines()
  assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
  assert lines[-1].startswith("error: config.") and override[len("--config."):].split("=")[0] in lines[-1], lines
  assert _digests(finished_run) == before

"""Fields the user set that the run would not read are refused in one line, naming the field and why (configs/given.py),
before anything is written; a config file's own values never are. A refusal about a value the user never set names
where it came from (an init's config.json). Each case goes through launch.main's command-line parser in-process, as
`python -m launch.main` reports it (encoder.errors.run: the line, exit status 1)."""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from configs import checks, finetune
from encoder import errors
from launch import main as launch_main

REPO = Path(__file__).resolve().parents[2]
SST2 = "--config=configs/finetune.py:task=sst2,runlocal"
PRETRAIN = "--config=configs/pretrain.py:runlocal"


def _refusal(*args: str, workdir: Path) -> str:
  """The one line `python -m launch.main <args> --workdir workdir` ends with (the test fails when it is accepted),
  checking that nothing was written."""
  with pytest.raises(SystemExit) as exit_info:
    errors.run(launch_main.parse_flags, ["launch.main", *args, f"--workdir={workdir}"])
  line = str(exit_info.value.code)
  assert line.startswith("error: ") and "\n" not in line, line
  assert not workdir.exists()
  return line


def test_a_refused_command_leaves_an_existing_run_as_it_was(tmp_path):
  workdir = tmp_path / "run"
  (workdir / "checkpoints" / "4").mkdir(parents=True)
  files = {"config.json": '{"model": {}}', "metrics.jsonl": '{"step": 4}\n', "checkpoints/4/state": "bytes"}
  for name, text in files.items():
    (workdir / name).write_text(text)
  with pytest.raises(SystemExit) as exit_info:
    errors.run(launch_main.parse_flags, ["launch.main", SST2, "--config.task.crf=True", f"--workdir={workdir}"])
  assert str(exit_info.value.code).startswith("error: config.task.crf=True")
  assert {str(p.relative_to(workdir)): p.read_text() for p in workdir.rglob("*") if p.is_file()} == files


def _accepted(*args: str) -> None:
  checks.check_command_line(["launch.main", *args, "--workdir=unused"])


@pytest.fixture(scope="module")
def small_bert(tmp_path_factory) -> Path:
  """An HF BERT checkpoint directory whose config.json says 2 layers of 32 and 16 positions (configs read only
  config.json; the weights file only has to be there)."""
  directory = tmp_path_factory.mktemp("hf") / "small_bert"
  directory.mkdir()
  (directory / "config.json").write_text(json.dumps(dict(
      model_type="bert", architectures=["BertModel"], vocab_size=100, hidden_size=32, num_hidden_layers=2,
      num_attention_heads=2, intermediate_size=64, max_position_embeddings=16, type_vocab_size=2)))
  (directory / "model.safetensors").write_bytes(b"")
  return directory


# An architecture switch (a string argument or an override) beside an init of another architecture.
@pytest.mark.parametrize("args,expected", [
    (("--config=configs/pretrain.py:runlocal,arch=rope,init=hf:all-MiniLM-L6-v2",),
     "config.model.position_embedding='rotary' (arch=rope in configs/pretrain.py:runlocal,arch=rope,init=hf:all-MiniLM"
     "-L6-v2) cannot apply to config.init='hf:all-MiniLM-L6-v2': a run from an init has its checkpoint's "
     "architecture, position_embedding='absolute' ("),
    (("--config=configs/pretrain.py:size=mini,init=hf:all-MiniLM-L6-v2",),
     "config.model.num_layers=4 (size=mini in configs/pretrain.py:size=mini,init=hf:all-MiniLM-L6-v2) (and 3 more "
     "fields it asks for) cannot apply to"),
    (("--config=configs/finetune.py:task=sick", "--config.model.hidden_act=silu"),
     "config.model.hidden_act='silu' (--config.model.hidden_act on the command line) cannot apply to config.init="),
    (("--config=configs/finetune.py:task=sick", "--config.data.tokenizer=bert-base-uncased"),
     "config.data.tokenizer='bert-base-uncased' (--config.data.tokenizer on the command line) is not the tokenizer of "
     "config.init='hf:all-MiniLM-L6-v2'"),
    (("--config=configs/finetune.py:task=sick,init=", "--config.init=hf:all-MiniLM-L6-v2"),
     "give --config configs/finetune.py:task=sick,init=hf:all-MiniLM-L6-v2, which reads it"),
])
def test_an_architecture_switch_beside_an_init_of_another_is_refused(tmp_path, args, expected):
  line = _refusal(*args, workdir=tmp_path / "run")
  assert expected in line, line


def test_an_init_takes_dropout_dtypes_and_how_it_computes(small_bert):
  _accepted("--config=configs/finetune.py:task=sick", "--config.model.dtype=bfloat16", "--config.model.remat=full",
            "--config.model.hidden_dropout=0.0", "--config.model.attention_dropout=0.0",
            "--config.model.bf16_dots=float32")
  _accepted("--config=configs/pretrain.py:init=hf:all-MiniLM-L6-v2,steps=500", "--config.data.packing=segments")
  _accepted(f"--config=configs/finetune.py:task=sick,init=hf:{small_bert}",
            "--config.model.hidden_size=32")  # The checkpoint's own value: read.


def test_an_init_of_another_architecture_names_the_checkpoints_field(tmp_path, small_bert):
  line = _refusal(f"--config=configs/finetune.py:task=sst2,runlocal,init=hf:{small_bert}",
                  "--config.model.max_positions=64", workdir=tmp_path / "run")
  assert f"max_positions=16 ({small_bert}/config.json's max_position_embeddings)" in line, line


# A family-specific field on a family that does not read it; custom-file fields beside a packaged dataset.
@pytest.mark.parametrize("args,expected", [
    ((SST2, "--config.task.crf=True"),
     "config.task.crf=True (--config.task.crf on the command line) has no effect: config.task.name='classification' "
     "(configs/finetune.py:task=sst2,runlocal's value) does not read it (read by task family tagging)"),
    (("--config=configs/finetune.py:task=squad,runlocal", "--config.task.pooling=mean"),
     "config.task.pooling='mean' (--config.task.pooling on the command line) has no effect: config.task.name="
     "'question_answering'"),
    (("--config=configs/finetune.py:task=conll2003,runlocal", "--config.task.doc_stride=16"),
     "(read by task family question_answering)"),
    ((SST2, "--config.task.files=train:a.tsv,validation:b.tsv"),
     "config.task.dataset='sst2' (configs/finetune.py:task=sst2,runlocal's value) is a packaged dataset"),
])
def test_a_field_of_another_task_family_is_refused(tmp_path, args, expected):
  line = _refusal(*args, workdir=tmp_path / "run")
  assert expected in line, line


def test_a_family_field_is_read_when_the_command_line_picks_that_family():
  _accepted(SST2, "--config.task.name=tagging", "--config.task.crf=True")
  _accepted(SST2, "--config.task.pooling=mean", "--config.task.rdrop=1.0")
  _accepted(SST2, "--config.task.dataset=", "--config.task.files=train:a.tsv,validation:b.tsv")


# A field of an objective, a regime or a setting that is not in use.
@pytest.mark.parametrize("args,expected", [
    ((PRETRAIN, "--config.electra.generator_size=0.5"),
     "config.electra.generator_size=0.5 (--config.electra.generator_size on the command line) has no effect: "
     "config.objectives='mlm' (configs/pretrain.py:runlocal's value) does not train 'electra'"),
    ((SST2, "--config.top_k=1"), "config.top_k=1 (--config.top_k on the command line) has no effect: config.regime="
     "'full' (configs/finetune.py:task=sst2,runlocal's value) does not read it (read by regime 'top_k')"),
    ((SST2, "--config.regime=frozen", "--config.layer_decay=0.5"),
     "config.layer_decay=0.5 (--config.layer_decay on the command line) has no effect: config.regime='frozen' "
     "(--config.regime on the command line) does not read it"),
    ((SST2, "--config.optimizer.warmup_steps=5"), "config.optimizer.warmup_fraction=0.1 (configs/finetune.py:task="
     "sst2,runlocal's value) sets the warmup"),
    ((PRETRAIN, "--config.data.prepared=corpus", "--config.data.train_files=more.txt"),
     "config.data.prepared='corpus' (--config.data.prepared on the command line) gives the training rows"),
    ((PRETRAIN, "--config.model.rope_theta=5.0"), "config.model.position_embedding='absolute'"),
    ((SST2, "--config.best_metric=", "--config.best_mode=min"), "keeps the latest checkpoint only"),
])
def test_a_field_of_an_objective_or_regime_not_in_use_is_refused(tmp_path, args, expected):
  line = _refusal(*args, workdir=tmp_path / "run")
  assert expected in line, line


def test_the_same_fields_are_read_where_they_are_used():
  _accepted("--config=configs/pretrain.py:runlocal,objectives=electra", "--config.electra.generator_size=0.5")
  _accepted(SST2, "--config.regime=top_k", "--config.top_k=1")
  _accepted(SST2, "--config.optimizer.warmup_fraction=0", "--config.optimizer.warmup_steps=5")
  _accepted("--config=configs/pretrain.py:runlocal,arch=rope", "--config.model.rope_theta=5.0")
  _accepted(PRETRAIN, "--config.model.bf16_dots=float32")  # Resolved platform fields come back in model cards.


def test_a_preset_setting_fields_is_not_the_user_setting_them():
  """Presets set family fields (conll2003_crf's crf), regimes (sick's top_k) and the init's model; none is refused."""
  for task in finetune.TASK_PRESETS:
    _accepted(f"--config=configs/finetune.py:task={task},runlocal")
  _accepted("--config=configs/finetune.py:task=sick")
  for arg in ("runlocal", "size=mini,arch=modernbert", "size=electra-small,objectives=electra",
              "init=hf:all-MiniLM-L6-v2,objectives=mlm+nsp"):
    _accepted(f"--config=configs/pretrain.py:{arg}")


# A refusal about a value the user never set names where it came from.
def test_a_refusal_names_the_init_file_a_value_came_from(small_bert):
  config = checks.load_config_file(f"configs/finetune.py:task=sst2,runlocal,init=hf:{small_bert}")
  with pytest.raises(SystemExit) as exit_info:
    errors.run(checks.check_config, config)
  line = str(exit_info.value.code)
  assert (f"error: config.task.max_length=32: expected at most config.model.max_positions=16 (config.init='hf:"
          f"{small_bert}': {small_bert}/config.json's max_position_embeddings)") in line, line


def test_a_refusal_names_the_init_file_of_a_layer_count(small_bert):
  config = checks.load_config_file(f"configs/finetune.py:task=sick,init=hf:{small_bert}")
  with config.unlocked():
    config.top_k = 5
    config.task.max_length = 16
  with pytest.raises(SystemExit) as exit_info:
    errors.run(checks.check_config, config)
  assert f"config.model.num_layers=2 (config.init='hf:{small_bert}': {small_bert}/config.json's num_hidden_layers)" \
      in str(exit_info.value.code)


def _documented_commands() -> list[str]:
  """The `python -m launch.main` command lines of README.md, docs/*.md (but errors.md's, which show refusals) and the
  config files' docstrings that can run here: those naming no earlier run (init=run:), bucket or placeholder."""
  commands = []
  pages = [path for path in sorted((REPO / "docs").glob("*.md")) if path.name != "errors.md"]
  for path in [REPO / "README.md", *pages, *sorted((REPO / "configs").glob("*.py"))]:
    text = path.read_text().replace("\\\n", " ")
    for match in re.finditer(r"python -m launch\.main (--config[^\n#`]*)", text):
      command = match.group(1).strip()
      if not re.search(r"init=run:|gs://|\.\.\.|<|\$", command):
        commands.append(command)
  return sorted(set(commands))


@pytest.mark.parametrize("command", _documented_commands())
def test_every_documented_command_line_passes_the_checks(command):
  _accepted(*shlex.split(command))


@pytest.mark.parametrize("spec", ["configs/pretrain.py:runlocal,init=hf:all-MiniLM-L6-v2",
                                  "configs/finetune.py:task=conll2003"])
def test_a_model_cards_training_command_passes_the_checks(spec):
  """launch.model_card writes the command that rebuilds a run's config: it sets no field the run does not read."""
  from launch import model_card  # pylint: disable=import-outside-toplevel  (imports the families' heads)
  config = checks.load_config_file(spec)
  with config.unlocked():
    config.model.bf16_dots = "float32"  # What start-up resolves "auto" to and config.json records.
    config.optimizer.learning_rate = 3e-4
  command = shlex.split(model_card.training_command(config))
  assert command[:3] == ["python", "-m", "launch.main"]
  _accepted(*command[3:])


@pytest.mark.slow
def test_python_m_launch_main_refuses_an_architecture_switch_beside_an_init(tmp_path):
  """The process boundary: the line on stderr, exit status 1, no traceback, no workdir (about 6 s: JAX's import)."""
  done = subprocess.run([sys.executable, "-m", "launch.main",
                         "--config=configs/pretrain.py:runlocal,arch=modernbert,init=hf:all-MiniLM-L6-v2",
                         f"--workdir={tmp_path / 'run'}"], cwd=REPO, capture_output=True, text=True, timeout=300,
                        check=False)
  lines = done.stderr.strip().splitlines()
  assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
  assert lines[-1].startswith("error: config.model.") and "arch=modernbert" in lines[-1], lines
  assert not (tmp_path / "run").exists()

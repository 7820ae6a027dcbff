"""Fine-tuning runs shared by the launch tests: every preset at runlocal size, trained once per test session."""

from pathlib import Path

import pytest

from configs import demo as demo_config, finetune
from launch import train
from tasks import tfds_builders
from tests.conftest import optimised, require_data

# name -> (configs/finetune.py argument, overrides, a data file the run needs); "ud_sample" is the demo's POS run on
# the packaged EWT sample (greedy tagging of plain tags with word endings; needs no data directory).
RUNS = {
    "sst2": ("task=sst2,runlocal", {"optimizer.ema_decay": 0.9}, "sst2/train.tsv"),  # Evaluated with an EMA.
    "sick": ("task=sick,runlocal", {}, "sick/SICK_train.txt"),
    "sick_relatedness": ("task=sick_relatedness,runlocal", {}, "sick/SICK_train.txt"),
    "conll2003": ("task=conll2003,runlocal", {}, "conll2003/bio/train.txt"),
    "conll2003_crf": ("task=conll2003_crf,runlocal", {}, "conll2003/bio/train.txt"),
    "conll2003_spans": ("task=conll2003_spans,runlocal", {}, "conll2003/bio/train.txt"),
    "ud_pos": ("task=ud_pos,runlocal", {}, "ud_english_ewt/en_ewt-ud-train.conllu"),
    "ud_sample": (None, {}, None),
}
# Presets added after the pins were written: trained the same way, not pinned (test_pinned_results pins RUNS).
UNPINNED_RUNS = {
    "mrpc": ("task=mrpc,runlocal", {}, "mrpc/train.tsv"),
    "squad": ("task=squad,runlocal", {}, "squad_v1.1/train-44-articles.json"),
    # 40 steps (ten passes over 64 sentences in batches of 16): at runlocal's 8 the run predicts no entity yet, and
    # test_export's and test_nested_spans's comparisons of entities need some, nested ones included.
    "genia_nested": ("task=genia_nested,runlocal", {"epochs": 10}, "genia_nested/train.jsonl"),
}


def run_spec(name: str) -> tuple[str | None, dict, str | None]:
  """(configs/finetune.py argument, overrides, a data file the run needs) of shared run `name`: one of RUNS or
  UNPINNED_RUNS, or any other preset of configs/finetune.py at runlocal size."""
  if name in RUNS | UNPINNED_RUNS:
    return (RUNS | UNPINNED_RUNS)[name]
  dataset = tfds_builders.PRESETS.get(finetune.TASK_PRESETS[name].get("dataset", ""))
  return f"task={name},runlocal", {}, dataset.files["train"] if dataset else None


def run_config(name: str):
  """The config of shared run `name`."""
  arg, overrides, _ = run_spec(name)
  config = demo_config.pos_config(runlocal=True) if arg is None else finetune.get_config(arg)
  config.update_from_flattened_dict(overrides)
  return config


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
  """name -> the workdir of that run, trained once per session (skipped when its data is absent)."""
  workdirs = {}

  def get(name: str) -> Path:
    if run_spec(name)[2]:
      require_data(run_spec(name)[2])
    if name not in workdirs:
      workdir = tmp_path_factory.mktemp(name)
      with optimised():  # Trained as a user's run is: test_pinned_results pins its scores.
        train.train_and_evaluate(run_config(name), workdir)
      workdirs[name] = workdir
    return workdirs[name]
  return get

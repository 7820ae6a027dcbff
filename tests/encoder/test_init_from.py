"""encoder.init_from: init strings -> model config, tokenizer and parameters; bad strings are one ConfigError; an
hf: init never imports orbax or the engine."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from encoder import init_from
from encoder.errors import ConfigError, UserError

REPO = Path(__file__).resolve().parents[2]


def test_parse_and_its_errors():
  assert init_from.parse("run:runs/a") == ("run", "runs/a")
  for bad in ("gs://bucket/x", "hf:", "all-MiniLM-L6-v2"):
    with pytest.raises(ConfigError, match="must be 'hf:<name or directory>', 'run:<workdir>' or ''"):
      init_from.parse(bad)


def test_model_fields_of_a_run_and_its_errors(tmp_path):
  with pytest.raises(ConfigError,
                     match=re.escape("config.json does not exist; expected the workdir of a training run")):
    init_from.model_fields(f"run:{tmp_path}")
  (tmp_path / "config.json").write_text("{}")
  with pytest.raises(ConfigError, match=re.escape("is not a run's config.json")):
    init_from.model_fields(f"run:{tmp_path}")
  (tmp_path / "config.json").write_text(json.dumps({"model": {"hidden_size": 64, "attention": "cudnn"},
                                                   "data": {"tokenizer": "t"}}))
  # The run's attention path and dot choices are the machine's where its weights are used: "auto" (resolved there).
  assert init_from.model_fields(f"run:{tmp_path}") == (
      {"hidden_size": 64, "attention": "auto", "kernels": "auto", "bf16_dots": "auto"}, "t")
  with pytest.raises(ConfigError, match="neither a checkpoint directory nor a known pretrained name"):
    init_from.model_fields(f"hf:{tmp_path / 'missing'}")


def test_a_run_without_checkpoints_is_one_user_error(tmp_path):
  with pytest.raises(UserError, match="holds no checkpoint: train the run first"):
    init_from.run_params(tmp_path)


def test_hf_init_loads_the_packaged_model_without_orbax_or_the_engine():
  code = ("import sys; from tasks.embeddings.extract import Embedder; e = Embedder.from_init('hf:all-MiniLM-L6-v2'); "
          "print(e.num_layers, e.hidden_size, e.tokenizer.vocab_size, "
          "sorted({m.split('.')[0] for m in sys.modules} & {'orbax', 'launch', 'configs', 'objectives'}))")
  done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
  assert done.stdout.split("\n")[-2] == "6 384 30522 []"


def test_load_gives_a_model_ready_to_apply():
  cfg, tokenizer, params = init_from.load("hf:all-MiniLM-L6-v2")
  assert (cfg.num_layers, cfg.vocab_size, tokenizer.vocab_size) == (6, 30522, 30522)
  assert np.shape(params["encoder"]["embeddings"]["word_embeddings"]["embedding"]) == (30522, 384)

"""Fine-tuning runs under a minimal-adjustment regime (tasks/regimes.py), end to end on the packaged POS sample:
BitFit trains the biases alone, its checkpoints hold them alone plus the base's fingerprint (tasks.regimes.PARTIAL;
their readers: tests/launch/test_regime_readers.py), a resume from
one is bitwise equal to the uninterrupted run, and a base whose weights changed is refused."""

import re
import shutil

import flax.traverse_util
import numpy as np
import orbax.checkpoint as ocp
import pytest

from configs import demo as demo_config
from encoder.errors import ConfigError
from launch import checkpointing, train


def _config(**overrides):
  config = demo_config.pos_config(runlocal=True)
  config.update_from_flattened_dict({"regime": "bitfit", "num_train_steps": 4, "checkpoint_every_steps": 2,
                                     "eval_every_steps": 2, "keep_checkpoints": 3, "best_metric": ""} | overrides)
  return config


def _saved(workdir, step) -> dict:
  """{path: array} of the params in checkpoint `step` of `workdir`."""
  with ocp.CheckpointManager(workdir / "checkpoints") as manager:
    tree = manager.restore(step, args=ocp.args.StandardRestore())
  return {"/".join(k): np.asarray(v) for k, v in flax.traverse_util.flatten_dict(tree["params"]).items()}


@pytest.fixture(scope="module")
def bitfit_run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("bitfit")
  train.train_and_evaluate(_config(), workdir)
  return workdir


@pytest.mark.slow
def test_bitfit_trains_the_biases_alone_and_checkpoints_them_alone(bitfit_run):
  start, end = _saved(bitfit_run, 2), _saved(bitfit_run, 4)
  encoder = [path for path in end if path.startswith("encoder/")]
  assert encoder and all(path.endswith("/bias") for path in encoder)  # What the checkpoint holds: biases + head.
  assert all(p.startswith("tagging/") for p in end if not p.startswith("encoder/"))  # The task head, all of it.
  assert "tagging/classifier/kernel" in end and "encoder/layer_1/mlp/intermediate/kernel" not in end
  moved = [path for path in end if not np.array_equal(start[path], end[path])]
  assert "encoder/layer_0/attention/qkv/bias" in moved and "tagging/classifier/kernel" in moved
  fingerprint = (bitfit_run / checkpointing.BASE_FILE).read_text()
  assert re.search(r'"fingerprint": "[0-9a-f]{64}"', fingerprint)


@pytest.mark.slow
def test_bitfit_resume_from_a_partial_checkpoint_is_bitwise_and_a_changed_base_is_refused(bitfit_run, tmp_path):
  resumed = tmp_path / "resumed"
  shutil.copytree(bitfit_run, resumed)
  shutil.rmtree(resumed / "checkpoints" / "4")
  (resumed / "results.json").unlink()
  recorded = (resumed / checkpointing.BASE_FILE).read_text()
  (resumed / checkpointing.BASE_FILE).write_text(re.sub(r'"fingerprint": "0', '"fingerprint": "1',
                                                        re.sub(r'"fingerprint": "[1-9a-f]', '"fingerprint": "0',
                                                               recorded)))
  before = sorted(p.name for p in (resumed / "checkpoints").iterdir())
  with pytest.raises(ConfigError, match=r"config.init='': its weights changed since the run in .* started") as err:
    train.train_and_evaluate(_config(), resumed)
  assert "\n" not in str(err.value) and sorted(p.name for p in (resumed / "checkpoints").iterdir()) == before
  (resumed / checkpointing.BASE_FILE).write_text(recorded)
  results = train.train_and_evaluate(_config(), resumed)
  assert results["step"] == 4
  straight, again = _saved(bitfit_run, 4), _saved(resumed, 4)
  assert straight.keys() == again.keys()
  for path in straight:
    np.testing.assert_array_equal(straight[path], again[path], err_msg=path)

"""Continued pretraining (configs/pretrain.py init=...): a run starts from our own run's encoder and pretraining heads,
or from the imported MiniLM encoder (which has no MLM head: that one starts random); mismatched shapes are refused."""

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from configs import pretrain
from encoder import errors, pretrained
from launch import train, warm_start
from objectives import hf_heads


def _params(workdir) -> dict:
  """The parameters of the newest checkpoint of a run, as numpy."""
  manager = ocp.CheckpointManager((workdir / "checkpoints").absolute(), item_handlers=ocp.StandardCheckpointHandler())
  state = manager.restore(manager.latest_step())
  manager.close()
  return jax.tree.map(np.asarray, state["params"])


def _frozen(arg: str):
  """configs/pretrain.py's config for `arg` with a zero learning rate: one step leaves the initial parameters as
  they were (AdamW's update and its weight decay are both scaled by the learning rate)."""
  config = pretrain.get_config(arg)
  with config.unlocked():
    config.optimizer.learning_rate = 0.0
    config.measure_mfu = False
  return config


@pytest.mark.slow
def test_continues_our_run_with_its_encoder_and_heads(tmp_path):
  source, continued = tmp_path / "source", tmp_path / "continued"
  train.train_and_evaluate(pretrain.get_config("runlocal,objectives=mlm+nsp,steps=3"), source)
  train.train_and_evaluate(_frozen(f"runlocal,objectives=mlm+nsp,steps=1,init=run:{source}"), continued)
  before, after = _params(source), _params(continued)
  assert set(after) == {"encoder", "mlm", "nsp"}
  assert jax.tree.all(jax.tree.map(np.array_equal, before, after))


@pytest.mark.slow
def test_continues_the_imported_minilm_encoder(tmp_path):
  config = _frozen("runlocal,steps=1,init=hf:all-MiniLM-L6-v2")
  assert (config.model.num_layers, config.model.hidden_size) == (6, 384)
  train.train_and_evaluate(config, tmp_path)
  _, expected, heads = hf_heads.load_hf_checkpoint(pretrained.minilm_path())
  trained = _params(tmp_path)
  assert heads == {} and set(trained) == {"encoder", "mlm"}  # A bare BertModel: the MLM head starts random.
  assert jax.tree.all(jax.tree.map(np.array_equal, trained["encoder"], expected))


def test_a_checkpoint_of_another_shape_is_refused():
  loaded = {"encoder": {"embeddings": {"word_embeddings": {"embedding": np.zeros((30522, 384))}}}, "other": {}}
  expected = {"encoder": {"embeddings": {"word_embeddings": {"embedding": np.zeros((1000, 384))}}}, "mlm": {}}
  with pytest.raises(errors.ConfigError, match=r"'encoder'\]\['embeddings'.*\(30522, 384\) in the checkpoint "
                     r"but \(1000, 384\)"):
    warm_start.check_matches("run:/somewhere", loaded, expected)

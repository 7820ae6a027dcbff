"""Reading a run whose regime freezes part of the model, outside its training loop (encoder.init_from.run_params and
load: launch.predict, launch.export, the embedding commands, init=run:), on the packaged POS sample (random tiny
encoder): a frozen run's parameter EMA covers the trainable part and is read on the frozen rest; a LoRA run
checkpoints its branches and head alone, and its readers put them on the base (its seed's encoder), giving what a
whole-state checkpoint of the same run gives, bit for bit; a base whose weights changed is refused in one line; the
embedding commands read a LoRA run merged (a plain encoder) and an adapters run with its adapters."""

import json

import flax.traverse_util
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
import safetensors.numpy

from configs import demo as demo_config
from encoder import init_from, runs
from encoder.errors import ConfigError
from encoder.model import Encoder
from launch import export, predict, train
from tasks import regimes

SENTENCE = "The cat sat on the mat ."
pytestmark = pytest.mark.slow  # Each fixture trains a tiny run (2 steps).


def _config(**overrides):
  config = demo_config.pos_config(runlocal=True)
  config.update_from_flattened_dict({"num_train_steps": 2, "checkpoint_every_steps": 2, "best_metric": ""}
                                    | overrides)
  return config


def _flat(tree) -> dict:
  return {"/".join(k): np.asarray(v) for k, v in flax.traverse_util.flatten_dict(tree).items()}


def _saved(workdir) -> dict:
  """The newest checkpoint's state of `workdir`, as saved (no base put under it)."""
  with ocp.CheckpointManager((workdir / "checkpoints").absolute()) as manager:
    return manager.restore(manager.latest_step(), args=ocp.args.StandardRestore())


@pytest.fixture(scope="module")
def frozen_ema(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("frozen_ema")
  train.train_and_evaluate(_config(regime="frozen", **{"optimizer.ema_decay": 0.5}), workdir)
  return workdir


@pytest.fixture(scope="module")
def lora(tmp_path_factory):
  """(partial run, the same run checkpointing its whole state)."""
  partial, whole = tmp_path_factory.mktemp("lora"), tmp_path_factory.mktemp("lora_whole")
  overrides = {"regime": "lora", "lora.targets": "query,value,output", "lora.layers": "top:1"}
  train.train_and_evaluate(_config(**overrides), partial)
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(regimes, "PARTIAL", ())
    train.train_and_evaluate(_config(**overrides), whole)
  return partial, whole


def test_a_frozen_runs_ema_is_read_on_its_frozen_rest_by_predict_and_export(frozen_ema, tmp_path):
  state = _saved(frozen_ema)
  saved, ema = _flat(state["params"]), _flat(state["opt_state"]["ema"])
  assert ema and not any(p.startswith(("encoder/layer_", "encoder/embeddings")) for p in ema)  # The trained part.
  assert any(not np.array_equal(ema[p], saved[p]) for p in ema)  # A guard: the average lags the parameters.
  config = predict.read_config(frozen_ema)
  _, params = predict.restore_params(frozen_ema, config, "latest")
  read = _flat(params)
  assert read.keys() == saved.keys()
  assert all(np.array_equal(read[p], ema.get(p, saved[p])) for p in read)
  assert len(predict.Predictor.from_workdir(frozen_ema).predict([SENTENCE])[0]["tags"]) == 7
  out = tmp_path / "out"
  export.export(frozen_ema, out)
  exported = safetensors.numpy.load_file(out / "model.safetensors")
  np.testing.assert_array_equal(exported["classifier.weight"], ema["tagging/classifier/kernel"].T)


def test_a_lora_run_checkpoints_its_branches_alone_and_is_read_as_a_whole_state_run(lora):
  partial, whole = lora
  held = _flat(_saved(partial)["params"])
  assert {p.split("/")[0] for p in held} == {"encoder", "tagging"}
  assert all("/lora_" in p for p in held if p.startswith("encoder/"))
  assert any("lora_output" in p for p in held) and not any("layer_0" in p for p in held)
  _, ours = init_from.run_params(partial)
  _, theirs = init_from.run_params(whole)
  ours, theirs = _flat(ours), _flat(theirs)
  assert ours.keys() == theirs.keys() and all(np.array_equal(ours[p], theirs[p]) for p in ours)
  assert (predict.Predictor.from_workdir(partial).predict([SENTENCE])
          == predict.Predictor.from_workdir(whole).predict([SENTENCE]))


def test_reading_a_partial_run_whose_base_changed_is_refused_in_one_line(lora):
  partial, _ = lora
  path = partial / runs.FILE
  recorded = path.read_text()
  saved = json.loads(recorded)
  path.write_text(json.dumps(saved | {"fingerprint": "0" * 64}))
  try:
    with pytest.raises(ConfigError, match=r"config.init='': its weights changed since the run in .* started") as err:
      predict.Predictor.from_workdir(partial)
    assert "\n" not in str(err.value) and "read the run with the weights it trained on" in str(err.value)
  finally:
    path.write_text(recorded)


def test_the_embedding_commands_read_a_lora_run_merged(lora):
  """init_from.load (tasks/embeddings/extract.py): a plain encoder whose kernels hold the branches. Bound 1e-5: the
  merged kernel W + s A B rounds once in float32 where the run adds s (x A) B to x W, on O(1) states of 2 layers."""
  partial, _ = lora
  cfg, _, params = init_from.load(f"run:{partial}")
  assert not cfg.lora_rank and not any("lora_" in p for p in _flat(params["encoder"]))
  predictor = predict.Predictor.from_workdir(partial)
  kernel = "encoder/layer_1/attention/qkv/kernel"
  assert not np.array_equal(_flat(params)[kernel], _flat(predictor.params)[kernel])  # The branches went in.
  ids = jnp.asarray([[2, 5, 9, 14, 3]])
  merged = Encoder(cfg).apply({"params": params["encoder"]}, ids).hidden_states[-1]
  lora_cfg = runs.encoder_config(predict.read_config(partial), predictor.tokenizer.vocab_size)
  assert lora_cfg.lora_rank == 8
  branched = Encoder(lora_cfg).apply({"params": predictor.params["encoder"]}, ids).hidden_states[-1]
  np.testing.assert_allclose(merged, branched, atol=1e-5)


def test_the_embedding_commands_read_an_adapters_run_with_its_adapters(tmp_path):
  workdir = tmp_path / "adapters"
  train.train_and_evaluate(_config(regime="adapters", **{"adapters.size": 4, "adapters.layers": "top:1"}), workdir)
  cfg, _, params = init_from.load(f"run:{workdir}")
  assert cfg.adapter_size == 4 and any("adapter_" in p for p in _flat(params["encoder"]))
  ids = jnp.asarray([[2, 5, 9, 14, 3]])
  states = jax.jit(lambda p: Encoder(cfg).apply({"params": p}, ids).hidden_states[-1])(params["encoder"])
  assert np.isfinite(np.asarray(states)).all()

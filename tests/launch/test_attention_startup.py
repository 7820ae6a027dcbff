"""model.attention, model.kernels and model.bf16_dots (and fine-tuning's data.compile_cost) are made concrete once, at
start-up (launch.startup.attention_path, dot_paths, compile_cost, given the workdir's config.json read once:
checkpointing.saved_config), for config.json to record: "auto" picks the platform's for a new run and the recorded one
(or, for a run saved before the field, "matmul" / the platform's) for a resumed run; they and the new
activation_dtype field keep old runs resumable."""

import json

import ml_collections
import pytest

from configs import checks, common
from encoder import matmul
from encoder.errors import ConfigError
from launch import startup
from launch.checkpointing import saved_config
from launch.startup import attention_path, compile_cost, dot_paths
from tasks import batching


def _config(**model) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.model = common.model_config("tiny", **({"attention_dropout": 0.0} | model))
  return config


def _saved_run(workdir, model: dict) -> None:
  (workdir / "checkpoints" / "5").mkdir(parents=True)
  (workdir / "config.json").write_text(json.dumps({"model": model}))


def test_a_new_run_gets_the_platforms_path(tmp_path):
  assert attention_path(_config(), saved_config(tmp_path)) == "matmul"  # On CPUs (encoder.config.auto_attention).
  assert attention_path(_config(attention="xla"), saved_config(tmp_path)) == "xla"


def test_a_resumed_run_keeps_its_recorded_path(tmp_path):
  model = common.model_config("tiny", attention_dropout=0.0).to_dict()
  _saved_run(tmp_path, model | {"attention": "xla"})
  assert attention_path(_config(), saved_config(tmp_path)) == "xla"
  # An explicit choice: the same function.
  assert attention_path(_config(attention="matmul"), saved_config(tmp_path)) == "matmul"


def test_a_run_saved_before_the_field_resumes_on_the_matmul_path(tmp_path):
  old = {k: v for k, v in common.model_config("tiny").to_dict().items() if k not in ("attention", "activation_dtype")}
  _saved_run(tmp_path, old)
  assert attention_path(_config(), saved_config(tmp_path)) == "matmul"
  wanted = {"model": _config(attention="matmul", attention_dropout=0.1).model.to_dict()}
  assert checks.incompatible_fields({"model": old}, wanted) == []
  assert checks.incompatible_fields({"model": old}, {"model": wanted["model"] | {"attention": "xla"}}) == []
  assert checks.incompatible_fields({"model": old}, {"model": wanted["model"] | {"activation_dtype": "bfloat16"}}) == [
      "model.activation_dtype: None -> 'bfloat16'"]


def test_cudnn_off_nvidia_gpus_is_a_config_error(tmp_path):
  with pytest.raises(ConfigError, match="attention='cudnn' runs on NVIDIA GPUs only, and this process runs on cpu"):
    attention_path(_config(attention="cudnn", dtype="bfloat16"), saved_config(tmp_path))


@pytest.mark.parametrize("units", [True, False])
def test_kernels_and_bf16_dots_are_the_platforms_unless_named_or_resumed(tmp_path, units, monkeypatch):
  monkeypatch.setattr(matmul, "native_bf16_dots", lambda where: units)  # An AMX CPU, or an AVX2-only one.
  platform = {"kernels": "cpu", "bf16_dots": "native" if units else "float32"}  # On CPUs (encoder.config).
  assert dot_paths(_config(), saved_config(tmp_path)) == platform
  named = {"kernels": "accelerator", "bf16_dots": "float32" if units else "native"}
  assert dot_paths(_config(**named), saved_config(tmp_path)) == named
  old = {k: v for k, v in common.model_config("tiny").to_dict().items() if k not in ("kernels", "bf16_dots")}
  _saved_run(tmp_path, old)
  assert dot_paths(_config(), saved_config(tmp_path)) == platform  # Saved before the fields: this platform's.
  (tmp_path / "config.json").write_text(json.dumps({"model": old | named}))
  assert dot_paths(_config(), saved_config(tmp_path)) == named  # Resumed as recorded.
  assert dot_paths(_config(kernels="cpu"), saved_config(tmp_path)) == named | {"kernels": "cpu"}
  assert checks.incompatible_fields({"model": old | named}, {"model": old | platform}) == []  # Same weights.


def test_compile_cost_is_the_backends_unless_named_or_resumed(tmp_path, monkeypatch):
  config = ml_collections.ConfigDict({"data": {"compile_cost": -1.0}})
  assert compile_cost(config, saved_config(tmp_path)) == batching.COMPILE_COSTS["cpu"] == 500.0
  monkeypatch.setattr(startup, "platform", lambda: "tpu")  # Not measured there: an accelerator's figure.
  assert compile_cost(config, saved_config(tmp_path)) == max(batching.COMPILE_COSTS.values()) > 500.0
  named = ml_collections.ConfigDict({"data": {"compile_cost": 0.0}})
  assert compile_cost(named, saved_config(tmp_path)) == 0.0  # Named: kept.
  (tmp_path / "checkpoints" / "5").mkdir(parents=True)
  (tmp_path / "config.json").write_text(json.dumps({"data": {"compile_cost": 123.0}}))
  assert compile_cost(config, saved_config(tmp_path)) == 123.0  # Resumed as recorded, whatever this backend's figure.
  (tmp_path / "config.json").write_text(json.dumps({"data": {}}))
  assert compile_cost(config, saved_config(tmp_path)) == 500.0  # Saved before auto: the figure it was pruned with.

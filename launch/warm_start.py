"""Pretrained encoder parameters for fine-tuning (config.init): an imported HuggingFace BERT ("hf:<name or dir>")
or the encoder of our own run's latest checkpoint ("run:<workdir>")."""

from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from encoder import hf_checkpoint, pretrained
from launch import config_checks


def _run_encoder(workdir: Path) -> dict:
  """params["encoder"] of the newest checkpoint in workdir/checkpoints, as numpy arrays on this host."""
  directory = (workdir / "checkpoints").absolute()
  manager = ocp.CheckpointManager(directory, item_handlers=ocp.StandardCheckpointHandler())
  step = manager.latest_step()
  if step is None:
    raise FileNotFoundError(f"config.init='run:{workdir}': no checkpoint in {directory}; train that run first")
  metadata = manager.item_metadata(step)
  device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device), metadata)
  state = manager.restore(step, args=ocp.args.StandardRestore(target))
  manager.close()
  params = state["params"]
  if "encoder" not in params:
    raise config_checks.ConfigError(f"config.init='run:{workdir}': checkpoint {directory / str(step)} has no encoder "
                                    f"parameters (top-level keys {sorted(params)})")
  return jax.tree.map(np.asarray, params["encoder"])


def encoder_params(init: str) -> dict | None:
  """The encoder parameter tree named by config.init, or None for random init ("")."""
  if not init:
    return None
  kind, _, where = init.partition(":")
  if kind == "hf":
    _, params, _ = hf_checkpoint.load_hf_checkpoint(pretrained.resolve_checkpoint(where))
    return params
  if kind == "run":
    return _run_encoder(Path(where))
  raise config_checks.ConfigError(f"config.init={init!r} must be 'hf:<name or directory>', 'run:<workdir>' or ''")


def check_matches(init: str, loaded: Any, expected: Any) -> None:
  """Raises ConfigError naming the first parameter whose path or shape differs from the model's (e.g. a vocabulary
  of another size: the fine-tuning tokenizer must be the checkpoint's)."""
  flat = lambda tree: {jax.tree_util.keystr(path): np.shape(leaf)
                       for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}
  got, want = flat(loaded), flat(expected)
  for path in sorted(set(got) | set(want)):
    if got.get(path) != want.get(path):
      raise config_checks.ConfigError(
          f"config.init={init!r}: encoder parameter {path} has shape {got.get(path)} in the checkpoint but "
          f"{want.get(path)} in the model of config.model/config.data.tokenizer; fine-tune with the checkpoint's own "
          "model config and tokenizer (configs/finetune.py reads them from the checkpoint)")

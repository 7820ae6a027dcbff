"""Pretrained parameters for a run's start (config.init): an imported HuggingFace BERT ("hf:<name or dir>") or our
own run's latest checkpoint ("run:<workdir>"). Fine-tuning takes the encoder; continued pretraining also takes the
pretraining heads (MLM, NSP, SBO) that both the checkpoint and the new run have."""

from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp

from encoder import errors
from encoder import hf_checkpoint, pretrained
from objectives import registry


def _run_params(workdir: Path) -> dict:
  """The parameters of the newest checkpoint in workdir/checkpoints, as numpy arrays on this host."""
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
    raise errors.ConfigError(f"config.init='run:{workdir}': checkpoint {directory / str(step)} has no encoder "
                                    f"parameters (top-level keys {sorted(params)})")
  return jax.tree.map(np.asarray, params)


def pretrained_params(init: str) -> dict | None:
  """{"encoder": tree, and any of "mlm"/"nsp"/"sbo": head tree} named by config.init; None for random init ("").
  A fine-tuned run's task head is never taken (a new task starts its head from scratch)."""
  if not init:
    return None
  kind, _, where = init.partition(":")
  if kind == "hf":
    _, params, heads = hf_checkpoint.load_hf_checkpoint(pretrained.resolve_checkpoint(where))
    return {"encoder": params, **heads}
  if kind == "run":
    params = _run_params(Path(where))
    return {name: tree for name, tree in params.items() if name == "encoder" or name in registry.OBJECTIVES}
  raise errors.ConfigError(f"config.init={init!r} must be 'hf:<name or directory>', 'run:<workdir>' or ''")


def check_matches(init: str, loaded: dict, expected: dict) -> None:
  """Raises ConfigError naming the first parameter whose path or shape differs from the model's (e.g. a vocabulary
  of another size: the fine-tuning tokenizer must be the checkpoint's), over the trees both have."""
  shared = sorted(loaded.keys() & expected.keys())
  flat = lambda tree: {jax.tree_util.keystr(path): np.shape(leaf)
                       for path, leaf in jax.tree_util.tree_flatten_with_path({k: tree[k] for k in shared})[0]}
  got, want = flat(loaded), flat(expected)
  for path in sorted(set(got) | set(want)):
    if got.get(path) != want.get(path):
      raise errors.ConfigError(
          f"config.init={init!r}: parameter {path} has shape {got.get(path)} in the checkpoint but {want.get(path)} "
          "in the model of config.model/config.data.tokenizer; train with the checkpoint's own model config and "
          "tokenizer (configs/finetune.py and configs/pretrain.py read them from the checkpoint)")

"""Pretrained parameters for a run's start (config.init, read by encoder.init_from): an imported HuggingFace BERT
("hf:<name or dir>") or our own run's latest checkpoint ("run:<workdir>"). Fine-tuning takes the encoder; continued
pretraining also takes the pretraining heads (MLM, NSP, SBO) that both the checkpoint and the new run have."""

import jax
import numpy as np

from encoder import errors, init_from
from objectives import hf_heads, registry


def pretrained_params(init: str) -> dict | None:
  """{"encoder": tree, and any of "mlm"/"nsp"/"sbo": head tree} named by config.init, as numpy arrays; None for
  random init (""). A fine-tuned run's task head is never taken (a new task starts its head from scratch)."""
  if not init:
    return None
  loaded = init_from.parameters(init, hf_heads.read_heads)
  return {name: jax.tree.map(np.asarray, tree) for name, tree in loaded.items()
          if name == "encoder" or name in registry.OBJECTIVES}


def check_matches(init: str, loaded: dict, expected: dict) -> None:
  """Raises ConfigError naming the first parameter whose path or shape differs from the model's (e.g. a vocabulary
  of another size: the fine-tuning tokenizer must be the checkpoint's), over the trees both have."""
  shared = sorted(loaded.keys() & expected.keys())
  flat = lambda tree: {jax.tree_util.keystr(path): np.shape(leaf)
                       for path, leaf in jax.tree_util.tree_flatten_with_path({k: tree[k] for k in shared})[0]}
  got, want = flat(loaded), flat(expected)
  for path in sorted(set(got) | set(want)):
    if path not in got and ("['lora_" in path or "['adapter_" in path):
      continue  # A LoRA or adapters regime's new module: it starts from its own initialisation.
    if got.get(path) != want.get(path):
      raise errors.ConfigError(
          f"config.init={init!r}: parameter {path} has shape {got.get(path)} in the checkpoint but {want.get(path)} "
          "in the model of config.model/config.data.tokenizer; train with the checkpoint's own model config and "
          "tokenizer (configs/finetune.py and configs/pretrain.py read them from the checkpoint)")

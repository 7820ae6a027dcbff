"""An objective added from this file alone (no edit to library code), with its own HuggingFace head layout:
`masked_count` regresses, from BERT's pooled [CLS], the fraction of a row's masking slots that hold a masked token.
Registered the way a forker's one line in objectives/registry.py would (OBJECTIVES["masked_count"] = build), it
pretrains beside MLM through `launch.train`, exports through `launch.export` (its tensors under `cls.masked_count`, in
the class it declares for MLM + itself) and imports back, head tensors bit for bit; unregistered, the same export is
refused, naming the tensor no layout takes."""

from collections.abc import Callable, Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy

from configs import pretrain
from encoder import hf
from encoder.config import EncoderConfig
from encoder.hf.tensors import Found, dense, state
from launch import export, predict, train
from objectives import hf_heads, objective, registry
from objectives.objective import HfHead, Objective

NAME = "masked_count"
CLASS = "BertForMaskedLMAndCount"  # Declared below; transformers has no such class (our import reads it back).


class CountHead(nn.Module):
  """Pooled [CLS] -> one number, a Dense named "count"."""

  @nn.compact
  def __call__(self, outputs, batch: dict[str, jax.Array], attend: Callable | None = None,
               train: bool = False) -> jax.Array:
    return nn.Dense(1, name="count")(outputs.pooled.astype(jnp.float32))[:, 0]


def count_loss(predictions: jax.Array, batch: dict[str, jax.Array]):
  """Mean squared error against each row's masked fraction, with masked_count_loss = (sum, count)."""
  weights = batch["masked_weights"].astype(jnp.float32)
  target = weights.sum(axis=1) / weights.shape[1]
  total, count = jnp.square(predictions - target).sum(), jnp.float32(target.shape[0])
  return total / count, {f"{NAME}_loss": (total, count)}


def hf_tensors(cfg: EncoderConfig, layout: str):
  """The Dense as BERT's nn.Linear `cls.masked_count` (no place in ELECTRA's or ModernBERT's classes)."""
  return dense((NAME, "count"), "cls.masked_count", cfg.hidden_size, 1) if layout == "bert" else []


def read_hf(found: Found, directory=None, params=None) -> dict | None:
  tensors = hf_tensors(found.cfg, found.layout)
  return found.take(tensors)[NAME] if tensors and found.holds(tensors) else None


def write_hf(cfg: EncoderConfig, layout: str, heads: Mapping, remote: bool = False):
  tensors = hf_tensors(cfg, layout)
  return (state(tensors, heads, "heads"), {}) if tensors else None


HF = HfHead(read_hf, write_hf, {("bert", ("masked_count", "mlm")): CLASS}, pooler=True)


def build(config: Mapping[str, Any] | None = None) -> Objective:
  return Objective(name=NAME, head=CountHead(), loss=count_loss, reads=objective.cls_only, hf=HF)


@pytest.mark.slow
def test_a_new_objective_pretrains_exports_and_imports_its_head(tmp_path, monkeypatch):
  monkeypatch.setitem(registry.OBJECTIVES, NAME, build)  # The forker's registry line.
  workdir, out = tmp_path / "run", tmp_path / "out"
  train.train_and_evaluate(pretrain.get_config(f"runlocal,objectives=mlm+{NAME},steps=3"), workdir)
  assert export.export(workdir, out, "latest") == (CLASS, "")  # Both heads held, nothing beside.
  held = safetensors.numpy.load_file(out / "model.safetensors")
  assert {"cls.masked_count.weight", "cls.masked_count.bias", "cls.predictions.bias"} <= held.keys()
  assert held["cls.masked_count.weight"].shape == (1, 64)  # nn.Linear's [out, in]; the runlocal model is 64 wide.

  config = predict.run_config(workdir, "a run")
  _, params = predict.restore_params(workdir, config, "latest")
  cfg, encoder, heads = hf_heads.load_hf_checkpoint(out)
  assert sorted(heads) == ["masked_count", "mlm"]
  for name in heads:  # Each head's tensors, and the encoder's, exactly as trained.
    ours = jax.tree.map(np.asarray, params[name])
    assert jax.tree.structure(heads[name]) == jax.tree.structure(ours), name
    assert jax.tree.all(jax.tree.map(np.array_equal, heads[name], ours)), name
  assert jax.tree.all(jax.tree.map(np.array_equal, encoder, jax.tree.map(np.asarray, params["encoder"])))
  assert cfg.hidden_size == 64

  monkeypatch.delitem(registry.OBJECTIVES, NAME)  # Without the objective nobody takes its tensors: refused.
  with pytest.raises(hf.UnexpectedTensorError, match=r"unexpected tensor\(s\) 'cls\.masked_count\.bias' in "):
    hf_heads.load_hf_checkpoint(out)

"""Next sentence prediction head and loss (spec, "Next Sentence Prediction": y = softmax(h_CLS W_NSP)).

The spec applies W_NSP to the raw final [CLS] vector; BERT (and HuggingFace checkpoints) apply it to the pooled
[CLS] (tanh(W h_CLS + b)). Default `use_pooler=True` so imported heads work; `use_pooler=False` is the spec's form.
Labels follow HuggingFace: 0 = IsNext (true continuation), 1 = NotNext (random segment).
"""

from collections.abc import Callable, Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from encoder.config import EncoderConfig
from encoder.hf.tensors import Found, Tensor, dense, state
from objectives import layers, objective
from objectives.objective import HfHead, Objective, Requirement


class NextSentenceHead(nn.Module):
  """2-way linear classifier on [CLS]; params `kernel` [H, 2] and `bias` [2] (the HF import's nsp tree)."""
  use_pooler: bool = True
  initializer_range: float = 0.02

  @nn.compact
  def __call__(self, outputs, batch: dict[str, jax.Array], attend: Callable | None = None,
               train: bool = False) -> jax.Array:
    """-> logits [batch, 2]."""
    cls = outputs.pooled if self.use_pooler else outputs.cls
    kernel = self.param("kernel", nn.initializers.normal(self.initializer_range), (cls.shape[-1], 2), jnp.float32)
    bias = self.param("bias", nn.initializers.zeros_init(), (2,), jnp.float32)
    return cls.astype(jnp.float32) @ kernel + bias


def nsp_loss(logits: jax.Array, batch: dict[str, jax.Array]):
  """Mean cross-entropy over the batch's pairs (nsp_weights when present), with nsp_loss/nsp_accuracy."""
  labels = batch["nsp_label"]
  weights = batch.get("nsp_weights", jnp.ones(labels.shape, jnp.float32))
  return layers.cross_entropy(logits, labels, weights, "nsp")


def build(config: Mapping[str, Any] | None = None) -> Objective:
  """Objective "nsp" from a config block (optional keys: use_pooler, initializer_range)."""
  head = NextSentenceHead(use_pooler=layers.option(config, "use_pooler", True),
                          initializer_range=layers.model_option(config, "initializer_range"))
  return Objective(name="nsp", head=head, loss=nsp_loss, reads=objective.cls_only, hf=HF,
                   packing=Requirement("nsp_pairs", "sentence pairs with nsp_label"))


# Where HF's classes keep the head: BertForPreTraining's cls.seq_relationship; an encoderlab ModernBERT export's
# seq_relationship (launch/hf_modeling: HF's ModernBERT classes have no NSP head); ELECTRA has none.
_NAMES = {"bert": "cls.seq_relationship", "modernbert": "seq_relationship"}


def hf_tensors(cfg: EncoderConfig, layout: str) -> list[Tensor]:
  """The head's kernel and bias as the nn.Linear(hidden, 2) of `layout` (none in ELECTRA's)."""
  return dense(("nsp",), _NAMES[layout], cfg.hidden_size, 2) if layout in _NAMES else []


def read_hf(found: Found, directory=None, params=None) -> dict | None:
  """The head's tree from a checkpoint's tensors, or None without one."""
  tensors = hf_tensors(found.cfg, found.layout)
  return found.take(tensors)["nsp"] if tensors and found.holds(tensors) else None


def write_hf(cfg: EncoderConfig, layout: str, heads: Mapping, remote: bool = False):
  """(HF tensors, no config.json fields) of heads["nsp"]; None in a layout without a place for it."""
  tensors = hf_tensors(cfg, layout)
  return (state(tensors, heads, "heads"), {}) if tensors else None


HF = HfHead(read_hf, write_hf, {("bert", ("nsp",)): "BertForNextSentencePrediction"}, pooler=True)

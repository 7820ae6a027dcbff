"""Masked language modeling head and loss (spec, "Masking Words": u_i = h_i E^T, y_i = softmax(u_i), L_MLM mean -log P).

The head gathers the final hidden states at `masked_positions` first, so the vocabulary projection runs on
[batch, P] positions only. Parameter names match the HuggingFace import: transform/{kernel,bias},
layer_norm/{scale,bias}, output_bias; `HF` is where HF's BERT, ELECTRA and ModernBERT classes keep them.
"""

from collections.abc import Callable, Mapping
from typing import Any

import flax.linen as nn
import jax
import numpy as np

from encoder.config import EncoderConfig
from encoder.hf.files import UnsupportedArchitectureError
from encoder.hf.tensors import Found, Tensor, dense, norm, state
from encoder.model import per_token
from objectives import layers
from objectives.objective import HfHead, Objective


class MaskedLMHead(nn.Module):
  """dense + GELU + LayerNorm, then the tied embedding decoder (`attend`) plus an output bias [V]."""
  initializer_range: float = 0.02
  layer_norm_eps: float = 1e-12
  approximate_gelu: bool = False
  features: int = 0  # Width of the transform: the embeddings' (factorized: ELECTRA's generator, ALBERT); 0 = hidden.

  @nn.compact
  def __call__(self, outputs, batch: dict[str, jax.Array], attend: Callable[[jax.Array], jax.Array],
               train: bool = False) -> jax.Array:
    """-> logits [batch, P, vocab] at batch["masked_positions"] [batch, P]."""
    hidden = outputs.at(batch["masked_positions"])  # [batch, P, H]
    transform = lambda h: layers.dense_gelu_norm(
        h, self.features or h.shape[-1], initializer_range=self.initializer_range, layer_norm_eps=self.layer_norm_eps,
        approximate_gelu=self.approximate_gelu, dense_name="transform", norm_name="layer_norm")
    return layers.output_bias(self, per_token(lambda h: attend(transform(h)), hidden))


def mlm_loss(logits: jax.Array, batch: dict[str, jax.Array]):
  """Mean cross-entropy over the real masked tokens of the batch (masked_weights), with mlm_loss/mlm_accuracy."""
  return layers.cross_entropy(logits, batch["masked_ids"], batch["masked_weights"], "mlm")


def build(config: Mapping[str, Any] | None = None) -> Objective:
  """Objective "mlm" from a config block (optional keys: initializer_range, layer_norm_eps, hidden_act,
  embedding_size)."""
  head = MaskedLMHead(initializer_range=layers.model_option(config, "initializer_range"),
                      layer_norm_eps=layers.model_option(config, "layer_norm_eps"),
                      approximate_gelu=layers.model_option(config, "hidden_act") == "gelu_tanh",
                      features=layers.model_option(config, "embedding_size"))
  return Objective(name="mlm", head=head, loss=mlm_loss, reads=lambda batch: batch["masked_positions"], hf=HF,
                   best=("mlm_accuracy", "max"))  # A run keeps the checkpoint that predicts masked tokens best.


# Where HF's classes keep the tied decoder (the word embeddings again; checked equal and dropped) and the embeddings.
_DECODERS = {"bert": ("cls.predictions.decoder.weight", "generator_lm_head.weight"),
             "electra": ("cls.predictions.decoder.weight", "generator_lm_head.weight"),
             "modernbert": ("decoder.weight",)}
_EMBEDDINGS = {"bert": "embeddings.word_embeddings.weight", "electra": "embeddings.word_embeddings.weight",
               "modernbert": "embeddings.tok_embeddings.weight"}
# Head biases ModernBertForMaskedLM may lack (classifier_bias, norm_bias, decoder_bias off): zeros in our MLM head.
_MODERNBERT_OPTIONAL = ("head.dense.bias", "head.norm.bias", "decoder.bias")


def hf_tensors(cfg: EncoderConfig, layout: str) -> list[Tensor]:
  """The head in HF's names: BertForPreTraining's cls.predictions (transform dense + LayerNorm, output bias; decoder
  tied), ElectraForMaskedLM's generator_predictions (dense to the embedding width) and generator_lm_head's bias, or
  ModernBertForMaskedLM's head (dense, norm) and decoder bias."""
  H, E, V = cfg.hidden_size, cfg.embedding_width, cfg.vocab_size
  names = {"bert": ("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm", "cls.predictions.bias"),
           "electra": ("generator_predictions.dense", "generator_predictions.LayerNorm", "generator_lm_head.bias"),
           "modernbert": ("head.dense", "head.norm", "decoder.bias")}[layout]
  width = E if layout == "electra" else H
  return (dense(("mlm", "transform"), names[0], H, width) + norm(("mlm", "layer_norm"), names[1], width)
          + [Tensor(("mlm", "output_bias"), (V,), (names[2],), (V,), "copy")])


def read_hf(found: Found, directory=None, params=None) -> dict | None:
  """The head's tree from a checkpoint's tensors (None without one): the tied decoder is checked and dropped, and
  ModernBERT's switched-off biases come back as zeros."""
  for name in _DECODERS[found.layout]:
    where = found.origin.get(name)
    weight, embeddings = found.pop(name), found.taken.get(_EMBEDDINGS[found.layout])
    if weight is not None and (embeddings is None or not np.array_equal(weight, embeddings)):
      raise UnsupportedArchitectureError(
          f"tensor {where} differs from the word embeddings: an untied MLM decoder is not supported (our MLM head "
          "reuses the input embeddings)")
  if found.layout != "modernbert":
    bias = found.pop("cls.predictions.decoder.bias")
    if bias is not None and "cls.predictions.bias" not in found.tensors:
      found.tensors["cls.predictions.bias"] = bias
      found.origin["cls.predictions.bias"] = found.origin["cls.predictions.decoder.bias"]
    elif bias is not None and not np.array_equal(bias, found.tensors["cls.predictions.bias"]):
      raise UnsupportedArchitectureError(f"tensor {found.origin['cls.predictions.decoder.bias']} differs from "
                                         f"{found.origin['cls.predictions.bias']}; they must be the same (tied) vector")
  tensors = hf_tensors(found.cfg, found.layout)
  if not found.holds(tensors):
    return None
  if found.layout == "modernbert":
    cfg = found.cfg
    for name, width in zip(_MODERNBERT_OPTIONAL, (cfg.hidden_size, cfg.hidden_size, cfg.vocab_size)):
      found.default(name, np.zeros(width, cfg.param_dtype))
  return found.take(tensors)["mlm"]


def write_hf(cfg: EncoderConfig, layout: str, heads: Mapping, remote: bool = False):
  """(HF tensors, config.json fields) of heads["mlm"]. ModernBertForMaskedLM (not `remote`: launch/hf_modeling's
  class keeps every bias) has no dense bias when it is all zeros (classifier_bias=False) and, bias-free, no LayerNorm
  bias."""
  tensors = state(hf_tensors(cfg, layout), heads, "heads")
  if layout != "modernbert":
    return tensors, {}
  if not remote:
    if not tensors["head.dense.bias"].any():  # classifier_bias=False.
      del tensors["head.dense.bias"]
    if not cfg.use_bias:  # norm_bias=False holds for the head's LayerNorm too.
      if tensors["head.norm.bias"].any():
        raise UnsupportedArchitectureError(
            "heads/mlm/layer_norm/bias is nonzero, but a bias-free ModernBERT (use_bias=False: norm_bias=False) has "
            "no LayerNorm biases, its MLM head's included; export the encoder alone")
      del tensors["head.norm.bias"]
  return tensors, {"classifier_bias": "head.dense.bias" in tensors}


def holds_exactly(cfg: EncoderConfig, layout: str, tree: Mapping) -> bool:
  """Whether HF's own class holds the head exactly: not ModernBertForMaskedLM when a bias-free encoder
  (use_bias=False: norm_bias=False) has an MLM head whose LayerNorm bias trained away from zero."""
  return layout != "modernbert" or cfg.use_bias or not np.asarray(tree["layer_norm"]["bias"]).any()


HF = HfHead(read_hf, write_hf, {("bert", ("mlm",)): "BertForMaskedLM", ("bert", ("mlm", "nsp")): "BertForPreTraining",
                                ("electra", ("mlm",)): "ElectraForMaskedLM",
                                ("modernbert", ("mlm",)): "ModernBertForMaskedLM"}, exact=holds_exactly,
            # launch/hf_modeling's ModernBERT classes: MLM with every bias; MLM and NSP (on BERT's pooler).
            remote={("modernbert", ("mlm",)): "EncoderlabModernBertForMaskedLM",
                    ("modernbert", ("mlm", "nsp")): "EncoderlabModernBertForPreTraining"})

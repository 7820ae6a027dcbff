"""HuggingFace BERT, ModernBERT and ELECTRA checkpoints <-> our encoder: config.json + model.safetensors in, the same
files out.

Reads and writes safetensors only (never pickles), maps HF tensor names to our parameter tree (fused QKV,
[in, out] kernels) and back, bit for bit, so `transformers.BertModel.from_pretrained` loads what we export. A
ModernBERT checkpoint (model_type "modernbert") is our encoder with the `modernbert` switches (encoder.config
ARCHITECTURES); which HF layout an EncoderConfig exports to is `hf_layout(cfg)`.
ELECTRA (model_type "electra": factorized embeddings, no pooler) comes as two directories, as Google released it:
the discriminator (ElectraForPreTraining) and, in its `generator/` subdirectory, the generator (ElectraForMaskedLM)
whose embeddings are the discriminator's; they become our encoder and the "electra" head's tree
(objectives/electra.py). An ElectraForMaskedLM alone imports as an encoder with an MLM head. A fine-tuned checkpoint
(HF's BertFor*Classification / BertForQuestionAnswering, or an export whose heads are remote code:
REMOTE_MODEL_TYPES) imports as its encoder; writing one takes a `TaskHead`.
"""

import contextlib
import json
import math
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import safetensors
import safetensors.numpy

from encoder import errors
from encoder.config import EncoderConfig
from encoder.files import atomic_path

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"  # Sharded checkpoints: {"weight_map": {tensor: shard file}}.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
IGNORED_TENSORS = ("embeddings.position_ids",)  # A constant buffer (0..max_positions-1) some exports include.

# HF hidden_act -> ours; "gelu" is the exact (erf) GELU, the other two the tanh approximation.
_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
_HF_ACTIVATION = {"gelu": "gelu", "gelu_tanh": "gelu_new"}
# model_type of exports whose heads need remote code (launch/hf_modeling's config classes) -> the encoder's.
REMOTE_MODEL_TYPES = {"encoderlab-bert": "bert", "encoderlab-modernbert": "modernbert"}
# Suffixes of fine-tuned (task) classes: their head tensors are not imported, a missing pooler comes back as zeros.
TASK_CLASS_SUFFIXES = ("ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering")
_ENCODER_ROOTS = ("embeddings", "embeddings_project", "encoder", "pooler", "layers", "final_norm")  # Tensor roots.
PRETRAINING_HEADS = ("mlm", "nsp", "electra")  # The pretraining heads HF's classes hold (our objective names).
# Which HF class a checkpoint is, from the heads it carries.
_ARCHITECTURES = {(): "BertModel", ("mlm",): "BertForMaskedLM", ("mlm", "nsp"): "BertForPreTraining",
                  ("nsp",): "BertForNextSentencePrediction", ("electra",): "ElectraForPreTraining"}
_ELECTRA_ARCHITECTURES = {(): "ElectraModel", ("mlm",): "ElectraForMaskedLM", ("electra",): "ElectraForPreTraining"}
_MODERNBERT_ARCHITECTURES = {(): "ModernBertModel", ("mlm",): "ModernBertForMaskedLM"}
GENERATOR_DIRECTORY = "generator"  # ELECTRA's generator (ElectraForMaskedLM) beside its discriminator.
_CONVERT_HINT = ("convert it once with `transformers`: AutoModel.from_pretrained(dir).save_pretrained(dir, "
                 "safe_serialization=True) (use the class named in config.json's architectures to keep its heads)")


class CheckpointError(errors.UserError):
  """A HuggingFace checkpoint that cannot be imported or exported; the message names the file and tensor."""


class MissingConfigError(CheckpointError):
  """The directory has no (readable) config.json."""


class PickledCheckpointError(CheckpointError):
  """Only pickled weights (pytorch_model.bin, *.pt, ...) were found; they are never loaded."""


class CorruptCheckpointError(CheckpointError):
  """A truncated or otherwise unreadable safetensors or JSON file."""


class UnsupportedArchitectureError(CheckpointError):
  """Not a BERT/ELECTRA encoder we can represent (model_type, position embeddings, activation, decoder, untied
  head)."""


class MissingTensorError(CheckpointError):
  """A tensor our model needs is absent from the checkpoint."""


class UnexpectedTensorError(CheckpointError):
  """The checkpoint holds tensors we do not know how to use."""


class ShapeMismatchError(CheckpointError):
  """A tensor's shape disagrees with config.json."""


class _Tensor(NamedTuple):
  """One leaf of our tree and the HF tensor(s) it is made of."""
  path: tuple[str, ...]  # Where the leaf lives in our tree.
  shape: tuple[int, ...]  # Its shape there.
  hf_names: tuple[str, ...]  # HF tensors it is built from (three for the fused QKV).
  hf_shape: tuple[int, ...]  # Shape of each HF tensor.
  # How the two relate: copy; transpose (nn.Linear [out, in] vs kernel [in, out]); qkv_* (three HF tensors);
  # transpose_reshape (one [out, in] weight vs a kernel [*in, *out]); reshape (the same values in another shape).
  layout: str


def _embed(path, hf, n, width):
  return [_Tensor(path + ("embedding",), (n, width), (hf + ".weight",), (n, width), "copy")]


def _dense(path, hf, n_in, n_out):
  return [_Tensor(path + ("kernel",), (n_in, n_out), (hf + ".weight",), (n_out, n_in), "transpose"),
          _Tensor(path + ("bias",), (n_out,), (hf + ".bias",), (n_out,), "copy")]


def _norm(path, hf, width):
  return [_Tensor(path + ("scale",), (width,), (hf + ".weight",), (width,), "copy"),
          _Tensor(path + ("bias",), (width,), (hf + ".bias",), (width,), "copy")]


def _encoder_tensors(cfg: EncoderConfig, pooler: bool = True) -> list[_Tensor]:
  """Every leaf of Encoder(cfg)'s params, in HF BertModel / ElectraModel names (no "bert."/"electra." prefix);
  pooler=False leaves the pooler out (ELECTRA has none)."""
  H, A, D, E = cfg.hidden_size, cfg.num_heads, cfg.head_dim, cfg.embedding_width
  tensors = (_embed(("embeddings", "word_embeddings"), "embeddings.word_embeddings", cfg.vocab_size, E)
             + _embed(("embeddings", "position_embeddings"), "embeddings.position_embeddings", cfg.max_positions, E)
             + _embed(("embeddings", "token_type_embeddings"), "embeddings.token_type_embeddings",
                      cfg.type_vocab_size, E)
             + _norm(("embeddings", "layer_norm"), "embeddings.LayerNorm", E))
  if E != H:
    tensors += _dense(("embeddings_project",), "embeddings_project", E, H)
  for i in range(cfg.num_layers):
    ours, hf = f"layer_{i}", f"encoder.layer.{i}"
    qkv = tuple(f"{hf}.attention.self.{part}" for part in ("query", "key", "value"))
    tensors += [
        _Tensor((ours, "attention", "qkv", "kernel"), (H, 3, A, D), tuple(n + ".weight" for n in qkv), (H, H),
                "qkv_kernel"),
        _Tensor((ours, "attention", "qkv", "bias"), (3, A, D), tuple(n + ".bias" for n in qkv), (H,), "qkv_bias"),
        _Tensor((ours, "attention", "output", "kernel"), (A, D, H), (f"{hf}.attention.output.dense.weight",),
                (H, H), "transpose_reshape"),
        _Tensor((ours, "attention", "output", "bias"), (H,), (f"{hf}.attention.output.dense.bias",), (H,), "copy")]
    tensors += (_norm((ours, "attention_layer_norm"), f"{hf}.attention.output.LayerNorm", H)
                + _dense((ours, "mlp", "intermediate"), f"{hf}.intermediate.dense", H, cfg.intermediate_size)
                + _dense((ours, "mlp", "output"), f"{hf}.output.dense", cfg.intermediate_size, H)
                + _norm((ours, "output_layer_norm"), f"{hf}.output.LayerNorm", H))
  return tensors + (_dense(("pooler",), "pooler.dense", H, H) if pooler else [])


def _head_tensors(cfg: EncoderConfig, electra: bool = False) -> dict[str, list[_Tensor]]:
  """BertForPreTraining's heads: MLM (transform dense + LayerNorm, output bias; decoder tied) and NSP; or ELECTRA's:
  ElectraForMaskedLM's generator head as "mlm", ElectraForPreTraining's discriminator head as "electra"."""
  H, E, V = cfg.hidden_size, cfg.embedding_width, cfg.vocab_size
  if electra:
    mlm = (_dense(("mlm", "transform"), "generator_predictions.dense", H, E)
           + _norm(("mlm", "layer_norm"), "generator_predictions.LayerNorm", E)
           + [_Tensor(("mlm", "output_bias"), (V,), ("generator_lm_head.bias",), (V,), "copy")])
    return {"mlm": mlm, "electra": (_dense(("electra", "discriminator", "dense"), "discriminator_predictions.dense",
                                           H, H)
                                    + _dense(("electra", "discriminator", "dense_prediction"),
                                             "discriminator_predictions.dense_prediction", H, 1))}
  mlm = (_dense(("mlm", "transform"), "cls.predictions.transform.dense", H, H)
         + _norm(("mlm", "layer_norm"), "cls.predictions.transform.LayerNorm", H)
         + [_Tensor(("mlm", "output_bias"), (V,), ("cls.predictions.bias",), (V,), "copy")])
  return {"mlm": mlm, "nsp": _dense(("nsp",), "cls.seq_relationship", H, 2)}


# ModernBERT (HF ModernBertModel, ModernBertForMaskedLM with the "model." prefix): the switches that make our encoder
# one, the fields a BERT export needs instead, and its tensors.
MODERNBERT_SWITCHES = dict(position_embedding="rotary", gated_feed_forward=True, pre_layer_norm=True,
                           embedding_norm=True, type_vocab_size=0)
BERT_SWITCHES = dict(position_embedding="absolute", gated_feed_forward=False, use_bias=True, pre_layer_norm=False,
                     embedding_norm=False, local_attention_window=0)
_MODERNBERT_ACTIVATIONS = dict(_ACTIVATIONS, silu="silu", swish="silu")
_HF_MODERNBERT_ACTIVATION = dict(_HF_ACTIVATION, silu="silu")
# Head biases ModernBertForMaskedLM may lack (classifier_bias, norm_bias, decoder_bias off): zeros in our MLM head.
_MODERNBERT_OPTIONAL = ("head.dense.bias", "head.norm.bias", "decoder.bias")


def _linear(path, hf, in_shape, out_shape, bias: bool):
  """An nn.Linear [prod(out), prod(in)] (+ bias) as our kernel [*in, *out] (+ bias [*out])."""
  n_in, n_out = math.prod(in_shape), math.prod(out_shape)
  tensors = [_Tensor(path + ("kernel",), in_shape + out_shape, (hf + ".weight",), (n_out, n_in), "transpose_reshape")]
  return tensors + ([_Tensor(path + ("bias",), out_shape, (hf + ".bias",), (n_out,), "reshape")] if bias else [])


def _modernbert_norm(path, hf, width, bias: bool):
  """A LayerNorm's weight (+ bias when the checkpoint has norm_bias)."""
  return _norm(path, hf, width) if bias else _norm(path, hf, width)[:1]


def _modernbert_tensors(cfg: EncoderConfig) -> list[_Tensor]:
  """Every leaf of Encoder(cfg)'s params but the pooler (ModernBERT has none), in HF ModernBertModel names."""
  H, A, D, b = cfg.hidden_size, cfg.num_heads, cfg.head_dim, cfg.use_bias
  tensors = (_embed(("embeddings", "word_embeddings"), "embeddings.tok_embeddings", cfg.vocab_size, H)
             + _modernbert_norm(("embeddings", "layer_norm"), "embeddings.norm", H, b))
  for i in range(cfg.num_layers):
    ours, hf = f"layer_{i}", f"layers.{i}"
    if i:  # The first block reads the normalized embeddings (embedding_norm).
      tensors += _modernbert_norm((ours, "attention_layer_norm"), f"{hf}.attn_norm", H, b)
    tensors += (_linear((ours, "attention", "qkv"), f"{hf}.attn.Wqkv", (H,), (3, A, D), b)
                + _linear((ours, "attention", "output"), f"{hf}.attn.Wo", (A, D), (H,), b)
                + _modernbert_norm((ours, "output_layer_norm"), f"{hf}.mlp_norm", H, b)
                + _linear((ours, "mlp", "intermediate"), f"{hf}.mlp.Wi", (H,), (2, cfg.intermediate_size), b)
                + _linear((ours, "mlp", "output"), f"{hf}.mlp.Wo", (cfg.intermediate_size,), (H,), b))
  return tensors + _modernbert_norm(("final_layer_norm",), "final_norm", H, b)


def _modernbert_head_tensors(cfg: EncoderConfig) -> dict[str, list[_Tensor]]:
  """ModernBertForMaskedLM's head as our MLM head: dense (+ bias) -> act -> LayerNorm (+ bias) -> tied decoder +
  bias; and the NSP classifier of an encoderlab export (`seq_relationship`, launch/hf_modeling), which HF's
  ModernBERT classes lack."""
  H = cfg.hidden_size
  return {"mlm": (_dense(("mlm", "transform"), "head.dense", H, H) + _norm(("mlm", "layer_norm"), "head.norm", H)
                  + [_Tensor(("mlm", "output_bias"), (cfg.vocab_size,), ("decoder.bias",), (cfg.vocab_size,),
                             "copy")]),
          "nsp": _dense(("nsp",), "seq_relationship", H, 2)}


def _modernbert_pooler(cfg: EncoderConfig) -> list[_Tensor]:
  """Our pooler (BERT's, which HF's ModernBERT lacks) as an encoderlab export holds it: `pooler.dense`."""
  return _linear(("pooler",), "pooler.dense", (cfg.hidden_size,), (cfg.hidden_size,), cfg.use_bias)


def hf_layout(cfg: EncoderConfig) -> str:
  """"bert" or "modernbert": the HF architecture that computes what Encoder(cfg) does (pooler aside, which ModernBERT
  lacks); an UnsupportedArchitectureError names the fields that keep `cfg` out of both."""
  def conflicts(switches):
    return [f"{field}={getattr(cfg, field)!r}" for field, value in switches.items() if getattr(cfg, field) != value]
  bert = conflicts(BERT_SWITCHES) + ([f"hidden_act={cfg.hidden_act!r}"] if cfg.hidden_act not in _HF_ACTIVATION else
                                     []) + (["type_vocab_size=0"] if not cfg.type_vocab_size else [])
  if not bert:
    return "bert"
  modernbert = conflicts(MODERNBERT_SWITCHES)
  if not modernbert:
    return "modernbert"
  raise UnsupportedArchitectureError(
      f"an encoder with {', '.join(bert)} has no HuggingFace BERT equivalent (BERT is post-LN with learned absolute "
      f"positions, biases and a dense feed-forward), nor a ModernBERT one ({', '.join(modernbert)}; ModernBERT needs "
      f"{', '.join(f'{k}={v!r}' for k, v in MODERNBERT_SWITCHES.items())}); export only those")


def _to_ours(t: _Tensor, arrays: list[np.ndarray]) -> np.ndarray:
  if t.layout == "copy":
    return arrays[0]
  if t.layout == "transpose":
    return arrays[0].T
  if t.layout == "qkv_kernel":  # Three [out, in] -> [in, 3, heads, head_dim].
    return np.stack([w.T for w in arrays], axis=1).reshape(t.shape)
  if t.layout == "qkv_bias":
    return np.stack(arrays).reshape(t.shape)
  if t.layout == "reshape":
    return arrays[0].reshape(t.shape)
  return arrays[0].T.reshape(t.shape)  # transpose_reshape, e.g. [hidden, heads * head_dim] -> [heads, head_dim, H].


def _to_hf(t: _Tensor, leaf: np.ndarray) -> list[np.ndarray]:
  if t.layout == "copy":
    arrays = [leaf]
  elif t.layout == "transpose":
    arrays = [leaf.T]
  elif t.layout == "qkv_kernel":
    arrays = [leaf[:, j].reshape(t.hf_shape[1], -1).T for j in range(3)]
  elif t.layout == "qkv_bias":
    arrays = [leaf[j].reshape(-1) for j in range(3)]
  elif t.layout == "reshape":
    arrays = [leaf.reshape(t.hf_shape)]
  else:  # transpose_reshape
    arrays = [leaf.reshape(t.hf_shape[::-1]).T]
  return [np.ascontiguousarray(a) for a in arrays]


def _get(tree: Mapping, path: tuple[str, ...], what: str) -> np.ndarray:
  node = tree
  for i, key in enumerate(path):
    if not isinstance(node, Mapping) or key not in node:
      raise MissingTensorError(f"{what} has no entry {'/'.join(path[:i + 1])!r}; it must be the tree of "
                               "Encoder(cfg).init(...)['params'] (or the heads tree) for the same config")
    node = node[key]
  return np.asarray(node)


def _put(tree: dict, path: tuple[str, ...], leaf: np.ndarray) -> None:
  for key in path[:-1]:
    tree = tree.setdefault(key, {})
  tree[path[-1]] = leaf


def config_from_hf(hf_config: dict, source: str) -> EncoderConfig:
  """EncoderConfig from a parsed HF config.json; anything but a post-LN absolute-position BERT or ELECTRA is
  refused."""
  def unsupported(field, why):
    return UnsupportedArchitectureError(f"{source}: field {field!r} = {hf_config.get(field)!r}: {why}; only BERT "
                                        "encoders (model_type 'bert', e.g. BertModel/BertForPreTraining), ELECTRA "
                                        "('electra') and ModernBERT ('modernbert') import")
  hf_config = hf_config | {"model_type": REMOTE_MODEL_TYPES.get(hf_config.get("model_type"),
                                                                hf_config.get("model_type"))}
  if hf_config.get("model_type") == "modernbert":
    return _modernbert_config_from_hf(hf_config, source)
  if hf_config.get("model_type") not in ("bert", "electra"):
    raise unsupported("model_type", "not a BERT, ELECTRA or ModernBERT checkpoint (RoBERTa/XLM-R/DistilBERT use "
                      "other layouts)")
  if hf_config.get("position_embedding_type", "absolute") != "absolute":
    raise unsupported("position_embedding_type", "only learned absolute positions are implemented")
  if hf_config.get("hidden_act", "gelu") not in _ACTIVATIONS:
    raise unsupported("hidden_act", f"the encoder implements only {sorted(_ACTIVATIONS)}")
  for field in ("is_decoder", "add_cross_attention"):
    if hf_config.get(field):
      raise unsupported(field, "causal decoders and cross-attention are not part of this encoder")
  fields = dict(vocab_size="vocab_size", hidden_size="hidden_size", num_layers="num_hidden_layers",
                num_heads="num_attention_heads", intermediate_size="intermediate_size")
  optional = dict(max_positions=("max_position_embeddings", 512), type_vocab_size=("type_vocab_size", 2),
                  pad_token_id=("pad_token_id", 0), embedding_size=("embedding_size", 0))
  values = _integer_fields(hf_config, source, fields, optional)
  if values["embedding_size"] == values["hidden_size"]:
    values["embedding_size"] = 0  # Not factorized: no projection.
  try:
    return EncoderConfig(
        **values, layer_norm_eps=float(hf_config.get("layer_norm_eps", 1e-12)),
        hidden_dropout=float(hf_config.get("hidden_dropout_prob", 0.1)),
        attention_dropout=float(hf_config.get("attention_probs_dropout_prob", 0.1)),
        hidden_act=_ACTIVATIONS[hf_config.get("hidden_act", "gelu")],
        initializer_range=float(hf_config.get("initializer_range", 0.02)))
  except (TypeError, ValueError) as err:
    raise CheckpointError(f"{source}: {err}") from err


def _integer_fields(hf_config: dict, source: str, required: dict, optional: dict) -> dict[str, int]:
  """{our field: value} of required {ours: hf} and optional {ours: (hf, default)} fields, each a non-negative int."""
  values = {}
  for ours, hf in required.items():
    if hf not in hf_config:
      raise CheckpointError(f"{source}: required field {hf!r} is missing")
    values[ours] = hf_config[hf]
  for ours, (hf, default) in optional.items():
    values[ours] = default if hf_config.get(hf) is None else hf_config[hf]
  for ours, value in values.items():
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
      raise CheckpointError(f"{source}: field {ours!r} must be a non-negative integer, found {value!r}")
  return values


def _global_every(layer_types: list, source: str) -> int:
  """The period p of ModernBERT's layer_types (layer i "full_attention" iff i % p == 0); 0 when every layer is."""
  if all(kind == "full_attention" for kind in layer_types):
    return 0
  for period in range(2, len(layer_types) + 1):
    if all((kind == "full_attention") == (i % period == 0) for i, kind in enumerate(layer_types)):
      return period
  raise UnsupportedArchitectureError(f"{source}: field 'layer_types' = {layer_types!r}: only global attention every "
                                     "p-th layer from the first (i % p == 0), local in the others, is implemented")


def _modernbert_config_from_hf(hf_config: dict, source: str) -> EncoderConfig:
  """EncoderConfig (the `modernbert` switches) from a ModernBertConfig's config.json."""
  def unsupported(field, why):
    return UnsupportedArchitectureError(f"{source}: field {field!r} = {hf_config.get(field)!r}: {why}")
  activation = hf_config.get("hidden_activation", "gelu")
  if activation not in _MODERNBERT_ACTIVATIONS:
    raise unsupported("hidden_activation", f"the encoder implements only {sorted(_MODERNBERT_ACTIVATIONS)}")
  biases = {field: bool(hf_config.get(field, False)) for field in ("attention_bias", "mlp_bias", "norm_bias")}
  if len(set(biases.values())) > 1:
    raise unsupported("norm_bias", f"biases on in some layers only ({biases}): use_bias switches all of them")
  values = _integer_fields(
      hf_config, source, dict(vocab_size="vocab_size", hidden_size="hidden_size", num_layers="num_hidden_layers",
                              num_heads="num_attention_heads", intermediate_size="intermediate_size"),
      dict(max_positions=("max_position_embeddings", 8192), pad_token_id=("pad_token_id", 50283),
           local_attention_window=("local_attention", 128)))
  rope = hf_config.get("rope_parameters") or {}
  thetas = {}
  for kind, legacy, default in (("full_attention", "global_rope_theta", 160_000.0),
                                ("sliding_attention", "local_rope_theta", 10_000.0)):
    parameters = rope.get(kind) or {}
    if parameters.get("rope_type", "default") != "default":
      raise unsupported("rope_parameters", f"{kind} uses rope_type {parameters['rope_type']!r}; only 'default' RoPE")
    thetas[kind] = float(parameters.get("rope_theta", hf_config.get(legacy, default)))
  stated = hf_config.get("global_attn_every_n_layers", 3)
  pattern = lambda every: ["full_attention" if i % every == 0 else "sliding_attention"
                           for i in range(values["num_layers"])]
  layer_types = hf_config.get("layer_types") or pattern(stated)
  if len(layer_types) != values["num_layers"]:
    raise unsupported("layer_types", f"{len(layer_types)} entries for {values['num_layers']} layers")
  # The stated period when it gives layer_types (a few layers fit several), else the shortest that does.
  every = (stated if isinstance(stated, int) and stated > 1 and layer_types == pattern(stated)
           else _global_every(layer_types, source))
  if not every:
    values["local_attention_window"] = 0
  try:
    return EncoderConfig(
        **values, **MODERNBERT_SWITCHES, use_bias=biases["norm_bias"], global_attention_every=every or 1,
        rope_theta=thetas["full_attention"], rope_local_theta=thetas["sliding_attention"],
        hidden_act=_MODERNBERT_ACTIVATIONS[activation], layer_norm_eps=float(hf_config.get("norm_eps", 1e-5)),
        hidden_dropout=float(hf_config.get("embedding_dropout", 0.0)),
        attention_dropout=float(hf_config.get("attention_dropout", 0.0)),
        initializer_range=float(hf_config.get("initializer_range", 0.02)))
  except (TypeError, ValueError) as err:
    raise CheckpointError(f"{source}: {err}") from err


def _modernbert_config_to_hf(cfg: EncoderConfig, architecture: str) -> dict[str, Any]:
  """The config.json dict that transformers' ModernBertConfig reads back as `cfg` (hidden_dropout is its embedding
  and MLP dropout)."""
  layer_types = ["full_attention" if cfg.is_global(i) else "sliding_attention" for i in range(cfg.num_layers)]
  return {
      "architectures": [architecture], "model_type": "modernbert", "vocab_size": cfg.vocab_size,
      "hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
      "intermediate_size": cfg.intermediate_size, "hidden_activation": _HF_MODERNBERT_ACTIVATION[cfg.hidden_act],
      "max_position_embeddings": cfg.max_positions, "norm_eps": cfg.layer_norm_eps, "norm_bias": cfg.use_bias,
      "attention_bias": cfg.use_bias, "mlp_bias": cfg.use_bias, "pad_token_id": cfg.pad_token_id,
      "bos_token_id": None, "eos_token_id": None, "cls_token_id": None, "sep_token_id": None,
      "layer_types": layer_types, "global_attn_every_n_layers": cfg.global_attention_every,
      "local_attention": cfg.local_attention_window or 128,
      "rope_parameters": {"full_attention": {"rope_theta": cfg.rope_theta, "rope_type": "default"},
                          "sliding_attention": {"rope_theta": cfg.rope_local_theta, "rope_type": "default"}},
      "embedding_dropout": cfg.hidden_dropout, "mlp_dropout": cfg.hidden_dropout,
      "attention_dropout": cfg.attention_dropout, "initializer_range": cfg.initializer_range,
      # Our MLM head's GELU (objectives/mlm.py), whatever the feed-forward's activation.
      "classifier_activation": "gelu_new" if cfg.hidden_act == "gelu_tanh" else "gelu", "decoder_bias": True,
      "tie_word_embeddings": True, "dtype": np.dtype(cfg.param_dtype).name}


def config_to_hf(cfg: EncoderConfig, architecture: str = "BertModel") -> dict[str, Any]:
  """The config.json dict that transformers' BertConfig (ModernBertConfig for `hf_layout` "modernbert", ElectraConfig
  for an Electra* architecture) reads back as `cfg`."""
  electra = architecture.startswith("Electra")
  if cfg.embedding_width != cfg.hidden_size and not electra:
    raise UnsupportedArchitectureError(f"embedding_size={cfg.embedding_size} (factorized embeddings) has no place in "
                                       "HuggingFace's BERT and ModernBERT classes; only ELECTRA pretraining runs "
                                       "(objectives=electra) export them, in ELECTRA's layout")
  layout = hf_layout(cfg)
  if electra and layout != "bert":
    raise UnsupportedArchitectureError(f"{architecture} is a BERT-layout encoder; this one has ModernBERT's switches")
  if layout == "modernbert":
    return _modernbert_config_to_hf(cfg, architecture)
  return {
      "architectures": [architecture], "model_type": "electra" if electra else "bert", "vocab_size": cfg.vocab_size,
      "hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
      "intermediate_size": cfg.intermediate_size, "hidden_act": _HF_ACTIVATION[cfg.hidden_act],
      "hidden_dropout_prob": cfg.hidden_dropout, "attention_probs_dropout_prob": cfg.attention_dropout,
      "max_position_embeddings": cfg.max_positions, "type_vocab_size": cfg.type_vocab_size,
      "initializer_range": cfg.initializer_range, "layer_norm_eps": cfg.layer_norm_eps,
      "pad_token_id": cfg.pad_token_id, "position_embedding_type": "absolute", "is_decoder": False,
      "add_cross_attention": False, "tie_word_embeddings": True, "dtype": np.dtype(cfg.param_dtype).name,
      **({"embedding_size": cfg.embedding_width} if electra else {})}


def _read_config(directory: Path) -> tuple[EncoderConfig, bool, str]:
  """(the EncoderConfig of directory's config.json, whether it is an ELECTRA checkpoint, its class: the first of
  its architectures, "" when it names none)."""
  path = directory / CONFIG_FILE
  if not path.is_file():
    raise MissingConfigError(f"{path} not found: a HuggingFace checkpoint directory needs {CONFIG_FILE} beside "
                             f"{WEIGHTS_FILE}")
  try:
    hf_config = json.loads(path.read_text(encoding="utf-8"))
  except json.JSONDecodeError as err:
    raise CorruptCheckpointError(f"{path}:{err.lineno}: expected JSON, found an error at column {err.colno} "
                                 f"({err.msg})") from err
  except UnicodeDecodeError as err:
    raise CorruptCheckpointError(f"{path}: expected UTF-8 JSON, found byte {err.object[err.start]:#x} at offset "
                                 f"{err.start}") from err
  if not isinstance(hf_config, dict):
    raise CorruptCheckpointError(f"{path}: expected a JSON object, found a {type(hf_config).__name__}")
  architectures = hf_config.get("architectures") or [""]
  return (config_from_hf(hf_config, str(path)), hf_config["model_type"] == "electra",
          architectures[0] if isinstance(architectures, list) and isinstance(architectures[0], str) else "")


def checked_config(directory: str | os.PathLike) -> EncoderConfig:
  """The EncoderConfig of a checkpoint directory, once it is known to hold a usable config.json and safetensors
  weights (not read): what a config file needs to fail early, naming the file, instead of when the weights load."""
  directory = Path(directory)
  if not directory.is_dir():
    raise MissingConfigError(f"{directory} is not a directory: expected a HuggingFace checkpoint directory")
  cfg, _, _ = _read_config(directory)
  _weight_files(directory)
  return cfg


def _weight_files(directory: Path) -> list[Path]:
  """The safetensors file(s) of a checkpoint; pickles are refused with the conversion recipe."""
  if (directory / WEIGHTS_FILE).is_file():
    return [directory / WEIGHTS_FILE]
  index = directory / INDEX_FILE
  if index.is_file():
    try:
      return [directory / name for name in sorted(set(json.loads(index.read_text())["weight_map"].values()))]
    except (json.JSONDecodeError, KeyError, AttributeError) as err:
      raise CorruptCheckpointError(f"{index}: not a safetensors index with a 'weight_map' ({err!r})") from err
  pickles = sorted(p.name for p in directory.iterdir() if p.suffix in PICKLE_SUFFIXES)
  if pickles:
    raise PickledCheckpointError(
        f"{directory} has only pickled weights ({', '.join(pickles)}), which are never loaded (unpickling can run "
        f"arbitrary code); {WEIGHTS_FILE} is required: {_CONVERT_HINT}")
  raise MissingTensorError(f"{directory / WEIGHTS_FILE} not found (nor {INDEX_FILE}): no weights to import")


def _read_tensors(files: list[Path]) -> tuple[dict[str, np.ndarray], dict[str, str]]:
  """{canonical name: array} and {canonical name: 'original name' in file} over all files."""
  found, origin = {}, {}
  for path in files:
    try:
      tensors = safetensors.numpy.load_file(path)
    except FileNotFoundError as err:
      raise MissingTensorError(f"{path} (listed in {INDEX_FILE}) not found") from err
    except (safetensors.SafetensorError, OSError) as err:
      raise CorruptCheckpointError(f"{path} is not a readable safetensors file (truncated or corrupt: {err}); "
                                   "copy or export it again") from err
    for name, array in tensors.items():
      canonical = _canonical(name)
      if canonical in IGNORED_TENSORS:
        continue
      if canonical in found:
        raise UnexpectedTensorError(f"{path}: tensor {name!r} duplicates {origin[canonical]} (same weight with and "
                                    "without the 'bert.' prefix or as gamma/beta and weight/bias)")
      found[canonical], origin[canonical] = array, f"{name!r} in {path}"
  return found, origin


def _canonical(name: str) -> str:
  """Drop BertFor*'s "bert." (ModernBertFor*'s "model.", ElectraFor*'s "electra.") prefix and rename TF-era LayerNorm
  gamma/beta to weight/bias."""
  name = name.removeprefix("bert.").removeprefix("model.").removeprefix("electra.")
  stem, _, leaf = name.rpartition(".")
  if stem.endswith("LayerNorm") and leaf in ("gamma", "beta"):
    return f"{stem}.{'weight' if leaf == 'gamma' else 'bias'}"
  return name


def _gather(tensors: list[_Tensor], found: dict, origin: dict, cfg: EncoderConfig, source: str) -> dict:
  """Pop `tensors` from `found` into our layout (nested dicts of numpy arrays in cfg.param_dtype)."""
  missing = [name for t in tensors for name in t.hf_names if name not in found]
  if missing:
    more = f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""
    hint = ("; a checkpoint without a pooler (e.g. BertForMaskedLM) loads with init_missing_pooler=True"
            if any(name.startswith("pooler.") for name in missing) else "")
    raise MissingTensorError(f"{source}: missing tensor(s) {', '.join(missing[:5])}{more} needed for the config in "
                             f"{CONFIG_FILE} (num_hidden_layers={cfg.num_layers}){hint}")
  tree = {}
  for t in tensors:
    for name in t.hf_names:
      if found[name].shape != t.hf_shape:
        raise ShapeMismatchError(f"tensor {origin[name]} has shape {tuple(found[name].shape)}, expected "
                                 f"{t.hf_shape} from {CONFIG_FILE} (hidden_size={cfg.hidden_size}, "
                                 f"intermediate_size={cfg.intermediate_size}, vocab_size={cfg.vocab_size})")
    leaf = _to_ours(t, [found.pop(name) for name in t.hf_names])
    _put(tree, t.path, leaf.astype(cfg.param_dtype))
  return tree


def _tied_decoder(found: dict, origin: dict) -> None:
  """Check HF's tied MLM decoder (weight = word embeddings, bias = predictions.bias) and drop it."""
  for name in ("cls.predictions.decoder.weight", "generator_lm_head.weight"):
    weight = found.pop(name, None)
    if weight is not None and not np.array_equal(weight, found.get("embeddings.word_embeddings.weight")):
      raise UnsupportedArchitectureError(
          f"tensor {origin[name]} differs from the word embeddings: an untied MLM decoder is not supported (our MLM "
          "head reuses the input embeddings)")
  bias = found.pop("cls.predictions.decoder.bias", None)
  if bias is None:
    return
  if "cls.predictions.bias" not in found:
    found["cls.predictions.bias"] = bias
    origin["cls.predictions.bias"] = origin["cls.predictions.decoder.bias"]
  elif not np.array_equal(bias, found["cls.predictions.bias"]):
    raise UnsupportedArchitectureError(f"tensor {origin['cls.predictions.decoder.bias']} differs from "
                                       f"{origin['cls.predictions.bias']}; they must be the same (tied) vector")


def load_hf_checkpoint(directory: str | os.PathLike, init_missing_pooler: bool = False
                       ) -> tuple[EncoderConfig, dict, dict]:
  """(cfg, params, heads) from an HF BERT or ELECTRA directory: Encoder(cfg).apply({"params": params}, ...) runs it.

  heads: {"mlm": {"transform": {kernel, bias}, "layer_norm": {scale, bias}, "output_bias"},
  "nsp": {kernel, bias}} with whichever pretraining heads the checkpoint has ({} for a bare BertModel); the MLM
  decoder is tied to the word embeddings. Leaves are numpy arrays. init_missing_pooler: a checkpoint without the
  pooler (BertForMaskedLM) gets a zero pooler instead of raising MissingTensorError. ELECTRA (no pooler: always a
  zero one): ElectraForMaskedLM's head is "mlm"; ElectraForPreTraining's is {"electra": {"discriminator": ...,
  "generator": {"encoder": its encoder without the shared embeddings, "head": its "mlm"}}}, the generator read from
  the `generator/` subdirectory when there is one. A fine-tuned checkpoint (a *ForSequenceClassification,
  *ForTokenClassification or *ForQuestionAnswering, HF's or an encoderlab export's remote class) gives its encoder:
  its task head is left out, a pooler it lacks (heads that never read it) comes back as zeros.
  """
  directory = Path(directory)
  if directory.is_file():
    kind = PickledCheckpointError if directory.suffix in PICKLE_SUFFIXES else CheckpointError
    raise kind(f"{directory} is a file; pass the checkpoint directory holding {CONFIG_FILE} and {WEIGHTS_FILE}"
               + (f" ({_CONVERT_HINT})" if kind is PickledCheckpointError else ""))
  if not directory.is_dir():
    raise MissingConfigError(f"{directory} is not a directory: expected a HuggingFace checkpoint directory")
  cfg, electra, architecture = _read_config(directory)
  task = architecture.endswith(TASK_CLASS_SUFFIXES)
  files = _weight_files(directory)
  source = str(files[0]) if len(files) == 1 else str(directory / INDEX_FILE)
  found, origin = _read_tensors(files)
  if hf_layout(cfg) == "modernbert":
    params, heads = _gather_modernbert(cfg, found, origin, source)
  else:
    params, heads = _gather_bert(cfg, found, origin, source, init_missing_pooler or task, electra)
  if task:  # The task head (what is left outside the encoder's modules) and any prediction head are not imported.
    found = {name: array for name, array in found.items() if name.split(".")[0] in _ENCODER_ROOTS}
    heads = {}
  if found:
    names = sorted(origin[name] for name in found)
    raise UnexpectedTensorError(f"{source}: unexpected tensor(s) {', '.join(names[:5])}"
                                f"{f' (and {len(names) - 5} more)' if len(names) > 5 else ''}: not part of a BERT "
                                "(ELECTRA, ModernBERT) encoder or its pretraining heads (task heads are not imported)")
  if "electra" in heads and (directory / GENERATOR_DIRECTORY).is_dir():
    heads["electra"]["generator"] = _generator(directory / GENERATOR_DIRECTORY, params["embeddings"])
  return cfg, params, heads


def _gather_bert(cfg: EncoderConfig, found: dict, origin: dict, source: str, init_missing_pooler: bool,
                 electra: bool) -> tuple[dict, dict]:
  """(params, heads) popped from a BERT or ELECTRA checkpoint's tensors (`load_hf_checkpoint`)."""
  encoder_tensors = _encoder_tensors(cfg)
  pooler = [t for t in encoder_tensors if t.path[0] == "pooler"]
  zero_pooler = electra or init_missing_pooler and not any(name in found for t in pooler for name in t.hf_names)
  if zero_pooler:
    encoder_tensors = [t for t in encoder_tensors if t.path[0] != "pooler"]
  _tied_decoder(found, origin)
  params = _gather(encoder_tensors, found, origin, cfg, source)
  if zero_pooler:
    for t in pooler:
      _put(params, t.path, np.zeros(t.shape, cfg.param_dtype))
  heads = {}
  for head, tensors in _head_tensors(cfg, electra).items():
    if any(name in found for t in tensors for name in t.hf_names):
      heads.update(_gather(tensors, found, origin, cfg, source))
  return params, heads


def _gather_modernbert(cfg: EncoderConfig, found: dict, origin: dict, source: str) -> tuple[dict, dict]:
  """(params, heads) popped from a ModernBertModel / ModernBertForMaskedLM checkpoint's tensors: a zero pooler
  (ModernBERT has none; an encoderlab export's, `pooler.dense`, when it has one) and the MLM head with zeros for the
  biases the checkpoint's config leaves out (and the NSP head, `seq_relationship`, of an encoderlab export)."""
  weight = found.pop("decoder.weight", None)
  if weight is not None and not np.array_equal(weight, found.get("embeddings.tok_embeddings.weight")):
    raise UnsupportedArchitectureError(
        f"tensor {origin['decoder.weight']} differs from the word embeddings: an untied MLM decoder is not supported "
        "(our MLM head reuses the input embeddings)")
  params = _gather(_modernbert_tensors(cfg), found, origin, cfg, source)
  pooler = _modernbert_pooler(cfg)
  if any(name in found for t in pooler for name in t.hf_names):
    params |= _gather(pooler, found, origin, cfg, source)
  else:
    params["pooler"] = {"kernel": np.zeros((cfg.hidden_size, cfg.hidden_size), cfg.param_dtype)} | (
        {"bias": np.zeros(cfg.hidden_size, cfg.param_dtype)} if cfg.use_bias else {})
  heads = {}
  nsp = _modernbert_head_tensors(cfg)["nsp"]
  if any(name in found for t in nsp for name in t.hf_names):
    heads = _gather(nsp, found, origin, cfg, source)
  head = _modernbert_head_tensors(cfg)["mlm"]
  if not any(name in found for t in head for name in t.hf_names):
    return params, heads
  for name, width in zip(_MODERNBERT_OPTIONAL, (cfg.hidden_size, cfg.hidden_size, cfg.vocab_size)):
    if name not in found:
      found[name], origin[name] = np.zeros(width, cfg.param_dtype), f"{name!r} (absent: zeros)"
  return params, heads | _gather(head, found, origin, cfg, source)


def _generator(directory: Path, embeddings: Mapping) -> dict:
  """ELECTRA's generator (an ElectraForMaskedLM directory) as the "electra" head's generator tree; its embeddings
  must be the discriminator's (ELECTRA shares them)."""
  _, params, heads = load_hf_checkpoint(directory)
  if "mlm" not in heads:
    raise MissingTensorError(f"{directory}: the ELECTRA generator has no generator_predictions / generator_lm_head "
                             "(expected an ElectraForMaskedLM checkpoint)")
  for path, ours, theirs in _leaves(embeddings, params["embeddings"]):
    if ours.shape != theirs.shape or not np.array_equal(ours, theirs):
      raise UnsupportedArchitectureError(f"{directory}: embeddings/{path} differs from the discriminator's; ELECTRA's "
                                         "generator shares the discriminator's embeddings")
  return {"encoder": {k: v for k, v in params.items() if k != "embeddings"}, "head": heads["mlm"]}


def _leaves(a: Mapping, b: Mapping, prefix: str = ""):
  """(path, a's leaf, b's leaf) of two trees with the same keys."""
  for key, value in a.items():
    if isinstance(value, Mapping):
      yield from _leaves(value, b[key], f"{prefix}{key}/")
    else:
      yield f"{prefix}{key}", np.asarray(value), np.asarray(b[key])


def generator_config(cfg: EncoderConfig, generator: Mapping) -> EncoderConfig:
  """The EncoderConfig of an "electra" head's generator tree, from its shapes and the discriminator's `cfg`."""
  qkv = np.shape(generator["encoder"]["layer_0"]["attention"]["qkv"]["kernel"])  # [hidden, 3, heads, head_dim]
  intermediate = np.shape(generator["encoder"]["layer_0"]["mlp"]["intermediate"]["kernel"])[1]
  layers = sum(1 for key in generator["encoder"] if key.startswith("layer_"))
  return cfg.replace(hidden_size=qkv[0], num_heads=qkv[2], intermediate_size=intermediate, num_layers=layers,
                     embedding_size=cfg.embedding_width)


def hf_state(cfg: EncoderConfig, params: Mapping, heads: Mapping | None = None, electra: bool = False, *,
             pooler: bool | None = None, prefix: str | None = None, remote: bool = False) -> dict[str, np.ndarray]:
  """{HF tensor name: array} for our params (+ heads, then with BertForPreTraining's "bert." prefix, or
  ModernBertForMaskedLM's "model.": its head's all-zero dense bias and, bias-free, its LayerNorm bias left out);
  electra: ELECTRA's names ("electra." prefix, no pooler; heads "mlm" as the generator's, "electra" the
  discriminator's). A ModernBERT encoder's NSP head (`seq_relationship`) and pooler (`pooler.dense`, outside the
  prefix) are an encoderlab export's (launch/hf_modeling), HF's ModernBERT has neither. pooler: whether the pooler is
  written (default: BERT's always, but ELECTRA's; ModernBERT's with an NSP head); prefix: the encoder's (default:
  as above, "" without heads); remote: for launch/hf_modeling's ModernBERT classes, whose MLM head keeps every
  bias."""
  heads = heads or {}
  modernbert = hf_layout(cfg) == "modernbert"
  exportable = ("mlm", "nsp") if modernbert else PRETRAINING_HEADS
  unknown = sorted(set(heads) - set(exportable))
  if unknown:
    raise UnexpectedTensorError(f"heads has unknown entries {unknown}; only {exportable} export")
  if prefix is None:
    prefix = ("model." if modernbert else "electra." if electra else "bert.") if heads else ""
  pooler = ("nsp" in heads if modernbert else not electra) if pooler is None else pooler
  head_tensors = _modernbert_head_tensors(cfg) if modernbert else _head_tensors(cfg, electra)
  state = {}

  def put(tensors: list[_Tensor], tree: Mapping, what: str, prefix: str) -> None:
    for t in tensors:
      leaf = _get(tree, t.path, what)
      if leaf.shape != t.shape:
        raise ShapeMismatchError(f"{what}/{'/'.join(t.path)} has shape {leaf.shape}, expected {t.shape} for the "
                                 "config")
      state.update({prefix + n: a for n, a in zip(t.hf_names, _to_hf(t, leaf))})

  put(_modernbert_tensors(cfg) if modernbert else _encoder_tensors(cfg, pooler=pooler), params, "params", prefix)
  if modernbert and pooler:
    put(_modernbert_pooler(cfg), params, "params", "")
  for head in heads:
    put(head_tensors[head], heads, "heads", "")
  if modernbert and "mlm" in heads and not remote:
    if not state["head.dense.bias"].any():  # classifier_bias=False.
      del state["head.dense.bias"]
    if not cfg.use_bias:  # norm_bias=False holds for the head's LayerNorm too.
      if state["head.norm.bias"].any():
        raise UnsupportedArchitectureError(
            "heads/mlm/layer_norm/bias is nonzero, but a bias-free ModernBERT (use_bias=False: norm_bias=False) has "
            "no LayerNorm biases, its MLM head's included; export the encoder alone")
      del state["head.norm.bias"]
  return state


def holds_mlm(cfg: EncoderConfig, heads: Mapping) -> bool:
  """Whether HF's ModernBertForMaskedLM holds heads["mlm"] exactly: not when a bias-free encoder (use_bias=False:
  norm_bias=False) has an MLM head whose LayerNorm bias trained away from zero."""
  return cfg.use_bias or not np.asarray(heads["mlm"]["layer_norm"]["bias"]).any()


def architecture_of(heads: Iterable[str], layout: str = "bert", electra: bool = False) -> str:
  """The HF class of a checkpoint with these pretraining heads (PRETRAINING_HEADS) in `layout` (`hf_layout`), e.g.
  BertForPreTraining, ModernBertForMaskedLM; electra: ELECTRA's classes (ElectraModel, ElectraForMaskedLM,
  ElectraForPreTraining)."""
  key = tuple(sorted(heads))
  architectures = (_MODERNBERT_ARCHITECTURES if layout == "modernbert" else _ELECTRA_ARCHITECTURES if electra
                   else _ARCHITECTURES)
  if key not in architectures:
    raise UnexpectedTensorError(f"no HuggingFace class holds the heads {list(key)} together (known: "
                                f"{', '.join(f'{list(k)} -> {v}' for k, v in architectures.items())})")
  return architectures[key]


def linear_to_hf(name: str, dense: Mapping) -> dict[str, np.ndarray]:
  """A linen Dense tree {kernel [in, out], bias [out]} as the tensors of torch's nn.Linear `name` ([out, in] weight):
  how a task head's output layer (e.g. BertForSequenceClassification's `classifier`) is written."""
  return {f"{name}.weight": np.ascontiguousarray(np.asarray(dense["kernel"]).T),
          f"{name}.bias": np.asarray(dense["bias"])}


class TaskHead(NamedTuple):
  """A fine-tuned head as an HF class holds it (`save_hf_checkpoint`)."""
  architecture: str  # config.json's class, e.g. BertForTokenClassification (an encoderlab export's remote class).
  tensors: Mapping[str, np.ndarray]  # The head's tensors, HF names (e.g. {"classifier.weight": ..., ...}).
  config: Mapping[str, Any]  # Its config.json fields (id2label, ...).
  pooler: bool  # Whether the class holds the encoder's pooler (HF's token-level classes do not).


def save_hf_checkpoint(directory: str | os.PathLike, cfg: EncoderConfig, params: Mapping,
                       heads: Mapping | None = None, tokenizer_files: Iterable[str | os.PathLike] | None = None,
                       *, task_head: TaskHead | None = None, electra: bool | None = None,
                       config_fields: Mapping[str, Any] | None = None, files: Mapping[str, str] | None = None) -> Path:
  """Write config.json + model.safetensors (+ copies of tokenizer_files, e.g. vocab.txt, tokenizer.json).

  The result loads with transformers' BertModel.from_pretrained (BertForPreTraining/BertForMaskedLM when heads are
  given), or ModernBertModel (ModernBertForMaskedLM) for an encoder of `hf_layout` "modernbert". electra (default:
  whether heads has "electra"): ELECTRA's layout, ElectraForPreTraining with the discriminator head, and the
  generator of heads["electra"] (if any) as ElectraForMaskedLM in `generator/`. task_head: a fine-tuned head, e.g.
  TaskHead("BertForTokenClassification", {"classifier.weight": ..., ...}, {"id2label": ...}, pooler=False); the
  encoder's tensors then get the class's "bert." ("model.": ModernBERT) prefix. config_fields: merged into
  config.json last (a class of launch/hf_modeling, with the remote code's model_type and auto_map: its ModernBERT
  MLM head keeps every bias); files:
  {name: text} written beside (remote code, a model card, a tokenizer_config.json replacing the copied one). Every
  file is written to a temporary name first and renamed into place only once all are complete.
  """
  directory = Path(directory)
  heads = dict(heads or {})
  config_fields, files = dict(config_fields or {}), dict(files or {})
  electra = "electra" in heads if electra is None else electra
  layout = hf_layout(cfg)
  if task_head is not None:
    if heads:
      raise CheckpointError("a checkpoint holds either pretraining heads or one task head, not both")
    state = hf_state(cfg, params, pooler=task_head.pooler, prefix="model." if layout == "modernbert" else "bert.")
    state |= dict(task_head.tensors)
    hf_config = config_to_hf(cfg, task_head.architecture) | dict(task_head.config)
  else:
    state = hf_state(cfg, params, heads, electra, remote=config_fields.get("model_type") in REMOTE_MODEL_TYPES)
    architecture = config_fields.get("architectures", [None])[0] or architecture_of(heads, layout, electra)
    hf_config = config_to_hf(cfg, architecture)
    if layout == "modernbert" and "mlm" in heads:
      hf_config["classifier_bias"] = "head.dense.bias" in state
  hf_config |= config_fields
  generator = heads.get("electra", {}).get("generator")
  if generator is not None:
    save_hf_checkpoint(directory / GENERATOR_DIRECTORY, generator_config(cfg, generator),
                       {"embeddings": params["embeddings"], **generator["encoder"]}, {"mlm": generator["head"]},
                       tokenizer_files, electra=True)
  tokenizer_files = [Path(source) for source in tokenizer_files or ()]
  own = (CONFIG_FILE, WEIGHTS_FILE, INDEX_FILE)
  clashes = [str(name) for name in [*(source.name for source in tokenizer_files), *files] if name in own]
  if clashes:
    raise CheckpointError(f"tokenizer_files/files {clashes} would overwrite the checkpoint's own files; pass only "
                          "tokenizer files (vocab.txt, tokenizer.json, ...) and files beside them")
  directory.mkdir(parents=True, exist_ok=True)
  names = dict.fromkeys([CONFIG_FILE, WEIGHTS_FILE, *(source.name for source in tokenizer_files), *files])
  with contextlib.ExitStack() as stack:  # Leaving it swaps the complete files in, config.json (entered first) last.
    staged = {name: stack.enter_context(atomic_path(directory / name)) for name in names}
    for source in tokenizer_files:
      if source.name not in files:
        shutil.copyfile(source, staged[source.name])
    for name, text in files.items():
      staged[name].write_text(text, encoding="utf-8")
    safetensors.numpy.save_file(state, staged[WEIGHTS_FILE], metadata={"format": "pt"})
    staged[CONFIG_FILE].write_text(json.dumps(hf_config, indent=2, sort_keys=True) + "\n")
    for temporary in staged.values():
      with open(temporary, "rb") as f:
        os.fsync(f.fileno())
  return directory

"""The BERT layout (HF BertModel; ElectraModel is the same encoder with factorized embeddings and no pooler): our
encoder's tensors in its names and config.json's fields <-> EncoderConfig."""

from typing import Any

import numpy as np

from encoder.config import EncoderConfig
from encoder.hf.files import CheckpointError
from encoder.hf.tensors import Tensor, dense, embed, norm

# The encoder switches of a BERT (post-LN, learned absolute positions, biases, a dense feed-forward).
SWITCHES = dict(position_embedding="absolute", gated_feed_forward=False, use_bias=True, pre_layer_norm=False,
                embedding_norm=False, local_attention_window=0)
# HF hidden_act -> ours; "gelu" is the exact (erf) GELU, the other two the tanh approximation.
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
HF_ACTIVATION = {"gelu": "gelu", "gelu_tanh": "gelu_new"}


def encoder_tensors(cfg: EncoderConfig, pooler: bool = True) -> list[Tensor]:
  """Every leaf of Encoder(cfg)'s params, in HF BertModel / ElectraModel names (no "bert."/"electra." prefix);
  pooler=False leaves the pooler out (ELECTRA has none)."""
  H, A, D, E = cfg.hidden_size, cfg.num_heads, cfg.head_dim, cfg.embedding_width
  tensors = (embed(("embeddings", "word_embeddings"), "embeddings.word_embeddings", cfg.vocab_size, E)
             + embed(("embeddings", "position_embeddings"), "embeddings.position_embeddings", cfg.max_positions, E)
             + embed(("embeddings", "token_type_embeddings"), "embeddings.token_type_embeddings",
                     cfg.type_vocab_size, E)
             + norm(("embeddings", "layer_norm"), "embeddings.LayerNorm", E))
  if E != H:
    tensors += dense(("embeddings_project",), "embeddings_project", E, H)
  for i in range(cfg.num_layers):
    ours, hf = f"layer_{i}", f"encoder.layer.{i}"
    qkv = tuple(f"{hf}.attention.self.{part}" for part in ("query", "key", "value"))
    tensors += [
        Tensor((ours, "attention", "qkv", "kernel"), (H, 3, A, D), tuple(n + ".weight" for n in qkv), (H, H),
               "qkv_kernel"),
        Tensor((ours, "attention", "qkv", "bias"), (3, A, D), tuple(n + ".bias" for n in qkv), (H,), "qkv_bias"),
        Tensor((ours, "attention", "output", "kernel"), (A, D, H), (f"{hf}.attention.output.dense.weight",),
               (H, H), "transpose_reshape"),
        Tensor((ours, "attention", "output", "bias"), (H,), (f"{hf}.attention.output.dense.bias",), (H,), "copy")]
    tensors += (norm((ours, "attention_layer_norm"), f"{hf}.attention.output.LayerNorm", H)
                + dense((ours, "mlp", "intermediate"), f"{hf}.intermediate.dense", H, cfg.intermediate_size)
                + dense((ours, "mlp", "output"), f"{hf}.output.dense", cfg.intermediate_size, H)
                + norm((ours, "output_layer_norm"), f"{hf}.output.LayerNorm", H))
  return tensors + (dense(("pooler",), "pooler.dense", H, H) if pooler else [])


def integer_fields(hf_config: dict, source: str, required: dict, optional: dict) -> dict[str, int]:
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


def config_from_hf(hf_config: dict, source: str, unsupported) -> EncoderConfig:
  """EncoderConfig from a BertConfig's or ElectraConfig's config.json; anything but a post-LN absolute-position
  encoder is refused (`unsupported(field, why)`: the error to raise)."""
  if hf_config.get("position_embedding_type", "absolute") != "absolute":
    raise unsupported("position_embedding_type", "only learned absolute positions are implemented")
  if hf_config.get("hidden_act", "gelu") not in ACTIVATIONS:
    raise unsupported("hidden_act", f"the encoder implements only {sorted(ACTIVATIONS)}")
  for field in ("is_decoder", "add_cross_attention"):
    if hf_config.get(field):
      raise unsupported(field, "causal decoders and cross-attention are not part of this encoder")
  fields = dict(vocab_size="vocab_size", hidden_size="hidden_size", num_layers="num_hidden_layers",
                num_heads="num_attention_heads", intermediate_size="intermediate_size")
  optional = dict(max_positions=("max_position_embeddings", 512), type_vocab_size=("type_vocab_size", 2),
                  pad_token_id=("pad_token_id", 0), embedding_size=("embedding_size", 0))
  values = integer_fields(hf_config, source, fields, optional)
  if values["embedding_size"] == values["hidden_size"]:
    values["embedding_size"] = 0  # Not factorized: no projection.
  try:
    return EncoderConfig(
        **values,  # type: ignore[arg-type]  # mypy checks **dict ints against every field; its keys are int fields
        layer_norm_eps=float(hf_config.get("layer_norm_eps", 1e-12)),
        hidden_dropout=float(hf_config.get("hidden_dropout_prob", 0.1)),
        attention_dropout=float(hf_config.get("attention_probs_dropout_prob", 0.1)),
        hidden_act=ACTIVATIONS[hf_config.get("hidden_act", "gelu")],
        initializer_range=float(hf_config.get("initializer_range", 0.02)))
  except (TypeError, ValueError) as err:
    raise CheckpointError(f"{source}: {err}") from err


def config_to_hf(cfg: EncoderConfig, architecture: str, electra: bool) -> dict[str, Any]:
  """The config.json dict that transformers' BertConfig (electra: ElectraConfig) reads back as `cfg`."""
  return {
      "architectures": [architecture], "model_type": "electra" if electra else "bert", "vocab_size": cfg.vocab_size,
      "hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
      "intermediate_size": cfg.intermediate_size, "hidden_act": HF_ACTIVATION[cfg.hidden_act],
      "hidden_dropout_prob": cfg.hidden_dropout, "attention_probs_dropout_prob": cfg.attention_dropout,
      "max_position_embeddings": cfg.max_positions, "type_vocab_size": cfg.type_vocab_size,
      "initializer_range": cfg.initializer_range, "layer_norm_eps": cfg.layer_norm_eps,
      "pad_token_id": cfg.pad_token_id, "position_embedding_type": "absolute", "is_decoder": False,
      "add_cross_attention": False, "tie_word_embeddings": True, "dtype": np.dtype(cfg.param_dtype).name,
      **({"embedding_size": cfg.embedding_width} if electra else {})}

"""The ModernBERT layout (HF ModernBertModel, "model." prefix in its *For* classes): our encoder with the
`modernbert` switches (encoder.config ARCHITECTURES), its tensors in ModernBERT's names and config.json's fields <->
EncoderConfig. HF's ModernBERT has no pooler; an encoderlab export (launch/hf_modeling) holds ours as `pooler.dense`."""

from typing import Any

import numpy as np

from encoder.config import EncoderConfig
from encoder.hf.bert import ACTIVATIONS, HF_ACTIVATION, integer_fields
from encoder.hf.files import CheckpointError, UnsupportedArchitectureError
from encoder.hf.tensors import Found, Tensor, embed, linear, norm

# The switches that make our encoder a ModernBERT.
SWITCHES: dict[str, Any] = dict(position_embedding="rotary", gated_feed_forward=True, pre_layer_norm=True,
                                embedding_norm=True, type_vocab_size=0)
_ACTIVATIONS = dict(ACTIVATIONS, silu="silu", swish="silu")
HF_ACTIVATIONS = dict(HF_ACTIVATION, silu="silu")


def _norm(path, hf, width, bias: bool):
  """A LayerNorm's weight (+ bias when the checkpoint has norm_bias)."""
  return norm(path, hf, width) if bias else norm(path, hf, width)[:1]


def encoder_tensors(cfg: EncoderConfig) -> list[Tensor]:
  """Every leaf of Encoder(cfg)'s params but the pooler (ModernBERT has none), in HF ModernBertModel names."""
  H, A, D, b = cfg.hidden_size, cfg.num_heads, cfg.head_dim, cfg.use_bias
  tensors = (embed(("embeddings", "word_embeddings"), "embeddings.tok_embeddings", cfg.vocab_size, H)
             + _norm(("embeddings", "layer_norm"), "embeddings.norm", H, b))
  for i in range(cfg.num_layers):
    ours, hf = f"layer_{i}", f"layers.{i}"
    if i:  # The first block reads the normalized embeddings (embedding_norm).
      tensors += _norm((ours, "attention_layer_norm"), f"{hf}.attn_norm", H, b)
    tensors += (linear((ours, "attention", "qkv"), f"{hf}.attn.Wqkv", (H,), (3, A, D), b)
                + linear((ours, "attention", "output"), f"{hf}.attn.Wo", (A, D), (H,), b)
                + _norm((ours, "output_layer_norm"), f"{hf}.mlp_norm", H, b)
                + linear((ours, "mlp", "intermediate"), f"{hf}.mlp.Wi", (H,), (2, cfg.intermediate_size), b)
                + linear((ours, "mlp", "output"), f"{hf}.mlp.Wo", (cfg.intermediate_size,), (H,), b))
  return tensors + _norm(("final_layer_norm",), "final_norm", H, b)


def pooler_tensors(cfg: EncoderConfig) -> list[Tensor]:
  """Our pooler (BERT's, which HF's ModernBERT lacks) as an encoderlab export holds it: `pooler.dense`."""
  return linear(("pooler",), "pooler.dense", (cfg.hidden_size,), (cfg.hidden_size,), cfg.use_bias)


def take_encoder(found: Found) -> dict:
  """Our params popped from a ModernBertModel's tensors, with the pooler of an encoderlab export or a zero one."""
  cfg = found.cfg
  params = found.take(encoder_tensors(cfg))
  pooler = pooler_tensors(cfg)
  if found.holds(pooler):
    return params | found.take(pooler)
  params["pooler"] = {"kernel": np.zeros((cfg.hidden_size, cfg.hidden_size), cfg.param_dtype)} | (
      {"bias": np.zeros(cfg.hidden_size, cfg.param_dtype)} if cfg.use_bias else {})
  return params


def _global_every(layer_types: list, source: str) -> int:
  """The period p of ModernBERT's layer_types (layer i "full_attention" iff i % p == 0); 0 when every layer is."""
  if all(kind == "full_attention" for kind in layer_types):
    return 0
  for period in range(2, len(layer_types) + 1):
    if all((kind == "full_attention") == (i % period == 0) for i, kind in enumerate(layer_types)):
      return period
  raise UnsupportedArchitectureError(f"{source}: field 'layer_types' = {layer_types!r}: only global attention every "
                                     "p-th layer from the first (i % p == 0), local in the others, is implemented")


def config_from_hf(hf_config: dict, source: str) -> EncoderConfig:
  """EncoderConfig (the `modernbert` switches) from a ModernBertConfig's config.json."""
  def unsupported(field, why):
    return UnsupportedArchitectureError(f"{source}: field {field!r} = {hf_config.get(field)!r}: {why}")
  activation = hf_config.get("hidden_activation", "gelu")
  if activation not in _ACTIVATIONS:
    raise unsupported("hidden_activation", f"the encoder implements only {sorted(_ACTIVATIONS)}")
  biases = {field: bool(hf_config.get(field, False)) for field in ("attention_bias", "mlp_bias", "norm_bias")}
  if len(set(biases.values())) > 1:
    raise unsupported("norm_bias", f"biases on in some layers only ({biases}): use_bias switches all of them")
  values = integer_fields(
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
        **values,  # type: ignore[arg-type]  # mypy checks **dict ints against every field; its keys are int fields
        **SWITCHES, use_bias=biases["norm_bias"], global_attention_every=every or 1,
        rope_theta=thetas["full_attention"], rope_local_theta=thetas["sliding_attention"],
        hidden_act=_ACTIVATIONS[activation], layer_norm_eps=float(hf_config.get("norm_eps", 1e-5)),
        hidden_dropout=float(hf_config.get("embedding_dropout", 0.0)),
        attention_dropout=float(hf_config.get("attention_dropout", 0.0)),
        initializer_range=float(hf_config.get("initializer_range", 0.02)))
  except (TypeError, ValueError) as err:
    raise CheckpointError(f"{source}: {err}") from err


def config_to_hf(cfg: EncoderConfig, architecture: str) -> dict[str, Any]:
  """The config.json dict that transformers' ModernBertConfig reads back as `cfg` (hidden_dropout is its embedding
  and MLP dropout)."""
  layer_types = ["full_attention" if cfg.is_global(i) else "sliding_attention" for i in range(cfg.num_layers)]
  return {
      "architectures": [architecture], "model_type": "modernbert", "vocab_size": cfg.vocab_size,
      "hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
      "intermediate_size": cfg.intermediate_size, "hidden_activation": HF_ACTIVATIONS[cfg.hidden_act],
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

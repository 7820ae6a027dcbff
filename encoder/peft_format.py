"""LoRA in HuggingFace PEFT's file format, and LoRA merged into the dense weights (docs/regimes.md, "LoRA and
adapters").

A PEFT LoRA adapter is a directory of adapter_config.json (peft.LoraConfig's fields: peft_type "LORA", r, lora_alpha,
target_modules, task_type, modules_to_save, base_model_name_or_path, ...) and adapter_model.safetensors, whose keys
name HF BERT's modules: base_model.model.[bert.]encoder.layer.<i>.<module>.lora_A.weight [r, in] and lora_B.weight
[out, r] (torch's [out, in] layout: our a and b transposed), plus the task head's tensors (modules_to_save) as
base_model.model.<head>.weight. Written and read here with safetensors and JSON; peft itself is only the tests'
reference (tests/launch/test_peft_parity.py).
"""

import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.numpy

from encoder.config import LORA_TARGETS, REGIME_FIELDS, EncoderConfig
from encoder.errors import ConfigError
from encoder.files import atomic_path

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
# Each LoRA target's module in HF's BERT layer, and where its branch sits in ours (under layer_<i>).
HF_MODULES = {"query": "attention.self.query", "key": "attention.self.key", "value": "attention.self.value",
              "attention_output": "attention.output.dense", "intermediate": "intermediate.dense",
              "output": "output.dense"}
OURS = {"query": "attention", "key": "attention", "value": "attention", "attention_output": "attention",
        "intermediate": "mlp", "output": "mlp"}
QKV = ("query", "key", "value")  # The fused qkv kernel's slices [hidden, 3, heads, head_dim], in order.
# peft's task types of the heads HF has (launch.export's AutoModelFor<task>) -> where the encoder sits in the model.
TASK_TYPES = {"SequenceClassification": "SEQ_CLS", "TokenClassification": "TOKEN_CLS",
              "QuestionAnswering": "QUESTION_ANS"}
_LORA_KEY = re.compile(r"base_model\.model\.(?:bert\.)?encoder\.layer\.(\d+)\.(" +
                       "|".join(re.escape(m) for m in HF_MODULES.values()) + r")\.lora_([AB])\.weight")
_TARGET_OF = {module: target for target, module in HF_MODULES.items()}


def base_config(cfg: EncoderConfig) -> EncoderConfig:
  """cfg without LoRA and adapters (the plain encoder the run started from)."""
  defaults = {f.name: f.default for f in dataclasses.fields(EncoderConfig) if f.name in REGIME_FIELDS}
  return cfg.replace(**defaults)


def _kernel_shape(cfg: EncoderConfig, target: str) -> tuple[int, ...]:
  """The shape the LoRA product A B [in, out] takes to add to its dense kernel (a slice of qkv for q, k, v)."""
  h, heads, d = cfg.hidden_size, cfg.num_heads, cfg.head_dim
  width = (2, cfg.intermediate_size) if cfg.gated_feed_forward else (cfg.intermediate_size,)
  return {"query": (h, heads, d), "key": (h, heads, d), "value": (h, heads, d), "attention_output": (heads, d, h),
          "intermediate": (h,) + width, "output": (cfg.intermediate_size, h)}[target]


def _sizes(cfg: EncoderConfig, target: str) -> tuple[int, int]:
  """(in, out) of LoRA's product on `target`: HF's Linear's in_features and out_features."""
  shape = _kernel_shape(cfg, target)
  split = 2 if target == "attention_output" else 1  # Its kernel is [heads, head_dim, hidden].
  return int(np.prod(shape[:split])), int(np.prod(shape[split:]))


def _dense_name(target: str) -> str:
  return {"intermediate": "intermediate", "output": "output", "attention_output": "output"}.get(target, "qkv")


def merge_lora(cfg: EncoderConfig, params: Mapping[str, Any]) -> dict[str, Any]:
  """The encoder tree `params` of Encoder(cfg) as the plain encoder's (base_config(cfg)): each LoRA branch folded into
  its kernel, W + (alpha / rank) A B, in float32. Adapters cannot fold into a dense layer: refused."""
  if cfg.adapter_size:
    raise ConfigError("config.regime='adapters': bottleneck adapters (a nonlinearity between two projections) do not "
                      "merge into HF BERT's dense weights; export a LoRA, bitfit or full run, or read the adapters "
                      "run with launch.predict")
  scaling = cfg.lora_alpha / cfg.lora_rank if cfg.lora_rank else 0.0
  merged = {name: dict(tree) if name.startswith("layer_") else tree for name, tree in params.items()}
  for name, block in merged.items():
    if not name.startswith("layer_"):
      continue
    for sublayer in ("attention", "mlp"):
      tree = dict(block[sublayer])
      branches = {key[len("lora_"):]: tree.pop(key) for key in list(tree) if key.startswith("lora_")}
      for target, branch in branches.items():
        dense = dict(tree[_dense_name(target)])
        kernel = np.array(dense["kernel"], np.float32)
        delta = (np.asarray(branch["a"], np.float32) @ np.asarray(branch["b"], np.float32) * scaling).reshape(
            _kernel_shape(cfg, target))
        if target in QKV:
          kernel[:, QKV.index(target)] += delta
        else:
          kernel += delta
        tree[_dense_name(target)] = dense | {"kernel": kernel.astype(np.asarray(dense["kernel"]).dtype)}
      block[sublayer] = tree
  return merged


def target_modules(cfg: EncoderConfig) -> str:
  """peft's target_modules regex (re.fullmatch on module names) of cfg's targets in cfg's layers: a pattern, since
  'output.dense' as a name suffix would also catch attention.output.dense."""
  layers = "|".join(map(str, cfg.lora_layers))
  modules = "|".join(re.escape(HF_MODULES[t]) for t in cfg.lora_targets)
  return rf".*encoder\.layer\.({layers})\.({modules})"


def write_adapter(directory: str | Path, cfg: EncoderConfig, params: Mapping[str, Any], base: str | None,
                  task: str | None = None, head: Mapping[str, np.ndarray] | None = None) -> None:
  """adapter_config.json and adapter_model.safetensors of the LoRA branches in encoder tree `params` into
  `directory`, for peft.PeftModel.from_pretrained on `base` (base_model_name_or_path: the run's init, a name or
  directory). task: the HF head class's task ("SequenceClassification", ...: a PEFT task_type, the encoder then under
  "bert."), with `head` its tensors in HF's names ({"classifier.weight": array, ...}: modules_to_save)."""
  if not cfg.lora_rank:
    raise ConfigError("config.regime: only a LoRA run (regime 'lora') has a PEFT adapter to write")
  prefix = "base_model.model." + ("bert." if task else "")
  arrays: dict[str, np.ndarray] = {}
  for layer in cfg.lora_layers:
    for target in cfg.lora_targets:
      branch = params[f"layer_{layer}"][OURS[target]][f"lora_{target}"]
      module = f"{prefix}encoder.layer.{layer}.{HF_MODULES[target]}"
      arrays[f"{module}.lora_A.weight"] = np.ascontiguousarray(np.asarray(branch["a"], np.float32).T)
      arrays[f"{module}.lora_B.weight"] = np.ascontiguousarray(np.asarray(branch["b"], np.float32).T)
  head = dict(head or {})
  arrays |= {f"base_model.model.{name}": np.ascontiguousarray(np.asarray(array, np.float32))
             for name, array in head.items()}
  fields = {"peft_type": "LORA", "r": cfg.lora_rank, "lora_alpha": cfg.lora_alpha, "lora_dropout": cfg.lora_dropout,
            "target_modules": target_modules(cfg), "bias": "none", "fan_in_fan_out": False, "use_rslora": False,
            "use_dora": False, "init_lora_weights": True, "inference_mode": True, "rank_pattern": {},
            "alpha_pattern": {}, "layers_to_transform": None, "layers_pattern": None,
            "base_model_name_or_path": base, "revision": None,
            "task_type": TASK_TYPES[task] if task else None,
            "modules_to_save": sorted({name.rsplit(".", 1)[0] for name in head}) or None}
  directory = Path(directory)
  directory.mkdir(parents=True, exist_ok=True)
  with atomic_path(directory / WEIGHTS) as path:
    safetensors.numpy.save_file(arrays, path, metadata={"format": "pt"})
  with atomic_path(directory / CONFIG) as path:
    path.write_text(json.dumps(fields, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def read_config(directory: str | Path) -> dict[str, Any]:
  """adapter_config.json of a PEFT LoRA adapter; anything but plain LoRA (DoRA, rsLoRA, per-module ranks, LoRA
  biases, another peft_type) is refused, naming the field."""
  path = Path(directory) / CONFIG
  if not path.is_file():
    raise ConfigError(f"{path} does not exist; expected a PEFT adapter directory (adapter_config.json, {WEIGHTS})")
  try:
    fields = json.loads(path.read_text(encoding="utf-8"))
  except ValueError as err:
    raise ConfigError(f"{path}: not JSON ({err})") from None
  plain = {"peft_type": "LORA", "use_dora": False, "use_rslora": False, "fan_in_fan_out": False, "bias": "none",
           "lora_bias": False, "rank_pattern": {}, "alpha_pattern": {}}
  for field, value in plain.items():
    if fields.get(field, value) != value:
      raise ConfigError(f"{path}: {field}={fields[field]!r}; only plain LoRA adapters load ({field}={value!r})")
  return fields


def read_adapter(directory: str | Path, cfg: EncoderConfig) -> tuple[dict[str, Any], dict[str, Any]]:
  """(the EncoderConfig LoRA fields, the LoRA branches as an encoder subtree {layer_<i>: {attention|mlp:
  {lora_<target>: {a, b}}}}) of the PEFT adapter in `directory`, for an encoder of plain config `cfg` (the base's).
  An adapter made for another base (a layer the encoder lacks, another width) is refused with one line naming the
  tensor and the field."""
  fields = read_config(directory)
  path = Path(directory) / WEIGHTS
  if not path.is_file():
    raise ConfigError(f"{path} does not exist; expected the adapter's weights beside {CONFIG}")
  rank = fields.get("r")
  found: dict[tuple[int, str], dict[str, np.ndarray]] = {}
  for key, array in safetensors.numpy.load_file(str(path)).items():
    match = _LORA_KEY.fullmatch(key)
    if match is None:
      if ".lora_" in key:
        raise ConfigError(f"{path}: tensor {key} is not LoRA on one of HF BERT's projections "
                          f"({', '.join(HF_MODULES.values())})")
      continue  # A task head's tensor (modules_to_save): the head comes from the run's task.
    layer, target, which = int(match[1]), _TARGET_OF[match[2]], match[3]
    if layer >= cfg.num_layers:
      raise ConfigError(f"{path}: tensor {key}: layer {layer}, but the run's encoder has {cfg.num_layers} layers "
                        f"(base_model_name_or_path={fields.get('base_model_name_or_path')!r} is not the run's base)")
    in_size, out_size = _sizes(cfg, target)
    want = (rank, in_size) if which == "A" else (out_size, rank)
    if tuple(array.shape) != want:
      raise ConfigError(f"{path}: tensor {key} has shape {list(array.shape)}, expected {list(want)} for r={rank} "
                        f"on the run's encoder (hidden_size={cfg.hidden_size}, intermediate_size="
                        f"{cfg.intermediate_size}); base_model_name_or_path="
                        f"{fields.get('base_model_name_or_path')!r} is not the run's base")
    found.setdefault((layer, target), {})["a" if which == "A" else "b"] = np.ascontiguousarray(array.T)
  if not found:
    raise ConfigError(f"{path}: no LoRA tensors on HF BERT's encoder layers")
  layers = sorted({layer for layer, _ in found})
  targets = tuple(t for t in LORA_TARGETS if any(t == target for _, target in found))
  missing = [f"layer {layer} {target}" for layer in layers for target in targets if (layer, target) not in found]
  incomplete = [f"layer {layer} {target}" for (layer, target), pair in found.items() if len(pair) < 2]
  if missing or incomplete:
    raise ConfigError(f"{path}: LoRA must cover the same projections in each of its layers, A and B each; "
                      f"missing {(missing + incomplete)[:4]}")
  tree: dict[str, Any] = {}
  for (layer, target), pair in found.items():
    tree.setdefault(f"layer_{layer}", {}).setdefault(OURS[target], {})[f"lora_{target}"] = pair
  lora = dict(lora_rank=rank, lora_alpha=float(fields.get("lora_alpha", 8)),
              lora_dropout=float(fields.get("lora_dropout", 0.0)), lora_targets=targets, lora_layers=tuple(layers))
  return lora, tree

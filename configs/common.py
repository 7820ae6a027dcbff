"""Shared config blocks (model size, optimizer, engine schedule) and big_vision-style string arguments.

Every experiment file (configs/pretrain.py, ...) builds its ConfigDict from these pieces so that a default lives in
one place; size presets come from encoder.config.PRESETS.
"""

import dataclasses
import difflib
from typing import Any

import ml_collections

from encoder import init_from
from encoder.config import ARCHITECTURES, AUTO, PLATFORM_FIELDS, REGIME_FIELDS, preset
from encoder.errors import ConfigError


def arg_items(arg: str | None) -> list[tuple[str, bool, str]]:
  """'task=sick,runlocal' -> [('task', True, 'sick'), ('runlocal', False, '')]: (name, has a value, value)."""
  parts = (item.partition("=") for item in filter(None, (arg or "").split(",")))
  return [(key, bool(equals), value) for key, equals, value in parts]


def parse_arg(arg: str | None, **defaults) -> ml_collections.ConfigDict:
  """'size=mini,objectives=mlm+nsp,runlocal' -> ConfigDict; values take the type of their default, bare words are
  True. An unknown name is an error listing the known ones (big_vision's parse_arg)."""
  parsed = ml_collections.ConfigDict(defaults)
  for key, has_value, value in arg_items(arg):
    if key not in defaults:
      close = difflib.get_close_matches(key, defaults, n=1)
      raise ConfigError(f"unknown config argument {key!r} in {arg!r}{f'; did you mean {close[0]!r}?' if close else ''}"
                        f" (known: {', '.join(sorted(defaults))})")
    default = defaults[key]
    if not has_value:
      parsed[key] = True
    elif isinstance(default, bool):
      if value.lower() not in ("1", "true", "yes", "0", "false", "no"):
        raise ConfigError(f"config argument {key}={value!r} in {arg!r}: expected true or false")
      parsed[key] = value.lower() in ("1", "true", "yes")
    else:
      try:
        parsed[key] = type(default)(value)
      except ValueError:
        kind = {int: "an integer", float: "a number"}.get(type(default), type(default).__name__)
        raise ConfigError(f"config argument {key}={value!r} in {arg!r}: expected {kind} (e.g. {key}={default})"
                          ) from None
  return parsed


def model_config(size: str, arch: str = "bert", **overrides) -> ml_collections.ConfigDict:
  """The EncoderConfig fields of a PRESETS size with the ARCHITECTURES switches `arch` as a ConfigDict (dtypes as
  strings); vocab_size 0 = the tokenizer's, attention, kernels and bf16_dots "auto" = the platform's, chosen at
  start-up."""
  if arch not in ARCHITECTURES:
    raise ConfigError(f"unknown architecture arch={arch!r}; choose one of {', '.join(sorted(ARCHITECTURES))}")
  fields = {k: v for k, v in dataclasses.asdict(preset(size, **ARCHITECTURES[arch])).items()
            if k not in REGIME_FIELDS}  # A run's regime sets those (config.lora, config.adapters).
  fields.update(vocab_size=0, dtype="float32", param_dtype="float32", activation_dtype="float32",
                **dict.fromkeys(PLATFORM_FIELDS, AUTO))
  fields.update(overrides)
  return ml_collections.ConfigDict(fields)


def optimizer_config(**overrides) -> ml_collections.ConfigDict:
  """BERT's optimizer: AdamW, linear warmup then linear (decay_power 1) decay to 0, global-norm clipping."""
  opt = ml_collections.ConfigDict()
  opt.name = "adamw"  # "adamw" or "lamb" (LAMB, You et al. 2019: Adam with a trust ratio per array; large batches).
  opt.learning_rate = 1e-4  # Peak learning rate, reached at the end of warmup.
  opt.warmup_steps = 1000  # Linear warmup from 0 over this many optimizer steps.
  opt.end_learning_rate = 0.0  # The decay reaches this value at num_train_steps.
  # Decay after warmup: lr_end + (lr - lr_end) * (1 - p)^power, p the fraction of post-warmup steps done (1: BERT's
  # linear decay; 0.5: NVIDIA's LAMB recipe's power, docs/pretraining.md).
  opt.decay_power = 1.0
  opt.weight_decay = 0.01  # Decoupled weight decay; never applied to biases, LayerNorm or embedding LayerNorm.
  opt.b1 = 0.9  # Adam beta1.
  opt.b2 = 0.999  # Adam beta2.
  opt.eps = 1e-6  # Adam epsilon.
  opt.clip_norm = 1.0  # Global gradient-norm clipping threshold (0 disables it).
  # Evaluate and test an exponential moving average of the parameters, updated after every step with this decay
  # (0: off, the parameters themselves; 1 - 1/n averages over about the last n steps).
  opt.ema_decay = 0.0
  opt.update(overrides)
  return opt


def engine_config(config: ml_collections.ConfigDict, *, steps: int) -> ml_collections.ConfigDict:
  """Adds the training-engine fields shared by every experiment (schedule, parallelism, checkpoints, logging)."""
  config.seed = 0  # Seeds parameter init, dropout, shuffling and masking.
  config.num_train_steps = steps  # Optimizer steps to train for.
  config.batch_size = 256  # Global examples per optimizer step (all devices and hosts together).
  config.grad_accum_steps = 1  # Split each step's batch into this many micro-batches; gradients are averaged.
  config.parallelism = "jit"  # "jit": one program over a device mesh; "pmap": replicated step with pmean.
  config.mesh_model = 1  # Size of the mesh's model axis (shards attention heads and MLP width); data axis = rest.
  # Also shard parameters, gradients and optimizer state over the data axis (FSDP / ZeRO-3; launch/sharding.py).
  config.fsdp = False
  config.log_every_steps = 50  # Fetch on-device metrics and write a metrics line every this many steps.
  config.eval_every_steps = 1000  # Evaluate every this many steps (and always at the end); 0 = only at the end.
  config.eval_steps = 20  # Batches per evaluation (fewer when the split is smaller); -1 = the whole split.
  config.checkpoint_every_steps = 1000  # Save a checkpoint every this many steps (and at the end; 0: at the end only).
  config.keep_checkpoints = 3  # Keep this many latest checkpoints (plus the best one).
  config.best_metric = "eval/loss"  # Metric that picks the best checkpoint ("" keeps only the latest).
  config.best_mode = "min"  # "min" or "max" for best_metric.
  config.measure_mfu = True  # Time a 2048^3 f32 matmul once at start as the MFU ceiling.
  config.compile_ahead = True  # jit: compile each batch shape's step on a background thread (launch.compile_ahead).
  # JAX's persistent compilation cache ('' = off); $ENCODERLAB_COMPILATION_CACHE wins (launch.compilation_cache).
  config.compilation_cache = "~/.cache/encoderlab/xla"
  return config


def model_from_init(init: str) -> tuple[ml_collections.ConfigDict, str]:
  """(config.model, tokenizer) of the checkpoint named by `init` ("hf:..." or "run:..."), read from its config
  (encoder.init_from.model_fields)."""
  fields, tokenizer = init_from.model_fields(init)
  return ml_collections.ConfigDict(fields), tokenizer


def leaf_paths(config: ml_collections.ConfigDict, prefix: str = "") -> dict[str, Any]:
  """{'optimizer.learning_rate': 1e-4, ...}: every leaf of a (nested) ConfigDict by dotted path."""
  out = {}
  for key, value in config.items():
    path = f"{prefix}{key}"
    if isinstance(value, ml_collections.ConfigDict):
      out.update(leaf_paths(value, path + "."))
    else:
      out[path] = value
  return out


def is_finetuning(config: ml_collections.ConfigDict) -> bool:
  """Whether `config` fine-tunes a task (a config.task block) rather than pretrains (config.task = "")."""
  return isinstance(config.get("task"), ml_collections.ConfigDict)

"""The fields a command line sets, and the refusal of those the run would not read.

A field counts as set by the user when a `--config.<key>` override names it, or when the config file's string
argument asks for it (`init=`; `size=` and `arch=`, which ask for model fields). A config file's own values, a task
preset's above all, are never refused here: only what the user gave. A set field is refused, naming it and why it has
no effect, when the chosen task family does not read it (another family's field), when the task reads a packaged
dataset (`task.format`, `files`, `columns`), when the objective or regime that reads it is not in use, when another
field overrides it (`optimizer.warmup_steps` under a warmup fraction, `data.train_files` under a prepared corpus),
when the architecture has no use for it (RoPE's thetas with absolute positions, ...), and when it asks a run from an
`init` for another architecture or tokenizer than the checkpoint's (`configs.checks.check_init`; encoder.init_from.TAKES
lists the model fields an init takes).
"""

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import ml_collections
from absl import flags
from ml_collections import config_flags

from configs import common
from encoder.config import ARCHITECTURES, PRESETS, EncoderConfig
from encoder.errors import ConfigError

# Fine-tuning fields that only some regimes (config.regime) read: field -> the regimes that read it.
# config.lora.* and config.adapters.* are read by the regime of their block's name (tasks.regimes.BLOCKS, not imported
# here: it loads JAX; tests/tasks/test_regimes.py checks that these are its fields).
REGIME_READERS: dict[str, tuple[str, ...]] = {
    "top_k": ("top_k",), **{f"lora.{f}": ("lora",) for f in ("rank", "alpha", "dropout", "targets", "layers")},
    **{f"adapters.{f}": ("adapters",) for f in ("size", "placement", "layers")}}
# ... and those a regime does not read: regime -> fields (a frozen encoder has no layers to decay).
REGIME_IGNORES: dict[str, tuple[str, ...]] = {"frozen": ("layer_decay",)}
# Reader options of custom files, read only when config.task.dataset is "" (tasks.finetune_data.dataset_of).
FILE_FIELDS = ("format", "files", "columns")
# Switch fields an `arch=` string argument asks for: every field some ARCHITECTURES entry sets.
_SWITCHES = tuple(dict.fromkeys(field for switches in ARCHITECTURES.values() for field in switches))
_DEFAULTS = {field.name: field.default for field in dataclasses.fields(EncoderConfig)}


@dataclasses.dataclass(frozen=True)
class Given:
  """A field the user set: the value asked for and how the command line asked for it."""
  value: Any
  how: str  # "--config.task.crf=True on the command line", "arch=rope in configs/pretrain.py:arch=rope,init=...".
  by_argument: bool = False  # Asked for by a string argument of the config file (size=, arch=, init=, ...).


def applied_config(argv: Sequence[str]) -> ml_collections.ConfigDict | None:
  """The config `argv` gives launch.main: --config's file with every --config.* override applied, as absl applies them
  (ml_collections' config_flags on a flag set of its own); None when absl refuses the command line."""
  values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "", flag_values=values, lock_config=True, sys_argv=list(argv))
  try:
    values(list(argv), known_only=True)
  except (flags.Error, ValueError, TypeError, KeyError, AttributeError):
    return None
  return values["config"].value


def from_command_line(spec: str, override_keys: Sequence[str], config: ml_collections.ConfigDict) -> dict[str, Given]:
  """{dotted key: Given} of what the command line `--config spec` with overrides of `override_keys` set, the values
  as `config` (the applied config) holds them; an override wins over a string argument asking for the same field."""
  arg = spec.partition(":")[2]
  given: dict[str, Given] = {}
  for name, _, value in common.arg_items(arg):
    how = f"{name}={value} in {spec}"
    if name == "init":
      given["init"] = Given(value, how, by_argument=True)
    elif name == "arch" and value in ARCHITECTURES:
      given |= {f"model.{field}": Given(ARCHITECTURES[value].get(field, _DEFAULTS[field]), how, by_argument=True)
                for field in _SWITCHES}
    elif name == "size" and value in PRESETS:
      given |= {f"model.{field}": Given(v, how, by_argument=True) for field, v in PRESETS[value].items()}
  leaves = common.leaf_paths(config)
  for key in override_keys:
    given[key] = Given(leaves[key], f"--config.{key} on the command line")
  return given


def check(config: ml_collections.ConfigDict, given: dict[str, Given], spec: str) -> None:
  """Raises a ConfigError naming the first field of `given` that the run of `config` (`spec`'s, overrides applied)
  does not read, and why (the model fields an init's checkpoint fixes are configs.checks.check_init's, run first)."""
  finetuning = common.is_finetuning(config)
  for key, asked in given.items():
    if asked.by_argument:
      continue
    why = _unread(config, key, finetuning, lambda field: _source(field, given, spec))
    if why:
      raise ConfigError(f"config.{key}={asked.value!r} ({asked.how}) has no effect: {why}; drop it")


def _source(key: str, given: dict[str, Given], spec: str) -> str:
  """How field `key` got its value, for a reason naming it: the command line's flag or argument, else `spec`'s."""
  return given[key].how if key in given else f"{spec}'s value"


def _unread(config: ml_collections.ConfigDict, key: str, finetuning: bool, source: Callable[[str], str]
            ) -> str | None:
  """Why the run of `config` does not read field `key`, or None when it does; `source(key)` says where a field
  named in the reason got its value."""
  from objectives import registry as objectives  # pylint: disable=import-outside-toplevel  (heads import flax)
  from tasks import registry as families  # pylint: disable=import-outside-toplevel
  section, _, name = key.partition(".")
  named = lambda field: f"config.{field}={common.leaf_paths(config)[field]!r} ({source(field)})"
  if finetuning and section == "task":
    readers = [who for who, _ in families.declared_fields().get(name, [])]
    if "every family" not in readers and config.task.name not in readers:
      return f"{named('task.name')} does not read it (read by task family {' and '.join(readers)})"
    if name in FILE_FIELDS and config.task.dataset:
      return (f"{named('task.dataset')} is a packaged dataset, and {', '.join(FILE_FIELDS)} are read only for "
              "files of your own (add --config.task.dataset= to read config.task.files)")
  if finetuning and key in REGIME_READERS and config.regime not in REGIME_READERS[key]:
    return f"{named('regime')} does not read it (read by regime {' and '.join(map(repr, REGIME_READERS[key]))})"
  if finetuning and key in REGIME_IGNORES.get(config.regime, ()):
    return f"{named('regime')} does not read it"
  if not finetuning and section in objectives.config_fields() and section not in config.objectives.split("+"):
    return f"{named('objectives')} does not train {section!r}, the objective whose block it is"
  if key == "optimizer.warmup_steps" and config.optimizer.get("warmup_fraction", 0.0) > 0:
    return f"{named('optimizer.warmup_fraction')} sets the warmup (warmup_steps is read when it is 0)"
  if key == "data.train_files" and config.data.get("prepared"):
    return f"{named('data.prepared')} gives the training rows (train_files is read when it is '')"
  if key == "best_mode" and not config.best_metric:
    return f"{named('best_metric')} keeps the latest checkpoint only, so no metric is compared"
  if section == "model":
    return _unread_model(config.model, name, named)
  return None


def _unread_model(model: ml_collections.ConfigDict, name: str, named: Callable[[str], str]) -> str | None:
  """Why the architecture of `model` has no use for its field `name`, or None."""
  if name in ("rope_theta", "rope_local_theta") and model.position_embedding != "rotary":
    return f"{named('model.position_embedding')} has no rotary positions to rotate"
  if name in ("rope_local_theta", "global_attention_every") and not model.local_attention_window:
    return f"{named('model.local_attention_window')}: every layer attends globally"
  return None


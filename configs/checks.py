"""Config validation with messages that name the key: mistyped keys (with close matches), wrong value types,
and a workdir whose saved model config differs from the one asked for."""

import ast
import dataclasses
import difflib
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any, Sequence

import ml_collections

from encoder.config import DTYPE_NAMES, EncoderConfig
from encoder.errors import ConfigError

# Fields whose change makes an existing checkpoint unusable (the parameter tree or its meaning changes).
MODEL_FIELDS = ("model", "objectives", "task")
# ... except these, which change how a step computes, not what it learns (a run may resume with another value).
RESUMABLE_MODEL_FIELDS = ("model.remat", "model.attention")
# What an encoder field added since a run was saved means in that run: the code before the field behaved as its default
# (dtypes by their config names).
ENCODER_DEFAULTS = {f"model.{field.name}": DTYPE_NAMES.get(field.default, field.default)
                    for field in dataclasses.fields(EncoderConfig)}


def load_python_file(path: str, module_name: str) -> ModuleType:
  """The module of a config or sweep file; a syntax error in it is a ConfigError `path:line: message`, not a
  traceback."""
  module_spec = importlib.util.spec_from_file_location(module_name, path)
  module = importlib.util.module_from_spec(module_spec)
  try:
    module_spec.loader.exec_module(module)
  except SyntaxError as err:
    raise ConfigError(f"{err.filename or path}:{err.lineno}: {err.msg} (a syntax error in this Python file)"
                      ) from None
  return module


def load_config_file(spec: str) -> ml_collections.ConfigDict:
  """'configs/pretrain.py:size=mini' -> get_config('size=mini') of that file (what config_flags loads)."""
  path, _, arg = spec.partition(":")
  if not Path(path).is_file():
    raise ConfigError(f"config file {path} does not exist (--config={spec})")
  module = load_python_file(path, "_checked_config")
  return module.get_config(arg) if arg else module.get_config()


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


def _parses_as(value: str, default: Any) -> bool:
  """Whether config_flags can turn the command-line string `value` into the type of `default`."""
  if default is None or isinstance(default, str):
    return True
  if isinstance(default, bool):
    return value.lower() in ("true", "false", "1", "0")
  try:
    parsed = ast.literal_eval(value)
  except (ValueError, SyntaxError):
    return False
  if isinstance(default, float):
    return isinstance(parsed, (int, float)) and not isinstance(parsed, bool)
  if isinstance(default, int):
    return isinstance(parsed, int) and not isinstance(parsed, bool)
  return isinstance(parsed, type(default))


def check_overrides(config: ml_collections.ConfigDict, overrides: Sequence[tuple[str, str | None]],
                    source: str, flag: str = "--config.") -> None:
  """Raises ConfigError for an override whose key is not in `config` (naming close matches) or whose value does
  not parse as the field's type. `overrides`: (dotted key, string value or None for a bare boolean flag); `flag`:
  how the command line spells an override before its key."""
  leaves = leaf_paths(config)
  for key, value in overrides:
    if key not in leaves:
      close = difflib.get_close_matches(key, leaves, n=3, cutoff=0.6)
      hint = f"; did you mean {' or '.join(close)}?" if close else "; run with --helpfull to list the keys"
      raise ConfigError(f"unknown config key {key!r} ({flag}{key} on the command line, config {source}){hint}")
    default = leaves[key]
    if value is None:
      if not isinstance(default, bool):
        raise ConfigError(f"{flag}{key} needs a value: the field expects {type(default).__name__} "
                          f"(default {default!r}, config {source})")
    elif not _parses_as(value, default):
      raise ConfigError(f"config key {key!r} got {value!r}, which is not a valid {type(default).__name__} "
                        f"(default {default!r}, config {source}); pass e.g. {flag}{key}={default!r}")


def command_line_overrides(argv: Sequence[str]) -> tuple[str | None, list[tuple[str, str | None]]]:
  """(the --config value, [(key, value)] of --config.key=value / --config.key value / --[no]config.flag)."""
  spec, overrides = None, []
  args = list(argv[1:])
  for i, arg in enumerate(args):
    name, has_value, value = arg.lstrip("-").partition("=")
    if not arg.startswith("-"):
      continue
    following = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("-") else None
    if name == "config":
      spec = value if has_value else following
    elif name.startswith("config."):
      overrides.append((name[len("config."):], value if has_value else following))
    elif name.startswith("noconfig."):
      overrides.append((name[len("noconfig."):], None))
  return spec, overrides


def check_command_line(argv: Sequence[str]) -> None:
  """Validates every --config.* override against the config file named by --config before absl applies them."""
  spec, overrides = command_line_overrides(argv)
  if spec is None:
    if overrides:
      raise ConfigError("--config.* overrides given without --config=<file>.py[:args]")
    return
  check_overrides(load_config_file(spec), overrides, spec)


def to_dict(config: ml_collections.ConfigDict) -> dict[str, Any]:
  """A JSON-ready plain dict of the resolved config."""
  return json.loads(config.to_json_best_effort())


def incompatible_fields(saved: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
  """Dotted MODEL_FIELDS keys whose saved value differs from the wanted one ('model.hidden_size: 64 -> 128'). A key
  the saved config lacks (a field added since the run was saved) is compatible at its default: an encoder field at
  EncoderConfig's, a task field at the config's own (new fields default to the earlier behaviour)."""
  flat = lambda d: leaf_paths(ml_collections.ConfigDict({k: d.get(k) for k in MODEL_FIELDS if k in d}))
  old, new = flat(saved), flat(wanted)
  added = {key for key in set(new) - set(old) if new[key] == ENCODER_DEFAULTS.get(key, new[key])}
  return [f"{key}: {old.get(key)!r} -> {new.get(key)!r}" for key in sorted(set(old) | set(new))
          if old.get(key) != new.get(key) and key not in RESUMABLE_MODEL_FIELDS and key not in added]

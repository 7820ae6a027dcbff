"""Config validation with messages that name the key: mistyped keys (with close matches), wrong value types, values
a field does not accept (configs.rules) and relations between fields, all before a run reads data or writes anything
(`check_config`, which returns what it resolved on the way for the workload to reuse); and a workdir whose saved model
config differs from the one asked for.

What is checked here is common to every run; a relation that only a task family or an objective knows is its own
hook (`TaskFamily.check`, `TaskFamily.is_score`, `Objective.check`), reached through their registries."""

import ast
import dataclasses
import difflib
import importlib.util
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import ml_collections

from configs import given, rules
from configs.common import is_finetuning, leaf_paths
from encoder import config as encoder_config, fields, init_from
from encoder.config import DTYPE_NAMES, EncoderConfig
from encoder.errors import ConfigError

if TYPE_CHECKING:  # Imported where they are used: their heads import flax.
  from objectives.data import Sources
  from objectives.objective import Objective

# Fields whose change makes an existing checkpoint unusable (the parameter tree or its meaning changes).
MODEL_FIELDS = ("model", "objectives", "task")
# ... except these, which change how a step computes, not what it learns (a run may resume with another value).
RESUMABLE_MODEL_FIELDS = ("model.remat", "model.attention", "model.kernels", "model.bf16_dots")
# What an encoder field added since a run was saved means in that run: the code before the field behaved as its default
# (dtypes by their config names).
ENCODER_DEFAULTS = {f"model.{field.name}": DTYPE_NAMES.get(field.default, field.default)
                    for field in dataclasses.fields(EncoderConfig)}


def load_python_file(path: str, module_name: str) -> ModuleType:
  """The module of a config or sweep file; a syntax error in it is a ConfigError `path:line: message`, not a
  traceback."""
  module_spec = importlib.util.spec_from_file_location(module_name, path)
  if module_spec is None or module_spec.loader is None:  # A name Python does not import, e.g. no .py suffix.
    raise ConfigError(f"{path}: not a Python file that can be imported; config and sweep files are .py files")
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
  if not callable(getattr(module, "get_config", None)):
    raise ConfigError(f"{path}: defines no get_config function (--config={spec}); a config file returns its "
                      "ConfigDict from get_config(arg=None), as configs/pretrain.py does")
  return module.get_config(arg) if arg else module.get_config()


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
  """Validates every --config.* override against the config file named by --config before absl applies them, then
  refuses a field the command line sets that the run does not read (configs.given)."""
  spec, overrides = command_line_overrides(argv)
  if spec is None:
    if overrides:
      raise ConfigError("--config.* overrides given without --config=<file>.py[:args]")
    return
  check_overrides(load_config_file(spec), overrides, spec)
  config = given.applied_config(argv)
  if config is not None:  # None: absl refuses the command line itself, with its own line, when launch.main parses it.
    asked = given.from_command_line(spec, [key for key, _ in overrides], config)
    check_init(config, asked, spec)  # The model fields an init's checkpoint fixes, first.
    given.check(config, asked, spec)


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


class Resolved(NamedTuple):
  """What `check_pretraining` or `check_finetuning` resolved while checking a config, for launch.workload's kind to
  load with rather than resolve again."""
  # Pretraining: the run's objectives, built from the config (their heads read none of the model fields that
  # launch.train resolves at start-up), and config.data's files resolved against the data directory.
  objectives: "tuple[Objective, ...]" = ()
  sources: "Sources | None" = None
  dataset: Any = None  # Fine-tuning: config.task's dataset (tasks.finetune_data.dataset_of: a preset name or files).


def check_config(config: ml_collections.ConfigDict) -> Resolved:
  """Everything about `config` that needs no data: each field's rule (configs.rules), the encoder's shape, the
  relations between fields and that the named files exist. Raises ConfigError naming the field; reads and writes
  nothing else, so a run's directory is untouched by a config it refuses. Returns what it resolved (`Resolved`).
  For tools and tests; a run's start-up calls the same checks through its kind (launch.workload.kind_of)."""
  finetuning = is_finetuning(config)
  model = check_common(config, finetuning)
  return check_finetuning(config, model) if finetuning else check_pretraining(config, model)


def check_common(config: ml_collections.ConfigDict, finetuning: bool) -> EncoderConfig:
  """The checks every run makes first: each field's rule (of a fine-tuning config when `finetuning`), the encoder's
  shape, the init's architecture, the mesh and batch. Returns the encoder's config (vocabulary 1) for the kind's own
  checks."""
  fields.check_fields(leaf_paths(config), rules.rules(finetuning), prefix="config.")
  model = encoder_config.from_fields(config.model.to_dict(), vocab_size=1)  # Heads divide the width, ...
  check_init(config)
  _check_engine(config)
  return model


def _check_engine(config: ml_collections.ConfigDict) -> None:
  if config.parallelism == "pmap" and (config.mesh_model != 1 or config.fsdp):
    raise ConfigError("config.parallelism='pmap' replicates the model: set config.mesh_model=1 and "
                      "config.fsdp=False, or use parallelism='jit'")
  if jax.device_count() % config.mesh_model:
    raise ConfigError(f"config.mesh_model={config.mesh_model}: expected a divisor of the {jax.device_count()} devices")
  micro = config.batch_size // config.grad_accum_steps
  data_axis = jax.device_count() // config.mesh_model
  if config.batch_size % config.grad_accum_steps or micro % data_axis:
    raise ConfigError(
        f"config.batch_size={config.batch_size}: expected a multiple of grad_accum_steps={config.grad_accum_steps} "
        f"micro-batches, each divisible by the {data_axis} data-parallel devices")


def model_value(config: ml_collections.ConfigDict, field: str) -> str:
  """'config.model.<field>=<value>' for a message, with where the value comes from when config.init's checkpoint set
  it ("config.model.max_positions=16 (DIR/config.json's max_position_embeddings)")."""
  value = config.model[field]
  text = f"config.model.{field}={value!r}"
  if not config.get("init") or field in init_from.TAKES:
    return text
  checkpoint, _ = init_from.model_fields(config.init)
  if checkpoint.get(field) != value:
    return text
  return f"{text} (config.init={config.init!r}: {init_from.field_source(config.init, field)})"


def check_init(config: ml_collections.ConfigDict, given: Mapping[str, Any] | None = None, spec: str = "") -> None:
  """A run from config.init has its checkpoint's architecture: every config.model field but init_from.TAKES must be
  the checkpoint's. `given`: the fields the command line set (configs.given.Given by dotted key), named in the line;
  a field it did not set differs when the config's model is not the init's (an init given as --config.init; `spec`,
  the --config value, then gives the string argument that reads the model from the checkpoint)."""
  init = config.get("init")
  if not init:
    return
  checkpoint, tokenizer = init_from.model_fields(init)
  asked = (given or {}).get("data.tokenizer")
  if asked is not None and asked.value != tokenizer:
    raise ConfigError(f"config.data.tokenizer={asked.value!r} ({asked.how}) is not the tokenizer of config.init="
                      f"{init!r}, {tokenizer!r}: the checkpoint's embeddings index that vocabulary; drop it, or start "
                      "a new model (init='')")
  asked_fields = {key[len("model."):]: value for key, value in (given or {}).items() if key.startswith("model.")}
  differ = [field for field in dict.fromkeys([*asked_fields, *checkpoint])
            if field in checkpoint and field not in init_from.TAKES
            and (asked_fields[field].value if field in asked_fields else config.model.get(field)) != checkpoint[field]]
  for field in differ:
    theirs = checkpoint[field]
    where = f"{field}={theirs!r} ({init_from.field_source(init, field)})"
    asked = asked_fields.get(field)
    ours = asked.value if asked is not None else config.model.get(field)
    if asked is not None:
      others = sum(f in asked_fields and asked_fields[f].how == asked.how for f in differ) - 1
      more = f" (and {others} more field{'s' * (others > 1)} it asks for)" if others else ""
      raise ConfigError(f"config.model.{field}={ours!r} ({asked.how}){more} cannot apply to config.init={init!r}: a "
                        f"run from an init has its checkpoint's architecture, {where}; an init takes only the model "
                        f"fields {', '.join(init_from.TAKES)}; drop it, or start a new model (init='')")
    path, _, arg = spec.partition(":")
    items = [item for item in arg.split(",") if item and not item.startswith("init=")]
    instead = f"--config {path}:{','.join([*items, f'init={init}'])}" if path else \
        "init as the config file's string argument"
    raise ConfigError(f"config.model.{field}={ours!r} is not that of config.init={init!r}, whose checkpoint has "
                      f"{where}: the config's model was not read from the checkpoint; give {instead}, which reads "
                      "it (or set the model's fields to the checkpoint's)")


def _check_length(key: str, length: int, config: ml_collections.ConfigDict, model: EncoderConfig) -> None:
  if length > model.max_positions:
    raise ConfigError(f"config.{key}={length}: expected at most {model_value(config, 'max_positions')} (the longest "
                      "input the encoder has positions for)")


def check_pretraining(config: ml_collections.ConfigDict, model: EncoderConfig) -> Resolved:
  """A pretraining config's own checks after `check_common` (`model`: its encoder): the objectives' weights and needs,
  lengths, masking, that the corpus files exist. Returns the objectives and the resolved files."""
  from objectives import data, registry  # pylint: disable=import-outside-toplevel  (heads import flax)
  names = config.objectives.split("+")
  weights = dict(config.objective_weights)
  if set(weights) != set(names):
    raise ConfigError(f"config.objective_weights has keys {sorted(weights)} but config.objectives="
                      f"{config.objectives!r}: give one weight per objective")
  for name, weight in weights.items():
    fields.check_field(f"config.objective_weights.{name}", weight, fields.NON_NEGATIVE)
  data.check(names, config.data.packing, config.masking.mode)
  _check_length("data.max_length", config.data.max_length, config, model)
  masking = config.masking
  if masking.mask_prob + masking.random_prob > 1:
    raise ConfigError(f"config.masking.mask_prob={masking.mask_prob} + config.masking.random_prob="
                      f"{masking.random_prob}: expected at most 1 (the rest of the selected tokens are kept)")
  if masking.max_predictions > config.data.max_length:
    raise ConfigError(f"config.masking.max_predictions={masking.max_predictions}: expected at most "
                      f"config.data.max_length={config.data.max_length}")
  objectives = registry.of_run(config)
  for objective in objectives:
    if objective.check:  # Its head runs on this encoder (ELECTRA: its generator's shape).
      objective.check(model)
  return Resolved(objectives, data.sources_of(config.data))  # The files exist.


def check_finetuning(config: ml_collections.ConfigDict, model: EncoderConfig) -> Resolved:
  """A fine-tuning config's own checks after `check_common` (`model`: its encoder): steps, the regime, lengths,
  packing, the family's relations, that the dataset is known or its files exist and the family reads their format,
  and the metrics. Returns the task's dataset."""
  from tasks import finetune_data, readers, regimes, registry  # pylint: disable=import-outside-toplevel  (flax heads)
  task = config.task
  if config.num_train_steps == 0 and config.epochs == 0:
    raise ConfigError("config.epochs=0 with config.num_train_steps=0 gives no training steps: set either to at "
                      "least 1")
  if config.regime == "top_k" and not 1 <= config.top_k <= model.num_layers:
    raise ConfigError(f"config.top_k={config.top_k}: regime 'top_k' trains the top top_k layers, expected 1 to "
                      f"{model_value(config, 'num_layers')}")
  regimes.check(config, num_layers=model.num_layers, width=model.hidden_size)  # LoRA's and adapters' rules.
  _check_length("task.max_length", task.max_length, config, model)
  _check_packing(config)
  family = registry.family(finetune_data.task_mapping(task, list(task.labels) or ["A", "B"]))
  family.check(config)  # The relations only the family knows (classification: R-Drop, positive_label).
  dataset = finetune_data.dataset_of(task)  # The dataset is known, or the files exist.
  data_format, read = finetune_data.data_format(dataset), readers.same_records(family.formats)  # tsv: jsonl too.
  if data_format not in read:
    remedy = f"set config.task.format={family.formats[0]}" if not task.dataset else "choose a dataset of its kind"
    raise ConfigError(f"config.task.{'dataset' if task.dataset else 'format'}={task.dataset or task.format!r}: task "
                      f"family {task.name!r} reads {' or '.join(read)} files, not {data_format} ({remedy})")
  family.objective()  # The head accepts its options.
  scores = ", ".join(family.metric_names()) + "".join(f" or {pattern}" for pattern in family.data_named_scores())
  if not family.is_score(task.metric):
    raise ConfigError(f"config.task.metric={task.metric!r}: expected a dev score of task family {task.name!r} "
                      f"({scores})")
  if config.best_metric and not (config.best_metric.startswith("eval/") and family.is_score(config.best_metric[5:])):
    raise ConfigError(f"config.best_metric={config.best_metric!r}: expected 'eval/' and a dev score of task family "
                      f"{task.name!r} ({scores}), or '' (the latest checkpoint)")
  return Resolved(dataset=dataset)


def _check_packing(config: ml_collections.ConfigDict) -> None:
  """Packed batches (config.data.pack) index their rows globally: one device, one micro-batch, each example once."""
  if not config.data.pack:
    return
  if config.grad_accum_steps > 1:
    raise ConfigError(f"config.data.pack=True: expected config.grad_accum_steps=1, found {config.grad_accum_steps} "
                      "(packed rows are not split into micro-batches)")
  if jax.device_count() > 1:
    raise ConfigError(f"config.data.pack=True: expected one device, found {jax.device_count()} (packed rows are not "
                      "split across devices; set config.data.pack=False)")

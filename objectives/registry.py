"""Objective names -> builders. Adding an objective is one module with `build(config) -> Objective` plus one line;
a module that reads a config block of its own (config.<name>) declares its fields as `CONFIG_FIELDS`."""

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ml_collections

from encoder import errors
from encoder.fields import Field
from objectives import electra, mlm, nsp, sbo
from objectives.objective import Objective

OBJECTIVES: dict[str, Callable[[Mapping[str, Any] | None], Objective]] = {
    "electra": electra.build,
    "mlm": mlm.build,
    "nsp": nsp.build,
    "sbo": sbo.build,
}


def get(name: str) -> Callable[[Mapping[str, Any] | None], Objective]:
  """The builder registered as `name`; an unknown name lists the registered ones."""
  if name not in OBJECTIVES:
    raise errors.ConfigError(f"config.objectives: unknown objective {name!r}; registered objectives: "
                             f"{sorted(OBJECTIVES)} (objectives/registry.py)")
  return OBJECTIVES[name]


def build(name: str, config: Mapping[str, Any] | None = None) -> Objective:
  """get(name)(config)."""
  return get(name)(config)


def options(config: ml_collections.ConfigDict, name: str) -> dict[str, Any]:
  """What objective `name` is built from in a run of `config`: config.model's fields, and those of a config block
  named after it (e.g. config.electra) when the config has one."""
  block = config.get(name)
  return config.model.to_dict() | (block.to_dict() if isinstance(block, ml_collections.ConfigDict) else {})


def of_run(config: ml_collections.ConfigDict) -> tuple[Objective, ...]:
  """The objectives of a pretraining run (config.objectives), each built from its `options`."""
  return tuple(build(name, options(config, name)) for name in config.objectives.split("+"))


def best_checkpoint(names: Sequence[str]) -> tuple[str, str]:
  """(config.best_metric, config.best_mode) of a run of objectives `names`: the held-out metric the first objective
  that names one keeps its best checkpoint by (`Objective.best`: MLM's accuracy, higher is better), else the loss
  (lower is better). An unknown name is skipped (config.objectives' rule reports it)."""
  for name in names:
    best = build(name).best if name in OBJECTIVES else None
    if best:
      return f"eval/{best[0]}", best[1]
  return "eval/loss", "min"


def config_fields() -> dict[str, tuple[Field, ...]]:
  """Objective name -> the fields of its own config block (its module's CONFIG_FIELDS), for objectives that have one:
  configs/pretrain.py builds config.<name> from them, configs/rules.py their rules, configs/reference.py their docs."""
  declared = {name: getattr(sys.modules[builder.__module__], "CONFIG_FIELDS", ())
              for name, builder in OBJECTIVES.items()}
  return {name: fields for name, fields in declared.items() if fields}

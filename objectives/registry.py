"""Objective names -> builders. Adding an objective is one module with `build(config) -> Objective` plus one line;
a module that reads a config block of its own (config.<name>) declares its fields as `CONFIG_FIELDS`."""

import sys
from collections.abc import Callable, Mapping
from typing import Any

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


def config_fields() -> dict[str, tuple[Field, ...]]:
  """Objective name -> the fields of its own config block (its module's CONFIG_FIELDS), for objectives that have one:
  configs/pretrain.py builds config.<name> from them, configs/rules.py their rules, configs/reference.py their docs."""
  declared = {name: getattr(sys.modules[builder.__module__], "CONFIG_FIELDS", ())
              for name, builder in OBJECTIVES.items()}
  return {name: fields for name, fields in declared.items() if fields}

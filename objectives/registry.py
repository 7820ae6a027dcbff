"""Objective names -> builders. Adding an objective is one module with `build(config) -> Objective` plus one line."""

from typing import Any, Callable, Mapping

from encoder import errors
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

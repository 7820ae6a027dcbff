"""What a config field accepts, as data: each rule checks a value with a one-line `ConfigError` naming the field,
says in words what it accepts (docs/config.md's "accepts" column) and lists values that break it (the config fuzz
test, tests/configs/test_fuzz.py).

  rules = {"batch_size": Number(low=1, integer=True), "optimizer.name": Choice(("adamw", "lamb"))}
  check_fields(values, rules, prefix="config.")   # values: {"batch_size": 0, ...} -> ConfigError naming the key

Like `encoder.errors` it imports only the standard library, so every layer (the encoder's own config, the objectives,
the task families, configs/) can state its fields' rules where the fields are defined.
"""

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from encoder.errors import ConfigError


def _show(value: Any) -> str:
  return repr(value)


@dataclasses.dataclass(frozen=True)
class Number:
  """A number in [low, high] (an open end excludes the bound), or one of `also` (sentinels such as -1 = "never")."""
  low: float | None = None
  high: float | None = None
  low_open: bool = False
  high_open: bool = False
  integer: bool = False
  also: tuple[float, ...] = ()

  def problem(self, value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (self.integer and not isinstance(value, int)):
      return f"expected {'an integer' if self.integer else 'a number'}"
    if value in self.also:
      return None
    if isinstance(value, float) and not math.isfinite(value):
      return "expected a finite number"
    if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
      return f"expected {self.describe()}"
    if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
      return f"expected {self.describe()}"
    return None

  def describe(self) -> str:
    kind = "an integer" if self.integer else "a number"
    if self.low is not None and self.high is not None:
      text = f"{kind} in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"
    elif self.low is not None:
      text = f"{kind} {'>' if self.low_open else '>='} {self.low:g}"
    elif self.high is not None:
      text = f"{kind} {'<' if self.high_open else '<='} {self.high:g}"
    else:
      text = kind
    return text + "".join(f" or {v:g}" for v in self.also)

  def bad_values(self) -> list[Any]:
    step, out = (1 if self.integer else 0.5), []
    for bound, is_open, direction in ((self.low, self.low_open, -1), (self.high, self.high_open, 1)):
      if bound is not None:
        value = bound if is_open else bound + direction * step
        while value in self.also:
          value += direction * step
        out.append(int(value) if self.integer else float(value))
    return out


@dataclasses.dataclass(frozen=True)
class Choice:
  """One of a fixed set of values (or of a registry's names: `choices` may be a function, called when checked)."""
  choices: tuple[Any, ...] | Callable[[], Sequence[Any]]

  def options(self) -> tuple[Any, ...]:
    return tuple(self.choices() if callable(self.choices) else self.choices)

  def problem(self, value: Any) -> str | None:
    return None if value in self.options() else f"expected one of {', '.join(map(_show, self.options()))}"

  def describe(self) -> str:
    return "one of " + ", ".join(map(_show, self.options()))

  def bad_values(self) -> list[Any]:
    return ["no_such_value"]


@dataclasses.dataclass(frozen=True)
class Check:
  """A rule written as a function: `problem(value)` returns what was expected (None when the value is fine)."""
  problem: Callable[[Any], str | None]
  description: str
  bad: tuple[Any, ...] = ()

  def describe(self) -> str:
    return self.description

  def bad_values(self) -> list[Any]:
    return list(self.bad)


@dataclasses.dataclass(frozen=True)
class Anything:
  """Every value of the field's type is accepted; the field's comment says so (tests/configs/test_fuzz.py)."""
  description: str

  def problem(self, value: Any) -> str | None:
    del value
    return None

  def describe(self) -> str:
    return self.description

  def bad_values(self) -> list[Any]:
    return []


Rule = Number | Choice | Check | Anything


class Field(NamedTuple):
  """One field of a config block that a module declares for itself (a task family's `task.*`, ELECTRA's
  `electra.*`): `--config.<block>.<name>=...` sets it."""
  name: str
  default: Any
  rule: Rule  # What it accepts (checked before a run reads data; docs/config.md's "accepts").
  comment: str  # One line: what it means (docs/config.md's "meaning").


def defaults(declared: Iterable[Field]) -> dict[str, Any]:
  """{name: default} of `declared` (a later declaration of a name wins)."""
  return {field.name: field.default for field in declared}


PROBABILITY = Number(0.0, 1.0, high_open=True)  # Dropout rates, decays: [0, 1).
POSITIVE = Number(0.0, low_open=True)
NON_NEGATIVE = Number(0.0)
POSITIVE_INT = Number(1, integer=True)
NON_NEGATIVE_INT = Number(0, integer=True)


def check_field(name: str, value: Any, rule: Rule) -> None:
  """Raises ConfigError `<name>=<value>: expected ...` when `value` breaks `rule`."""
  problem = rule.problem(value)
  if problem:
    raise ConfigError(f"{name}={value!r}: {problem}")


def check_fields(values: Mapping[str, Any], rules: Mapping[str, Rule], prefix: str = "") -> None:
  """Checks each of `values` that has a rule (dotted keys), naming it as `prefix + key`."""
  for key, rule in rules.items():
    if key in values:
      check_field(prefix + key, values[key], rule)

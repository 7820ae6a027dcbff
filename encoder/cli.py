"""Every entry point's command line: an argparse parser whose mistakes are user errors (one line `error: ...`, exit
status 1, through `errors.run`, as every other user error), and flag types that check a number's range with the
config fields' rules (encoder.fields) as the flag is read, so that a refused value is refused before anything
happens, and the command-line fuzz test (tests/test_cli_fuzz.py) reads each flag's bad values from its parser.

  parser = cli.ArgumentParser(prog="python -m benchmarks.x", description=...)
  parser.add_argument("--rounds", type=cli.integer(1), default=5)             # 0 -> error: ... expected an integer >= 1
  parser.add_argument("--lengths", type=cli.integers(8), default="32,128")    # "32,x" -> error: ...

Like `encoder.errors` it imports only the standard library (and encoder.fields), so light commands stay light.
"""

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any, NoReturn

from encoder import errors, fields

HELP = "--help lists the options"


class ArgumentParser(argparse.ArgumentParser):
  """argparse whose mistakes (an unknown flag, a missing or refused value) raise a UserError: `errors.run` prints
  `error: <prog>: <argparse's line> (--help lists the options)` and exits 1, without argparse's usage lines. Its
  subcommands' parsers are of this class too (argparse makes them of the parent's class)."""

  def error(self, message: str) -> NoReturn:
    raise errors.UserError(f"{self.prog}: {message} ({HELP})")


@dataclasses.dataclass(frozen=True)
class Number:
  """A flag type: the text as an int (or float) that `rule` accepts, else argparse's `argument --x: expected ...,
  got 'text'`; `rule.bad_values()` are the fuzz test's out-of-range values."""
  rule: fields.Number

  def __call__(self, text: str) -> Any:
    try:
      value = int(text) if self.rule.integer else float(text)
    except ValueError:
      raise argparse.ArgumentTypeError(f"expected {self.rule.describe()}, got {text!r}") from None
    problem = self.rule.problem(value)
    if problem:
      raise argparse.ArgumentTypeError(f"{problem}, got {text!r}")
    return value


@dataclasses.dataclass(frozen=True)
class Numbers:
  """A flag type: comma-separated numbers, each as `Number(rule)` reads it, as a tuple (e.g. --lengths 32,128)."""
  rule: fields.Number

  def __call__(self, text: str) -> tuple[Any, ...]:
    item = Number(self.rule)
    try:
      return tuple(item(part.strip()) for part in text.split(","))
    except argparse.ArgumentTypeError:
      raise argparse.ArgumentTypeError(f"expected comma-separated values, each {self.rule.describe()}, got "
                                       f"{text!r}") from None


@dataclasses.dataclass(frozen=True)
class Names:
  """A flag type: comma-separated names, each one of `choices` (e.g. --modes fwd,train), as a tuple."""
  choices: tuple[str, ...]

  def __call__(self, text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [name for name in names if name not in self.choices]
    if unknown or not names:
      raise argparse.ArgumentTypeError(f"expected comma-separated names of {', '.join(self.choices)}, got {text!r}")
    return names


@dataclasses.dataclass(frozen=True)
class Parsed:
  """A flag type: `parse(text)`, whose UserError or ValueError is the refusal's message; `bad` holds values it
  refuses (the fuzz test's out-of-range values)."""
  parse: Callable[[str], Any]
  bad: tuple[str, ...]

  def __call__(self, text: str) -> Any:
    try:
      return self.parse(text)
    except ValueError as err:  # errors.UserError included.
      raise argparse.ArgumentTypeError(str(err)) from None


def integer(low: int | None = None, high: int | None = None, also: tuple[int, ...] = ()) -> Number:
  """An integer in [low, high] (None: unbounded), or one of `also` (sentinels such as -1 = "all")."""
  return Number(fields.Number(low, high, integer=True, also=also))


def number(low: float | None = None, high: float | None = None, *, low_open: bool = False,
           high_open: bool = False) -> Number:
  """A finite number in [low, high] (an open end excludes the bound)."""
  return Number(fields.Number(low, high, low_open=low_open, high_open=high_open))


def integers(low: int | None = None, high: int | None = None) -> Numbers:
  """Comma-separated integers, each in [low, high]."""
  return Numbers(fields.Number(low, high, integer=True))


def child_error(output: str | list[str]) -> str | None:
  """A child command's own refusal: the message of its last line `error: <message>` (encoder.errors prints one), so
  that a command that ran it passes the child's message on instead of only its exit status; None when it printed
  none."""
  lines = output.splitlines() if isinstance(output, str) else output
  return next((line.strip().removeprefix("error: ") for line in reversed(lines) if line.startswith("error: ")), None)

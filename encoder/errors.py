"""Every command's entry point: a user mistake is one line `error: <message>` on stderr and exit status 1, not a
traceback; a programming error keeps its traceback. `--debug` anywhere on the command line (removed before the
command parses it) or ENCODERLAB_DEBUG=1 shows the traceback of user errors too.

  if __name__ == "__main__":
    errors.run(main)               # or errors.run(app.run, main, flags_parser=...) for absl commands

A user error is a `UserError` (raise it from command code: `raise errors.UserError(f"{path}: expected ..., got ...")`;
every library error type derives from it: ReaderError, CheckpointError, TokenizerError, CorpusError, ...), a
missing or unreadable file, or undecodable text / JSON. Plain ValueError, KeyError and TypeError are not: numpy and
JAX raise them for bugs, so the input check that knows the file must raise one of the above. This module imports
only the standard library and sits at the bottom of the import graph, so every module can derive its errors from it
and every command (tasks.scoring.score included) can use it without loading JAX.
"""

import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

DEBUG_FLAG = "--debug"
DEBUG_ENV = "ENCODERLAB_DEBUG"

_FILE_ERRORS = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError)


class UserError(ValueError):
  """A mistake in what the user gave (a file, flag or config value); the message names where, what was found and
  what was expected."""


class ConfigError(UserError):
  """A user error in a config file or a --config.* override."""


# The exception types reported as one line (see the module docstring).
USER_ERRORS = (UserError, *_FILE_ERRORS, UnicodeDecodeError, json.JSONDecodeError)


def message(err: BaseException) -> str:
  """The one-line text of a user error (OSErrors as `path: reason`, without `[Errno n]`)."""
  if isinstance(err, OSError) and err.filename is not None and err.strerror:
    text = f"{err.filename}: {err.strerror}"
  elif isinstance(err, UnicodeDecodeError):
    text = f"expected UTF-8 text, found byte {err.object[err.start]:#04x} at offset {err.start} ({err.reason})"
  else:
    text = str(err) or type(err).__name__
  return " ".join(text.split())


def debug_enabled() -> bool:
  """Whether --debug was given or ENCODERLAB_DEBUG is set to a true value."""
  return DEBUG_FLAG in sys.argv[1:] or os.environ.get(DEBUG_ENV, "").lower() not in ("", "0", "false", "no")


def run(main: Callable[..., T], *args: Any, **kwargs: Any) -> T:
  """Calls main(*args, **kwargs); a user error exits with `error: <message>` (status 1), or with its traceback under
  --debug / ENCODERLAB_DEBUG=1. Removes --debug from sys.argv first, so the command's parser never sees it."""
  debug = debug_enabled()
  sys.argv[1:] = [arg for arg in sys.argv[1:] if arg != DEBUG_FLAG]
  try:
    return main(*args, **kwargs)
  except USER_ERRORS as err:
    if debug:
      traceback.print_exc()
    raise SystemExit(f"error: {message(err)}") from None

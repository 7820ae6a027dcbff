"""Numbered lines of a text file and the error that points at one (`path:line: what was expected`)."""

import json
import os
from collections.abc import Iterator

from encoder import errors


class ReaderError(errors.UserError):
  """A malformed input line: `path:line: expected ...` (1-based line number, what was expected, what was found)."""

  def __init__(self, path: str | os.PathLike, line: int, expected: str):
    self.path, self.line, self.expected = str(path), line, expected
    super().__init__(f"{self.path}:{line}: expected {expected}")

  def __reduce__(self):  # Picklable across worker processes despite the three-argument constructor.
    return ReaderError, (self.path, self.line, self.expected)


def numbered_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
  """Yields (line number, text) with the '\\n' or '\\r\\n' ending (and a UTF-8 BOM) removed.

  Lines end at '\\n' only, so a stray '\\r' inside a field never splits a line and numbers match an editor's.
  """
  with open(path, "rb") as f:
    for number, raw in enumerate(f, start=1):
      raw = raw.removesuffix(b"\n").removesuffix(b"\r")
      if number == 1:
        raw = raw.removeprefix(b"\xef\xbb\xbf")
      try:
        yield number, raw.decode("utf-8")
      except UnicodeDecodeError as err:
        raise ReaderError(path, number, f"UTF-8 text, found byte {raw[err.start]:#04x} at column {err.start + 1} "
                          f"({err.reason}); re-encode the file (e.g. iconv -f latin1 -t utf-8)") from None


def json_objects(path: str | os.PathLike, example: str) -> Iterator[tuple[int, dict]]:
  """Yields (line number, object) per non-blank line of a JSON-lines file; a line that is not valid JSON, or not an
  object, is a ReaderError (`example` shows the expected object, e.g. '{"context": ..., "choices": [...]}')."""
  for number, line in numbered_lines(path):
    if not line.strip():
      continue
    try:
      value = json.loads(line)
    except json.JSONDecodeError as err:
      raise ReaderError(path, number, f"a JSON object, found invalid JSON ({err.msg} at column {err.colno})") from None
    if not isinstance(value, dict):
      raise ReaderError(path, number, f"a JSON object such as {example}, found a {type(value).__name__}")
    yield number, value

"""The one line for a checkpoint that orbax cannot read (truncated, overwritten, partly deleted since it was written):
the step, the damaged file and what to do, instead of orbax's and TensorStore's traceback (issue 71). Used where a
run's checkpoint is read for export, predict and the embeddings (`encoder.init_from.run_params`)."""

import contextlib
import json
import re
import sys
import traceback
import types
from collections.abc import Iterator

from encoder.errors import UserError
from encoder.files import Path

_QUOTED_FILE = re.compile(r'local file "([^"]+)"')  # TensorStore names the file it failed on this way.
_ARRAY = re.compile(r'Error reading "([^"/]+)')  # ... and the array: "params.encoder.layer_0.attention.qkv.kernel/0".


def _chain(err: BaseException) -> list[BaseException]:
  """The error and those it was raised from (orbax wraps TensorStore's)."""
  chain: list[BaseException] = []
  link: BaseException | None = err
  while link is not None and link not in chain:
    chain.append(link)
    link = link.__cause__ or link.__context__
  return chain


def _unreadable_json(step_dir: Path) -> Path | None:
  """The first of orbax's JSON metadata files in the step directory that does not parse (it names none in its
  error): each item's _METADATA and array_metadatas/*."""
  for path in sorted([*step_dir.glob("*/_METADATA"), *step_dir.glob("*/array_metadatas/*")]):
    try:
      json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError):
      return path
  return None


def _data_file(step_dir: Path, messages: list[str]) -> Path | None:
  """The OCDBT data file TensorStore found too short: it names only the database directory and the size it found,
  so the file of that size under d/."""
  sizes = {int(n) for m in messages for n in re.findall(r"value of size (\d+)", m)}
  found = [p for p in [*step_dir.glob("*/d/*"), *step_dir.glob("*/ocdbt.process_*/d/*")] if p.stat().length in sizes]
  return found[0] if len(found) == 1 else None


def _reason(message: str) -> str:
  """What TensorStore or orbax found, without the paths and source locations before and after it."""
  reason = re.split(r'"\s*:\s*', re.split(r" \[(?:source locations|tensorstore_spec)=", message)[0])[-1].strip()
  return reason.splitlines()[0][:160] if reason else "unreadable"


def _from_reads(unraisable) -> bool:
  """Whether an unraisable exception comes from orbax's parallel reads: a read coroutine of orbax's collected with its
  failure, or a late callback (TensorStore's) onto asyncio's closed event loop."""
  code = getattr(unraisable.object, "cr_code", None)
  if isinstance(unraisable.object, types.CoroutineType) and code and "/orbax/" in code.co_filename:
    return True
  frames = traceback.extract_tb(unraisable.exc_traceback) if unraisable.exc_traceback else []
  return any(part in frame.filename for frame in frames for part in ("/orbax/", "/asyncio/", "/tensorstore/"))


@contextlib.contextmanager
def quiet_reads() -> Iterator[None]:
  """orbax reads a checkpoint's arrays in parallel: when one read fails, the others' failures surface as "Exception
  ignored" tracebacks (coroutines collected with their errors, callbacks onto a closed event loop), more often on a
  loaded machine. During the read, and for the rest of the process when it fails (the one line says what is wrong),
  those are dropped; any other unraisable exception still prints."""
  previous = sys.unraisablehook
  sys.unraisablehook = lambda unraisable: None if _from_reads(unraisable) else previous(unraisable)
  yield
  sys.unraisablehook = previous  # Reached only when the read succeeded.


def error(step_dir: Path, step: int, err: BaseException) -> UserError:
  """The UserError for a failed read of checkpoint `step` in `step_dir`: the damaged file (from TensorStore's message,
  or the orbax metadata file that does not parse; else the step directory) and the array being read when known."""
  messages = [str(e) for e in _chain(err)]
  quoted = [Path(p) for m in messages for p in _QUOTED_FILE.findall(m)]
  damaged = (next((p for p in reversed(quoted) if p.is_file()), None) or _data_file(step_dir, messages)
             or _unreadable_json(step_dir) or step_dir)
  arrays = [a for m in messages for a in _ARRAY.findall(m)]
  what = f" (reading {arrays[-1]})" if arrays else ""
  return UserError(f"{damaged}: checkpoint step {step} cannot be read{what}: {_reason(messages[-1])}; the file is "
                   "damaged (truncated or overwritten since the run wrote it): copy the run's checkpoints again from "
                   "where it trained, or train the run again")

"""The presets' real datasets in one command, checked byte for byte against tasks/data_sources.py's table.

  python -m tasks.data list [NAME ...]                        each dataset: licence, source, files, total size
  python -m tasks.data fetch NAME [NAME ...] [--data-dir DIR] [--mirror URL]
  python -m tasks.data fetch all                              every dataset (155 MB)

Files go to --data-dir, else $ENCODERLAB_DATA, else ~/.cache/encoderlab/data (`encoder.paths.fetch_dir`, where
`encoder.paths.data_dir` looks too), at the relative paths of docs/data.md's "Layout". Before a dataset, its licence
and source are printed. Each download goes to `<file>.part` beside its final name, is checked (size and SHA-256) and
renamed into place; a file already there with the right checksum is skipped; an interrupted download resumes from its
`.part` with an HTTP Range request (and starts over when the server ignores it). A derived file (a member of an
archive, files joined or converted) is built from downloads checked the same way, then checked itself. --mirror URL
fetches every final file from URL/<relative path> instead (a lab's copy of the data directory; the tests' local
server), with no derivation step.

An HTTP error, a short download, a checksum mismatch or a full disk is one line `error: <file>: ...` and exit status
1, and leaves no final file half-written (a short download keeps its `.part`, which the next run resumes).
"""

import argparse
import collections
import errno
import hashlib
import http.client
import json
import os
import random
import sys
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from encoder import cli, errors, paths
from tasks import data_sources
from tasks.data_sources import Dataset, Download, FileEntry, Member, Plain, SpanSplit, SquadJoin, Step

CHUNK_BYTES = 1 << 16
PROGRESS_MIN_BYTES = 1 << 20  # A progress bar for files at least this large, when stderr is a terminal.
TIMEOUT_S = 60  # Per connection attempt and per read.
DOWNLOADS = ".downloads"  # Under the data directory: a derived file's inputs, removed once its dataset is in place.


class FetchError(errors.UserError):
  """A file could not be fetched: what was found against what was expected, and what to do."""


def human_size(size: int) -> str:
  """12,345,678 -> "12.3 MB", 4,567 -> "4.6 kB"."""
  if size >= 1e6:
    return f"{size / 1e6:.1f} MB"
  return f"{size / 1e3:.1f} kB" if size >= 1e3 else f"{size} bytes"


def sha256_of(path: Path) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def is_present(path: Path, size: int, sha256: str) -> bool:
  """Whether `path` is already the expected file."""
  return path.is_file() and path.stat().st_size == size and sha256_of(path) == sha256


class Progress:
  """A plain-text bar on `stream`, redrawn with '\\r' at each new percent; silent unless `enabled`."""

  def __init__(self, label: str, total: int, stream: TextIO, enabled: bool):
    self.label, self.total, self.stream, self.enabled = label, total, stream, enabled
    self.shown = -1

  def update(self, done: int) -> None:
    percent = 100 * done // max(self.total, 1)
    if not self.enabled or percent == self.shown:
      return
    self.shown = percent
    bar = "#" * (percent // 5)
    self.stream.write(f"\r  {self.label} [{bar:<20}] {percent:3d}% {human_size(done)} of {human_size(self.total)}")
    self.stream.flush()

  def close(self) -> None:
    if self.enabled and self.shown >= 0:
      self.stream.write("\n")
      self.stream.flush()


def _open_part(part: Path, append: bool) -> BinaryIO:
  """The temporary file a download is written to (a seam for the tests' full disk)."""
  return open(part, "ab" if append else "wb")


def _discard(part: Path) -> None:
  part.unlink(missing_ok=True)


def _write(out: BinaryIO, data: bytes, part: Path, label: str, written: int, size: int) -> None:
  """out.write(data); a full disk or another write error is refused, and the partial file removed."""
  try:
    out.write(data)
  except OSError as err:
    out.close()
    _discard(part)
    if err.errno == errno.ENOSPC:
      raise FetchError(f"{label}: disk full writing {part} ({written} of {size} bytes written); free space and "
                       "run again") from None
    raise FetchError(f"{label}: cannot write {part}: {err.strerror or err}") from None


def _check(part: Path, size: int, sha256: str, label: str) -> None:
  """Refuses (and removes) a finished `.part` whose size or SHA-256 is not the expected one."""
  found = part.stat().st_size
  if found != size:
    _discard(part)
    raise FetchError(f"{label}: {found} bytes, expected {size}; the download was discarded")
  digest = sha256_of(part)
  if digest != sha256:
    _discard(part)
    raise FetchError(f"{label}: checksum mismatch: sha256 {digest}, expected {sha256}; the download was discarded")


def _chunks(response: http.client.HTTPResponse, limit: int, problem: list[str]) -> Iterator[bytes]:
  """The body in chunks, at most `limit` bytes; a connection lost mid-way ends it, with the reason in `problem`."""
  read = 0
  while read < limit:
    try:
      chunk = response.read(min(CHUNK_BYTES, limit - read))
    except (http.client.HTTPException, OSError) as err:
      problem.append(type(err).__name__)
      return
    if not chunk:
      return
    read += len(chunk)
    yield chunk


def _request(url: str, start: int, label: str) -> http.client.HTTPResponse | None:
  """GET url (from byte `start` with a Range header when it is not 0); None when the server cannot serve that range
  (416: the partial file is stale); HTTP and network errors are refused."""
  request = urllib.request.Request(url, headers={"Range": f"bytes={start}-"} if start else {})
  try:
    return urllib.request.urlopen(request, timeout=TIMEOUT_S)
  except urllib.error.HTTPError as err:
    if err.code == 416 and start:
      return None
    raise FetchError(f"{label}: HTTP {err.code} {err.reason} from {url}") from None
  except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
    reason = getattr(err, "reason", None) or err
    raise FetchError(f"{label}: cannot download {url}: {reason}") from None


def download(url: str, dest: Path, size: int, sha256: str, label: str, stream: TextIO | None = None) -> str:
  """Makes `dest` the file of `size` bytes and `sha256` from `url`: "present" (already there), "fetched" or
  "resumed" (from `dest`.part with a Range request). Module docstring: what is refused and what is left behind."""
  if is_present(dest, size, sha256):
    return "present"
  stream = sys.stderr if stream is None else stream
  part = dest.with_name(dest.name + ".part")
  have = part.stat().st_size if part.is_file() else 0
  if have > size:
    _discard(part)
    have = 0
  how = "fetched"
  if have < size:
    response = _request(url, have, label)
    while response is None:  # 416: the partial file does not fit the server's file; start over (no Range, no 416).
      _discard(part)
      have = 0
      response = _request(url, have, label)
    with response:
      if have and response.status == 206:
        content_range = response.headers.get("Content-Range", "")
        if not content_range.startswith(f"bytes {have}-"):
          raise FetchError(f"{label}: asked {url} for bytes {have}- and got {content_range or 'no Content-Range'}")
        how = "resumed"
      else:
        have = 0  # A fresh download, or a server that ignored the Range header (200): start over.
      progress = Progress(label, size, stream, stream.isatty() and size >= PROGRESS_MIN_BYTES)
      problem: list[str] = []
      done = have
      with _open_part(part, append=have > 0) as out:
        for chunk in _chunks(response, size + 1 - have, problem):  # One byte past `size` shows a longer file.
          _write(out, chunk, part, label, done, size)
          done += len(chunk)
          progress.update(min(done, size))
      progress.close()
    if done < size:
      lost = f", {problem[0]}" if problem else ""
      raise FetchError(f"{label}: partial download, {done} of {size} bytes from {url} (connection closed early"
                       f"{lost}); run the same command again to resume")
  _check(part, size, sha256, label)
  os.replace(part, dest)
  return how


def write_checked(dest: Path, data: bytes, entry: FileEntry) -> None:
  """Writes a derived file through `.part`, checks it like a download and renames it into place."""
  part = dest.with_name(dest.name + ".part")
  with _open_part(part, append=False) as out:
    _write(out, data, part, entry.path, 0, len(data))
  _check(part, entry.size, entry.sha256, entry.path)
  os.replace(part, dest)


def spans_from_w2ner(records: list[dict], seed: int) -> list[str]:
  """W2NER records -> span JSON lines, shuffled (data_sources.SpanSplit)."""
  lines = []
  for record in records:
    spans = []
    for entity in record["ner"]:
      span = {"start": min(entity["index"]), "end": max(entity["index"]) + 1, "label": entity["type"]}
      if span not in spans:
        spans.append(span)
    spans.sort(key=lambda span: (span["start"], span["end"], span["label"]))
    lines.append(json.dumps({"words": record["sentence"], "spans": spans}, ensure_ascii=False) + "\n")
  random.Random(seed).shuffle(lines)
  return lines


def read_members(archive: Path, names: set[str]) -> dict[str, bytes]:
  """The named members of a .zip or tar archive, in one pass."""
  found = {}
  if zipfile.is_zipfile(archive):
    with zipfile.ZipFile(archive) as zf:
      found = {name: zf.read(name) for name in names if name in zf.namelist()}
  else:
    with tarfile.open(archive) as tf:
      for member in tf:
        if member.name in names and member.isfile():
          found[member.name] = tf.extractfile(member).read()  # type: ignore[union-attr]  # None only if not isfile()
  if missing := sorted(names - found.keys()):
    raise FetchError(f"{archive}: no member {missing[0]} (of {len(missing)} missing)")
  return found


class Builder:
  """Builds derived files from their inputs, each downloaded once into <data dir>/.downloads and checked."""

  def __init__(self, root: Path, members: dict[str, set[str]], stream: TextIO):
    self.folder, self.members, self.stream = root / DOWNLOADS, members, stream
    self.cache: dict[tuple, Any] = {}

  def fetch(self, source: Download) -> Path:
    self.folder.mkdir(exist_ok=True)
    name = source.sha256[:12] + "-" + Path(urllib.parse.urlsplit(source.url).path).name
    path = self.folder / name
    how = download(source.url, path, source.size, source.sha256, label=source.url, stream=self.stream)
    if how != "present":
      print(f"  {how} {source.url} ({human_size(source.size)})")
    return path

  def _once(self, key: tuple, make: Callable[[], Any]) -> Any:
    if key not in self.cache:
      self.cache[key] = make()
    return self.cache[key]

  def build(self, step: Step) -> bytes:
    """The final file's bytes (data_sources' module docstring says what each step kind does)."""
    if isinstance(step, Member):
      members = self._once(("members", step.archive), lambda: read_members(self.fetch(step.archive),
                                                                           self.members[step.archive.url]))
      data = members[step.member]
      return data.replace(b"\r", b"") if step.crlf else data
    if isinstance(step, SquadJoin):
      articles = [article for part in step.parts for article in json.loads(self.fetch(part).read_bytes())["data"]]
      return json.dumps({"data": articles, "version": step.version}, ensure_ascii=False).encode()
    if isinstance(step, SpanSplit):
      lines = self._once(("spans", step.source, step.seed), lambda: spans_from_w2ner(
          json.loads(self.fetch(step.source).read_bytes()), step.seed))
      return "".join(lines[step.start:step.stop]).encode()
    raise TypeError(f"no build for {type(step).__name__}")

  def clean(self) -> None:
    """Removes the inputs (their files are in place) and the folder when it is left empty."""
    if self.folder.is_dir():
      for path in self.folder.iterdir():
        if not path.name.endswith(".part"):
          path.unlink()
      if not any(self.folder.iterdir()):
        self.folder.rmdir()


def mirror_url(mirror: str, relative: str) -> str:
  return mirror.rstrip("/") + "/" + urllib.parse.quote(relative)


def fetch_dataset(dataset: Dataset, root: Path, mirror: str | None = None, stream: TextIO | None = None) -> dict:
  """Lays out one dataset under `root`, printing its licence and source first; returns the count of each outcome."""
  stream = sys.stderr if stream is None else stream
  print(f"{dataset.name}: {len(dataset.files)} files, {human_size(dataset.size)}")
  print(f"  licence: {dataset.licence}")
  print(f"  source: {mirror_url(mirror, dataset.name + '/') if mirror else dataset.source}")
  members: dict[str, set[str]] = collections.defaultdict(set)
  for entry in dataset.files:
    if isinstance(entry.step, Member):
      members[entry.step.archive.url].add(entry.step.member)
  builder = Builder(root, members, stream)
  outcomes: collections.Counter[str] = collections.Counter()
  for entry in dataset.files:
    dest = root / entry.path
    dest.parent.mkdir(parents=True, exist_ok=True)
    if mirror or isinstance(entry.step, Plain):
      url = mirror_url(mirror, entry.path) if mirror else entry.step.url  # type: ignore[union-attr]  # a Plain here
      how = download(url, dest, entry.size, entry.sha256, label=entry.path, stream=stream)
    elif is_present(dest, entry.size, entry.sha256):
      how = "present"
    else:
      write_checked(dest, builder.build(entry.step), entry)
      how = "built"
    outcomes[how] += 1
    if how != "present":
      print(f"  {how} {entry.path} ({human_size(entry.size)})")
  builder.clean()
  counts = ", ".join(f"{n} {how}" for how, n in sorted(outcomes.items()))
  print(f"  {dataset.name}: in place under {root / dataset.name} ({counts}; sizes and SHA-256 checked)")
  return dict(outcomes)


def select(names: Sequence[str]) -> list[Dataset]:
  """Datasets by name ("all": every one), in the order given, each once; an unknown name is refused."""
  chosen: dict[str, Dataset] = {}
  for name in names:
    if name == "all":
      chosen.update(data_sources.DATASETS)
    elif name in data_sources.DATASETS:
      chosen[name] = data_sources.DATASETS[name]
    else:
      raise FetchError(f"unknown dataset {name!r}: the datasets are {', '.join(data_sources.DATASETS)}, or all")
  return list(chosen.values())


def writable_root(data_dir: str | None) -> Path:
  """The data directory (--data-dir, else encoder.paths.fetch_dir()), created; refused when it cannot be written."""
  root = Path(data_dir).expanduser() if data_dir else paths.fetch_dir()
  where = "--data-dir" if data_dir else f"${paths.DATA_ENV} or the default"
  try:
    root.mkdir(parents=True, exist_ok=True)
  except OSError as err:
    raise FetchError(f"cannot create the data directory {root} ({where}): {err.strerror or err}") from None
  if not os.access(root, os.W_OK | os.X_OK):
    raise FetchError(f"the data directory {root} ({where}) is not writable")
  return root


def list_datasets(datasets: Sequence[Dataset], folded: int = 8) -> None:
  """Prints each dataset's licence, source, files (a folder of more than `folded` files as one line) and size."""
  for dataset in datasets:
    print(f"{dataset.name}: {len(dataset.files)} files, {human_size(dataset.size)}")
    print(f"  licence: {dataset.licence}")
    print(f"  source: {dataset.source}")
    folders: dict[str, list[FileEntry]] = collections.defaultdict(list)
    for entry in dataset.files:
      folders[entry.path.rpartition("/")[0] + "/"].append(entry)
    for folder, entries in folders.items():
      if len(entries) > folded:
        print(f"    {folder}  {len(entries)} files, {human_size(sum(e.size for e in entries))}")
      else:
        for entry in entries:
          print(f"    {entry.path}  {human_size(entry.size)}")
  files = [entry for dataset in datasets for entry in dataset.files]
  print(f"{len(datasets)} datasets, {len(files)} files, {human_size(sum(e.size for e in files))}")


def parser() -> argparse.ArgumentParser:
  """The command line (module docstring)."""
  root = cli.ArgumentParser(prog="python -m tasks.data", description=__doc__.split("\n")[0])
  commands = root.add_subparsers(dest="command", required=True)
  listing = commands.add_parser("list", help="each dataset's licence, source, files and size")
  listing.add_argument("names", nargs="*", metavar="NAME", help="datasets to list (default: all)")
  fetching = commands.add_parser("fetch", help="download and check datasets into the data directory")
  fetching.add_argument("names", nargs="+", metavar="NAME", help=f"{', '.join(data_sources.DATASETS)}, or all")
  fetching.add_argument("--data-dir", help="where to lay the data out (default: $ENCODERLAB_DATA, else "
                                           "~/.cache/encoderlab/data)")
  fetching.add_argument("--mirror", metavar="URL", help="fetch every file from URL/<relative path> (a copy of the "
                                                        "data directory served over HTTP), not from its source")
  return root


def main(argv: Sequence[str] | None = None) -> None:
  """Parses the command line and lists or fetches."""
  args = parser().parse_args(argv)
  datasets = select(args.names or ["all"])
  if args.command == "list":
    list_datasets(datasets)
    return
  if args.mirror and urllib.parse.urlsplit(args.mirror).scheme not in ("http", "https", "file"):
    raise FetchError(f"--mirror {args.mirror}: expected an http://, https:// or file:// URL")
  root = writable_root(args.data_dir)
  totals: collections.Counter[str] = collections.Counter()
  for dataset in datasets:
    totals.update(fetch_dataset(dataset, root, args.mirror))
  counts = ", ".join(f"{n} {how}" for how, n in sorted(totals.items()))
  print(f"done: {len(datasets)} dataset{'s' * (len(datasets) != 1)} under {root} ({counts})")


if __name__ == "__main__":
  errors.run(main)

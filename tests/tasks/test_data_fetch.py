"""`python -m tasks.data`: the checksum table against the shared copy, fetches through --mirror from a local HTTP
server (127.0.0.1, port 0) serving the shared data, resume with and without Range, derived files, and each refusal
(one line, no final file half-written). No network beyond 127.0.0.1."""

import contextlib
import dataclasses
import errno
import gzip
import hashlib
import http.server
import io
import json
import os
import random
import re
import subprocess
import sys
import tarfile
import threading
import urllib.parse
import zipfile
from pathlib import Path

import pytest

from tasks import data, data_sources
from tasks.data_sources import Dataset, Download, FileEntry, Member, SpanSplit, SquadJoin
from tests.conftest import require_data

REPO = Path(__file__).resolve().parents[2]
SMALL = ("sick", "mrpc", "wic")  # 3.2 MB in all.


class _Handler(http.server.BaseHTTPRequestHandler):
  """Serves server.root's files at their relative paths, misbehaving as the server's switches say."""

  def log_message(self, *args):  # Quiet.
    pass

  def do_GET(self):
    server = self.server
    relative = urllib.parse.unquote(self.path.lstrip("/"))
    server.requests.append((relative, self.headers.get("Range")))
    path = server.root / relative
    if relative in server.missing or not path.is_file():
      self.send_error(404)
      return
    body = path.read_bytes()
    if relative in server.altered:
      body = bytes([body[0] ^ 1]) + body[1:] + server.altered[relative]
    start, status = 0, 200
    asked = self.headers.get("Range")
    if asked and server.honour_range:
      start, status = int(asked.removeprefix("bytes=").split("-")[0]), 206
    body = body[start:]
    length = len(body) // 2 if server.short_length else len(body)
    self.send_response(status)
    self.send_header("Content-Length", str(length))
    if status == 206:
      self.send_header("Content-Range", f"bytes {start}-{start + len(body) - 1}/{start + len(body)}")
    self.end_headers()
    self.wfile.write(body[:server.cut_after] if server.cut_after is not None else body[:length])
    self.close_connection = True


@contextlib.contextmanager
def serving(root: Path):
  """A local server over `root` (its URL is .url, the switches of _Handler off), shut down on exit."""
  httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
  httpd.daemon_threads = True
  httpd.root = root
  httpd.requests, httpd.missing, httpd.altered = [], set(), {}
  httpd.honour_range, httpd.short_length, httpd.cut_after = True, False, None
  httpd.url = f"http://127.0.0.1:{httpd.server_address[1]}"
  thread = threading.Thread(target=httpd.serve_forever, kwargs=dict(poll_interval=0.05), daemon=True)
  thread.start()
  try:
    yield httpd
  finally:
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
  """127.0.0.1 is reached directly, whatever proxy the environment names."""
  monkeypatch.setenv("no_proxy", "127.0.0.1")
  monkeypatch.setenv("NO_PROXY", "127.0.0.1")


@pytest.fixture
def server():
  """A local server over the shared data directory (skips without it, fails under CI)."""
  with serving(require_data("")) as httpd:
    yield httpd


@pytest.fixture
def local_server(tmp_path):
  """A local server over tmp_path/src (no shared data needed)."""
  (tmp_path / "src").mkdir()
  with serving(tmp_path / "src") as httpd:
    yield httpd


def fetch(server, tmp_path, *names):
  data.main(["fetch", *names, "--data-dir", str(tmp_path), "--mirror", server.url])


def leftovers(root: Path) -> list[str]:
  """Temporary files or folders left under root."""
  return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                if p.name.endswith(".part") or p.name == data.DOWNLOADS)


def one_line(err: pytest.ExceptionInfo) -> str:
  text = str(err.value)
  assert "\n" not in text
  return text


def test_table_matches_the_shared_copy():
  """Every file of every dataset folder is in the table with its size and SHA-256, and nothing else is."""
  for dataset in data_sources.DATASETS.values():
    folder = require_data(dataset.name)
    on_disk = {str(p.relative_to(folder.parent)) for p in folder.rglob("*") if p.is_file() and p.name != "SOURCE.md"}
    assert on_disk == {entry.path for entry in dataset.files}, dataset.name
    for entry in dataset.files:
      path = folder.parent / entry.path
      assert (path.stat().st_size, data.sha256_of(path)) == (entry.size, entry.sha256), entry.path


def test_every_source_is_pinned():
  """A URL at a full commit hash or a PyPI file of a fixed version; every dataset of docs/data.md's layout."""
  pinned = re.compile(r"https://raw\.githubusercontent\.com/[\w.-]+/[\w.-]+/[0-9a-f]{40}/\S+$"
                      r"|https://files\.pythonhosted\.org/packages/source/\w/[\w-]+/[\w-]+-\d[\w.]*\.(tar\.gz|zip)$")
  for dataset in data_sources.DATASETS.values():
    assert dataset.licence and dataset.source
    for entry in dataset.files:
      step = entry.step
      urls = [getattr(step, "url", None)] + [d.url for d in (getattr(step, "parts", ()) + tuple(
          getattr(step, name) for name in ("archive", "source") if hasattr(step, name)))]
      for url in filter(None, urls):
        assert pinned.match(url), (entry.path, url)
  layout = (REPO / "docs" / "data.md").read_text().split("## Layout")[1].split("```")[1]
  assert {line.split()[0].split("/")[0] for line in layout.splitlines() if line.startswith("  ")} == set(
      data_sources.DATASETS)


def test_fetch_through_a_mirror_lays_out_the_shared_bytes(server, tmp_path, capsys):
  fetch(server, tmp_path, *SMALL)
  out = capsys.readouterr().out
  for name in SMALL:
    dataset = data_sources.DATASETS[name]
    assert out.index(f"licence: {dataset.licence}") < out.index(f"fetched {dataset.files[0].path}")
    for entry in dataset.files:
      assert (tmp_path / entry.path).read_bytes() == (server.root / entry.path).read_bytes(), entry.path
  assert not leftovers(tmp_path)
  server.requests.clear()
  fetch(server, tmp_path, "sick", "sick")  # Present files are checked, not downloaded; a name given twice is one.
  assert server.requests == []
  assert "4 present" in capsys.readouterr().out


def test_resume_asks_for_the_rest_with_range(server, tmp_path):
  entry = data_sources.DATASETS["sick"].files[0]
  dest = tmp_path / "f.txt"
  whole = (server.root / entry.path).read_bytes()
  dest.with_name("f.txt.part").write_bytes(whole[:1000])
  how = data.download(f"{server.url}/{entry.path}", dest, entry.size, entry.sha256, "f.txt")
  assert how == "resumed" and server.requests == [(entry.path, "bytes=1000-")]
  assert dest.read_bytes() == whole and not leftovers(tmp_path)


def test_resume_starts_over_when_the_server_ignores_range(server, tmp_path):
  server.honour_range = False
  entry = data_sources.DATASETS["sick"].files[0]
  dest = tmp_path / "f.txt"
  dest.with_name("f.txt.part").write_bytes(b"stale bytes")
  how = data.download(f"{server.url}/{entry.path}", dest, entry.size, entry.sha256, "f.txt")
  assert how == "fetched" and server.requests == [(entry.path, "bytes=11-")]
  assert dest.read_bytes() == (server.root / entry.path).read_bytes() and not leftovers(tmp_path)


@pytest.mark.parametrize("extra", [b"", b"tail"], ids=["same-size", "longer"])
def test_altered_bytes_are_refused(server, tmp_path, extra):
  server.altered["wic/README.txt"] = extra
  with pytest.raises(data.FetchError) as err:
    fetch(server, tmp_path, "wic")
  message = one_line(err)
  assert message.startswith("wic/README.txt: ")
  assert ("checksum mismatch: sha256 " in message) if not extra else ("expected" in message and "bytes" in message)
  assert not (tmp_path / "wic/README.txt").exists() and not leftovers(tmp_path)


@pytest.mark.parametrize("how", ["closed-early", "short-content-length"])
def test_a_partial_download_is_refused_then_resumed(server, tmp_path, how):
  if how == "closed-early":
    server.cut_after = 5000
  else:
    server.short_length = True
  with pytest.raises(data.FetchError) as err:
    fetch(server, tmp_path, "sick")
  message = one_line(err)
  entry = data_sources.DATASETS["sick"].files[0]
  assert message.startswith(f"{entry.path}: partial download, ") and f" of {entry.size} bytes" in message
  assert not (tmp_path / entry.path).exists()
  assert leftovers(tmp_path) == [entry.path + ".part"]  # Kept for the resume.
  server.cut_after, server.short_length = None, False
  fetch(server, tmp_path, "sick")
  assert (tmp_path / entry.path).read_bytes() == (server.root / entry.path).read_bytes()
  assert [asked for relative, asked in server.requests if relative == entry.path][-1] is not None  # Resumed.
  assert not leftovers(tmp_path)


def test_a_full_disk_is_refused(server, tmp_path, monkeypatch):
  class FullDisk(io.BytesIO):
    def write(self, chunk):
      raise OSError(errno.ENOSPC, "No space left on device")

  real_open = data._open_part

  def open_part(part, append):
    real_open(part, append).close()
    return FullDisk()

  monkeypatch.setattr(data, "_open_part", open_part)
  with pytest.raises(data.FetchError) as err:
    fetch(server, tmp_path, "wic")
  assert "disk full writing" in one_line(err)
  assert not list(tmp_path.rglob("*.txt")) and not leftovers(tmp_path)


def test_http_404_is_refused(server, tmp_path):
  server.missing.add("mrpc/dev.tsv")
  with pytest.raises(data.FetchError) as err:
    fetch(server, tmp_path, "mrpc")
  assert one_line(err).startswith("mrpc/dev.tsv: HTTP 404 ")
  assert not (tmp_path / "mrpc/dev.tsv").exists() and not leftovers(tmp_path)


@pytest.mark.parametrize("argv", [["fetch", "nosuch"], ["fetch", "sick", "--no-such-flag"], ["fetch"]])
def test_user_mistakes_are_one_line_and_status_1(tmp_path, argv):
  env = dict(os.environ, ENCODERLAB_DATA=str(tmp_path / "data"), JAX_PLATFORMS="cpu")
  run = subprocess.run([sys.executable, "-m", "tasks.data", *argv], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=120, check=False)
  assert run.returncode == 1 and run.stdout == ""
  assert len(run.stderr.splitlines()) == 1 and run.stderr.startswith("error: "), run.stderr
  assert not (tmp_path / "data").exists()


def test_a_data_dir_that_is_a_file_is_refused(tmp_path):
  (tmp_path / "file").write_text("")
  with pytest.raises(data.FetchError, match="cannot create the data directory"):
    data.main(["fetch", "sick", "--data-dir", str(tmp_path / "file" / "data")])


def test_the_default_data_dir_is_the_fetch_dir(tmp_path, monkeypatch):
  monkeypatch.setenv("ENCODERLAB_DATA", str(tmp_path / "d"))
  assert data.writable_root(None) == tmp_path / "d" and (tmp_path / "d").is_dir()


def test_derived_files_are_built_and_checked(local_server, tmp_path):
  """Member (tar.gz with CRLF -> LF, zip), SquadJoin and SpanSplit on small inputs served from tmp_path/src."""
  server, src = local_server, tmp_path / "src"
  tar_buffer = io.BytesIO()
  with tarfile.open(fileobj=tar_buffer, mode="w") as tf:
    for name, text in (("pkg/db/a.txt", b"one\r\ntwo\r\n"), ("pkg/db/b.txt", b"three\r\n")):
      info = tarfile.TarInfo(name)
      info.size = len(text)
      tf.addfile(info, io.BytesIO(text))
  (src / "pkg.tar.gz").write_bytes(gzip.compress(tar_buffer.getvalue()))
  with zipfile.ZipFile(src / "pkg.zip", "w") as zf:
    zf.writestr("z/c.txt", "zipped\n")
  (src / "half1.json").write_text(json.dumps({"data": [{"title": "A"}], "version": "1.1"}))
  (src / "half2.json").write_text(json.dumps({"data": [{"title": "É"}], "version": "1.1"}))
  records = [{"sentence": ["w", str(i)], "ner": [{"index": [1], "type": "T"}, {"index": [0, 1], "type": "S"},
                                                 {"index": [1], "type": "T"}]} for i in range(5)]
  (src / "w2ner.json").write_text(json.dumps(records))

  def download(name):
    body = (src / name).read_bytes()
    return Download(f"{server.url}/{name}", len(body), hashlib.sha256(body).hexdigest())

  lines = [json.dumps({"words": ["w", str(i)], "spans": [{"start": 0, "end": 2, "label": "S"},
                                                         {"start": 1, "end": 2, "label": "T"}]}) + "\n"
           for i in range(5)]
  random.Random(7).shuffle(lines)
  expected = {"x/a.txt": b"one\ntwo\n", "x/b.txt": b"three\n", "x/c.txt": b"zipped\n",
              "x/dev.json": json.dumps({"data": [{"title": "A"}, {"title": "É"}], "version": "1.1"},
                                       ensure_ascii=False).encode(),
              "x/train.jsonl": "".join(lines[:3]).encode(), "x/dev.jsonl": "".join(lines[3:]).encode()}
  tar, zipped, w2ner = download("pkg.tar.gz"), download("pkg.zip"), download("w2ner.json")
  steps = {"x/a.txt": Member(tar, "pkg/db/a.txt", crlf=True), "x/b.txt": Member(tar, "pkg/db/b.txt", crlf=True),
           "x/c.txt": Member(zipped, "z/c.txt"), "x/dev.json": SquadJoin((download("half1.json"),
                                                                           download("half2.json"))),
           "x/train.jsonl": SpanSplit(w2ner, seed=7, start=0, stop=3),
           "x/dev.jsonl": SpanSplit(w2ner, seed=7, start=3, stop=5)}
  dataset = Dataset("x", "a licence", "a source", tuple(
      FileEntry(path, len(expected[path]), hashlib.sha256(expected[path]).hexdigest(), step)
      for path, step in steps.items()))
  out = tmp_path / "out"
  out.mkdir()
  assert data.fetch_dataset(dataset, out) == {"built": 6}
  assert {path: (out / path).read_bytes() for path in expected} == expected
  assert sum(1 for relative, _ in server.requests if relative == "pkg.tar.gz") == 1 and not leftovers(out)
  assert data.fetch_dataset(dataset, out) == {"present": 6}

  wrong = Dataset("x", "l", "s", (dataclasses.replace(dataset.files[0], sha256="0" * 64),))
  (out / "x/a.txt").unlink()
  with pytest.raises(data.FetchError, match=r"^x/a.txt: checksum mismatch"):
    data.fetch_dataset(wrong, out)
  assert not (out / "x/a.txt").exists() and not list(out.rglob("*.part"))


def test_progress_bar_on_a_terminal(server, tmp_path, monkeypatch):
  class Terminal(io.StringIO):
    def isatty(self):
      return True

  monkeypatch.setattr(data, "PROGRESS_MIN_BYTES", 1000)
  entry = data_sources.DATASETS["sick"].files[0]
  stream = Terminal()
  data.download(f"{server.url}/{entry.path}", tmp_path / "f", entry.size, entry.sha256, "f", stream=stream)
  shown = stream.getvalue()
  assert shown.startswith("\r  f [") and shown.count("\r") > 3
  assert shown.endswith(f"] 100% {data.human_size(entry.size)} of {data.human_size(entry.size)}\n")
  quiet = io.StringIO()  # Not a terminal: nothing.
  data.download(f"{server.url}/{entry.path}", tmp_path / "g", entry.size, entry.sha256, "g", stream=quiet)
  assert quiet.getvalue() == ""


def test_list_prints_every_dataset(capsys):
  data.main(["list"])
  out = capsys.readouterr().out
  for dataset in data_sources.DATASETS.values():
    assert f"{dataset.name}: {len(dataset.files)} files, {data.human_size(dataset.size)}\n  licence: " in out
  assert "semcor/semcor3.0/brown1/tagfiles/  103 files" in out
  assert out.splitlines()[-1].startswith(f"{len(data_sources.DATASETS)} datasets, 434 files, ")

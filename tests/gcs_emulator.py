"""A GCS emulator on loopback for the tests of gs:// paths: gcp-storage-emulator (the GCS JSON API over HTTP, objects
in memory), with the variables that point gcsfs, tensorstore (orbax's arrays), array_record and google-cloud-storage
(tensorboardX) at it. Nothing reaches Google.

`python -m tests.gcs_emulator start ...` is the emulator's own command with one fix: its downloads lack the
x-goog-generation header that GCS sends, without which tensorstore's OCDBT (orbax's checkpoint format) fails on the
second write of a manifest it has read ("Malformed StorageGeneration").
"""

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import gcsfs

REPO = Path(__file__).resolve().parents[1]
BUCKET = "bucket"
START_TIMEOUT_S = 60


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def environment(host: str) -> dict[str, str]:
  """The variables that send every GCS client of a process (and its subprocesses) to `host`."""
  return {"STORAGE_EMULATOR_HOST": host,  # gcsfs (epath's gs://) and google-cloud-storage (tensorboardX).
          "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",  # Else gcsfs probes the bucket over gRPC: 60 s per bucket.
          "TENSORSTORE_GCS_HTTP_URL": host,  # orbax's array data.
          "CLOUD_STORAGE_EMULATOR_ENDPOINT": host,  # array_record's gs:// reader (prepared corpora).
          "GOOGLE_CLOUD_PROJECT": "test"}


@contextlib.contextmanager
def running() -> Iterator[str]:
  """Starts the emulator with an empty bucket named BUCKET and sets `environment` in os.environ; yields its URL;
  stops it (by its process id) and restores the environment. Its log (a line per request) goes to a file: a pipe
  nobody reads would fill and stall it."""
  port = _free_port()
  host = f"http://127.0.0.1:{port}"
  saved = {k: os.environ.get(k) for k in environment(host)}
  with tempfile.TemporaryDirectory(prefix="gcs-emulator-") as folder:
    log = Path(folder) / "emulator.log"
    with open(log, "w", encoding="utf-8") as out:
      process = subprocess.Popen([sys.executable, "-m", "tests.gcs_emulator", "start", "--host=127.0.0.1",
                                  f"--port={port}", "--in-memory", f"--default-bucket={BUCKET}"], stdout=out,
                                 stderr=subprocess.STDOUT, cwd=REPO)
    try:
      started = time.monotonic()
      while "All services started" not in log.read_text(encoding="utf-8", errors="replace"):
        if process.poll() is not None or time.monotonic() - started > START_TIMEOUT_S:
          raise RuntimeError("gcp-storage-emulator did not start:\n" + log.read_text(errors="replace")[-3000:])
        time.sleep(0.05)
      os.environ.update(environment(host))
      gcsfs.GCSFileSystem.clear_instance_cache()  # fsspec keeps filesystems (and the endpoint each was made with).
      yield host
    finally:
      gcsfs.GCSFileSystem.clear_instance_cache()
      process.terminate()
      process.wait(timeout=30)
      for key, value in saved.items():
        if value is None:
          os.environ.pop(key, None)
        else:
          os.environ[key] = value


def objects(host: str, prefix: str) -> list[str]:
  """The names of the bucket's objects under `prefix` (the emulator's JSON API, not the code under test)."""
  names, token = [], ""
  while True:
    url = f"{host}/storage/v1/b/{BUCKET}/o?prefix={prefix}" + (f"&pageToken={token}" if token else "")
    with urllib.request.urlopen(url, timeout=30) as response:
      page = json.load(response)
    names += [item["name"] for item in page.get("items", [])]
    token = page.get("nextPageToken")
    if not token:
      return sorted(names)


def _serve() -> None:
  """The emulator's command line, its downloads sending x-goog-generation as GCS does."""
  from gcp_storage_emulator.handlers import objects  # pylint: disable=import-outside-toplevel
  download = objects.download

  def download_with_generation(request, response, storage, *args, **kwargs):
    download(request, response, storage, *args, **kwargs)
    try:
      found = storage.get_file_obj(request.params["bucket_name"], request.params["object_id"])
    except Exception:  # noqa: BLE001  (a 404, already answered)
      return
    response["x-goog-generation"] = found["generation"]
    response["x-goog-metageneration"] = found["metageneration"]

  objects.download = download_with_generation  # Before the server module builds its routes from it.
  from gcp_storage_emulator import __main__ as command  # pylint: disable=import-outside-toplevel
  command.main(sys.argv[1:])


if __name__ == "__main__":
  _serve()

"""gs:// workdirs and corpora end to end against a GCS emulator on loopback (tests/gcs_emulator.py): a corpus
prepared into the bucket; pretraining in the bucket that is SIGKILLed and resumes bitwise equal to the same run on
local files; 2 processes sharing one gs:// workdir; fine-tuning from init=run:gs://... and predicting from the
fine-tuned gs:// run. Tiny runs of a few steps on the packaged sample corpora (no shared data needed)."""

import json
import os
import pathlib
import socket

import numpy as np
import pytest

from benchmarks import determinism
from configs import demo as demo_config, finetune, samples
from encoder import errors, files
from encoder.array_files import load_npy
from launch import metrics_writer, train
from launch.experiments import local_cluster, report, sweep
from objectives import prepare
from tasks.embeddings import store
from tests import gcs_emulator
from tests.launch.test_engine_runs import PARAMS_TOLERANCE  # Its reason is given there.

pytestmark = pytest.mark.slow  # Every test here trains or runs a model end to end (docs/testing.md).

RUN = "runs/base"
STEPS = ["--config.num_train_steps=10", "--config.checkpoint_every_steps=5"]


@pytest.fixture(scope="module")
def gcs():
  with gcs_emulator.running() as host:
    yield host


@pytest.fixture(scope="module")
def corpus(gcs, tmp_path_factory):
  """(local prepared directory, gs:// prepared directory) of the packaged sample corpus, prepared twice."""
  local = tmp_path_factory.mktemp("corpus") / "prepared"
  for out in (local, f"gs://{gcs_emulator.BUCKET}/corpus"):
    prepare.prepare([str(samples.sample_file("train"))], "all-MiniLM-L6-v2", str(out), shard_documents=64)
  return local, f"gs://{gcs_emulator.BUCKET}/corpus"


def _overrides(prepared) -> list[str]:
  return [f"--config.data.prepared={prepared}", f"--config.data.eval_files={samples.sample_file('heldout')}",
          *STEPS]


@pytest.fixture(scope="module")
def runs(gcs, corpus, tmp_path_factory):
  """(local reference run, gs:// run SIGKILLed at step 7 and resumed, the resumed run's output, cache)."""
  root = tmp_path_factory.mktemp("runs")
  cache = root / "cache"
  reference = root / "local"
  determinism.run(reference, _overrides(corpus[0]), cache=cache)
  remote = files.path(f"gs://{gcs_emulator.BUCKET}/{RUN}")
  killed = determinism.run(remote, _overrides(corpus[1]), cache=cache, check=False, fault=("SIGKILL", 7))
  assert killed.returncode == -9, killed.stderr[-3000:]
  resumed = determinism.run(remote, _overrides(corpus[1]), cache=cache)
  return reference, remote, resumed, cache


def test_a_gs_url_never_becomes_a_local_path(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  with pytest.raises(errors.UserError, match="lost a slash"):
    files.path(pathlib.Path("gs://bucket/runs/x"))  # pathlib made it gs:/bucket/runs/x.
  with pytest.raises(errors.UserError, match="lost a slash"):
    train.train_and_evaluate(demo_config.mlm_config(1), pathlib.Path("gs://bucket/runs/x"))
  with pytest.raises(errors.UserError, match="a sweep root is a local directory"):
    sweep.sweep_main(["--sweep", "any_sweep.py", "--root", "gs://bucket/sweep"])
  with pytest.raises(errors.UserError, match="reports read local workdirs"):
    report.find_workdirs(["gs://bucket/runs"])
  with pytest.raises(errors.UserError, match="the store is written locally"):
    store.open_store("gs://bucket/embeddings", {})
  assert str(files.absolute("gs://bucket/runs/x")) == "gs://bucket/runs/x"
  assert str(files.path("gs://bucket/runs") / "x") == "gs://bucket/runs/x"
  assert not any(tmp_path.iterdir())


def _closed_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]  # Closed again when the block ends: nothing listens there.


@pytest.mark.parametrize("url, endpoint, expected", [
    ("gs:///runs/x", None, "expected gs://<bucket>/<path>, found no bucket name after gs:// (an unset variable"),
    ("gs://bucket/runs/x", "http://127.0.0.1:{closed}", "gs://bucket/runs/x: cannot connect to 127.0.0.1:{closed}"),
    ("gs://bucket/runs/x", "http://no-such-host.invalid:4443", "cannot connect to no-such-host.invalid:4443"),
])
def test_an_unreachable_gs_url_is_one_line_naming_it_and_the_remedy(monkeypatch, url, endpoint, expected):
  """No bucket, no server, no name: refused before any gcsfs call (which retries for about a minute)."""
  closed = _closed_port()
  if endpoint:
    monkeypatch.setenv(files.EMULATOR_ENV, endpoint.format(closed=closed))
  with pytest.raises(errors.UserError) as raised:
    files.reachable(url)
  assert expected.format(closed=closed) in str(raised.value) and "\n" not in str(raised.value)
  assert endpoint is None or "STORAGE_EMULATOR_HOST" in str(raised.value)


def test_a_missing_bucket_is_named_and_a_command_stops_before_writing(gcs, tmp_path):
  with pytest.raises(errors.UserError, match=r"gs://no-such-bucket/runs/x: the bucket gs://no-such-bucket does not "
                                             r"exist"):
    files.reachable("gs://no-such-bucket/runs/x")
  assert str(files.reachable(f"gs://{gcs_emulator.BUCKET}/runs/x")) == f"gs://{gcs_emulator.BUCKET}/runs/x"
  done = determinism.run(files.path("gs://no-such-bucket/runs/x"), STEPS, cache=tmp_path / "cache", check=False)
  assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
  assert done.stderr.strip().splitlines()[-1].startswith("error: gs://no-such-bucket/runs/x: the bucket")


def test_atomic_writes_moves_and_arrays_in_the_bucket(gcs):
  folder = files.path(f"gs://{gcs_emulator.BUCKET}/files")
  files.atomic_write(folder / "a.txt", "é\n")
  with files.atomic_path(folder / "b.npy") as temporary:
    np.save(temporary, np.arange(3), allow_pickle=False)
  with pytest.raises(RuntimeError), files.atomic_path(folder / "c.txt") as temporary:
    temporary.write_text("half")
    raise RuntimeError("killed while writing")
  assert gcs_emulator.objects(gcs, "files/") == ["files/a.txt", "files/b.npy"]  # Nothing of the failed write.
  files.move(folder, f"gs://{gcs_emulator.BUCKET}/moved/files")
  assert gcs_emulator.objects(gcs, "files/") == []
  assert gcs_emulator.objects(gcs, "moved/") == ["moved/files/a.txt", "moved/files/b.npy"]
  assert (files.path(f"gs://{gcs_emulator.BUCKET}/moved/files") / "a.txt").read_text(encoding="utf-8") == "é\n"
  np.testing.assert_array_equal(load_npy(f"gs://{gcs_emulator.BUCKET}/moved/files/b.npy"), np.arange(3))


def test_metrics_and_tensorboard_events_in_the_bucket(gcs):
  workdir = f"gs://{gcs_emulator.BUCKET}/metrics"
  for step in (1, 2):  # A run and its resumption: metrics.jsonl continues.
    writer = metrics_writer.MetricsWriter(workdir)
    writer.write(step, {"train/loss": 1.5 * step, "train/grad_norm": float("nan")})
    writer.close()
  assert metrics_writer.read_jsonl(f"{workdir}/metrics.jsonl") == [
      {"step": 1, "train/loss": 1.5, "train/grad_norm": "nan"},
      {"step": 2, "train/loss": 3.0, "train/grad_norm": "nan"}]
  events = gcs_emulator.objects(gcs, "metrics/tensorboard/")
  assert events and all(b"train/loss" in files.path(f"gs://{gcs_emulator.BUCKET}/{e}").read_bytes() for e in events)


def test_prepared_in_the_bucket_equals_prepared_locally(corpus):
  local = json.loads((corpus[0] / "metadata.json").read_text())
  remote = json.loads((files.path(corpus[1]) / "metadata.json").read_text())
  assert [s["sha256"] for s in remote["shards"]] == [s["sha256"] for s in local["shards"]]
  for shard in local["shards"]:
    for suffix in prepare.SUFFIXES:
      name = f"{shard['name']}{suffix}"
      assert (files.path(corpus[1]) / name).read_bytes() == (corpus[0] / name).read_bytes()


def test_pretraining_in_the_bucket_resumes_bitwise_equal_to_the_local_run(gcs, runs):
  reference, remote, resumed, _ = runs
  assert "resuming from checkpoint step 5" in resumed.stdout
  names = gcs_emulator.objects(gcs, RUN + "/")
  for name in ("config.json", "metrics.jsonl", "results.json", "checkpoints/5/commit_success.txt",
               "checkpoints/10/commit_success.txt", "checkpoints/10/default/manifest.ocdbt"):
    assert f"{RUN}/{name}" in names, names
  assert any(n.startswith(f"{RUN}/tensorboard/events.out.tfevents.") for n in names)
  assert not (determinism.REPO / "gs:").exists()
  assert determinism.params_equal(determinism.final_params(remote), determinism.final_params(reference))
  np.testing.assert_array_equal(determinism.losses(remote), determinism.losses(reference))
  assert json.loads((remote / "results.json").read_text())["eval"] == json.loads(
      (reference / "results.json").read_text())["eval"]


def test_two_processes_share_one_gs_workdir(gcs, corpus, runs, capsys, tmp_path, monkeypatch):
  reference, _, _, cache = runs
  monkeypatch.chdir(tmp_path)  # The processes' logs: two.logs/ in the current directory, for a gs:// workdir.
  monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(determinism.REPO), os.environ.get("PYTHONPATH")])))
  workdir = f"gs://{gcs_emulator.BUCKET}/runs/two"
  args = [f"--config={determinism.REPO / determinism.CONFIG}", f"--workdir={workdir}", *determinism.TINY,
          f"--config.data.cache_dir={cache / 'corpus'}", *_overrides(corpus[1])]
  codes = local_cluster.run_cluster(args, processes=2, devices=1, timeout_s=determinism.TIMEOUT_S)
  assert codes == [0, 0], capsys.readouterr().out[-3000:]
  assert (tmp_path / "two.logs" / "process1.log").is_file()
  names = gcs_emulator.objects(gcs, "runs/two/")
  steps = sorted({n.split("/")[3] for n in names if n.startswith("runs/two/checkpoints/")})
  assert steps == ["10", "5"]
  shards = sorted({n.split("/")[5] for n in names if n.startswith("runs/two/checkpoints/10/default/ocdbt.")})
  assert shards == ["ocdbt.process_0", "ocdbt.process_1"]
  assert sum(n.endswith("/results.json") for n in names) == 1
  params = determinism.final_params(files.path(workdir))
  assert determinism.params_max_rel_diff(params, determinism.final_params(reference)) <= PARAMS_TOLERANCE


def test_finetune_from_a_gs_run_and_predict_from_a_gs_run(gcs, runs):
  from launch import predict  # pylint: disable=import-outside-toplevel
  config = finetune.get_config(f"task=ud_pos,runlocal,init=run:gs://{gcs_emulator.BUCKET}/{RUN}")
  config.task.dataset, config.task.format, config.task.test_split = "", "conllu", ""
  config.task.files = (f"train:{samples.ud_sample_file('train')},"
                       f"validation:{samples.ud_sample_file('heldout')}")
  config.num_train_steps, config.eval_every_steps = 4, 0
  workdir = f"gs://{gcs_emulator.BUCKET}/runs/pos"
  results = train.train_and_evaluate(config, workdir)
  names = gcs_emulator.objects(gcs, "runs/pos/")
  assert {"runs/pos/results.json", "runs/pos/predictions/dev.jsonl", "runs/pos/predictions/dev.conll"} <= set(names)
  assert json.loads((files.path(workdir) / "results.json").read_text())["dev"] == results["dev"]
  written = [json.loads(line) for line in (files.path(workdir) / "predictions" / "dev.jsonl").read_text().splitlines()]
  predictor = predict.Predictor.from_workdir(workdir)
  outputs = predictor.predict_records([{"words": r["words"]} for r in written])
  assert len(outputs) == len(written) > 0
  for output, record in zip(outputs, written):
    assert [t for t in output["tags"] if t is not None] == record["prediction"]

"""launch.experiments.pod_worker, the supervisor every TPU worker runs, as several local processes sharing a workdir
(a local directory, and once a bucket of the GCS emulator), each supervising tests/.../standin_main.py in place of
launch.main: a finished run is `done` everywhere and worker 0 runs --on_end after all are done; a worker that fails
for good stops the others, whose statuses name it and its error line, and --on_end runs; a failed attempt restarts
every worker (the hung one killed after SIGTERM) and the run finishes in the next attempt; a supervisor killed with
its run (a host restart) and started again makes all workers restart together; SIGTERM (systemctl stop) stops every
run, saved, without --on_end; the logs are copied into <workdir>/logs while the run goes on."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
FAST = ["--poll_s", "0.2", "--grace_s", "3", "--restart_delay_s", "0.1", "--host_timeout_s", "1"]


def _start(workdir: str, tmp_path: Path, worker: int, hosts: int, script: dict, *options: str) -> subprocess.Popen:
  (tmp_path / "script.json").write_text(json.dumps(script))
  marker = tmp_path / "on_end.txt"
  on_end = json.dumps(["sh", "-c", f"echo deleted by worker {worker} >> {marker}"])
  return subprocess.Popen(
      [sys.executable, "-m", "launch.experiments.pod_worker", "--workdir", workdir, "--run_id", "run1", "--hosts",
       str(hosts), "--worker", str(worker), "--local_dir", str(tmp_path / f"local{worker}"), "--module",
       "tests.launch.experiments.standin_main", "--on_end", on_end, *FAST, *options, "--", "--config",
       "configs/pretrain.py:size=base", "--workdir", workdir],
      cwd=REPO, env=dict(os.environ, STANDIN_SCRIPT=str(tmp_path / "script.json")), stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True)


def _status(logs: Path, worker: int) -> dict:
  return json.loads((logs / f"worker-{worker}.json").read_text())


def _wait(processes: list[subprocess.Popen], timeout: float = 120) -> list[int]:
  codes = []
  for process in processes:
    try:
      process.wait(timeout)
    except subprocess.TimeoutExpired:
      process.kill()
      raise AssertionError(process.communicate()[0]) from None
    codes.append(process.returncode)
  return codes


def test_done_everywhere_then_on_end(tmp_path):
  workdir = tmp_path / "run"
  codes = _wait([_start(str(workdir), tmp_path, w, 2, {}) for w in range(2)])
  assert codes == [0, 0]
  logs = workdir / "logs"
  assert [(_status(logs, w)["state"], _status(logs, w)["generation"]) for w in range(2)] == [("done", 0), ("done", 0)]
  assert "standin worker 1 attempt 0: --config configs/pretrain.py:size=base" in (logs / "worker-1.log").read_text()
  assert (tmp_path / "on_end.txt").read_text() == "deleted by worker 0\n"  # Worker 0 only, once.


@pytest.mark.slow
def test_a_failure_for_good_stops_the_others_and_names_the_worker(tmp_path):
  workdir = tmp_path / "run"
  script = {"0/0": "stuck", "1/0": "hang", "2/0": "fail:error: config.batch_size=7 must split into micro-batches"}
  processes = [_start(str(workdir), tmp_path, w, 3, script, "--max_attempts", "1") for w in range(3)]
  assert _wait(processes) == [1, 1, 1]
  logs = workdir / "logs"
  failed = _status(logs, 2)
  assert (failed["state"], failed["exit"], failed["final"]) == ("failed", 1, True)
  reason = ("error: config.batch_size=7 must split into micro-batches (the code failed 1 time(s), "
            "--max_attempts=1)")
  assert failed["reason"] == reason
  for worker in (0, 1):
    stopped = _status(logs, worker)
    assert stopped["state"] == "stopped"
    assert stopped["reason"] == f"worker 2 failed for good: {reason}"
  assert stopped["exit"] == 0 and "SIGTERM: saved" in (logs / "worker-1.log").read_text()  # It saved.
  assert _status(logs, 0)["exit"] == -signal.SIGKILL  # The stuck one was killed after --grace_s.
  assert (tmp_path / "on_end.txt").read_text() == "deleted by worker 0\n"


@pytest.mark.slow
def test_a_failed_attempt_restarts_every_worker(tmp_path):
  workdir = tmp_path / "run"
  script = {"0/0": "hang", "1/0": "fail:RuntimeError: DEADLINE_EXCEEDED: barrier timed out"}
  assert _wait([_start(str(workdir), tmp_path, w, 2, script) for w in range(2)]) == [0, 0]
  logs = workdir / "logs"
  assert [(_status(logs, w)["state"], _status(logs, w)["generation"]) for w in range(2)] == [("done", 1), ("done", 1)]
  log0 = (logs / "worker-0.log").read_text()
  assert "run run1 generation 0" in log0 and "SIGTERM: saved" in log0 and "run run1 generation 1" in log0
  generation = json.loads((logs / "generation-1.json").read_text())
  assert (generation["cause"], generation["failures"], generation["worker"]) == ("failure", 1, 1)


@pytest.mark.slow
def test_a_restarted_host_restarts_the_run_and_sigterm_stops_it(tmp_path):
  """Worker 1's supervisor and its run are SIGKILLed (the host restarts); started again, it raises the attempt and
  worker 0 follows; then SIGTERM to both supervisors (systemctl stop) stops both runs, saved, without --on_end."""
  workdir = tmp_path / "run"
  script = {"0/0": "hang", "1/0": "hang", "0/1": "hang", "1/1": "hang"}
  first = [_start(str(workdir), tmp_path, w, 2, script) for w in range(2)]
  logs = workdir / "logs"
  _until(lambda: all(_exists_state(logs, w, "running", 0) for w in range(2)))
  os.killpg(_status(logs, 1)["pid"], signal.SIGKILL)  # Its own process group (pod_worker starts a session).
  first[1].kill()
  first[1].wait()
  again = _start(str(workdir), tmp_path, 1, 2, script)
  _until(lambda: all(_exists_state(logs, w, "running", 1) for w in range(2)))
  _until(lambda: all(f"standin worker {w} attempt 1" in _local_log(tmp_path, w) for w in range(2)))  # Started.
  for process in (first[0], again):
    process.send_signal(signal.SIGTERM)
  assert _wait([first[0], again]) == [0, 0]
  assert [(_status(logs, w)["state"], _status(logs, w)["generation"]) for w in range(2)] == [("stopped", 1)] * 2
  assert json.loads((logs / "generation-1.json").read_text())["cause"] == "host"  # Not a failure of the code.
  assert (logs / "worker-1.log").read_text().count("SIGTERM: saved") == 1  # Attempt 0's run was killed, not saved.
  assert not (tmp_path / "on_end.txt").exists()


def _exists_state(logs: Path, worker: int, state: str, attempt: int) -> bool:
  try:
    status = _status(logs, worker)
  except (FileNotFoundError, json.JSONDecodeError):
    return False
  return status["state"] == state and status["generation"] == attempt


def _local_log(tmp_path: Path, worker: int) -> str:
  log = tmp_path / f"local{worker}" / f"worker-{worker}.log"
  return log.read_text() if log.is_file() else ""


def _until(condition, timeout: float = 60) -> None:
  deadline = time.monotonic() + timeout
  while not condition():
    if time.monotonic() > deadline:
      raise AssertionError("timed out")
    time.sleep(0.1)


@pytest.mark.slow
def test_logs_and_statuses_in_a_bucket(tmp_path):
  """The same protocol with a gs:// workdir (the GCS emulator): a failed attempt restarts both workers, the logs and
  statuses land in gs://bucket/run/logs/, readable while the run goes on."""
  from tests import gcs_emulator  # pylint: disable=import-outside-toplevel
  with gcs_emulator.running() as host:
    workdir = f"gs://{gcs_emulator.BUCKET}/run"
    script = {"0/0": "hang", "1/0": "fail:error: a broken shard"}
    assert _wait([_start(workdir, tmp_path, w, 2, script) for w in range(2)], timeout=300) == [0, 0]
    names = gcs_emulator.objects(host, "run/logs/")
    assert names == ["run/logs/generation-1.json", "run/logs/worker-0.json", "run/logs/worker-0.log",
                     "run/logs/worker-1.json", "run/logs/worker-1.log"]
    from encoder import files  # pylint: disable=import-outside-toplevel
    status = json.loads(files.path(f"{workdir}/logs/worker-1.json").read_text())
    assert (status["state"], status["generation"]) == ("done", 1)
    assert "error: a broken shard" in files.path(f"{workdir}/logs/worker-1.log").read_text()

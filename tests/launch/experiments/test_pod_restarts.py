"""The pod supervisor around the real launch.main, two hosts on this machine (jax.distributed over 127.0.0.1, as
launch.experiments.local_cluster wires them): each host in turn "restarts" in the middle of the run (its supervisor
and its launch.main SIGKILLed, the supervisor started again, as a rebooted host's unit does); each restart begins one
generation that both hosts join, none counts as a failure of the code, training resumes from the newest checkpoint,
and the run ends with parameters bitwise equal to the same two processes never interrupted."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from benchmarks import determinism
from launch.experiments import local_cluster

ARGS = ["--config.num_train_steps=24", "--config.checkpoint_every_steps=2"]


def _metrics(workdir) -> int:
  path = workdir / "metrics.jsonl"
  return len(path.read_text().splitlines()) if path.is_file() else 0


def _status(workdir, worker: int) -> dict:
  try:
    return json.loads((workdir / "logs" / f"worker-{worker}.json").read_text())
  except (FileNotFoundError, json.JSONDecodeError):
    return {}


@pytest.mark.slow
def test_hosts_restarting_one_after_another_resume_bitwise_and_count_no_failure(tmp_path):
  cache = tmp_path / "cache"
  reference = tmp_path / "reference"
  command = determinism.command(reference, ARGS, cache)[3:]  # launch.main's arguments.
  env = determinism._env(1, cache)  # pylint: disable=protected-access
  ran = subprocess.run([sys.executable, "-m", "launch.experiments.local_cluster", "--processes=2", "--", *command],
                       cwd=determinism.REPO, env=env, capture_output=True, text=True, timeout=900, check=False)
  assert ran.returncode == 0, ran.stderr[-3000:]
  workdir = tmp_path / "pod"
  port = local_cluster.free_port()

  def supervisor(worker: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "launch.experiments.pod_worker", "--workdir", str(workdir), "--run_id", "r1",
         "--hosts", "2", "--worker", str(worker), "--local_dir", str(tmp_path / f"local{worker}"), "--poll_s", "0.5",
         "--host_timeout_s", "5", "--grace_s", "5", "--restart_delay_s", "0", "--wait_hours", "0.2", "--",
         *determinism.command(workdir, ARGS, cache)[3:]],
        cwd=determinism.REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env=env | {"JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_NUM_PROCESSES": "2",
                   "JAX_PROCESS_ID": str(worker)})

  supervisors = [supervisor(w) for w in range(2)]
  try:
    for worker, at in ((1, 6), (0, 14)):  # Host 1 restarts after step 6 is logged, host 0 after step 14.
      deadline = time.monotonic() + 600
      while _metrics(workdir) < at:
        assert time.monotonic() < deadline and all(s.poll() is None for s in supervisors), "no progress"
        time.sleep(0.05)
      os.killpg(_status(workdir, worker)["pid"], signal.SIGKILL)  # Its launch.main and input workers.
      supervisors[worker].kill()
      supervisors[worker].wait()
      supervisors[worker] = supervisor(worker)
    assert [s.wait(900) for s in supervisors] == [0, 0]
  finally:
    for s in supervisors:
      if s.poll() is None:
        os.killpg(s.pid, signal.SIGKILL)
  generations = [json.loads((workdir / "logs" / f"generation-{g}.json").read_text()) for g in (1, 2)]
  assert [(g["cause"], g["failures"]) for g in generations] == [("host", 0), ("host", 0)]
  assert not (workdir / "logs" / "generation-3.json").exists()
  assert [(_status(workdir, w)["state"], _status(workdir, w)["generation"]) for w in range(2)] == [("done", 2)] * 2
  log0 = (workdir / "logs" / "worker-0.log").read_text()
  assert log0.count("resuming from checkpoint step") == 2
  ours, theirs = determinism.final_params(workdir), determinism.final_params(reference)
  assert ours.keys() == theirs.keys() and all(np.array_equal(ours[k], theirs[k]) for k in theirs)

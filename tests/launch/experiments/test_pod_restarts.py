"""The pod supervisor around the real launch.main, hosts on this machine (jax.distributed over 127.0.0.1, as
launch.experiments.local_cluster wires them). Two hosts, each in turn "restarting" in the middle of the run (its
supervisor and its launch.main SIGKILLed, the supervisor started again, as a rebooted host's unit does): each restart
begins one generation that both hosts join. Then both going down at once (a maintenance event) and coming back one
after another: one generation. No restart counts as a failure of the code, training resumes from the newest
checkpoint, and the run ends with parameters bitwise equal to the same processes never interrupted."""

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

# 16 steps, a checkpoint every 2, no evaluation (its programs would only add compile time to every process; the check
# is the parameters). The reference saves only at its end: a resumed run equals one that never saved in between.
ARGS = ["--config.num_train_steps=16", "--config.checkpoint_every_steps=2", "--config.data.eval_files="]


def _metrics(workdir) -> int:
  path = workdir / "metrics.jsonl"
  return len(path.read_text().splitlines()) if path.is_file() else 0


def _status(workdir, worker: int) -> dict:
  try:
    return json.loads((workdir / "logs" / f"worker-{worker}.json").read_text())
  except (FileNotFoundError, json.JSONDecodeError):
    return {}


def _reference(tmp_path, hosts: int, cache, env) -> None:
  """The same run on `hosts` processes, never interrupted."""
  command = determinism.command(tmp_path / "reference", [*ARGS, "--config.checkpoint_every_steps=0"], cache)[3:]
  ran = subprocess.run([sys.executable, "-m", "launch.experiments.local_cluster", f"--processes={hosts}", "--",
                        *command], cwd=determinism.REPO, env=env, capture_output=True, text=True, timeout=900,
                       check=False)
  assert ran.returncode == 0, ran.stderr[-3000:]


def _supervisors(tmp_path, hosts: int, cache, env):
  """A function starting worker w's supervisor of the pod run in tmp_path/pod (as a host's unit starts it)."""
  workdir, port = tmp_path / "pod", local_cluster.free_port()

  def supervisor(worker: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "launch.experiments.pod_worker", "--workdir", str(workdir), "--run_id", "r1",
         "--hosts", str(hosts), "--worker", str(worker), "--local_dir", str(tmp_path / f"local{worker}"),
         "--poll_s", "0.5", "--host_timeout_s", "5", "--grace_s", "5", "--restart_delay_s", "0", "--wait_hours",
         "0.2", "--", *determinism.command(workdir, ARGS, cache)[3:]],
        cwd=determinism.REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env=env | {"JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_NUM_PROCESSES": str(hosts),
                   "JAX_PROCESS_ID": str(worker)})
  return workdir, supervisor


def _wait_for_step(workdir, step: int, supervisors) -> None:
  deadline = time.monotonic() + 600
  while _metrics(workdir) < step:
    assert time.monotonic() < deadline and all(s.poll() is None for s in supervisors), "no progress"
    time.sleep(0.05)


def _kill(supervisors) -> None:
  """What is still running when a test fails."""
  for s in supervisors:
    if s.poll() is None:
      os.killpg(s.pid, signal.SIGKILL)


def _assert_resumed_bitwise(tmp_path, workdir, hosts: int, causes: list[str]) -> None:
  generations = [json.loads((workdir / "logs" / f"generation-{g}.json").read_text())
                 for g in range(1, len(causes) + 1)]
  assert [(g["cause"], g["failures"]) for g in generations] == [(cause, 0) for cause in causes]
  assert not (workdir / "logs" / f"generation-{len(causes) + 1}.json").exists()
  assert [(_status(workdir, w)["state"], _status(workdir, w)["generation"]) for w in range(hosts)] == [
      ("done", len(causes))] * hosts
  assert (workdir / "logs" / "worker-0.log").read_text().count("resuming from checkpoint step") == len(causes)
  ours, theirs = determinism.final_params(workdir), determinism.final_params(tmp_path / "reference")
  assert ours.keys() == theirs.keys() and all(np.array_equal(ours[k], theirs[k]) for k in theirs)


@pytest.mark.slow
def test_hosts_restart_one_after_another_then_all_at_once_resume_bitwise_and_count_no_failure(tmp_path):
  """Host 1 restarts after step 4 is logged, host 0 (the coordinator's) after step 8: a generation each. Then issue 70's
  maintenance event: every host goes down at once after step 12, and their units start again one after another: one
  generation, however late the last host comes back."""
  hosts, cache = 2, tmp_path / "cache"
  env = determinism._env(1, cache)  # pylint: disable=protected-access
  _reference(tmp_path, hosts, cache, env)
  workdir, supervisor = _supervisors(tmp_path, hosts, cache, env)
  supervisors = [supervisor(w) for w in range(hosts)]
  try:
    for worker, at in ((1, 4), (0, 8)):
      _wait_for_step(workdir, at, supervisors)
      os.killpg(_status(workdir, worker)["pid"], signal.SIGKILL)  # Its launch.main and input workers.
      supervisors[worker].kill()
      supervisors[worker].wait()
      supervisors[worker] = supervisor(worker)
    _wait_for_step(workdir, 12, supervisors)
    pids = [_status(workdir, w)["pid"] for w in range(hosts)]
    for s in supervisors:  # The hosts go down: supervisors first, so that none sees its run end.
      s.kill()
      s.wait()
    for pid in pids:
      os.killpg(pid, signal.SIGKILL)  # Each launch.main and its input workers.
    for worker in range(hosts):  # Back one after another.
      supervisors[worker] = supervisor(worker)
      time.sleep(2)
    assert [s.wait(900) for s in supervisors] == [0] * hosts
  finally:
    _kill(supervisors)
  _assert_resumed_bitwise(tmp_path, workdir, hosts, ["host", "host", "host"])

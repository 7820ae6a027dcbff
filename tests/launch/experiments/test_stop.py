"""A stop saves (launch/stopping.py), in real processes: SIGTERM sent to launch.main's whole process group at a
random step, with two grain input worker processes in the group, saves a checkpoint at most one step after the step
in flight (the input workers ignore the signal and are stopped after the save), exits with the status the pod
supervisor reads as "stopped, resumable" (ENCODERLAB_STOP_EXIT), and the same command resumes to parameters bitwise
equal to a run never interrupted; a SIGTERM during start-up ends the process promptly with that status."""

import json
import os
import random
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

from benchmarks import determinism
from launch import stopping

# 24 steps: a stop at step 12 at the latest leaves 10 to spare. No evaluation: its programs would only add compile
# time to every process (the checks are the save, the exit status and the parameters).
STEPS = ["--config.num_train_steps=24", "--config.checkpoint_every_steps=0", "--config.data.eval_files="]


def _lines(workdir) -> int:
  metrics = workdir / "metrics.jsonl"
  return len(metrics.read_text().splitlines()) if metrics.is_file() else 0


@pytest.mark.slow
def test_sigterm_to_the_group_at_a_random_step_saves_within_one_step_and_resumes_bitwise(tmp_path):
  cache = tmp_path / "cache"
  baseline = tmp_path / "baseline"
  determinism.run(baseline, STEPS, cache=cache)
  workdir = tmp_path / "stopped"
  env = determinism._env(1, cache) | {stopping.STOP_EXIT_ENV: str(stopping.STOPPED_EXIT)}  # pylint: disable=protected-access
  process = subprocess.Popen(determinism.command(workdir, [*STEPS, "--config.data.workers=2"], cache),
                             cwd=determinism.REPO, env=env, start_new_session=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
  at = random.Random().randint(2, 12)
  deadline = time.monotonic() + determinism.TIMEOUT_S
  while (logged := _lines(workdir)) < at and process.poll() is None and time.monotonic() < deadline:
    time.sleep(0.002)
  os.killpg(process.pid, signal.SIGTERM)  # As a group-wide stop would: the input workers get it too.
  out, err = process.communicate(timeout=determinism.TIMEOUT_S)
  assert process.returncode == stopping.STOPPED_EXIT, (at, out[-2000:], err[-3000:])
  saved = json.loads((workdir / "results.json").read_text())
  assert saved["stopped_early"] and f"SIGTERM: saved step {saved['step']}" in out + err
  # `logged` steps had written their metrics (the loop fetches them after each step, so step logged + 1 was in
  # flight, or logged + 2 had been taken); the save is after the step in flight.
  assert logged <= saved["step"] <= logged + 2, (logged, saved["step"])
  assert _lines(workdir) == saved["step"]
  assert "terminated unexpectedly" not in err and "Traceback" not in err, err[-3000:]
  resumed = determinism.run(workdir, STEPS, cache=cache)
  assert f"resuming from checkpoint step {saved['step']}" in resumed.stdout + resumed.stderr
  ours, theirs = determinism.final_params(workdir), determinism.final_params(baseline)
  assert ours.keys() == theirs.keys() and all(np.array_equal(ours[k], theirs[k]) for k in theirs)


@pytest.mark.slow
def test_sigterm_during_start_up_ends_promptly_with_the_stop_status(tmp_path):
  env = determinism._env(1, tmp_path / "cache") | {stopping.STOP_EXIT_ENV: "75"}  # pylint: disable=protected-access
  process = subprocess.Popen(determinism.command(tmp_path / "run", STEPS), cwd=determinism.REPO, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  deadline = time.monotonic() + determinism.TIMEOUT_S
  while not (tmp_path / "run" / "config.json").exists() and process.poll() is None and time.monotonic() < deadline:
    time.sleep(0.01)  # config.json is written before the programs compile.
  sent = time.monotonic()
  process.send_signal(signal.SIGTERM)
  _, err = process.communicate(timeout=60)
  assert process.returncode == 75, err[-3000:]
  # Usually in the compilation (nothing saved); should the tiny run's loop have begun, it saved its first step.
  assert time.monotonic() - sent < 10 and ("SIGTERM during start-up" in err or "SIGTERM: saved step" in err), err


class FakeClient:
  """jax.distributed's key-value store and barrier, for processes simulated by threads."""

  def __init__(self, processes: int):
    self.store: dict[str, str] = {}
    self.barrier = threading.Barrier(processes)

  def key_value_set(self, key: str, value: str, allow_overwrite: bool = False) -> None:
    assert allow_overwrite or key not in self.store
    self.store[key] = value

  def key_value_try_get(self, key: str) -> str:
    if key not in self.store:
      raise RuntimeError(f"NOT_FOUND: Config key {key} not found.")
    return self.store[key]

  def key_value_dir_get(self, prefix: str) -> list[tuple[str, str]]:
    return sorted((k, v) for k, v in self.store.items() if k.startswith(prefix))

  def wait_at_barrier(self, name: str, timeout_ms: int) -> None:
    self.barrier.wait(timeout_ms / 1000)


def test_processes_agree_on_the_step_to_save_at(monkeypatch):
  """Process 0 is asked to stop after its step 5; process 1, two steps ahead, sees the request after its step 7:
  both stop after step 7, the largest either had reached, and neither before it."""
  monkeypatch.setattr(stopping, "requested", threading.Event())
  client = FakeClient(2)
  agreements = [stopping.Agreement(2, client, timeout_ms=10_000) for _ in range(2)]
  assert not agreements[1].should_stop(6, 1)  # Nothing posted yet.
  stopping.requested.set()  # The signal reaches process 0 (its flag; process 1's is not read below).
  answers: dict[str, bool] = {}
  first = threading.Thread(target=lambda: answers.update(a5=agreements[0].should_stop(5, 0)))
  first.start()
  while stopping.STOP_KEY not in client.store:
    time.sleep(0.001)
  answers["b7"] = agreements[1].should_stop(7, 1)
  first.join(10)
  assert answers == {"a5": False, "b7": True} and agreements[0].stop_at == agreements[1].stop_at == 7
  assert agreements[0].should_stop(6, 0) is False and agreements[0].should_stop(7, 0) is True

"""launch.experiments.local_cluster: 2 processes on 127.0.0.1, stopped by SIGTERM and resumed, train the tiny
pretraining run with the same losses, grad norms and final parameters as 1 process with the same global batch, only
process 0 writing; a failing process stops the launcher with one error line."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import determinism
from launch.experiments import local_cluster
from tests import faults
from tests.launch.test_engine_runs import PARAMS_TOLERANCE, TOLERANCE  # Their reasons are given there.

REPO = Path(__file__).resolve().parents[3]
# Tiny MLM run, 6 steps of global batch 8, a loss line every step, dropout off, no evaluation.
TINY = ["--config=configs/pretrain.py:runlocal", "--config.num_train_steps=6", "--config.log_every_steps=1",
        "--config.checkpoint_every_steps=6", "--config.data.eval_files=", "--config.measure_mfu=false",
        "--config.model.hidden_dropout=0.0", "--config.model.attention_dropout=0.0"]


def _cluster(processes: int, workdir: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "launch.experiments.local_cluster", f"--processes={processes}", "--",
                         *TINY, f"--workdir={workdir}"], cwd=REPO, capture_output=True, text=True, timeout=600,
                        check=False, env=env)


def _losses(workdir: Path) -> list[tuple[int, float]]:
  records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
  return [(r["step"], r["train/loss"]) for r in records if "train/loss" in r]


def test_commands_and_environment():
  commands = local_cluster.process_commands(["--config=c.py", "--workdir=w"], 2, 1234, python="py")
  assert commands[1] == ["py", "-m", "launch.main", "--config=c.py", "--workdir=w",
                         "--coordinator_address=127.0.0.1:1234", "--num_processes=2", "--process_id=1"]
  env = local_cluster.process_env("cpu", 4)
  assert env["JAX_PLATFORMS"] == "cpu" and "--xla_force_host_platform_device_count=4" in env["XLA_FLAGS"]
  assert local_cluster.workdir_of(["--workdir", "runs/x"]) == "runs/x"


@pytest.mark.slow
def test_two_processes_train_like_one_and_resume(tmp_path):
  one = _cluster(1, tmp_path / "one")
  assert one.returncode == 0, one.stdout[-2000:] + one.stderr[-2000:]
  # Every process gets SIGTERM as step 3 starts (tests/faults.py): they agree to stop, save step 3 together, and the
  # same command resumes (the signal comes again, but only at a step 3, which the resumed run never starts).
  sigterm = faults.environment("SIGTERM", 3)
  stopped = _cluster(2, tmp_path / "two", sigterm)
  assert stopped.returncode == 0, stopped.stdout[-2000:] + stopped.stderr[-2000:]
  assert "2 processes" in stopped.stdout  # The engine saw the cluster.
  assert json.loads((tmp_path / "two" / "results.json").read_text())["stopped_early"]
  two = _cluster(2, tmp_path / "two", sigterm)
  assert two.returncode == 0, two.stdout[-2000:] + two.stderr[-2000:]
  assert "resuming from checkpoint step 3" in two.stdout
  losses_one, losses_two = _losses(tmp_path / "one"), _losses(tmp_path / "two")
  assert [s for s, _ in losses_two] == [1, 2, 3, 4, 5, 6]  # Written once, by process 0.
  np.testing.assert_allclose([x for _, x in losses_two], [x for _, x in losses_one], rtol=TOLERANCE)  # As above.
  grad_norms = [determinism.logged(tmp_path / name, "train/grad_norm") for name in ("two", "one")]
  assert len(grad_norms[0]) == 6 and determinism.max_rel_diff(*grad_norms) <= TOLERANCE
  params_two, params_one = determinism.final_params(tmp_path / "two"), determinism.final_params(tmp_path / "one")
  assert params_two.keys() == params_one.keys()
  assert determinism.params_max_rel_diff(params_two, params_one) <= PARAMS_TOLERANCE
  assert json.loads((tmp_path / "two" / "results.json").read_text())["step"] == 6
  assert (tmp_path / "two.logs" / "process1.log").is_file()


def test_a_failing_process_is_one_error_line(tmp_path):
  result = subprocess.run([sys.executable, "-m", "launch.experiments.local_cluster", "--processes=2", "--",
                           "--config=configs/pretrain.py:runlocal", f"--workdir={tmp_path / 'w'}",
                           "--config.batch_size=oops"], cwd=REPO, capture_output=True, text=True, timeout=300,
                          check=False)
  # Both processes fail on the config; whichever exits first stops the other, which is then named as stopped (or
  # as failed too, when it exited before it could be stopped).
  failed = re.search(r"^error: process (\d) failed \(exit 1, log [^)]*\)(, process \d failed \(exit 1, log [^)]*\)"
                     r"|; stopped process \d)$", result.stderr.strip())
  assert result.returncode == 1 and failed, result.stderr
  assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1
  assert "batch_size" in (tmp_path / "w.logs" / f"process{failed.group(1)}.log").read_text()

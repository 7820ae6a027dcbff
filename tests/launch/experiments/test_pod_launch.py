"""launch.experiments.tpu_pod's first launch and its failures, against fake_gcloud.py: a FAILED queued resource has
its reason printed at every re-queue and the launch stops at --max_requeues with the reason on its last line; the
fake models the queued-resource states and refuses flags gcloud does not have; on a machine without gcloud's key the
key check prints a command that works before any slice exists (run here: it makes the key, ssh-add takes it, and
the check then passes); a VM service account that cannot write the workdir's bucket is refused in one line naming the
account and the role, before the code is copied."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from launch.experiments import tpu_pod
from tests.launch.experiments.test_tpu_pod import MAIN_ARGS, V4, V5E, _calls, _fake, _state, fixture_world  # noqa: F401


@pytest.fixture(name="pod")
def fixture_pod(world, monkeypatch, capsys):
  """tpu_pod in this process (the fake gcloud still runs as gcloud does): (exit status, stdout, stderr)."""
  monkeypatch.chdir(world["checkout"])

  def run(args: list[str], main_args: list[str] = MAIN_ARGS, **env: str) -> subprocess.CompletedProcess:
    with monkeypatch.context() as patch:
      for key, value in (world["env"] | env).items():
        patch.setenv(key, value)
      if "SSH_AUTH_SOCK" not in env:
        patch.delenv("SSH_AUTH_SOCK", raising=False)
      try:
        tpu_pod.main([*args, "--", *main_args])
        code = 0
      except SystemExit as stop:
        code = 1
        print(stop.code, file=sys.stderr)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out, err)
  return run


def test_a_failed_queued_resource_prints_its_reason_and_stops_at_the_bound(world, pod):
  reason = "Insufficient capacity: no v5litepod-16 available in us-west4-a for Spot"
  failed = pod([*V5E, "--max_requeues", "2"], FAKE_QUEUE_FAIL=reason)
  assert failed.returncode == 1
  assert failed.stdout.count(f"queued resource bert FAILED: {reason}; deleting and queueing it again") == 2
  assert failed.stderr == (f"error: queued resource bert FAILED 3 time(s), over --max_requeues=2; it is kept for "
                           f"`gcloud compute tpus queued-resources describe bert`; the reason: {reason}\n")
  assert _calls(world).count("queued-resources create") == 3  # The first queueing and two re-queues.
  assert _state(world)["queued"]["bert"]["state"] == "FAILED"  # Kept to inspect.


def test_the_fake_models_queued_resource_states_and_refuses_unknown_flags(world):
  created = _fake(world, "compute", "tpus", "queued-resources", "create", "q", "--node-id=q",
                  "--accelerator-type=v5litepod-16", "--runtime-version=v2-alpha-tpuv5-lite", "--zone=z")
  assert created.returncode == 0, created.stderr
  describe = ["compute", "tpus", "queued-resources", "describe", "q", "--zone=z",
              "--format=value(state.state,state.failedData.error.message)"]
  states = [_fake(world, *describe).stdout.split("\t")[0].strip() for _ in range(4)]
  assert states == ["WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE", "ACTIVE"]
  state = _state(world)
  state["queued"]["q"]["state"] = "SUSPENDING"
  (world["tmp"] / "state.json").write_text(json.dumps(state))
  assert _fake(world, *describe).stdout.strip() == "SUSPENDED"  # The next describe finds it suspended, node gone.
  assert "q" not in _state(world)["nodes"]
  for argv in (["tpu-vm", "create", "x", "--accelerator-type=v4-8", "--version=v", "--node-id=x"],
               ["tpu-vm", "ssh", "q", "--worker=0", "--command=true", "--recurse"],
               ["queued-resources", "delete", "q", "--quiet", "--force", "--async", "--wait"]):
    refused = _fake(world, "compute", "tpus", *argv, "--zone=z")
    assert refused.returncode == 2 and "unrecognized arguments: --" in refused.stderr, (argv, refused.stderr)


def test_first_launch_without_gcloud_key_prints_a_command_that_works(world, pod):
  if not (shutil.which("ssh-keygen") and shutil.which("ssh-agent") and shutil.which("ssh-add")):
    pytest.skip("OpenSSH's ssh-keygen, ssh-agent and ssh-add are not installed here")
  home = world["tmp"] / "home"
  home.mkdir()
  agent = subprocess.run(["ssh-agent", "-s"], capture_output=True, text=True, check=True).stdout
  env = dict(re.findall(r"(SSH_AUTH_SOCK|SSH_AGENT_PID)=([^;]+);", agent))
  try:
    refused = pod(V5E, HOME=str(home), **env)
    assert refused.returncode == 1 and _calls(world) == []  # Before any slice exists.
    fix = re.search(r"run `([^`]+)` \(what gcloud would run; it uploads the public half at its first ssh\), then "
                    r"`([^`]+)`$", refused.stderr.strip())
    assert fix, refused.stderr
    for command in fix.groups():  # What the user types, in their shell (no terminal: the passphrase from stdin).
      ran = subprocess.run(["bash", "-c", command], input="\n\n", env=world["env"] | env | {"HOME": str(home)},
                           capture_output=True, text=True, start_new_session=True, check=False)
      assert ran.returncode == 0, (command, ran.stderr)
    assert (home / ".ssh" / "google_compute_engine.pub").is_file()
    with pytest.MonkeyPatch.context() as patch:  # Then the launch's check finds the key in the agent.
      for key, value in (env | {"HOME": str(home)}).items():
        patch.setenv(key, value)
      tpu_pod.check_ssh_agent(4)
  finally:
    subprocess.run(["kill", env["SSH_AGENT_PID"]], check=False)


def test_a_bucket_the_slice_cannot_write_is_refused_before_the_code_is_copied(world, pod):
  refused = pod(V4, FAKE_BUCKET_READONLY="123-compute@developer.gserviceaccount.com")
  assert refused.returncode == 1
  assert refused.stderr == (
      "error: the slice's service account 123-compute@developer.gserviceaccount.com cannot write "
      "gs://bucket/runs/base: grant it roles/storage.objectUser on the bucket (gcloud storage buckets "
      "add-iam-policy-binding gs://bucket --member=serviceAccount:123-compute@developer.gserviceaccount.com "
      "--role=roles/storage.objectUser)\n")
  calls = _calls(world)
  assert calls[-1] == "tpu-vm ssh" and "tpu-vm scp" not in calls
  assert not os.path.exists(world["tmp"] / "homes" / "bert" / "0" / "tmp" / "encoderlab.tar.gz")
  assert MAIN_ARGS[-1] == "gs://bucket/runs/base"


@pytest.mark.slow
def test_the_start_command_runs_in_each_workers_sandbox(world, pod):
  """The shell each host runs at the start (the run script, the unit with the host's user and home, systemctl's
  reload, enable and restart) runs in the fake's sandbox homes; the unit file is the one systemd verified."""
  launched = pod(V4)
  assert launched.returncode == 0, launched.stderr
  user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
  for worker in range(4):
    sandbox = world["tmp"] / "homes" / "bert" / str(worker)
    unit = (sandbox / "etc" / "systemd" / "system" / "encoderlab.service").read_text()
    assert unit == tpu_pod.unit_text().replace("@USER@", user).replace("@HOME@", str(sandbox))
    script = (sandbox / "encoderlab-run.sh").read_text()
    assert "exec .venv/bin/python -m launch.experiments.pod_worker --workdir gs://bucket/runs/base" in script
    assert (sandbox / "systemctl.log").read_text().splitlines() == [
        "daemon-reload", "enable -q encoderlab", "restart encoderlab"]
    assert (sandbox / "encoderlab-logs").is_dir()

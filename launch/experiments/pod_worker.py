"""What runs on every worker of a TPU slice: `launch.main` under a supervisor that puts its log where the user can
read it, stops the whole run when one worker fails for good (saying which and why), restarts all workers together
after a failure or a host restart (resuming from the workdir), and optionally deletes the slice when the run ends.

  python -m launch.experiments.pod_worker --workdir gs://bucket/runs/x --run_id 20261201-101500 --hosts 4 \
      [--worker auto] [--max_attempts 3] [--on_end '["gcloud", ...]'] -- <launch.main arguments>

`launch.experiments.tpu_pod` starts it on every worker as the systemd unit `encoderlab` (so a host that reboots
starts it again; MaxText's multihost_job.py runs its job from a startup script for the same reason).

Files, in <workdir>/logs/ (gs:// or a shared filesystem; every worker reads them) and in --local_dir:
  worker-<i>.log   the output of every attempt of launch.main on worker i, copied up every --poll_s seconds and at
                   the end: `gcloud storage cat gs://.../logs/worker-0.log` reads it while the run goes on
  worker-<i>.json  its status: run_id, attempt, state (running, done, failed, stopped), pid, exit, final, reason (the
                   log's last line: launch.main's one-line `error: ...`, or a traceback's last line), host, time
  attempt.json     {"run_id", "attempt"}: the attempt all workers run (only ever raised)
launch.main runs with ENCODERLAB_POD_WORKER and ENCODERLAB_POD_ATTEMPT set (which worker and attempt it is).

Rules. An attempt ends on every worker when one worker's launch.main exits other than done: that worker records
`failed` and raises the attempt (if --max_attempts allows), and the others, seeing the raised attempt, stop theirs
(SIGTERM, --grace_s, then SIGKILL: a process whose peer died may hang in a collective) and start the new one, which
resumes from the newest checkpoint (jax.distributed waits for all processes). A worker whose last attempt failed
records `failed` with `final`; the others then stop for good, each recording `stopped` with that worker's reason. A
supervisor that starts and finds its own status `running` or `stopped` for this run (its host restarted) raises the
attempt, so the others restart with it, unless a worker has failed for good (then it ends too). SIGTERM to the
supervisor (`systemctl stop`: tpu_pod --stop, a shutdown) passes SIGTERM on to launch.main, which saves a checkpoint
and exits; the supervisor records `stopped` and ends. A launch.main that exits 0 without finishing (results.json's
stopped_early: SIGTERM from outside, e.g. Autocheckpoint before maintenance) counts as a failed attempt, retried
after --restart_delay_s x its number. --on_end runs on worker 0 once the run is done on every worker or failed for
good (tpu_pod --delete_when_done: deleting the slice).
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from encoder import errors, files

METADATA_WORKER = "http://metadata.google.internal/computeMetadata/v1/instance/attributes/agent-worker-number"
WAIT_FOR_PEERS_S = 600  # How long a worker waits for the others to record how an attempt ended.


def worker_number(value: str) -> int:
  """--worker: a number, or `auto`: this TPU VM's agent-worker-number from the metadata server."""
  if value != "auto":
    return int(value)
  request = urllib.request.Request(METADATA_WORKER, headers={"Metadata-Flavor": "Google"})
  with urllib.request.urlopen(request, timeout=10) as response:
    return int(response.read().decode().strip())


def _read_json(target: Any) -> dict | None:
  """A JSON file's content, None when it does not exist (yet) or is not JSON."""
  try:
    return json.loads(files.path(target).read_text())
  except (FileNotFoundError, json.JSONDecodeError):
    return None


def last_line(log: Path, start: int = 0) -> str:
  """The last non-empty line of `log` from byte `start` (what an attempt printed last)."""
  with open(log, "rb") as f:
    f.seek(start)
    lines = [line.strip() for line in f.read()[-20_000:].decode("utf-8", "replace").splitlines() if line.strip()]
  return lines[-1] if lines else "(no output)"


class Supervisor:
  """One worker's supervisor (module docstring)."""

  def __init__(self, args: argparse.Namespace, main_args: Sequence[str]):
    self.args, self.main_args = args, list(main_args)
    self.worker = worker_number(args.worker)
    self.logs = files.path(args.workdir) / "logs"
    self.logs.mkdir(parents=True, exist_ok=True)
    self.local = Path(os.path.expanduser(args.local_dir))
    self.local.mkdir(parents=True, exist_ok=True)
    self.log = self.local / f"worker-{self.worker}.log"
    self.stop = threading.Event()

  def status_of(self, worker: int) -> dict | None:
    """Worker `worker`'s status for this run (None: none yet, or another run's)."""
    found = _read_json(self.logs / f"worker-{worker}.json")
    return found if found and found.get("run_id") == self.args.run_id else None

  def attempt(self) -> int:
    found = _read_json(self.logs / "attempt.json")
    return found["attempt"] if found and found.get("run_id") == self.args.run_id else 0

  def raise_attempt(self, attempt: int) -> int:
    """Sets the run's attempt to at least `attempt` (two workers raising it at once write the same number)."""
    attempt = max(attempt, self.attempt())
    files.atomic_write(self.logs / "attempt.json", json.dumps({"run_id": self.args.run_id, "attempt": attempt}))
    return attempt

  def record(self, attempt: int, state: str, **fields: Any) -> None:
    """Writes this worker's status (here and in the workdir) and copies its log up."""
    status = {"run_id": self.args.run_id, "worker": self.worker, "attempt": attempt, "state": state,
              "host": socket.gethostname(), "time": time.strftime("%Y-%m-%d %H:%M:%S %Z")} | fields
    text = json.dumps(status, sort_keys=True)
    (self.local / f"worker-{self.worker}.json").write_text(text + "\n")
    files.atomic_write(self.logs / f"worker-{self.worker}.json", text)
    self.upload_log()
    print(f"[pod_worker {self.worker}] attempt {attempt}: {state}"
          + (f" ({fields['reason']})" if fields.get("reason") else ""), flush=True)

  def upload_log(self) -> None:
    if self.log.is_file():
      files.atomic_write(self.logs / f"worker-{self.worker}.log", self.log.read_bytes())

  def peer_failure(self) -> tuple[int, str] | None:
    """(worker, reason) of another worker that failed for good in this run, if any."""
    for worker in range(self.args.hosts):
      status = self.status_of(worker) if worker != self.worker else None
      if status and status["state"] == "failed" and status.get("final"):
        return worker, status.get("reason", "")
    return None

  def end(self, process: subprocess.Popen) -> None:
    """SIGTERM to launch.main (it saves a checkpoint when its peers are alive), SIGKILL after --grace_s."""
    if process.poll() is None:
      os.killpg(process.pid, signal.SIGTERM)
      try:
        process.wait(self.args.grace_s)
      except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()

  def finished(self, attempt: int) -> bool:
    """Whether launch.main's exit 0 means the run is done: results.json (process 0 writes it before it exits; other
    workers first wait, up to WAIT_FOR_PEERS_S, for worker 0 to record how this attempt ended) says it was not
    stopped early."""
    deadline = time.monotonic() + WAIT_FOR_PEERS_S
    while self.worker != 0 and time.monotonic() < deadline and self.attempt() == attempt:
      lead = self.status_of(0)
      if lead and lead["attempt"] >= attempt and lead["state"] != "running":
        break
      time.sleep(self.args.poll_s)
    results = _read_json(files.path(self.args.workdir) / "results.json")
    return not (results or {}).get("stopped_early", True)

  def run_attempt(self, attempt: int) -> str:
    """Runs launch.main once; returns how the attempt ended: done, failed, stopped, restart or peer."""
    start = self.log.stat().st_size if self.log.is_file() else 0
    command = [sys.executable, "-m", self.args.module, *self.main_args, "--distributed"]
    with open(self.log, "ab") as out:
      out.write(f"== pod_worker {self.worker}: run {self.args.run_id} attempt {attempt} on {socket.gethostname()} "
                f"at {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n".encode())
      out.flush()
      process = subprocess.Popen(  # Its own process group: end() signals it and its input workers.
          command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
          env=os.environ | {"ENCODERLAB_POD_WORKER": str(self.worker), "ENCODERLAB_POD_ATTEMPT": str(attempt)})
    self.record(attempt, "running", pid=process.pid)
    while process.poll() is None:
      if self.stop.wait(self.args.poll_s):
        self.end(process)
        self.record(attempt, "stopped", exit=process.returncode, reason="stop requested (SIGTERM)")
        return "stopped"
      self.upload_log()
      if self.attempt() > attempt:
        self.end(process)
        return "restart"
      failed = self.peer_failure()
      if failed:
        self.end(process)
        self.record(attempt, "stopped", exit=process.returncode,
                    reason=f"worker {failed[0]} failed for good: {failed[1]}")
        return "peer"
    code = process.returncode
    if self.stop.is_set():
      self.record(attempt, "stopped", exit=code, reason="stop requested (SIGTERM)")
      return "stopped"
    if code == 0 and self.finished(attempt):
      self.record(attempt, "done", exit=0)
      return "done"
    reason = (last_line(self.log, start) if code else
              "exited 0 before the last step without a stop request (SIGTERM from outside, e.g. maintenance)")
    final = attempt + 1 >= self.args.max_attempts
    self.record(attempt, "failed", exit=code, final=final, reason=reason)
    return "failed"

  def wait_for_all_done(self) -> bool:
    deadline = time.monotonic() + WAIT_FOR_PEERS_S
    while time.monotonic() < deadline:
      if all((self.status_of(w) or {}).get("state") == "done" for w in range(self.args.hosts)):
        return True
      time.sleep(self.args.poll_s)
    return False

  def on_end(self) -> None:
    """--on_end on worker 0 (deleting the slice ends this machine: the command must be asynchronous)."""
    if self.worker == 0 and self.args.on_end:
      command = json.loads(self.args.on_end)
      print(f"[pod_worker 0] the run has ended: {' '.join(command)}", flush=True)
      self.upload_log()
      subprocess.run(command, check=False)

  def run(self) -> int:
    """The supervisor's life: join (or restart) the run's attempt, run attempts until done, stopped or failed."""
    mine = self.status_of(self.worker) or {}
    failed = self.peer_failure()
    if mine.get("state") == "done" or mine.get("final") or failed:
      print(f"[pod_worker {self.worker}] run {self.args.run_id} has ended: "
            + (f"worker {failed[0]} failed for good" if failed else mine["state"]), flush=True)
      return 0 if mine.get("state") == "done" else 1
    attempt = self.attempt()
    if mine:  # Running or stopped before: this host restarted mid-run; everyone restarts together.
      attempt = self.raise_attempt(max(attempt, mine["attempt"]) + 1)
    while True:
      if attempt >= self.args.max_attempts:
        self.record(attempt, "failed", final=True, reason=f"--max_attempts={self.args.max_attempts} used up")
        self.on_end()
        return 1
      outcome = self.run_attempt(attempt)
      if outcome == "done":
        if self.worker == 0 and self.args.on_end and self.wait_for_all_done():
          self.on_end()
        return 0
      if outcome == "stopped":
        return 0
      if outcome == "peer" or (outcome == "failed" and attempt + 1 >= self.args.max_attempts):
        self.on_end()
        return 1
      if outcome == "failed":
        self.raise_attempt(attempt + 1)
        if self.stop.wait(self.args.restart_delay_s * (attempt + 1)):
          return 0
      attempt = self.attempt()


def parser() -> argparse.ArgumentParser:
  root = argparse.ArgumentParser(prog="python -m launch.experiments.pod_worker", description=__doc__.split("\n")[0])
  root.add_argument("--workdir", required=True, help="the run's workdir (gs:// or shared): logs/ goes there")
  root.add_argument("--run_id", required=True, help="this launch's id: statuses of other launches are ignored")
  root.add_argument("--hosts", type=int, required=True, help="workers in the slice")
  root.add_argument("--worker", default="auto", help="this worker's number (auto: the TPU VM's metadata)")
  root.add_argument("--max_attempts", type=int, default=3, help="attempts before a failure is for good")
  root.add_argument("--on_end", default="", help="JSON argv worker 0 runs when the run is done or failed for good")
  root.add_argument("--local_dir", default="~/encoderlab-logs", help="this worker's own copy of its log and status")
  root.add_argument("--module", default="launch.main", help="the module run with `python -m` (tests: a stand-in)")
  root.add_argument("--poll_s", type=float, default=15.0, help="seconds between log uploads and status checks")
  root.add_argument("--grace_s", type=float, default=120.0, help="seconds between SIGTERM and SIGKILL")
  root.add_argument("--restart_delay_s", type=float, default=60.0, help="x the attempt number, before a retry")
  return root


def main(argv: Sequence[str] | None = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  split = argv.index("--") if "--" in argv else len(argv)
  supervisor = Supervisor(parser().parse_args(argv[:split]), argv[split + 1:])
  for signum in (signal.SIGTERM, signal.SIGINT):
    signal.signal(signum, lambda *_: supervisor.stop.set())
  return supervisor.run()


if __name__ == "__main__":
  sys.exit(errors.run(main))

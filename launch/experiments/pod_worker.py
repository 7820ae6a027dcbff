"""What runs on every worker of a TPU slice: `launch.main` under a supervisor that puts its log where the user can
read it, restarts all workers together after a failure, a stop from outside or a host restart (resuming from the
workdir), ends the run when its code has failed --max_attempts times (saying which worker and why), and optionally
deletes the slice when the run ends.

  python -m launch.experiments.pod_worker --workdir gs://bucket/runs/x --run_id 20261201-101500 --hosts 4 \
      [--worker auto] [--max_attempts 3] [--wait_hours 6] [--on_end '["gcloud", ...]'] -- <launch.main arguments>

`launch.experiments.tpu_pod` starts it on every worker as the systemd unit `encoderlab` (so a host that reboots
starts it again; MaxText's multihost_job.py runs its job from a startup script for the same reason).

Files, in <workdir>/logs/ (gs:// or a shared filesystem; every worker reads them) and in --local_dir:
  worker-<i>.log     the output of every generation of launch.main on worker i, copied up every --poll_s seconds and
                     at the end: `gcloud storage cat gs://.../logs/worker-0.log` reads it while the run goes on
  worker-<i>.json    its status: run_id, generation, state (waiting, running, done, failed, stopped), pid, exit, final,
                     cause (code, infrastructure), reason (the log's last line: launch.main's one-line `error: ...`, or
                     a traceback's last line), host, time, beat (the time of its last heartbeat, every --poll_s)
  generation-<g>.json  {"run_id", "generation", "failures", "cause", "reason", "worker"}: why generation g began
                     (failure, host, stop), written once by the first worker that saw generation g - 1 end; the
                     others join it. `failures` counts the generations the code's own failure ended.
  supervisor.log     (--local_dir only) the supervisor's own failures, with their tracebacks (also in the journal)
launch.main runs with ENCODERLAB_POD_WORKER and ENCODERLAB_POD_ATTEMPT (the generation) set, and with
ENCODERLAB_STOP_EXIT=75: a stopped launch.main (SIGTERM, saved) exits 75 (launch/stopping.py).

Rules. Every worker runs generation g once all workers are present in it: waiting or running in g, each with a
heartbeat younger than --host_timeout_s; a worker waits for that up to --wait_hours (a maintenance event can keep a
host away for hours), then ends the run as an infrastructure failure. A generation ends when a worker's launch.main
ends other than done; that worker writes generation g + 1 (unless another did first), with its cause:
  stop     launch.main exited 75, or 0 with results.json's stopped_early: a SIGTERM from outside (Autocheckpoint before
           maintenance, a scheduler) saved it; not a failure;
  host     launch.main failed while a peer's heartbeat went stale (its host went away): not a failure of the code;
  host     a supervisor that starts and finds its own status running, or stopped by a shutdown, in the newest
           generation (its host restarted);
  failure  launch.main failed, and every peer stayed alive --host_timeout_s after: counts against --max_attempts.
The others, seeing generation g + 1, stop their launch.main (SIGTERM to it alone: its input workers ignore SIGTERM
and are stopped after the save; SIGKILL to its process group after --grace_s: a process whose peer died may hang in
a collective) and join it after --restart_delay_s x the failures so far. When the code has failed --max_attempts
times, the worker that saw the last failure records `failed` with `final`, and the others stop for good, each
recording `stopped` with that worker's reason. SIGTERM to the supervisor (`systemctl stop`: tpu_pod --stop, a
shutdown) passes SIGTERM on to launch.main, which saves a checkpoint and exits; the supervisor records `stopped` and
ends. --on_end runs on worker 0 once the run is done on every worker, or its code has failed for good
(tpu_pod --delete_when_done: deleting the slice); never after an infrastructure failure (a host that did not come
back: the slice and what is on it are kept). A failure of the supervisor itself (a bucket it cannot write, a metadata
error at boot) goes to stderr (the journal), to --local_dir/supervisor.log (tpu_pod --logs copies it), and ends it
with status 70, and systemd restarts it (Restart=on-failure; the run's own end for good is status 1, which it does not
restart).
"""

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from encoder import cli, errors, files
from launch import stopping

METADATA_WORKER = "http://metadata.google.internal/computeMetadata/v1/instance/attributes/agent-worker-number"
WAIT_FOR_PEERS_S = 600  # How long a worker waits for worker 0 to record how a generation ended.
SUPERVISOR_FAILED = 70  # EX_SOFTWARE: the supervisor's own failure; systemd restarts it (1: the run ended for good).
WAIT_HOURS = 6.0  # Google: a maintenance event can leave a slice unavailable for up to a few hours.


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
  """The last non-empty line of `log` from byte `start` (what a generation printed last)."""
  with open(log, "rb") as f:
    f.seek(start)
    lines = [line.strip() for line in f.read()[-20_000:].decode("utf-8", "replace").splitlines() if line.strip()]
  return lines[-1] if lines else "(no output)"


class Supervisor:
  """One worker's supervisor (module docstring). `now` and `sleep` (which returns True when a stop was requested)
  are the clock: the tests simulate hours with them."""

  def __init__(self, args: argparse.Namespace, main_args: Sequence[str], now: Callable[[], float] = time.time,
               sleep: Callable[[float], bool] | None = None):
    self.args, self.main_args = args, list(main_args)
    self.stop = threading.Event()
    self.now, self.sleep = now, sleep or self.stop.wait
    self.local = Path(os.path.expanduser(args.local_dir))
    self.local.mkdir(parents=True, exist_ok=True)
    self.worker = worker_number(args.worker)
    self.logs = files.path(args.workdir) / "logs"
    self.logs.mkdir(parents=True, exist_ok=True)
    self.log = self.local / f"worker-{self.worker}.log"
    self.status: dict[str, Any] = {}

  def status_of(self, worker: int) -> dict | None:
    """Worker `worker`'s status for this run (None: none yet, or another run's)."""
    found = _read_json(self.logs / f"worker-{worker}.json")
    return found if found and found.get("run_id") == self.args.run_id else None

  def generation(self, number: int) -> dict | None:
    """Generation `number`'s record for this run (generation 0: the launch's), None when it has not begun."""
    if number == 0:
      return {"run_id": self.args.run_id, "generation": 0, "failures": 0, "cause": "launch", "reason": ""}
    found = _read_json(self.logs / f"generation-{number}.json")
    return found if found and found.get("run_id") == self.args.run_id else None

  def newest(self, start: int = 0) -> dict:
    """The newest generation of this run (from `start` on: generations only ever begin in order)."""
    found = self.generation(start) or self.generation(0)
    assert found is not None
    while (following := self.generation(found["generation"] + 1)) is not None:
      found = following
    return found

  def advance(self, current: dict, cause: str, reason: str) -> dict:
    """Begins generation current + 1 for `cause` (failure counts against --max_attempts), or joins it when another
    worker began it first: one event, one generation, whichever worker sees it."""
    number = current["generation"] + 1
    found = self.generation(number)
    if found is not None:
      return self.newest(number)
    record = {"run_id": self.args.run_id, "generation": number, "worker": self.worker, "cause": cause,
              "reason": reason, "failures": current["failures"] + (cause == "failure")}
    files.atomic_write(self.logs / f"generation-{number}.json", json.dumps(record, sort_keys=True))
    print(f"[pod_worker {self.worker}] generation {number} begins ({cause}: {reason}); code failures so far "
          f"{record['failures']} of --max_attempts={self.args.max_attempts}", flush=True)
    return self.newest(number)

  def record(self, generation: int, state: str, **fields: Any) -> None:
    """Writes this worker's status (here and in the workdir) and copies its log up."""
    self.status = {"run_id": self.args.run_id, "worker": self.worker, "generation": generation, "state": state,
                   "host": socket.gethostname(), "time": time.strftime("%Y-%m-%d %H:%M:%S %Z")} | fields
    self.beat()
    print(f"[pod_worker {self.worker}] generation {generation}: {state}"
          + (f" ({fields['reason']})" if fields.get("reason") else ""), flush=True)

  def beat(self) -> None:
    """The heartbeat: this worker's status with the time now, and its log, copied up."""
    self.status["beat"] = self.now()
    text = json.dumps(self.status, sort_keys=True)
    (self.local / f"worker-{self.worker}.json").write_text(text + "\n")
    files.atomic_write(self.logs / f"worker-{self.worker}.json", text)
    if self.log.is_file():
      files.atomic_write(self.logs / f"worker-{self.worker}.log", self.log.read_bytes())

  def alive(self, status: dict | None) -> bool:
    return bool(status) and self.now() - float(status.get("beat", 0)) < self.args.host_timeout_s  # type: ignore[union-attr]  # bool(status) checked

  def away(self) -> list[int]:
    """The other workers whose heartbeat is older than --host_timeout_s (their host went away)."""
    return [w for w in range(self.args.hosts) if w != self.worker and not self.alive(self.status_of(w))]

  def final_failure(self) -> tuple[int, str, str] | None:
    """(worker, reason, cause) of a worker whose run failed for good, if any."""
    for worker in range(self.args.hosts):
      status = self.status_of(worker)
      if status and status["state"] == "failed" and status.get("final"):
        return worker, status.get("reason", ""), status.get("cause", "code")
    return None

  def gather(self, current: dict) -> dict | str:
    """Waits until every worker is present in `current` (or a newer generation began: then that one); returns the
    generation to run, or `stopped`, `ended` (a worker failed for good) or `away` (--wait_hours passed)."""
    deadline = self.now() + self.args.wait_hours * 3600
    self.record(current["generation"], "waiting")
    while True:
      newest = self.newest(current["generation"])
      if newest["generation"] > current["generation"]:
        current = newest
        self.record(current["generation"], "waiting")
      if self.final_failure():
        return "ended"
      present = [w for w in range(self.args.hosts) if self._present(w, current["generation"])]
      if len(present) == self.args.hosts:
        return current
      if self.now() >= deadline:
        missing = sorted(set(range(self.args.hosts)) - set(present))
        self.record(current["generation"], "failed", final=True, cause="infrastructure",
                    reason=f"worker(s) {', '.join(map(str, missing))} did not come back within --wait_hours="
                           f"{self.args.wait_hours:g}; the slice is kept: relaunch to resume from the workdir")
        return "away"
      if self.sleep(self.args.poll_s):
        self.record(current["generation"], "stopped", reason="stop requested (SIGTERM)")
        return "stopped"
      self.beat()

  def _present(self, worker: int, generation: int) -> bool:
    status = self.status if worker == self.worker else self.status_of(worker)
    return (self.alive(status) and status is not None and status["generation"] >= generation
            and status["state"] in ("waiting", "running", "done"))

  def end(self, process: subprocess.Popen) -> None:
    """SIGTERM to launch.main alone (it saves; its input workers ignore SIGTERM and are stopped after the save),
    SIGKILL to its whole process group after --grace_s."""
    if process.poll() is None:
      process.send_signal(signal.SIGTERM)
      with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(self.args.grace_s)
    with contextlib.suppress(ProcessLookupError):  # What is left of the group (a hung process, its input workers).
      os.killpg(process.pid, signal.SIGKILL)
    process.wait()

  def finished(self, generation: int) -> bool:
    """Whether launch.main's exit 0 means the run is done: results.json (process 0 writes it before it exits; other
    workers first wait, up to WAIT_FOR_PEERS_S, for worker 0 to record how this generation ended) says it was not
    stopped early."""
    deadline = self.now() + WAIT_FOR_PEERS_S
    while self.worker != 0 and self.now() < deadline and self.newest(generation)["generation"] == generation:
      lead = self.status_of(0)
      if lead and lead["generation"] >= generation and lead["state"] not in ("running", "waiting"):
        break
      if self.sleep(self.args.poll_s):
        break
    results = _read_json(files.path(self.args.workdir) / "results.json")
    return not (results or {}).get("stopped_early", True)

  def cause_of_failure(self, current: dict) -> tuple[str, str] | dict:
    """After launch.main failed: the generation a peer began meanwhile (join it), else (cause, reason): `host` when a
    peer's heartbeat goes stale (a peer that died with it beat at most --poll_s before: stale within --host_timeout_s
    + 2 --poll_s), else `failure` (the code's)."""
    deadline = self.now() + self.args.host_timeout_s + 2 * self.args.poll_s
    while True:
      newest = self.newest(current["generation"])
      if newest["generation"] > current["generation"]:
        return newest
      away = self.away()
      if away:
        return "host", f"worker(s) {', '.join(map(str, away))} went away (no heartbeat for --host_timeout_s)"
      if self.now() >= deadline or self.sleep(self.args.poll_s):
        return "failure", ""
      self.beat()

  def run_generation(self, current: dict) -> dict | str:
    """Runs launch.main once in generation `current`; returns the next generation, or done, stopped or ended."""
    number = current["generation"]
    start = self.log.stat().st_size if self.log.is_file() else 0
    command = [sys.executable, "-m", self.args.module, *self.main_args, "--distributed"]
    with open(self.log, "ab") as out:
      out.write(f"== pod_worker {self.worker}: run {self.args.run_id} generation {number} on "
                f"{socket.gethostname()} at {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n".encode())
      out.flush()
      process = subprocess.Popen(  # Its own process group: end() kills what is left of it.
          command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
          env=os.environ | {"ENCODERLAB_POD_WORKER": str(self.worker), "ENCODERLAB_POD_ATTEMPT": str(number),
                            stopping.STOP_EXIT_ENV: str(stopping.STOPPED_EXIT)})
    self.record(number, "running", pid=process.pid)
    while process.poll() is None:
      if self.sleep(self.args.poll_s):
        self.end(process)
        self.record(number, "stopped", exit=process.returncode, reason="stop requested (SIGTERM)")
        return "stopped"
      self.beat()
      newest = self.newest(number)
      if newest["generation"] > number:
        self.end(process)
        if newest["failures"] < self.args.max_attempts:
          return newest
        self.record(number, "stopped", exit=process.returncode,
                    reason=f"worker {newest['worker']} failed for good: {self.final_reason(newest)}")
        return "ended"
      failed = self.final_failure()
      if failed:
        self.end(process)
        self.record(number, "stopped", exit=process.returncode, reason=f"worker {failed[0]} failed for good: "
                                                                        f"{failed[1]}")
        return "ended"
    code = process.returncode
    if self.stop.is_set():
      self.record(number, "stopped", exit=code, reason="stop requested (SIGTERM)")
      return "stopped"
    if code == 0 and self.finished(number):
      self.record(number, "done", exit=0)
      return "done"
    if code in (0, stopping.STOPPED_EXIT):
      return self.advance(current, "stop", f"worker {self.worker}'s launch.main was stopped by a SIGTERM from "
                                           "outside (maintenance, Autocheckpoint) and saved")
    reason = last_line(self.log, start)
    cause = self.cause_of_failure(current)
    if isinstance(cause, dict):
      return cause
    following = self.advance(current, cause[0], cause[1] or reason)
    if following["failures"] >= self.args.max_attempts and following["worker"] == self.worker:
      self.record(number, "failed", exit=code, final=True, cause="code", reason=self.final_reason(following))
      return "failed"
    self.record(number, "failed", exit=code, reason=reason)
    return following

  def final_reason(self, generation: dict) -> str:
    return (f"{generation['reason']} (the code failed {generation['failures']} time(s), --max_attempts="
            f"{self.args.max_attempts})")

  def wait_for_all_done(self) -> bool:
    deadline = self.now() + WAIT_FOR_PEERS_S
    while self.now() < deadline:
      if all((self.status_of(w) or {}).get("state") == "done" for w in range(self.args.hosts)):
        return True
      if self.sleep(self.args.poll_s):
        return False
    return False

  def on_end(self) -> None:
    """--on_end on worker 0 (deleting the slice ends this machine: the command must be asynchronous)."""
    if self.worker == 0 and self.args.on_end:
      command = json.loads(self.args.on_end)
      print(f"[pod_worker 0] the run has ended: {' '.join(command)}", flush=True)
      subprocess.run(command, check=False)

  def join(self, mine: dict) -> dict:
    """The generation this worker joins when its supervisor starts: the newest, or a new one when this worker was
    running in the newest, or stopped in it by a shutdown (its host restarted, or its supervisor: everyone restarts
    together; `tpu_pod --stop` disables the unit, so no boot starts it again; a worker that was in an older
    generation joins the newest, which the others began when it went away)."""
    current = self.newest()
    if mine.get("generation") == current["generation"] and mine.get("state") in ("running", "stopped"):
      current = self.advance(current, "host", f"worker {self.worker}'s host restarted during the run")
    return current

  def run(self) -> int:
    """The supervisor's life: join the run's newest generation (a new one if this host restarted in it), run
    generations until done, stopped or ended."""
    mine = self.status_of(self.worker) or {}
    ended = self.final_failure()
    if mine.get("state") == "done" or ended:
      print(f"[pod_worker {self.worker}] run {self.args.run_id} has ended: "
            + (f"worker {ended[0]} failed for good" if ended else "done"), flush=True)
      return 0 if mine.get("state") == "done" else 1
    current = self.join(mine)
    while True:
      if current["failures"] >= self.args.max_attempts:  # Another worker saw the code's last failure.
        self.record(current["generation"], "stopped", reason=f"worker {current['worker']} failed for good: "
                                                             f"{self.final_reason(current)}")
        self.on_end()
        return 1
      if current["cause"] == "failure" and self.sleep(self.args.restart_delay_s * current["failures"]):
        return 0
      gathered = self.gather(current)
      if gathered == "stopped":
        return 0
      if gathered in ("ended", "away"):
        return self._ended()
      assert isinstance(gathered, dict)
      outcome = self.run_generation(gathered)
      if outcome == "done":
        if self.worker == 0 and self.args.on_end and self.wait_for_all_done():
          self.on_end()
        return 0
      if outcome == "stopped":
        return 0
      if outcome in ("ended", "failed"):
        return self._ended()
      assert isinstance(outcome, dict)
      current = outcome

  def _ended(self) -> int:
    """The run failed for good: --on_end when its code failed (never after an infrastructure failure: a worker
    that did not come back)."""
    failed = self.final_failure()
    if (failed and failed[2] == "code") or self.newest()["failures"] >= self.args.max_attempts:
      self.on_end()
    return 1


def parser() -> argparse.ArgumentParser:
  positive = cli.number(0, low_open=True)
  root = cli.ArgumentParser(prog="python -m launch.experiments.pod_worker", description=__doc__.split("\n")[0])
  root.add_argument("--workdir", required=True, help="the run's workdir (gs:// or shared): logs/ goes there")
  root.add_argument("--run_id", required=True, help="this launch's id: statuses of other launches are ignored")
  root.add_argument("--hosts", type=cli.integer(1), required=True, help="workers in the slice")
  root.add_argument("--worker", default="auto", help="this worker's number (auto: the TPU VM's metadata)")
  root.add_argument("--max_attempts", type=cli.integer(1), default=3,
                    help="failures of launch.main itself before the run fails for good (host restarts and stops "
                         "from outside do not count)")
  root.add_argument("--wait_hours", type=positive, default=WAIT_HOURS,
                    help="how long the workers wait for one that went away (a maintenance event) before the run "
                         "ends as an infrastructure failure")
  root.add_argument("--host_timeout_s", type=positive, default=180.0,
                    help="a worker whose heartbeat is older than this is away (more than twice --poll_s)")
  root.add_argument("--on_end", default="", help="JSON argv worker 0 runs when the run is done or its code failed "
                                                 "for good")
  root.add_argument("--local_dir", default="~/encoderlab-logs", help="this worker's own copy of its log and status")
  root.add_argument("--module", default="launch.main", help="the module run with `python -m` (tests: a stand-in)")
  root.add_argument("--poll_s", type=positive, default=15.0, help="seconds between heartbeats, log uploads and checks")
  root.add_argument("--grace_s", type=positive, default=120.0, help="seconds between SIGTERM and SIGKILL")
  root.add_argument("--restart_delay_s", type=cli.number(0), default=60.0,
                    help="x the code's failures so far, before the generation after a failure")
  return root


def check_args(args: argparse.Namespace) -> None:
  """What the flags' types cannot see, before anything is written (one line each): their combinations, --worker,
  --on_end's JSON, --run_id."""
  if args.host_timeout_s <= 2 * args.poll_s:
    raise errors.UserError(f"--host_timeout_s {args.host_timeout_s:g}: expected more than twice --poll_s "
                           f"({args.poll_s:g}): a heartbeat comes every --poll_s")
  if args.worker != "auto" and not (args.worker.isdigit() and int(args.worker) < args.hosts):
    raise errors.UserError(f"--worker {args.worker}: expected auto or a number below --hosts {args.hosts}")
  if args.on_end:
    try:
      command = json.loads(args.on_end)
    except json.JSONDecodeError as err:
      raise errors.UserError(f"--on_end: expected a JSON list of strings, found invalid JSON ({err.msg})") from None
    if not (isinstance(command, list) and command and all(isinstance(a, str) for a in command)):
      raise errors.UserError(f"--on_end {args.on_end}: expected a non-empty JSON list of strings (an argv)")
  if not args.run_id.strip():
    raise errors.UserError("--run_id: expected a non-empty id")


def _journal(local_dir: str) -> None:
  """The supervisor's own failure: its traceback to stderr (the host's journal) and to <local_dir>/supervisor.log."""
  text = f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')} pod_worker failed:\n{traceback.format_exc()}"
  print(text, file=sys.stderr, flush=True)
  try:
    folder = Path(os.path.expanduser(local_dir))
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "supervisor.log", "a", encoding="utf-8") as log:
      log.write(text)
  except OSError:
    pass


def main(argv: Sequence[str] | None = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  split = argv.index("--") if "--" in argv else len(argv)
  args = parser().parse_args(argv[:split])
  check_args(args)
  try:
    supervisor = Supervisor(args, argv[split + 1:])
    for signum in (signal.SIGTERM, signal.SIGINT):
      signal.signal(signum, lambda *_: supervisor.stop.set())
    return supervisor.run()
  except Exception:  # pylint: disable=broad-except  # noqa: BLE001  any failure of its own: journal, file, restart
    _journal(args.local_dir)
    return SUPERVISOR_FAILED


if __name__ == "__main__":
  sys.exit(errors.run(main))

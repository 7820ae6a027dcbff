"""launch.experiments.pod_worker's generations, in-process with a simulated clock (hours in milliseconds; peers are
status files written by the test): four hosts that come back one after another begin one generation, and no failure
is counted; a host away for 20 minutes (longer than the 15 of the old retries) is waited for and the run goes on; one
that stays away past --wait_hours ends the run as an infrastructure failure that keeps the slice (--on_end not run);
a launch.main failure while a peer's heartbeat goes stale is the host's, not the code's; the code's own failures end
the run at --max_attempts, and only then does --on_end run; every flag is checked before anything is written; the
supervisor's own failure goes to its local file and the journal, with the status systemd restarts."""

import json
from pathlib import Path

import pytest

from encoder import errors
from launch.experiments import pod_worker, tpu_pod

START = 1_800_000_000.0


class Clock:
  """Simulated time: `sleep` advances it and runs `tick` (the peers' doings) at the new time."""

  def __init__(self, tick=lambda now: None):
    self.time, self.tick = START, tick

  def now(self) -> float:
    return self.time

  def sleep(self, seconds: float) -> bool:
    self.time += seconds
    self.tick(self.time)
    return False


def _supervisor(tmp_path: Path, worker: int, clock: Clock, hosts: int = 4, *options: str) -> pod_worker.Supervisor:
  args = pod_worker.parser().parse_args(
      ["--workdir", str(tmp_path / "run"), "--run_id", "r1", "--hosts", str(hosts), "--worker", str(worker),
       "--local_dir", str(tmp_path / f"local{worker}"), "--on_end", json.dumps(["touch", str(tmp_path / "deleted")]),
       *options])
  pod_worker.check_args(args)
  return pod_worker.Supervisor(args, [], now=clock.now, sleep=clock.sleep)


def _peer(tmp_path: Path, worker: int, generation: int, state: str, beat: float, **fields) -> None:
  logs = tmp_path / "run" / "logs"
  logs.mkdir(parents=True, exist_ok=True)
  (logs / f"worker-{worker}.json").write_text(json.dumps(
      {"run_id": "r1", "worker": worker, "generation": generation, "state": state, "beat": beat} | fields))


@pytest.mark.parametrize("state", ["running", "stopped"])  # Killed with their host, or stopped by its shutdown.
def test_hosts_back_one_after_another_begin_one_generation_and_count_no_failure(tmp_path, state):
  clock = Clock()
  for worker in range(4):  # A maintenance event: every host went down during generation 0.
    _peer(tmp_path, worker, 0, state, START - 3600)
  joined = []
  for worker in range(4):  # Their supervisors start again one after another, minutes apart.
    clock.time += 300
    joined.append(_supervisor(tmp_path, worker, clock).join(pod_worker._read_json(
        tmp_path / "run" / "logs" / f"worker-{worker}.json")))
    _peer(tmp_path, worker, joined[-1]["generation"], "waiting", clock.time)
  assert [g["generation"] for g in joined] == [1, 1, 1, 1]
  assert (joined[0]["cause"], joined[0]["failures"]) == ("host", 0)
  assert not (tmp_path / "run" / "logs" / "generation-2.json").exists()


def test_a_host_away_for_20_minutes_is_waited_for(tmp_path):
  def tick(now):  # Workers 1 and 2 wait too; worker 3 comes back after 20 minutes.
    for worker in (1, 2) + ((3,) if now >= START + 20 * 60 else ()):
      _peer(tmp_path, worker, 1, "waiting", now)
  clock = Clock(tick)
  tick(START)
  supervisor = _supervisor(tmp_path, 0, clock, 4, "--poll_s", "15")
  generation = supervisor.advance(supervisor.newest(), "host", "worker 3 went away")
  gathered = supervisor.gather(generation)
  assert isinstance(gathered, dict) and gathered["generation"] == 1 and gathered["failures"] == 0
  assert START + 20 * 60 <= clock.time <= START + 21 * 60


def test_a_host_away_past_wait_hours_keeps_the_slice(tmp_path):
  clock = Clock(lambda now: _peer(tmp_path, 1, 0, "waiting", now))  # Worker 2 never comes back.
  supervisor = _supervisor(tmp_path, 0, clock, 3, "--wait_hours", "2", "--poll_s", "60")
  assert supervisor.run() == 1
  status = json.loads((tmp_path / "run" / "logs" / "worker-0.json").read_text())
  assert (status["state"], status["final"], status["cause"]) == ("failed", True, "infrastructure")
  assert status["reason"].startswith("worker(s) 2 did not come back within --wait_hours=2; the slice is kept")
  assert START + 2 * 3600 <= clock.time <= START + 2 * 3600 + 60
  assert not (tmp_path / "deleted").exists()  # --delete_when_done: never after an infrastructure failure.


def test_a_failure_while_a_peer_goes_away_is_the_hosts(tmp_path):
  clock = Clock(lambda now: _peer(tmp_path, 1, 0, "running", now))  # Worker 1 beats on; worker 2 stopped at START.
  for worker in (1, 2):
    _peer(tmp_path, worker, 0, "running", START)
  supervisor = _supervisor(tmp_path, 0, clock, 3, "--host_timeout_s", "180", "--poll_s", "15")
  assert supervisor.cause_of_failure(supervisor.newest())[0] == "host"
  assert clock.time >= START + 180
  _peer(tmp_path, 2, 0, "running", clock.time)  # Everyone alive for --host_timeout_s: the code's failure.
  clock.tick = lambda now: [_peer(tmp_path, w, 0, "running", now) for w in (1, 2)]
  assert supervisor.cause_of_failure(supervisor.newest()) == ("failure", "")
  later = supervisor.advance(supervisor.newest(), "host", "x")  # Another worker began generation 1 meanwhile.
  assert supervisor.cause_of_failure(supervisor.generation(0)) == later


def test_code_failures_count_to_max_attempts_then_on_end(tmp_path):
  clock = Clock()
  supervisor = _supervisor(tmp_path, 0, clock, 2, "--max_attempts", "2")
  current = supervisor.newest()
  for cause in ("failure", "host", "stop", "failure"):
    current = supervisor.advance(current, cause, f"error: {cause}")
  assert (current["generation"], current["failures"]) == (4, 2)
  again = _supervisor(tmp_path, 1, clock, 2, "--max_attempts", "2")  # Joins it: the run has failed for good.
  assert again.advance(again.generation(3), "failure", "another") == current  # Written once: joined, not counted.
  assert again.run() == 1
  status = json.loads((tmp_path / "run" / "logs" / "worker-1.json").read_text())
  assert status["reason"] == ("worker 0 failed for good: error: failure (the code failed 2 time(s), "
                              "--max_attempts=2)")
  assert not (tmp_path / "deleted").exists()  # --on_end is worker 0's.
  assert supervisor.run() == 1 and (tmp_path / "deleted").exists()


@pytest.mark.parametrize("flag, value, message", [
    ("--hosts", "0", "argument --hosts: expected an integer >= 1, got '0'"),
    ("--max_attempts", "0", "argument --max_attempts: expected an integer >= 1, got '0'"),
    ("--wait_hours", "0", "argument --wait_hours: expected a number > 0, got '0'"),
    ("--wait_hours", "nan", "argument --wait_hours: expected a finite number, got 'nan'"),
    ("--poll_s", "-1", "argument --poll_s: expected a number > 0, got '-1'"),
    ("--grace_s", "0", "argument --grace_s: expected a number > 0, got '0'"),
    ("--restart_delay_s", "-1", "argument --restart_delay_s: expected a number >= 0, got '-1'"),
    ("--host_timeout_s", "20", "--host_timeout_s 20: expected more than twice --poll_s (15)"),
    ("--worker", "4", "--worker 4: expected auto or a number below --hosts 4"),
    ("--on_end", "[gcloud", "--on_end: expected a JSON list of strings, found invalid JSON"),
    ("--on_end", '"gcloud"', '--on_end "gcloud": expected a non-empty JSON list of strings'),
    ("--run_id", " ", "--run_id: expected a non-empty id")])
def test_every_flag_is_checked_before_anything_is_written(tmp_path, capsys, flag, value, message):
  argv = ["--workdir", str(tmp_path / "run"), "--run_id", "r1", "--hosts", "4", "--worker", "0", "--local_dir",
          str(tmp_path / "local"), flag, value]
  with pytest.raises(errors.UserError) as refused:
    pod_worker.main(argv)
  assert message in str(refused.value)
  assert list(tmp_path.iterdir()) == []
  assert capsys.readouterr().out == ""


def test_the_supervisors_own_failure_goes_to_its_local_file_and_asks_for_a_restart(tmp_path, capsys):
  (tmp_path / "run").write_text("a file where the workdir should be")  # As a bucket it cannot write would fail.
  code = pod_worker.main(["--workdir", str(tmp_path / "run"), "--run_id", "r1", "--hosts", "2", "--worker", "0",
                          "--local_dir", str(tmp_path / "local")])
  assert code == pod_worker.SUPERVISOR_FAILED  # systemd's Restart=on-failure restarts it; exit 1 it does not.
  own = (tmp_path / "local" / "supervisor.log").read_text()
  assert "pod_worker failed:" in own and "Traceback" in own and own in capsys.readouterr().err  # And the journal.
  unit = tpu_pod.unit_text()
  assert "Restart=on-failure" in unit and "RestartPreventExitStatus=1" in unit

"""Every flag of launch.experiments.tpu_pod, pod_plan and pod_worker, given a value or a combination it refuses,
against the fake gcloud (tests/.../fake_gcloud.py first on PATH): one line `error: ...` naming the flag, and no
gcloud command issued, no file written. The flags come from the parsers, so a new flag without a refused case here
fails the test. Calls are in-process (the refusals come before anything is run)."""

import json
import os
import re

import pytest

from encoder import errors
from launch.experiments import pod_plan, pod_worker, tpu_pod
from tests.launch.experiments.test_tpu_pod import MAIN_ARGS, fixture_world  # noqa: F401  (the `world` fixture)

BASE = ["--name", "bert", "--zone", "us-central2-b", "--type", "v4-32", "--skip_plan"]
QUEUED = ["--name", "bert", "--zone", "us-west4-a", "--type", "v5e-16", "--queued"]


def _without(argv: list[str], flag: str) -> list[str]:
  """`argv` without `flag` (and its value, for --name, --zone and --type)."""
  if flag not in argv:
    return argv
  i = argv.index(flag)
  return argv[:i] + argv[i + (2 if flag in ("--name", "--zone", "--type") else 1):]


def tpu_pod_cases(missing_dir: str, a_file: str) -> dict[str, list[tuple[list[str], list[str]]]]:
  """flag -> [(options, launch.main arguments)], each refused."""
  plain = lambda *extra: ([*BASE, *extra], MAIN_ARGS)
  replaced = lambda flag, value: ([*_without(BASE, flag), flag, value], MAIN_ARGS)
  return {
      "--name": [replaced("--name", "Bert_1"), replaced("--name", "-bert")],
      "--zone": [replaced("--zone", "uscentral2b")],
      "--type": [replaced("--type", "v4-33"), replaced("--type", "v5e-2"), replaced("--type", "v9-8"),
                 replaced("--type", "v4-0")],
      "--project": [plain("--project", "X")],
      "--version": [plain("--version", "")],
      "--spot": [(["--name", "bert", "--zone", "us-central2-b", "--type", "v4-32", "--stop", "--spot"], [])],
      "--queued": [(["--name", "bert", "--zone", "us-central2-b", "--type", "v4-32", "--plan", "--queued"],
                    MAIN_ARGS)],
      "--autocheckpoint": [([*_without(BASE, "--type"), "--type", "v6e-8", "--autocheckpoint"], MAIN_ARGS)],
      "--git_url": [(["--name", "bert", "--zone", "us-central2-b", "--type", "v4-32", "--logs", "out",
                      "--git_url", "https://x/y.git"], ["--workdir", "gs://b/r"])],
      "--git_ref": [plain("--git_ref", "main")],
      "--data": [plain("--data", missing_dir), plain("--data", "gs:///x")],
      "--max_code_mb": [plain("--max_code_mb", "0"), plain("--max_code_mb", "x")],
      "--max_attempts": [plain("--max_attempts", "0"), plain("--max_attempts", "1.5")],
      "--wait_hours": [plain("--wait_hours", "0"), plain("--wait_hours", "inf")],
      "--max_requeues": [plain("--max_requeues", "2"), ([*QUEUED, "--max_requeues", "-1"], MAIN_ARGS)],
      "--delete_when_done": [(["--name", "bert", "--zone", "us-central2-b", "--type", "v4-32", "--plan",
                               "--delete_when_done"], MAIN_ARGS)],
      "--plan": [(["--name", "bert", "--zone", "us-central2-b", "--type", "v4-32", "--plan", "--stop"], [])],
      "--skip_plan": [plain("--plan")],
      "--mfu": [plain("--mfu", "0"), plain("--mfu", "1.5"), plain("--mfu", "nan")],
      "--logs": [(["--name", "bert", "--zone", "us-central2-b", "--type", "v4-32", "--logs", a_file],
                  ["--workdir", "gs://b/r"])],
      "--stop": [(["--name", "bert", "--zone", "us-central2-b", "--type", "v4-32", "--stop"], MAIN_ARGS)],
      "--delete": [(["--name", "bert", "--zone", "us-central2-b", "--type", "v4-32", "--delete", "--logs", "out"],
                    [])],
      "--poll_s": [plain("--poll_s", "0")],
      "--dry-run": [plain("--dry-run=yes")],
  }


def _flags(parser) -> set[str]:
  return {action.option_strings[0] for action in parser._actions  # pylint: disable=protected-access
          if action.option_strings and action.option_strings[0] != "-h"}


def _assert_refused(capsys, run, argv: list[str], flag: str) -> None:
  with pytest.raises(SystemExit) as refused:
    run(argv)
  line = str(refused.value.code)
  assert line.startswith("error: ") and "\n" not in line and flag.lstrip("-").split("=")[0] in line, (argv, line)
  assert "Traceback" not in capsys.readouterr().err


def test_every_tpu_pod_flag_refused_before_any_gcloud_command(world, monkeypatch, capsys):
  monkeypatch.chdir(world["checkout"])
  for key, value in world["env"].items():
    monkeypatch.setenv(key, value)
  a_file = world["tmp"] / "a_file"
  a_file.write_text("x")
  cases = tpu_pod_cases(str(world["tmp"] / "missing"), str(a_file))
  assert set(cases) == _flags(tpu_pod.parser())  # A new flag needs its refused case here.
  before = sorted(p.name for p in world["tmp"].iterdir())
  for flag, refused in cases.items():
    for options, main_args in refused:
      _assert_refused(capsys, tpu_pod.main, [*options, "--", *main_args], flag)
  combinations = [  # Contradictions and a missing partner, each named.
      (["--name", "bert", "--zone", "us-central2-b", "--type", "v4-32", "--stop", "--delete"], [], "--stop, --delete"),
      ([*BASE], [], "--config and --workdir"), ([*BASE], ["--config", "c.py", "--workdir", "gs:///r"], "--workdir")]
  for options, main_args, named in combinations:
    _assert_refused(capsys, tpu_pod.main, [*options, "--", *main_args], named)
  assert not (world["tmp"] / "calls.log").exists()  # No gcloud command was issued.
  assert sorted(p.name for p in world["tmp"].iterdir()) == before
  assert not os.path.exists(world["tmp"] / "state.json")


def test_every_pod_plan_and_pod_worker_flag_refused_before_anything(world, monkeypatch, capsys, tmp_path):
  for key, value in world["env"].items():
    monkeypatch.setenv(key, value)
  plan_cases = {"--type": [["--type", "v4-24"], ["--type", "tpu"]],
                "--mfu": [["--type", "v4-8", "--mfu", "0"], ["--type", "v4-8", "--mfu", "2"]]}
  assert set(plan_cases) == _flags(pod_plan.parser())
  run_plan = lambda argv: errors.run(pod_plan.main, argv)
  for flag, refused in plan_cases.items():
    for argv in refused:
      _assert_refused(capsys, run_plan, [*argv, "--", *MAIN_ARGS], flag)
  _assert_refused(capsys, run_plan, ["--type", "v4-8"], "--plan")  # No launch.main arguments.
  root = tmp_path / "worker"  # Nothing may appear here.
  base = ["--workdir", str(root / "run"), "--run_id", "r1", "--hosts", "4", "--worker", "0", "--local_dir",
          str(root / "local")]
  worker_cases = {
      "--workdir": [base[2:]], "--run_id": [[*base, "--run_id", " "]], "--hosts": [[*base, "--hosts", "0"]],
      "--worker": [[*base, "--worker", "4"], [*base, "--worker", "x"]],
      "--max_attempts": [[*base, "--max_attempts", "0"]], "--wait_hours": [[*base, "--wait_hours", "-2"]],
      "--host_timeout_s": [[*base, "--host_timeout_s", "10"]],
      "--on_end": [[*base, "--on_end", "[gcloud"], [*base, "--on_end", json.dumps({"a": 1})]],
      "--local_dir": [[*base[:-2]] + ["--local_dir"]], "--module": [[*base, "--module"]],
      "--poll_s": [[*base, "--poll_s", "0"]], "--grace_s": [[*base, "--grace_s", "-1"]],
      "--restart_delay_s": [[*base, "--restart_delay_s", "-1"]]}
  assert set(worker_cases) == _flags(pod_worker.parser())
  run_worker = lambda argv: errors.run(pod_worker.main, argv)
  for flag, refused in worker_cases.items():
    for argv in refused:
      _assert_refused(capsys, run_worker, argv, flag)
  assert not (world["tmp"] / "calls.log").exists() and not root.exists()


def test_a_damaged_status_file_is_named(tmp_path):
  (tmp_path / "worker-0.json").write_text('{"run_id": "r1", "state": "runn')
  (tmp_path / "worker-1.json").write_text('{"run_id": "r1"}')
  for worker, problem in ((0, "a damaged worker status (Unterminated string"), (1, "a damaged worker status (no "
                                                                                  "state, generation, time)")):
    with pytest.raises(errors.UserError, match=re.escape(f"{tmp_path / f'worker-{worker}.json'}: {problem}")):
      tpu_pod.summary(str(tmp_path), worker + 1)
    (tmp_path / f"worker-{worker}.json").unlink()

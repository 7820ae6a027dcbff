"""launch.experiments.sweep: names, config specs and chains of a sweep file; a real 4-point sweep of tiny SICK
relatedness runs (two seeds, a point stopped once by SIGTERM, a point that always fails) finishes what it can,
records the failure, and a rerun skips the finished points and resumes the stopped one; --print's commands reproduce
a point (seed-1, which loaded seed-0's programs from the points' compilation cache, compiled afresh: the same bits);
the report of the sweep holds its results.json numbers and the `tasks.scoring.score bootstrap` p-value of its
prediction files."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from configs import finetune
from configs.sweeps import objectives, suite
from encoder import errors
from encoder.errors import ConfigError
from launch import compilation_cache
from launch.experiments import report, sweep
from tests import faults
from tests.conftest import require_data

REPO = Path(__file__).resolve().parents[3]
SWEEP_FILE = """
from configs.sweeps.points import seeds

def get_sweep(arg=None):
  return {"config": "configs/finetune.py:task=sick_relatedness,runlocal",
          "points": seeds([{}], [0, 1]) + [{"optimizer.learning_rate": 0.003, "seed": 0},
                                           {"optimizer.learning_rate": "fast"}]}
"""
STOPPED = "optimizer.learning_rate-0.003_seed-0"  # SIGTERM as its step 6 starts (tests/faults.py), in both sweeps.
FAILING = "optimizer.learning_rate-fast"


def _sweep(args: list[str], cwd: Path = REPO, env: dict | None = None) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "launch.experiments.sweep", *args], cwd=cwd, capture_output=True,
                        text=True, timeout=900, check=False, env=env)


def _log(root: Path) -> list[dict]:
  return [json.loads(line) for line in (root / "sweep.jsonl").read_text().splitlines()]


# Fast checks of the sweep file format.

def test_names_and_specs():
  assert sweep.point_name({":objectives": "mlm+nsp", "optimizer.learning_rate": 2e-4, "seed": 1}) == \
      "objectives-mlm+nsp_optimizer.learning_rate-0.0002_seed-1"
  assert sweep.point_name({"task.train_split": "train[:64]", "data.buckets": (16, 32)}) == \
      "task.train_split-train--64-_data.buckets--16--32-"
  assert sweep.point_name({}) == "base"
  long = sweep.point_name({"x": "y" * 300})
  assert len(long) == sweep.MAX_NAME and long != sweep.point_name({"x": "y" * 301})
  cut = [sweep.point_name({"x": "y" * 300, "seed": s}) for s in (0, 1)]  # The seed stays whole, last.
  assert [len(n) for n in cut] == [sweep.MAX_NAME] * 2 and cut[1].endswith("_seed-1") and cut[0][:-1] == cut[1][:-1]
  assert sweep.merge_spec("configs/finetune.py:task=sick,runlocal", {"task": "sst2", "init": "run:r/a"}) == \
      "configs/finetune.py:task=sst2,runlocal,init=run:r/a"
  assert sweep.merge_spec("configs/pretrain.py", {"runlocal": True}) == "configs/pretrain.py:runlocal"


def test_objectives_sweep_chains_finetuning_to_its_pretraining():
  points = sweep.expand(sweep.load_sweep(str(REPO / "configs/sweeps/objectives.py:budget=small")), "runs/obj")
  pretraining = [p for p in points if p.parent is None]
  assert [p.name for p in pretraining] == ["objectives-mlm", "objectives-mlm+nsp", "objectives-mlm+sbo",
                                           "objectives-mlm+nsp+sbo", "objectives-electra_num_train_steps-764"]
  assert objectives.TASKS == suite.TASKS  # The checkpoint suite's tasks.
  tasks = [t for t in objectives.TASKS if t in finetune.TASK_PRESETS]
  runs = 2 * len(tasks)
  assert len(points) == 5 + 5 * runs
  steps = {p.overrides["num_train_steps"] for p in pretraining}
  batches = {p.overrides["batch_size"] for p in pretraining}
  assert steps == {1000, 764} and batches == {32}  # ELECTRA: fewer steps of its dearer step (below).
  assert all(p.overrides["num_train_steps"] == 1000 for p in pretraining[:4])
  for i, parent in enumerate(pretraining):
    children = points[(runs + 1) * i + 1:(runs + 1) * (i + 1)]  # Each pretraining point is followed by its runs.
    assert [c.parent for c in children] == [parent.name] * runs
    def named(task, *seed):  # TASK_FIELDS at budget small: SQuAD's fields are in its names (cut, the seed kept).
      return sweep.point_name({":task": task, **objectives.TASK_FIELDS["small"].get(task, {}),
                               **({"seed": seed[0]} if seed else {})})
    assert {c.name for c in children} == {f"{parent.name}__{named(t, s)}" for t in tasks for s in (0, 1)}
    assert {c.name[len(parent.name):] for c in children if "squad" in c.name} == {
        "__task-squad_num_train_steps-300_task.max_length-128_task.max_question_length-32_task.doc_stride-64_data.b"
        f"-66a97958_seed-{s}" for s in (0, 1)}
    assert all(c.overrides.get("num_train_steps") == (300 if "squad" in c.name or "sst2" in c.name else None)
               for c in children)  # SST-2's 3 epochs are 6,300 steps.
    assert all(f"init=run:runs/obj/{parent.name}" in c.config for c in children)
    assert {c.group for c in children} == {f"{parent.name}__{named(t)}" for t in tasks}
  base = sweep.expand(sweep.load_sweep(str(REPO / "configs/sweeps/objectives.py:budget=base")), "r")
  assert base[0].config == "configs/pretrain.py:size=base,objectives=mlm"
  # SQuAD's windows are the pretraining rows' 128 subwords at every budget (later positions would be untrained).
  assert {p.overrides["task.max_length"] for p in base if "squad" in p.name} == {128}
  assert {p.overrides.get("data.max_length", 128) for p in base if p.parent is None} == {128}
  with pytest.raises(ConfigError, match="budget='huge'"):
    sweep.load_sweep(str(REPO / "configs/sweeps/objectives.py:budget=huge"))


def test_sick_recipes_sweep_builds_every_point_of_the_results_table():
  from configs import finetune  # pylint: disable=import-outside-toplevel
  points = sweep.expand(sweep.load_sweep(str(REPO / "configs/sweeps/sick_recipes.py")), "runs/sick")
  assert len(points) == 30 and len({p.group for p in points}) == 10
  assert [p.name for p in points[:3]] == ["seed-0", "seed-1", "seed-2"]  # The preset: group "base".
  for point in points:  # Every override names a field of the config: the points build.
    config = finetune.get_config(point.config.partition(":")[2])
    config.update_from_flattened_dict(point.overrides)
    assert config.seed == point.overrides["seed"]


def test_bad_sweeps_are_one_line_errors(tmp_path):
  with pytest.raises(errors.UserError, match="both named 'seed-0'"):
    sweep.expand({"config": "c.py", "points": [{"seed": 0}, {"seed": 0}]}, tmp_path)
  with pytest.raises(errors.UserError, match="unknown key"):
    sweep.expand({"config": "c.py", "points": [{}], "pionts": []}, tmp_path)
  with pytest.raises(errors.UserError, match="non-empty list"):
    sweep.expand({"config": "c.py", "points": []}, tmp_path)
  result = _sweep(["--sweep", str(tmp_path / "missing.py"), "--print"])
  assert result.returncode == 1 and result.stderr.strip().startswith("error:") and "missing.py" in result.stderr
  assert "Traceback" not in result.stderr


def test_a_sweep_file_with_a_syntax_error_is_one_line_naming_its_line(tmp_path):
  broken = tmp_path / "broken.py"
  broken.write_text("def get_sweep(arg=None):\n  return {'config': 'c.py',\n          'points': [{}]\n\nx = 1\n")
  result = _sweep(["--sweep", str(broken), "--print"])
  assert result.returncode == 1 and "Traceback" not in result.stderr
  assert result.stderr.strip().startswith(f"error: {broken}:2: "), result.stderr


# A real sweep (one run shared by the tests below).

@pytest.fixture(scope="module")
def swept(tmp_path_factory):
  """The sweep run twice: (root, first run's log, log of both runs, seed-0's files before the rerun)."""
  require_data("sick/SICK_train.txt")
  root = tmp_path_factory.mktemp("sweep") / "runs"
  sweep_file = root.parent / "tiny_sweep.py"
  sweep_file.write_text(SWEEP_FILE)
  # The points' shared compilation cache (ROOT/xla_cache; tests/conftest.py turns the user's off).
  env = {k: v for k, v in os.environ.items() if k not in (sweep.CACHE_ENV, compilation_cache.ENV)}
  env = faults.environment("SIGTERM", 6, workdir=STOPPED, base=env)  # The rerun resumes after step 6: no signal.
  first = _sweep(["--sweep", str(sweep_file), "--root", str(root)], env=env)
  assert first.returncode == 1, first.stdout[-3000:] + first.stderr[-3000:]
  assert f"{STOPPED}, {FAILING}" in first.stderr  # The points that did not finish, in one error line.
  first_log = _log(root)
  before = {name: (root / "seed-0" / name).read_bytes() for name in ("metrics.jsonl", "results.json")}
  second = _sweep(["--sweep", str(sweep_file), "--root", str(root)], env=env)
  assert second.returncode == 1 and FAILING in second.stderr and STOPPED not in second.stderr, second.stderr[-3000:]
  return root, sweep_file, first_log, _log(root)[len(first_log):], before


@pytest.mark.slow
def test_sweep_runs_points_and_records_failures(swept):
  root, _, first, _, _ = swept
  assert {r["name"]: r["status"] for r in first} == {"seed-0": "finished", "seed-1": "finished", STOPPED: "stopped",
                                                     FAILING: "failed"}
  failure = next(r for r in first if r["name"] == FAILING)
  assert failure["returncode"] == 1 and "optimizer.learning_rate" in failure["error"]
  assert not (root / FAILING / "results.json").exists()
  stopped = json.loads((root / STOPPED / "sweep_point.json").read_text())
  assert stopped["attempts"] == 2 and stopped["group"] == STOPPED.removesuffix("_seed-0")


@pytest.mark.slow
def test_rerun_skips_finished_points_and_resumes_the_stopped_one(swept):
  root, _, _, second, before = swept
  assert {r["name"]: r["status"] for r in second} == {"seed-0": "skipped", "seed-1": "skipped", STOPPED: "finished",
                                                      FAILING: "failed"}
  assert {name: (root / "seed-0" / name).read_bytes() for name in before} == before  # Not run again.
  results = json.loads((root / STOPPED / "results.json").read_text())
  assert results["step"] == 8 and not results["stopped_early"]
  steps = [r["step"] for r in map(json.loads, (root / STOPPED / "metrics.jsonl").read_text().splitlines())
           if "train/loss" in r]
  assert steps == [2, 4, 6, 8]  # Stopped after step 6, resumed from its checkpoint: no step trained twice.


@pytest.mark.slow
def test_print_gives_commands_that_reproduce_a_point(swept, tmp_path):
  root, sweep_file, _, _, _ = swept
  printed = _sweep(["--sweep", str(sweep_file), "--root", str(root), "--print"])
  lines = printed.stdout.splitlines()
  assert len(lines) == 4 and all(line.startswith("python -m launch.main --config=") for line in lines)
  argv = shlex.split(lines[1])
  assert argv[4] == f"--workdir={root / 'seed-1'}"
  assert json.loads((root / "seed-1" / "sweep_point.json").read_text())["command"] == lines[1]
  argv[4] = f"--workdir={tmp_path / 'again'}"
  assert any((root / sweep.CACHE_DIR).iterdir())  # seed-1 loaded seed-0's programs from it; here, compiled afresh:
  env = {k: v for k, v in os.environ.items() if k != sweep.CACHE_ENV}
  subprocess.run([sys.executable, *argv[1:]], cwd=REPO, check=True, capture_output=True, timeout=600, env=env)
  for name in ("predictions/test.labels", "predictions/dev.labels"):  # Bitwise (the engine is deterministic).
    assert (tmp_path / "again" / name).read_text() == (root / "seed-1" / name).read_text(), name
  untimed = lambda path: {k: v for k, v in json.loads(path.read_text()).items()
                           if k not in ("train", "evaluation_examples_per_second")} | {
      "train": {k: v for k, v in json.loads(path.read_text())["train"].items() if not k.endswith("_per_second")}}
  assert untimed(tmp_path / "again" / "results.json") == untimed(root / "seed-1" / "results.json")


def test_report_of_the_sweep(swept, tmp_path):
  root = swept[0]
  summary = report.write_report([root], tmp_path / "report", baselines=["base"], samples=2000)
  results = {name: json.loads((root / name / "results.json").read_text()) for name in ("seed-0", "seed-1", STOPPED)}
  runs = {r["name"]: r for r in summary["runs"]}
  for name, result in results.items():
    assert runs[name]["scores"] == {f"{s} {k}": v for s in ("dev", "test") for k, v in result[s].items()}
    assert runs[name]["steps"] == result["step"] == 8
  (table,) = summary["tables"]
  base = table["groups"]["base"]["cells"]["test pearson"]
  values = [results[n]["test"]["pearson"] for n in ("seed-0", "seed-1")]
  # Float64 both sides (approx's 1e-6 relative; rounding ~1e-16), one value off would move the mean by ~1%.
  assert base["values"] == values and base["mean"] == pytest.approx(np.mean(values))
  assert base["std"] == pytest.approx(np.std(values, ddof=1))
  assert "| base (baseline) | 2/2 | " in (tmp_path / "report" / "report.md").read_text()
  assert FAILING not in table["groups"]  # It never wrote config.json: listed below the tables with its error.
  assert summary["unfinished"] == {FAILING: next(r for r in swept[3] if r["name"] == FAILING)["status"] + ": " +
                                   next(r for r in swept[3] if r["name"] == FAILING)["error"]}
  assert f"- {FAILING}: failed: error: " in (tmp_path / "report" / "report.md").read_text()
  # The p-value of the stopped-then-resumed point (seed 0) against seed-0 equals the command line's on the same
  # files, with a gold file written here from the test split's records.
  (test,) = table["bootstrap"][STOPPED.removesuffix("_seed-0")]
  gold = tmp_path / "gold.txt"
  records = (root / "seed-0" / "predictions" / "test.jsonl").read_text().splitlines()
  gold.write_text("".join(f"{json.loads(line)['score']}\n" for line in records))
  command = subprocess.run([sys.executable, "-m", "tasks.scoring.score", "bootstrap", "--gold", str(gold), "--pred-a",
                            str(root / STOPPED / "predictions/test.labels"), "--pred-b",
                            str(root / "seed-0" / "predictions/test.labels"), "--task", "scores", "--samples", "2000"],
                           cwd=REPO, check=True, capture_output=True, text=True)
  expected = json.loads(command.stdout.splitlines()[-1])
  assert test["p_value"] == expected["p_value"] and test["delta"] == expected["delta"]
  assert test["split"] == "test" and test["seed"] == 0 and 0 < expected["p_value"] < 1


@pytest.mark.parametrize("budget", ["small", "gpu", "base"])
def test_architecture_sweep_points_cost_the_same_flops(budget):
  """Every switch set pretrains with the same steps and batch, and the gated feed-forwards are narrowed so that each
  point's encoder training FLOPs per row are BERT's (encoder.flops) to within the rounding of the width."""
  from configs import pretrain  # pylint: disable=import-outside-toplevel
  from encoder import flops  # pylint: disable=import-outside-toplevel
  from launch.model import encoder_config  # pylint: disable=import-outside-toplevel
  points = sweep.expand(sweep.load_sweep(str(REPO / f"configs/sweeps/architecture.py:budget={budget}")), "r")
  pretraining = [p for p in points if p.parent is None]
  assert [p.name.split("_model")[0] for p in pretraining] == [
      f"arch-{a}" for a in ("bert", "pre_ln", "rope", "geglu", "swiglu", "no_bias", "local_global", "modernbert")]
  assert len(points) == 8 + 8 * 7 * 2  # The suite's 7 tasks x 2 seeds.
  cost = {}
  for point in pretraining:
    config = pretrain.get_config(point.config.partition(":")[2]).unlock()
    config.update_from_flattened_dict(point.overrides)
    cfg = encoder_config(config.model, 30522)
    cost[point.name] = flops.encoder_train_flops(cfg, 1, config.data.max_length)
    assert (config.num_train_steps, config.batch_size, config.objectives) == (
        {"small": 1000, "gpu": 6000, "base": 10_000}[budget], {"small": 32, "gpu": 128, "base": 256}[budget], "mlm")
  bert = cost["arch-bert"]
  assert all(abs(c / bert - 1) < 0.01 for c in cost.values()), cost
  gated = next(p for p in pretraining if p.name.startswith("arch-geglu"))
  assert gated.overrides["model.intermediate_size"] == {"small": 680, "gpu": 680, "base": 2048}[budget]


@pytest.mark.parametrize("budget", ["small", "gpu", "base"])
def test_objectives_sweep_gives_electra_the_flops_of_mlm(budget):
  """ELECTRA's steps x its step's FLOPs (generator included) equal MLM's to within one step, each step counted as the
  engine counts it (launch.model.last_positions on a batch of the config's shapes picks MLM's last-block rows)."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel

  from configs import pretrain  # pylint: disable=import-outside-toplevel
  from encoder import flops  # pylint: disable=import-outside-toplevel
  from launch import workload  # pylint: disable=import-outside-toplevel
  from launch.model import encoder_config, last_positions  # pylint: disable=import-outside-toplevel
  from objectives import objective, registry  # pylint: disable=import-outside-toplevel
  points = sweep.expand(sweep.load_sweep(str(REPO / f"configs/sweeps/objectives.py:budget={budget}")), "r")
  cost = {}
  for point in (p for p in points if p.parent is None and p.name.split("_")[0] in ("objectives-mlm",
                                                                                  "objectives-electra")):
    config = pretrain.get_config(point.config.partition(":")[2]).unlock()
    config.update_from_flattened_dict(point.overrides)
    cfg = encoder_config(config.model, 30522)
    built = tuple(registry.build(n, workload.objective_options(config, n)) for n in config.objectives.split("+"))
    length, width = config.data.max_length, config.masking.max_predictions
    batch = {"input_ids": jnp.zeros((1, length), jnp.int32), "masked_positions": jnp.zeros((1, width), jnp.int32)}
    last = last_positions(built, batch)
    step = flops.step_flops(cfg, 1, length, None if last is None else last.shape[1],
                            objective.extra_encoders(built, cfg))
    cost[config.objectives] = (config.num_train_steps, step)
  (mlm_steps, mlm_step), (electra_steps, electra_step) = cost["mlm"], cost["electra"]
  assert electra_steps < mlm_steps
  assert abs(electra_steps * electra_step - mlm_steps * mlm_step) <= electra_step / 2


@pytest.mark.slow
def test_sigterm_stops_the_sweep_after_the_running_point_checkpoints(tmp_path):
  # A preemption or `timeout` signals the sweep: the running point is told too, saves a checkpoint and is recorded as
  # stopped; later points are left for the next run (before, the sweep died and its point lost its output pipe).
  root, sweep_file = tmp_path / "runs", tmp_path / "long_sweep.py"
  sweep_file.write_text('def get_sweep(arg=None):\n  return {"config": "configs/pretrain.py:runlocal", "points": '
                        '[{"seed": 0, "num_train_steps": 100000}, {"seed": 1}], '
                        '"common": {"data.eval_files": ""}}\n')  # No evaluation: nothing more to compile.
  process = subprocess.Popen([sys.executable, "-m", "launch.experiments.sweep", "--sweep", str(sweep_file), "--root",
                              str(root)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  point = root / "seed-0_num_train_steps-100000"
  deadline = time.time() + 300
  while not (point / "metrics.jsonl").is_file() or not (point / "metrics.jsonl").read_text():
    assert process.poll() is None and time.time() < deadline, process.communicate()
    time.sleep(0.5)
  process.send_signal(signal.SIGTERM)
  _, stderr = process.communicate(timeout=300)
  assert process.returncode == 1 and "did not finish: seed-0_num_train_steps-100000" in stderr, stderr[-2000:]
  assert [(r["name"], r["status"]) for r in _log(root)] == [(point.name, "stopped")]
  results = json.loads((point / "results.json").read_text())
  assert results["stopped_early"] and results["step"] > 0
  assert str(results["step"]) in [p.name for p in (point / "checkpoints").iterdir()]
  assert not (root / "seed-1").exists()

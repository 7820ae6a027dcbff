"""configs/sweeps/suite.py: one init on every task preset with the budget's seeds, expanded as the sweep runs it; a
preset that does not exist yet (squad, until the QA family lands) is left out with one stderr line naming it."""

from pathlib import Path

import pytest

from configs import finetune
from configs.sweeps import suite
from encoder.errors import ConfigError
from launch.experiments import sweep

REPO = Path(__file__).resolve().parents[3]


def _expand(arg: str) -> list[sweep.Point]:
  return sweep.expand(sweep.load_sweep(f"{REPO / 'configs/sweeps/suite.py'}:{arg}"), "runs/suite")


@pytest.mark.parametrize("budget,seeds,fields", [("small", (0, 1, 2), {"num_train_steps": 300}),
                                                 ("full", (0, 1, 2, 3, 4), {})])
def test_every_available_preset_times_the_budgets_seeds(budget, seeds, fields):
  assert suite.TASKS == ("sst2", "mrpc", "sick", "sick_relatedness", "conll2003", "ud_pos", "squad")
  tasks = [t for t in suite.TASKS if t in finetune.TASK_PRESETS]
  assert {"sst2", "mrpc", "sick", "sick_relatedness", "conll2003", "ud_pos"} <= set(tasks)
  points = _expand(f"budget={budget}")
  assert [p.name for p in points] == [f"task-{t}_seed-{s}" for t in tasks for s in seeds]
  assert [p.group for p in points] == [f"task-{t}" for t in tasks for _ in seeds]
  assert [p.config for p in points] == [f"configs/finetune.py:init=hf:all-MiniLM-L6-v2,task={t}"
                                        for t in tasks for _ in seeds]
  assert [p.overrides for p in points] == [fields | {"seed": s} for _ in tasks for s in seeds]
  assert all(p.parent is None for p in points)


def test_init_is_passed_to_every_point_and_a_bad_budget_is_an_error():
  points = _expand("init=run:runs/mini,budget=full")
  assert all(p.config.startswith("configs/finetune.py:init=run:runs/mini,task=") for p in points)
  with pytest.raises(ConfigError, match="budget='huge'"):
    _expand("budget=huge")


def test_a_missing_preset_is_named_and_left_out(monkeypatch, capsys):
  monkeypatch.setattr(finetune, "TASK_PRESETS", {k: v for k, v in finetune.TASK_PRESETS.items() if k != "squad"})
  tasks = {p.config.rsplit("task=", 1)[1] for p in _expand("budget=small")}
  assert tasks == set(suite.TASKS) - {"squad"}
  assert "configs/sweeps/suite.py: no preset squad in configs/finetune.py TASK_PRESETS yet" in capsys.readouterr().err
  monkeypatch.setattr(finetune, "TASK_PRESETS", finetune.TASK_PRESETS | {"squad": {}})  # Once it lands: run.
  assert {p.config.rsplit("task=", 1)[1] for p in _expand("budget=small")} == set(suite.TASKS)
  assert capsys.readouterr().err == ""

"""configs/sweeps/regimes.py: one regime and learning rate over the suite's tasks and seeds, expanded as the sweep runs
it, each point a configs/finetune.py run that the config checks accept; mistakes are one ConfigError naming the
argument."""

import re
from pathlib import Path

import pytest

from configs import finetune
from configs.sweeps import suite
from encoder.errors import ConfigError
from launch.experiments import sweep

REPO = Path(__file__).resolve().parents[3]


def _expand(arg: str) -> list[sweep.Point]:
  return sweep.expand(sweep.load_sweep(f"{REPO / 'configs/sweeps/regimes.py'}:{arg}"), "runs/regimes")


def test_a_regime_and_rate_over_the_chosen_tasks_and_seeds():
  points = _expand("regime=lora,lr=5e-4,tasks=sick+conll2003,seeds=0+2")
  assert [p.name for p in points] == ["task-sick_seed-0", "task-sick_seed-2", "task-conll2003_seed-0",
                                      "task-conll2003_seed-2"]
  assert [p.overrides for p in points] == [{"num_train_steps": 300, "regime": "lora", "optimizer.learning_rate": 5e-4,
                                            "seed": s} for _ in range(2) for s in (0, 2)]
  config = finetune.get_config("task=sick,runlocal")
  config.unlock().update_from_flattened_dict({k: v for k, v in points[0].overrides.items() if k != "seed"})
  assert config.regime == "lora" and config.optimizer.learning_rate == 5e-4


def test_defaults_are_full_with_each_presets_rate_on_the_suite():
  points = _expand("")
  tasks = [t for t in suite.TASKS if t in finetune.TASK_PRESETS]
  assert [p.name for p in points] == [f"task-{t}_seed-{s}" for t in tasks for s in (0, 1, 2)]
  assert all(p.overrides == {"num_train_steps": 300, "regime": "full", "seed": p.overrides["seed"]} for p in points)


@pytest.mark.parametrize("arg,message", [
    ("regime=prefix", "regime='prefix'; expected one of full, frozen, top_k, lora, bitfit, adapters"),
    ("tasks=sick+swag", "tasks='sick+swag' names swag; expected some of sst2+"),
    ("lr=-1e-3", "lr=-0.001; expected >= 0"),
    ("seeds=0+one", "seeds='0+one'; expected integers joined by '+'"),
    ("budget=huge", "budget='huge'"),
])
def test_a_mistake_is_one_line_naming_the_argument(arg, message):
  with pytest.raises(ConfigError, match=re.escape("configs/sweeps/regimes.py: " + message)):
    _expand(arg)

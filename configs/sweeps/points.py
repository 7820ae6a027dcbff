"""Building a sweep's list of points (override dicts, see launch/experiments/sweep.py) without importing the engine:
what sweep files import."""

import itertools
import sys
from collections.abc import Sequence
from typing import Any

from configs import finetune

SEED_KEY = "seed"  # The override that `launch.experiments.report` averages over.


def grid(**axes: Sequence[Any]) -> list[dict[str, Any]]:
  """Every combination of the axes' values: grid(seed=[0, 1], lr=[1, 2]) -> 4 points (keys as in a point)."""
  keys = list(axes)
  return [dict(zip(keys, values)) for values in itertools.product(*(axes[k] for k in keys))]


def product(*point_lists: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
  """Every combination of one point from each list, merged (later lists win on shared keys)."""
  return [dict(itertools.chain.from_iterable(p.items() for p in combo)) for combo in itertools.product(*point_lists)]


def seeds(points: Sequence[dict[str, Any]], values: Sequence[int]) -> list[dict[str, Any]]:
  """Each point once per seed (config.seed)."""
  return product(points, [{SEED_KEY: s} for s in values])


def available_presets(tasks: Sequence[str], where: str) -> list[str]:
  """The fine-tuning presets among `tasks` that configs/finetune.py defines; any other (a preset whose task family
  has not landed yet) is named in one stderr line from `where` (the sweep file) and left out."""
  missing = [t for t in tasks if t not in finetune.TASK_PRESETS]
  if missing:
    print(f"{where}: no preset {', '.join(missing)} in configs/finetune.py TASK_PRESETS yet: left out of the sweep",
          file=sys.stderr)
  return [t for t in tasks if t in finetune.TASK_PRESETS]

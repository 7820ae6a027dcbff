"""Building a sweep's list of points (override dicts, see launch/experiments/sweep.py) without importing the engine:
what sweep files import."""

import itertools
from typing import Any, Sequence

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

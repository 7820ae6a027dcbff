"""The SICK recipe comparison of docs/results.md ("SICK, three seeds per recipe"): ten fine-tuning recipes from
all-MiniLM-L6-v2, seeds 0, 1 and 2 each (30 runs; about 3-4 minutes per run on a 2-core CPU), compared by their dev
mean; the p-values test each recipe against the preset on the test predictions, per seed.

  python -m launch.experiments.sweep --sweep configs/sweeps/sick_recipes.py --root runs/sick_recipes
  python -m launch.experiments.report runs/sick_recipes --baseline base

Our side of `python -m benchmarks.finetune --task sick --set ...` (the same config, overrides and engine; the
benchmark adds the HF reference). The table's task-adaptive row needs a pretraining run on SICK's sentences first
(docs/results.md gives its commands) and is not a point here.
"""

from typing import Any

from configs.sweeps.points import seeds

# Every parameter trains (the preset freezes the embeddings: regime top_k, top_k 6).
FULL: dict[str, Any] = {"regime": "full"}
RECIPES: list[dict[str, Any]] = [
    {},  # The preset.
    FULL,
    FULL | {"task.score_weight": 0.5},  # Relatedness as an auxiliary target.
    FULL | {"optimizer.ema_decay": 0.99},
    FULL | {"task.pooling": "mean"},
    FULL | {"task.score_weight": 1.0},
    FULL | {"epochs": 5},
    FULL | {"optimizer.learning_rate": 7e-5},
    FULL | {"task.rdrop": 1.0},  # R-Drop, alpha 1.
    FULL | {"epochs": 6},
]


def get_sweep(arg: str | None = None) -> dict:
  """10 recipes x seeds 0, 1, 2; the preset's group is 'base'."""
  del arg  # No arguments.
  return {"config": "configs/finetune.py:task=sick", "points": seeds(RECIPES, [0, 1, 2])}

"""A 3-point sweep of tiny fine-tuning runs (SICK relatedness, random-init 2x64 encoder, a few steps each): two seeds
of the runlocal recipe and one with a higher learning rate. Under a minute per point on CPU.

  python -m launch.experiments.sweep --sweep configs/sweeps/example.py --root runs/example
  python -m launch.experiments.report runs/example --baseline base
"""

from configs.sweeps.points import seeds


def get_sweep(arg: str | None = None) -> dict:
  """Points seed-0, seed-1 (group 'base') and optimizer.learning_rate-0.003_seed-0."""
  del arg  # No arguments.
  return {"config": "configs/finetune.py:task=sick_relatedness,runlocal",
          "points": seeds([{}], [0, 1]) + [{"optimizer.learning_rate": 0.003, "seed": 0}]}

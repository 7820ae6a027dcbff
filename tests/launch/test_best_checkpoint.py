"""The best checkpoint has one definition (launch.checkpointing._rank: the best saved metric, a tie going to the
later step, as orbax's BestN kept it): the checkpoint kept as best is the one `best_step` names and the training
loop's "best" in results.json. The loop and `best_step` took the earliest of tied evaluations while orbax kept the
latest, so a genia_nested run whose dev F1 tied at steps 4 and 8 (no entity predicted yet) wrote "best": {"step": 4}
and "best_step": 8 (issue 71), as did the runlocal conll2003_crf, sst2 and sick runs (their pins hold step 8's)."""

import jax.numpy as jnp
import pytest

from configs import pretrain
from launch import checkpointing


def _state(value: float):
  return {"step": jnp.asarray(int(value), jnp.int32), "params": {"w": jnp.full((3,), value, jnp.float32)}}


def _loop_best(evaluations: list[tuple[int, float]], mode: str) -> int:
  """The training loop's "best" step (launch/train.py: a later evaluation at least as good replaces it)."""
  best = None
  for step, value in evaluations:
    if best is None or (value <= best[1] if mode == "min" else value >= best[1]):
      best = (step, value)
  assert best is not None
  return best[0]


@pytest.mark.parametrize("keep", [1, 3])
@pytest.mark.parametrize("mode,values", [("max", [0.0, 0.0, 0.0]), ("max", [0.2, 0.5, 0.5]), ("max", [0.5, 0.5, 0.2]),
                                         ("min", [3.0, 3.0, 4.0]), ("min", [2.0, 1.0, 1.0])])
def test_a_tie_keeps_the_later_step_as_the_loop_reports_it(tmp_path, mode, values, keep):
  config = pretrain.get_config("runlocal")
  config.keep_checkpoints, config.best_metric, config.best_mode = keep, "eval/f1", mode
  manager = checkpointing.create_manager(tmp_path, config)
  evaluations = list(zip((4, 8, 12), values))
  for step, value in evaluations:
    checkpointing.save(manager, step, _state(step), {"eval/f1": value})
    manager.wait_until_finished()
  best = _loop_best(evaluations, mode)
  assert checkpointing.best_step(manager, "eval/f1", mode) == best
  assert sorted(manager.all_steps()) == sorted({best, *(4, 8, 12)[-keep:]})  # The best and the latest `keep`.
  manager.close()

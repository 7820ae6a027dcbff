"""Orbax checkpoints in workdir/checkpoints: async saves, the last K plus the best by a metric, resume from the
newest readable one (a corrupt or partial newest one is reported, moved aside and the previous one used), and a
refusal to resume a workdir whose saved model config differs from the one asked for.

The input pipeline is a pure function of the step (launch/input_pipeline.py), so the step is its iterator state.
"""

import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import flax.traverse_util
import jax
import ml_collections
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils
from orbax.checkpoint import checkpoint_managers

from configs import checks
from encoder import errors, files, runs
from encoder.files import Path
from tasks import regimes


def create_manager(workdir: Path, config: ml_collections.ConfigDict) -> ocp.CheckpointManager:
  """Async manager keeping config.keep_checkpoints latest plus the best by config.best_metric."""
  policies: list[Any] = [checkpoint_managers.LatestN(n=config.keep_checkpoints)]
  if config.best_metric:
    policies.append(KeepBest(config.best_metric, config.best_mode))
  # best_fn also makes orbax write each save's metrics (without it KeepBest never sees any and keeps nothing).
  best = (dict(best_fn=lambda metrics: metrics[config.best_metric], best_mode=config.best_mode)
          if config.best_metric else {})
  options = ocp.CheckpointManagerOptions(
      preservation_policy=checkpoint_managers.AnyPreservationPolicy(policies), enable_async_checkpointing=True, **best)
  # The handler named here, not learnt from a first save: a manager that has not saved yet (a resumed run, the end of
  # a run reading its best step) otherwise answers None for a checkpoint's metadata, which `_restore` reads.
  return ocp.CheckpointManager(files.absolute(workdir / "checkpoints"), options=options,
                               item_handlers=ocp.StandardCheckpointHandler())


def save(manager: ocp.CheckpointManager, step: int, state: Any, metrics: dict[str, float] | None = None,
         trainable: Any = None) -> None:
  """Starts an async save of `state` at `step` (with eval metrics when there are some, for best-N). `trainable` (a
  tree of bools like the params; regimes whose base stays frozen, `tasks.regimes.PARTIAL`): the parameters that train
  alone are saved, the frozen base being the run's `init` (its fingerprint: `check_base`)."""
  if trainable is not None:
    state = state.replace(params=regimes.select(state.params, trainable))
  manager.save(step, args=ocp.args.StandardSave(state), metrics=metrics, force=True)


def _restore(manager: ocp.CheckpointManager, step: int, abstract_state: Any, base_params: Any) -> Any:
  """Checkpoint `step` onto `abstract_state`; with `base_params` (the run's initial parameters), a checkpoint that
  holds some parameters only (`save`'s `trainable`) has the rest taken from them."""
  if base_params is None:
    return manager.restore(step, args=ocp.args.StandardRestore(abstract_state))
  held = flax.traverse_util.flatten_dict(manager.item_metadata(step).tree["params"])
  target = abstract_state.replace(params=regimes.select(abstract_state.params, flax.traverse_util.unflatten_dict(
      {path: path in held for path in flax.traverse_util.flatten_dict(abstract_state.params)})))
  restored = manager.restore(step, args=ocp.args.StandardRestore(target))
  return restored.replace(params=regimes.merge(base_params, restored.params))


def restore_latest(manager: ocp.CheckpointManager, abstract_state: Any, workdir: Path,
                   base_params: Any = None) -> Any | None:
  """The newest checkpoint that restores onto `abstract_state` (shapes, dtypes, shardings), or None if there is none;
  `base_params`: the parameters a checkpoint of the trainable part alone lacks (`save`).

  An unreadable one is reported on stderr and moved to workdir/corrupt_checkpoints/ (kept, never deleted).
  """
  for step in sorted(manager.all_steps(), reverse=True):
    try:
      return _restore(manager, step, abstract_state, base_params)
    except Exception as err:  # noqa: BLE001  (Orbax raises many types for truncated/missing files: all unreadable)
      moved = workdir / "corrupt_checkpoints" / f"{step}-{int(time.time())}"
      print(f"warning: checkpoint {manager.directory / str(step)} is unreadable ({type(err).__name__}: "
            f"{str(err)[:300]}); moving it to {moved} and trying the previous one", file=sys.stderr, flush=True)
      multihost_utils.sync_global_devices(f"restore-failed-{step}")
      if jax.process_index() == 0:
        files.move(manager.directory / str(step), moved)
      multihost_utils.sync_global_devices(f"moved-{step}")
      manager.reload()
  return None


def _rank(metrics: dict[str, Any] | None, step: int, metric: str, mode: str) -> tuple[float, int] | None:
  """How good the checkpoint of `step` is by its saved `metric` ("max" or "min" mode), greater is better and a tie
  goes to the later step (as the training loop's "best" in results.json, launch/train.py); None without the metric."""
  if not metrics or metric not in metrics:
    return None
  return metrics[metric] if mode == "max" else -metrics[metric], step


@dataclasses.dataclass(frozen=True)
class KeepBest:
  """Orbax preservation policy keeping the one checkpoint `best_step` chooses (`_rank`, the one definition of the
  best checkpoint). Orbax's BestN keeps the latest of tied checkpoints while `best_step` and the training loop took the
  earliest: a run whose dev F1 tied at steps 4 and 8 wrote "best": {"step": 4} and "best_step": 8 in results.json."""
  metric: str
  mode: str

  def should_preserve(self, checkpoints: Sequence[Any], *, context: Any) -> list[bool]:
    ranks = [_rank(c.metrics, c.step, self.metric, self.mode) for c in checkpoints]
    best = max((r for r in ranks if r is not None), default=None)
    return [r is not None and r == best for r in ranks]


def best_step(manager: ocp.CheckpointManager, metric: str, mode: str) -> int | None:
  """The kept checkpoint with the best saved `metric` ("max" or "min" mode; ties: the later), None if none has it."""
  ranks = [r for r in (_rank(manager.metrics(step), step, metric, mode) for step in manager.all_steps()) if r]
  return max(ranks)[1] if ranks else None


def restore_step(manager: ocp.CheckpointManager, step: int, abstract_state: Any, base_params: Any = None) -> Any:
  """The checkpoint of `step` restored onto `abstract_state` (shapes, dtypes, shardings); `base_params`: the
  parameters a checkpoint of the trainable part alone lacks (`save`)."""
  return _restore(manager, step, abstract_state, base_params)


def saved_config(workdir: Path) -> dict | None:
  """The config.json of a workdir holding checkpoints (the run a start resumes), else None. Read once, at start-up
  (launch.train), and passed to what asks about the resumed run."""
  saved_path = workdir / "config.json"
  checkpoints = workdir / "checkpoints"
  has_checkpoints = checkpoints.is_dir() and any(p.name.isdigit() for p in checkpoints.iterdir())
  return files.read_json(saved_path) if has_checkpoints and saved_path.is_file() else None


def check_compatible(workdir: Path, config: ml_collections.ConfigDict, saved: dict | None) -> None:
  """Refuses a workdir holding checkpoints written under a different model config (listing the differences); `saved`:
  its config.json (`saved_config`), None for a new run."""
  if saved is None:
    return
  saved_path = workdir / "config.json"
  differences = checks.incompatible_fields(saved, checks.to_dict(config))
  if differences:
    raise errors.ConfigError(
        f"{workdir} holds checkpoints of a different model ({saved_path} differs: {'; '.join(differences)}); "
        "use a new --workdir, or the saved config to resume")


def write_config(workdir: Path, config: ml_collections.ConfigDict) -> None:
  """workdir/config.json: the full resolved config of this run (process 0 only)."""
  if jax.process_index() == 0:
    (workdir / "config.json").write_text(json.dumps(checks.to_dict(config), indent=2, sort_keys=True) + "\n")


BASE_FILE = runs.FILE  # In workdir: the `init` (and its weights' fingerprint) of a run whose checkpoints hold the
# trainable part alone; its readers (encoder.init_from.run_params) check it too.


def base_fingerprint(pretrained: dict | None, seed: int) -> str:
  """SHA-256 of the encoder a run reads from its `init`, or of the seed of a random init (encoder.runs.fingerprint):
  what a checkpoint of the trainable part alone needs unchanged."""
  return runs.fingerprint(pretrained, seed)


def check_base(workdir: Path, config: ml_collections.ConfigDict, fingerprint: str, saved: dict | None) -> None:
  """Refuses, in one line, to resume a run whose checkpoints hold the trainable part alone when its `init`'s weights
  changed since it started (its recorded fingerprint differs): the frozen rest would not be the one it trained on.
  `saved`: the workdir's config.json (`saved_config`), None for a new run (nothing to check)."""
  if saved is None:
    return
  error = runs.changed_base(workdir, config, fingerprint, reading=False)
  if error is not None:
    raise error


def write_base(workdir: Path, config: ml_collections.ConfigDict, fingerprint: str) -> None:
  """workdir/base_fingerprint.json: the `init` and the fingerprint of the weights the run started from (process 0)."""
  if jax.process_index() == 0 and not (workdir / BASE_FILE).is_file():
    (workdir / BASE_FILE).write_text(json.dumps({"init": config.init, "fingerprint": fingerprint}, indent=2) + "\n")

"""A run traces each of its programs once (issue 69), and its start reads the saved config.json once (issue 73, part 3).

launch.train traces the gradient program on the run's first batch for its outputs' shapes (the metric sums' zeros),
and the loop's own call and compile-ahead lower that trace; the train state's init is traced once for its shapes and
its sharded creation. jax runs a traced Python function only to trace it, so its calls count the traces. A start
that resumes a run reads workdir/config.json once, for every start-up choice and check that asks about that run
(launch.startup.attention_path, dot_paths, compile_cost and checkpointing.check_compatible: four reads before; and
check_base for LoRA, BitFit and adapters)."""

import collections
import functools
from collections.abc import Callable
from typing import Any

import pytest

from configs import demo, finetune
from encoder import files
from launch import checkpointing, compile_ahead, programs, steps, train, workload


def _counted(calls: collections.Counter, name: str, function: Callable, key: Callable = lambda *a, **k: ()
             ) -> Callable:
  @functools.wraps(function)  # jax reads the signature and the name (the program's) through it.
  def call(*args: Any, **kwargs: Any) -> Any:
    calls[(name, *key(*args, **kwargs))] += 1
    return function(*args, **kwargs)
  return call


# The `trained` fixture's `ud_sample` run (tests/launch/conftest.py), 8 steps: the session's compilation cache holds
# its programs once that run is made (the counting wrappers' names and lines are not in the cache's key).
@pytest.mark.slow
@pytest.mark.parametrize("ahead", [True, False])
def test_a_run_traces_each_program_once(tmp_path, monkeypatch, ahead):
  """The gradient program once per batch shape the run trains on (length buckets: one or more), the init and the
  update program once; with compile-ahead (the shapes compiled on a thread) and without (compiled by the loop)."""
  traces: collections.Counter = collections.Counter()
  trained: set = set()
  batch_key = lambda fns, state, batch, **_: compile_ahead.batch_key(batch)
  monkeypatch.setattr(steps, "grad_step", _counted(traces, "grad_step", steps.grad_step, key=batch_key))
  for name in ("init_state", "apply_step"):
    monkeypatch.setattr(steps, name, _counted(traces, name, getattr(steps, name)))
  train_step = programs.Programs.train_step
  monkeypatch.setattr(programs.Programs, "train_step",
                      lambda self, state, batch, acc: trained.add(compile_ahead.batch_key(batch))
                      or train_step(self, state, batch, acc))
  config = demo.pos_config(runlocal=True)
  config.compile_ahead = ahead
  train.train_and_evaluate(config, tmp_path)
  assert trained and traces == collections.Counter({("init_state",): 1, ("apply_step",): 1} |
                                       {("grad_step", *shape): 1 for shape in trained})


class _StoppedError(Exception):
  """Raised where the start-up's choices and checks are over: the workload's load."""


def _stop(*args: Any, **kwargs: Any) -> Any:
  raise _StoppedError


def test_a_resumed_start_reads_its_saved_config_once(tmp_path, monkeypatch):
  """A fine-tuning run (compile_cost asks too), resumed: a workdir with a checkpoint and the config.json the run
  wrote; stopped as the workload's load begins, so no data is read and nothing compiles."""
  config = finetune.get_config("task=sst2,runlocal")
  checkpointing.write_config(tmp_path, config)
  (tmp_path / "checkpoints" / "5").mkdir(parents=True)
  reads: collections.Counter = collections.Counter()
  read_json = files.read_json
  monkeypatch.setattr(files, "read_json", lambda path: reads.update([files.path(path).name]) or read_json(path))
  monkeypatch.setattr(workload.Finetuning, "load", _stop)
  with pytest.raises(_StoppedError):
    train.train_and_evaluate(config, tmp_path)
  assert reads["config.json"] == 1

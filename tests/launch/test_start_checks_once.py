"""A run's start-up checks and resolves each thing once (issue 73, part 3): the run's kind (launch.workload.kind_of)
keeps what its check resolved (the objectives, the corpus files, the dataset) and its load hands it to the loaders,
which trust it. Counted on the real start, `train.train_and_evaluate`, stopped as the workload's data load begins
(before the workdir is made), so no corpus is read and nothing compiles."""

import collections
from collections.abc import Callable
from typing import Any

import pytest

from configs import finetune, pretrain
from encoder import paths
from launch import train
from objectives import data as pretraining_data, registry
from tasks import finetune_data


class _StoppedError(Exception):
  """Raised where the start-up's checks and resolutions are over: the data load."""


def _counted(calls: collections.Counter, name: str, function: Callable, key: Callable = lambda *a, **k: ()
             ) -> Callable:
  def call(*args: Any, **kwargs: Any) -> Any:
    calls[(name, *key(*args, **kwargs))] += 1
    return function(*args, **kwargs)
  return call


def _stop(*args: Any, **kwargs: Any) -> Any:
  raise _StoppedError


def test_a_pretraining_start_checks_its_objectives_and_resolves_its_files_once(tmp_path, monkeypatch):
  calls: collections.Counter = collections.Counter()
  monkeypatch.setattr(paths, "resolve_files", _counted(calls, "resolve_files", paths.resolve_files,
                                                       key=lambda spec, what: (what,)))
  monkeypatch.setattr(pretraining_data, "check", _counted(calls, "check", pretraining_data.check))
  monkeypatch.setattr(registry, "of_run", _counted(calls, "of_run", registry.of_run))
  monkeypatch.setattr(pretraining_data, "load", _counted(calls, "load", pretraining_data.load,
                                                         key=lambda config, **kw: (kw["sources"] is not None,)))
  monkeypatch.setattr(pretraining_data, "rows_of", _stop)  # The first stage that reads the corpus.
  with pytest.raises(_StoppedError):
    train.train_and_evaluate(pretrain.get_config("runlocal,objectives=mlm+nsp"), tmp_path / "run")
  assert dict(calls) == {("check",): 1, ("of_run",): 1, ("resolve_files", "train_files"): 1,
                         ("resolve_files", "eval_files"): 1, ("load", True): 1}  # Given the sources check resolved.
  assert not (tmp_path / "run").exists()  # Stopped before anything is written.


def test_a_finetuning_start_resolves_its_dataset_once(tmp_path, monkeypatch):
  calls: collections.Counter = collections.Counter()
  monkeypatch.setattr(finetune_data, "dataset_of", _counted(calls, "dataset_of", finetune_data.dataset_of))
  monkeypatch.setattr(finetune_data, "read", _stop)  # The first stage that reads the data.
  with pytest.raises(_StoppedError):
    train.train_and_evaluate(finetune.get_config("task=sst2,runlocal"), tmp_path / "run")
  assert dict(calls) == {("dataset_of",): 1}
  assert not (tmp_path / "run").exists()

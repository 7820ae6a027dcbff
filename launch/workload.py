"""What the training loop trains on and what it asks of that: pretraining objectives over a text corpus, or one
fine-tuning task over its splits (a config with a `task` block).

Both give a `Workload` (a frozen dataclass, built by keyword): the objectives, an example batch, the step count and
batches from a start step, and the two things that differ between them, as functions: `update_scales`
(fine-tuning's regime and layer-wise decay; none for pretraining) and `evaluation`, which, once the loop has built
its programs, returns an `Evaluation`: the held-out metrics of a state, the evaluation's programs to compile ahead,
and the results a run adds to results.json (fine-tuning: dev and test scores of the best-dev checkpoint and its
prediction files). So `launch.train` runs one loop with no mode branches, as flax's examples/wmt and big_vision's
train.py do, the evaluation being what the workload (big_vision: its evaluators) says it is.

The kind of run is decided once, by `kind_of(config)`: a `Pretraining` or a `Finetuning`, each with the start-up's
three steps as methods (as big_vision's evaluators are small classes): `check()` (configs.checks's common checks, then
its own; it keeps what they resolved: the objectives and corpus files, or the task's dataset), `resolve(saved)` (the
start-up choices made concrete for config.json to record: the attention and dot paths, and fine-tuning's compile
cost; `saved`: the resumed run's config.json) and `load(workdir)` (the `Workload`, reusing what `check` resolved). So a
run's start-up checks and resolves each thing once, and `launch.train` has no kind branch.
"""

import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple, Protocol

import jax
import ml_collections
import numpy as np

from configs import checks
from configs.common import is_finetuning
from encoder import files
from encoder.files import Path
from launch import checkpointing, input_pipeline, metrics_writer, optimizer, sharding, startup, steps
from launch.compile_ahead import Jitted
from launch.programs import Programs, outputs_program, zero_sums
from objectives import data as pretraining_data, registry
from objectives.objective import Objective
from tasks import evaluation, finetune_data, regimes


class Evaluation(NamedTuple):
  """What the loop asks of a workload once its programs exist."""
  evaluate: Callable[[Any], dict[str, float]]  # State in the steps' layout -> {"eval/<metric>": value} ({}: none).
  # State in the steps' layout -> (jitted program, its first argument, () -> a batch of each shape) to compile ahead.
  programs: Callable[[Any], list[tuple[Jitted, Any, Callable[[], Iterable[dict[str, jax.Array]]]]]]
  final: Callable[[Any], dict[str, Any]]  # The final state (canonical) -> results.json's fields beyond the loop's.


@dataclasses.dataclass(frozen=True, kw_only=True)
class Workload:
  """What the training loop trains on and asks of it (the module's docstring)."""
  objectives: tuple[Objective, ...]
  weights: dict[str, float]  # Loss weight per objective name.
  vocab_size: int  # The tokenizer's (config.model.vocab_size 0 takes it).
  example: dict[str, np.ndarray]  # A batch of one row: init and tracing shapes.
  total_steps: int  # Optimizer steps of the run.
  steps_per_epoch: int  # Fine-tuning: batches per pass over the training split (0 for pretraining).
  tokens_per_example: int  # For the tokens/s and FLOPs estimates (padded length).
  train_batches: Callable[[int], Iterator[dict[str, np.ndarray]]]  # start step -> this process's batches.
  # start step -> a batch of each shape the run will need, in order of first use (for launch.compile_ahead).
  batch_shapes: Callable[[int], list[dict[str, np.ndarray]]]
  # The model (launch.model.EncoderWithHeads) -> per-parameter update factors like its parameters (the optimizer's
  # `scales`), or None when every parameter trains at the schedule's rate.
  update_scales: Callable[[Any], Any]
  # (step functions, programs, the abstract train state with its shardings: the restore target) -> the evaluation.
  evaluation: Callable[[steps.StepFns, Programs, Any], Evaluation]
  # What it reads (for tools and tests; the loop never looks).
  data: pretraining_data.PretrainingData | finetune_data.TaskData
  description: str  # For the start-up line.


objective_options = registry.options  # What an objective is built from in a run (tools and tests build heads so).


def pretraining(config: ml_collections.ConfigDict, workdir: Path, checked: checks.Resolved | None = None) -> Workload:
  """Pretraining (MLM, NSP, SBO, ELECTRA) on config.data's corpus; `checked`: what check_config resolved (None: the
  objectives built and the files checked and resolved here)."""
  data = pretraining_data.load(config, cache_dir=files.path(config.data.cache_dir or workdir / "cache"),
                               sources=checked.sources if checked else None)
  example = pretraining_data.example_batch(data.train, data.mask_options)
  return Workload(
      objectives=checked.objectives if checked else registry.of_run(config),
      weights=dict(config.objective_weights), vocab_size=data.tokenizer.vocab_size, example=example,
      total_steps=config.num_train_steps, steps_per_epoch=0, tokens_per_example=config.data.max_length,
      train_batches=lambda start: input_pipeline.train_batches(
          data.train, data.mask_options, global_batch=config.batch_size, seed=config.seed, start_step=start,
          prefetch=config.data.prefetch, workers=config.data.workers),
      batch_shapes=lambda start: [], update_scales=lambda model: None,
      evaluation=functools.partial(_held_out_metrics, config, data, example), data=data,
      description=f"objectives {config.objectives}, init {config.init or 'random'}")


def _held_out_metrics(config: ml_collections.ConfigDict, data: pretraining_data.PretrainingData,
                      example: dict[str, np.ndarray], fns: steps.StepFns, programs: Programs, target: Any
                      ) -> Evaluation:
  """Pretraining's evaluation: the objectives' metrics over the first config.eval_steps whole batches of the
  held-out split (fixed masks), with the steps' own eval program."""
  zero = zero_sums(functools.partial(steps.eval_step, fns), target.params, example)

  def evaluate(device_state) -> dict[str, float]:
    if data.eval is None:
      return {}
    count, batches = input_pipeline.eval_batches(data.eval, data.mask_options,
                                                 global_batch=config.batch_size // config.grad_accum_steps,
                                                 seed=config.seed, max_batches=config.eval_steps)
    acc = programs.place(zero)
    for local in batches:
      acc = programs.eval_step(optimizer.evaluation_params(device_state), programs.to_device(local, accum=1), acc)
    return metrics_writer.summarize(programs.fetch(acc), "eval", fns.weights) if count else {}
  return Evaluation(evaluate, lambda device_state: [], lambda final_state: {})


def finetuning(config: ml_collections.ConfigDict, workdir: Path, checked: checks.Resolved | None = None) -> Workload:
  """config.task on its dataset: config.epochs passes (or config.num_train_steps when positive); `checked`: what
  check_config resolved (None: the dataset resolved here)."""
  data = finetune_data.load(config, checked.dataset if checked else None)
  objective = data.family.objective()
  per_epoch = data.schedule.steps_per_epoch
  mean_length = float(np.mean([np.size(e["input_ids"]) for e in data.train.examples]))  # Every row's tokens.
  example = finetune_data.example_batch(data)

  def update_scales(model) -> Any:  # The regime and layer-wise LR decay as static per-parameter update factors.
    abstract_params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), example, train=False))["params"]
    return regimes.update_scales(abstract_params, num_layers=model.cfg.num_layers, regime=config.regime,
                                 top_k=config.top_k, layer_decay=config.layer_decay)
  return Workload(
      objectives=(objective,), weights={objective.name: 1.0}, vocab_size=data.tokenizer.vocab_size, example=example,
      total_steps=data.schedule.total_steps, steps_per_epoch=per_epoch, tokens_per_example=round(mean_length),
      train_batches=lambda start: finetune_data.train_batches(data, start_step=start, prefetch=config.data.prefetch),
      batch_shapes=lambda start: finetune_data.first_batch_of_each_shape(data, start_step=start),
      update_scales=update_scales, evaluation=functools.partial(_task_scores, config, workdir, data), data=data,
      description=f"task {config.task.name} on {config.task.dataset or config.task.files} "
                  f"({len(data.train.examples)} train examples, {per_epoch} steps/epoch), "
                  f"init {config.init or 'random'}, regime {config.regime}")


def _task_scores(config: ml_collections.ConfigDict, workdir: Path, data: finetune_data.TaskData, fns: steps.StepFns,
                 programs: Programs, target: Any) -> Evaluation:
  """Fine-tuning's evaluation: the task's scores on the whole dev split (tasks.evaluation, jit over the mesh with the
  canonical parameters), its programs for each shape of the dev and test batches, and at the end the dev and test
  scores and prediction files of the best-dev checkpoint."""
  predict = outputs_program(fns.model, data.family, programs.mesh, programs.state_shardings.params)
  to_device = functools.partial(sharding.global_batch, mesh=programs.mesh, accum=1, parallelism="jit")
  batch_size = config.batch_size // config.grad_accum_steps
  evaluate_dev, final_evaluation = evaluation.make_evaluator(data, predict, batch_size=batch_size, to_device=to_device)

  def evaluate(device_state) -> dict[str, float]:
    return evaluate_dev(optimizer.evaluation_params(programs.canonical(device_state)))

  def ahead(device_state) -> list:
    firsts = lambda: map(to_device, finetune_data.first_eval_batch_of_each_shape(
        (data.eval, data.test), batch_size=batch_size, buckets=data.buckets, widths=data.widths))
    return [(predict, optimizer.evaluation_params(device_state), firsts)]

  def final(final_state) -> dict[str, Any]:
    return _best_dev_results(config, workdir, target, final_state, final_evaluation) | {
        # What launch.predict needs to encode new inputs as this run did, without reading its training data again.
        "labels": list(data.task["labels"]), "buckets": list(data.buckets)}
  return Evaluation(evaluate, ahead, final)


def _best_dev_results(config: ml_collections.ConfigDict, workdir: Path, target: Any, final_state: Any,
                      final_evaluation: Callable) -> dict[str, Any]:
  """Dev and test scores (percent; a mean squared error as it is) and prediction files with the best-dev checkpoint
  (chosen on dev, never test)."""
  manager = checkpointing.create_manager(workdir, config)
  best_step = checkpointing.best_step(manager, config.best_metric, config.best_mode)
  params = optimizer.evaluation_params(final_state)
  if best_step is not None and best_step != int(jax.device_get(final_state.step)):
    base = final_state.params if config.get("regime") in regimes.PARTIAL else None  # Its frozen rest: the run's.
    params = optimizer.evaluation_params(checkpointing.restore_step(manager, best_step, target, base))
  manager.close()
  scores = final_evaluation(params, workdir, write_files=jax.process_index() == 0)
  percent = lambda split: {k: v if k == "mse" else 100 * v for k, v in scores.get(split, {}).items()}
  out = {"best_step": best_step if best_step is not None else int(jax.device_get(final_state.step)),
         "metric": config.task.metric, "dev": percent("dev"), "test": percent("test")}
  if "threshold" in scores:
    out["threshold"] = scores["threshold"]
  out["evaluation_examples_per_second"] = scores["examples_per_second"]  # Forward passes + decoding, per split.
  return out


class Kind(Protocol):
  """A kind of run (`Pretraining` or `Finetuning`): its start-up, in order."""
  config: ml_collections.ConfigDict

  def check(self) -> None:
    """Raises ConfigError for what is wrong with the config (configs.checks); keeps what it resolved."""

  def resolve(self, saved: dict | None) -> None:
    """Sets the start-up choices in the config (`saved`: the resumed run's config.json; None: a new run)."""

  def load(self, workdir: Path) -> Workload:
    """The run's workload, reusing what `check` resolved."""


@dataclasses.dataclass
class Pretraining:
  """Pretraining on config.data's corpus (Kind)."""
  config: ml_collections.ConfigDict
  checked: checks.Resolved | None = dataclasses.field(default=None, init=False)  # `check`'s objectives and files.

  def check(self) -> None:
    self.checked = checks.check_pretraining(self.config, checks.check_common(self.config, finetuning=False))

  def resolve(self, saved: dict | None) -> None:
    startup.resolve_model(self.config, saved)

  def load(self, workdir: Path) -> Workload:
    return pretraining(self.config, workdir, self.checked)


@dataclasses.dataclass
class Finetuning:
  """config.task on its dataset (Kind)."""
  config: ml_collections.ConfigDict
  checked: checks.Resolved | None = dataclasses.field(default=None, init=False)  # `check`'s dataset.

  def check(self) -> None:
    self.checked = checks.check_finetuning(self.config, checks.check_common(self.config, finetuning=True))

  def resolve(self, saved: dict | None) -> None:
    startup.resolve_model(self.config, saved)
    self.config.data.compile_cost = startup.compile_cost(self.config, saved)  # The length buckets' pruning.

  def load(self, workdir: Path) -> Workload:
    return finetuning(self.config, workdir, self.checked)


def kind_of(config: ml_collections.ConfigDict) -> Kind:
  """The kind of run `config` asks for (a `task` block: fine-tuning), decided once for the whole start-up."""
  return Finetuning(config) if is_finetuning(config) else Pretraining(config)


def build(config: ml_collections.ConfigDict, workdir: Path) -> Workload:
  """The workload of a config already checked and resolved (a finished run's config.json), for tools and tests: its
  kind's `load` without `check`, the loaders resolving what they read themselves."""
  return kind_of(config).load(workdir)

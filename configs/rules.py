"""What each field of an experiment config accepts (encoder.fields rules), by dotted key: checked by
`configs.checks.check_config` before a run reads data or writes anything, shown in docs/config.md's "accepts" column,
and broken on purpose, field by field, by the config fuzz test (tests/configs/test_fuzz.py).

The encoder's fields (`model.*`) are EncoderConfig's own rules (encoder/config.py); an objective with a config block
of its own (ELECTRA's `electra.*`) declares its fields beside its builder (`CONFIG_FIELDS` in its module); the task
block's fields (`task.*`) are declared with their rules by the task families (tasks/task_fields.py). Relations
between fields (max_length within max_positions, heads dividing the width, ...) are `configs.checks`'s.
"""

from encoder import config as encoder_config, fields
from encoder.fields import (
    NON_NEGATIVE,
    NON_NEGATIVE_INT,
    POSITIVE,
    POSITIVE_INT,
    PROBABILITY,
    Anything,
    Check,
    Choice,
    Number,
)
from objectives import masking as masking_lib, pipeline, registry as objective_registry
from tasks import regimes
from tasks.task_fields import BOOL

OPTIMIZERS = ("adamw", "lamb")
EVERY = Number(1, integer=True, also=(-1,))  # A period in steps, or -1 (fine-tuning: every epoch / evaluation).


def _objectives_problem(value: str) -> str | None:
  known = tuple(objective_registry.OBJECTIVES)
  unknown = [name for name in value.split("+") if name not in known]
  return f"'+'-joined objective names of {', '.join(known)}, got unknown {unknown}" if unknown else None


def _init_problem(value: str) -> str | None:
  ok = value == "" or (value.partition(":")[0] in ("hf", "run", "peft") and value.partition(":")[2])
  return None if ok else "'hf:<name or directory>', 'run:<workdir>' or '' (random init), or 'peft:<directory>'"


def _comma_paths(value: str) -> str | None:
  return "comma-separated file paths" if any(not part.strip() for part in value.split(",")) else None


def _buckets_problem(value) -> str | None:
  ok = len(value) > 0 and all(isinstance(b, int) and b > 0 for b in value) and list(value) == sorted(set(value))
  return None if ok else "increasing positive token lengths such as (16, 32, 64)"


def _best_metric_problem(value: str) -> str | None:
  return None if value == "" or value.startswith(("eval/", "train/")) else \
      "a metric name such as 'eval/loss' or 'eval/accuracy' (or '' for the latest checkpoint only)"


ENGINE: dict[str, fields.Rule] = {
    "seed": NON_NEGATIVE_INT, "batch_size": POSITIVE_INT, "grad_accum_steps": POSITIVE_INT,
    "parallelism": Choice(("jit", "pmap")), "mesh_model": POSITIVE_INT, "fsdp": BOOL,
    "log_every_steps": POSITIVE_INT, "eval_every_steps": Number(0, integer=True, also=(-1,)),
    "eval_steps": Number(1, integer=True, also=(-1,)), "checkpoint_every_steps": EVERY,
    "keep_checkpoints": POSITIVE_INT, "best_metric": Check(_best_metric_problem, "a metric name ('eval/...') or ''",
                                                           ("accuracy",)),
    "best_mode": Choice(("min", "max")), "measure_mfu": BOOL, "compile_ahead": BOOL,
    "compilation_cache": Anything("a directory path (local or gs://), or '' for no persistent compilation cache"),
    "init": Check(_init_problem, "'hf:<name or directory>', 'run:<workdir>' or ''", ("bert-base", "hf:")),
}
OPTIMIZER: dict[str, fields.Rule] = {
    "optimizer.name": Choice(OPTIMIZERS), "optimizer.learning_rate": NON_NEGATIVE,
    "optimizer.warmup_steps": NON_NEGATIVE_INT, "optimizer.end_learning_rate": NON_NEGATIVE,
    "optimizer.weight_decay": NON_NEGATIVE, "optimizer.b1": PROBABILITY, "optimizer.b2": PROBABILITY,
    "optimizer.eps": POSITIVE, "optimizer.clip_norm": NON_NEGATIVE, "optimizer.ema_decay": PROBABILITY,
    "optimizer.warmup_fraction": PROBABILITY, "optimizer.decay_power": POSITIVE,
}
PRETRAINING: dict[str, fields.Rule] = {
    "objectives": Check(_objectives_problem, "'+'-joined objective names (objectives/registry.py)",
                        ("mlm+no_such_objective",)),
    "objective_weights": Anything("a weight >= 0 per objective, one per name in objectives (checked with them)"),
    "task": Check(lambda v: None if v == "" else "'' for pretraining (a task block is configs/finetune.py's)",
                  "'' (pretraining)", ("sst2",)),
    "num_train_steps": POSITIVE_INT, "eval_every_steps": NON_NEGATIVE_INT, "checkpoint_every_steps": NON_NEGATIVE_INT,
    "data.train_files": Check(_comma_paths, "comma-separated existing files (checked with the data directory)",
                              ("a.txt,,b.txt",)),
    "data.eval_files": Anything("comma-separated existing files, or '' for no evaluation (checked with the data "
                                "directory)"),
    "data.prepared": Anything("a directory of objectives.prepare, or '' (checked when opened)"),
    "data.tokenizer": Anything("a tokenizer path or packaged checkpoint name (checked when loaded)"),
    "data.max_length": Number(8, integer=True), "data.packing": Choice(lambda: tuple(pipeline.PACKINGS)),
    "data.cache_dir": Anything("any directory path ('' = workdir/cache)"), "data.prefetch": NON_NEGATIVE_INT,
    "data.workers": Number(0, integer=True, also=(-1,)),
    "masking.rate": Number(0.0, 1.0, low_open=True, high_open=True), "masking.max_predictions": POSITIVE_INT,
    "masking.mode": Choice(masking_lib.MODES), "masking.replacement": Choice(masking_lib.REPLACEMENTS),
    "masking.mask_prob": Number(0.0, 1.0), "masking.random_prob": Number(0.0, 1.0),
    **{f"{name}.{field.name}": field.rule for name, declared in objective_registry.config_fields().items()
       for field in declared},
}
FINETUNING: dict[str, fields.Rule] = {
    "objectives": Check(lambda v: None if v == "" else "'' (fine-tuning trains the task's head)", "''",
                        ("mlm",)),
    "objective_weights": Anything("unused by fine-tuning"),
    "num_train_steps": NON_NEGATIVE_INT, "epochs": NON_NEGATIVE_INT,
    "regime": Choice(regimes.REGIMES), "top_k": NON_NEGATIVE_INT, **regimes.field_rules(),
    "layer_decay": Number(0.0, 1.0, low_open=True),
    "data.tokenizer": Anything("a tokenizer path or packaged checkpoint name (checked when loaded)"),
    "data.buckets": Check(_buckets_problem, "increasing positive token lengths", ((32, 16), (0, 16))),
    "data.compile_cost": Number(0, also=(-1,)), "data.pack": BOOL,
    "data.cache_dir": Anything("any directory path ('' = the default cache)"),
    "data.prefetch": NON_NEGATIVE_INT,
}


def rules(finetuning: bool) -> dict[str, fields.Rule]:
  """Every field's rule for a fine-tuning or a pretraining config (the task block's: its families' declarations,
  tasks.registry.field_rules, read when called so a family registered later is checked too)."""
  model = {f"model.{key}": rule for key, rule in encoder_config.FIELD_RULES.items()}
  if not finetuning:
    return ENGINE | OPTIMIZER | model | PRETRAINING
  from tasks import registry  # pylint: disable=import-outside-toplevel  (the registry imports the heads)
  task = {f"task.{key}": rule for key, rule in registry.field_rules().items()}
  return ENGINE | OPTIMIZER | model | FINETUNING | task


"""Which pretraining objectives help? MLM, MLM+NSP, MLM+SBO, MLM+NSP+SBO and ELECTRA pretrained on WikiText-2 with the
same steps, batch and row length, each then fine-tuned on the checkpoint suite's tasks (configs/sweeps/suite.py:
SST-2, MRPC, SICK, SICK relatedness, CoNLL-2003, UD POS, SQuAD; a task without a preset is left out with a line on
stderr) with 2 seeds; SQuAD's windows are 128 subwords like the pretraining rows, and the small budget trains SQuAD
and SST-2 300 steps (TASK_FIELDS). `launch.experiments.suite_report ROOT --by-point --baseline objectives-mlm` gives
the table of points x tasks with the suite average and p-values against MLM.

  python -m launch.experiments.sweep --sweep configs/sweeps/objectives.py:budget=small --root runs/objectives  # 2 cores
  python -m launch.experiments.sweep --sweep configs/sweeps/objectives.py:budget=base --root runs/obj_base --print
  python -m launch.experiments.suite_report runs/objectives --by-point --baseline objectives-mlm

String arguments: budget: "small" (mini encoder L4/H256, 1,000 steps of batch 32; the 2-core CPU), "gpu" (mini,
6,000 steps of batch 128 in bf16, 12 input worker processes; a few minutes per point on one GPU), "base" (base
encoder L12/H768, 10,000 steps of batch 256; accelerators) or "tiny" (a 2x64 encoder, 20 steps, fine-tuning on
slices: checks the chain in a few minutes). NSP rows are sentence pairs (packing nsp_pairs), the others packed full
sentences; SBO brings SpanBERT's span masking, ELECTRA its generator (1/4 of the encoder's width) and replaced-token
detection, fine-tuned from the discriminator (configs/pretrain.py). Equal compute: an ELECTRA step also runs its
generator, so ELECTRA's point trains fewer steps, those whose FLOPs equal MLM's (`equal_flops_steps`: encoder.flops as
the engine counts them, heads left out; the small budget's 1,000 MLM steps are 764 ELECTRA steps); the MLM+NSP/SBO
points differ from MLM only by their heads and train the same steps. Fine-tuning trains every layer (regime full):
the presets' top_k=6 assumes MiniLM's 6 layers.
"""

from typing import Any

from configs import common, pretrain
from configs.sweeps import suite
from configs.sweeps.points import available_presets, seeds
from encoder import flops
from encoder.config import from_fields
from encoder.errors import ConfigError
from objectives import objective, registry

OBJECTIVES = ("mlm", "mlm+nsp", "mlm+sbo", "mlm+nsp+sbo", "electra")
TASKS = suite.TASKS  # Its squad: SpanBERT's headline task.
SEEDS = (0, 1)
# Pretraining: the config-file size and the engine fields shared by the objectives (the same steps and batch).
PRETRAIN: dict[str, tuple[str, dict[str, Any]]] = {
    "tiny": ("tiny", {"num_train_steps": 20, "batch_size": 8, "optimizer.learning_rate": 1e-3,
                      "optimizer.warmup_steps": 4, "log_every_steps": 5, "eval_every_steps": 10, "eval_steps": 2,
                      "checkpoint_every_steps": 10, "measure_mfu": False}),
    "small": ("mini", {"num_train_steps": 1000, "batch_size": 32, "optimizer.learning_rate": 5e-4,
                       "optimizer.warmup_steps": 100, "log_every_steps": 50, "eval_every_steps": 250,
                       "eval_steps": 20, "checkpoint_every_steps": 250, "measure_mfu": False}),
    "gpu": ("mini", {"num_train_steps": 6000, "batch_size": 128, "optimizer.learning_rate": 5e-4,
                     "optimizer.warmup_steps": 600, "log_every_steps": 200, "eval_every_steps": 1000,
                     "eval_steps": 20, "checkpoint_every_steps": 1000, "model.dtype": "bfloat16",
                     "data.workers": 12}),
    "base": ("base", {"num_train_steps": 10_000, "batch_size": 256, "optimizer.learning_rate": 1e-4,
                      "optimizer.warmup_steps": 1000, "log_every_steps": 100, "eval_every_steps": 1000,
                      "eval_steps": 20, "checkpoint_every_steps": 1000}),
}
TINY_DATA = {"data.train_files": "wikitext-2/raw/wiki.valid.raw", "data.eval_files": "wikitext-2/raw/wiki.test.raw",
             "data.max_length": 32, "masking.max_predictions": 4, "model.max_positions": 64}
# Fine-tuning fields per budget (the presets' learning rates and batch 32 otherwise).
FINETUNE = {
    "tiny": {"regime": "full", "epochs": 1, "batch_size": 16, "task.train_split": "train[:64]",
             "task.eval_split": "validation[:32]", "task.test_split": "test[:32]", "task.max_length": 32,
             "data.buckets": (16, 32)},
    "small": {"regime": "full", "epochs": 3},
    "gpu": {"regime": "full", "epochs": 3},
    "base": {"regime": "full"},
}
# SQuAD's windows: pretraining rows are 128 subwords at every budget, so positions past 128 would stay untrained;
# questions cut at 32 subwords, windows 64 apart.
SQUAD_WINDOWS = {"task.max_length": 128, "task.max_question_length": 32, "task.doc_stride": 64, "data.buckets": (128,)}
# Fields of one task's runs at one budget, over FINETUNE's. Small: SQuAD's 3 epochs would take ~45 min a run on 2
# cores and SST-2's are 6,300 steps, so both train 300 steps of batch 32 (the suite's small budget). Tiny: windows of
# 32 hold 17 context subwords; SST-2 has no labelled test split.
TASK_FIELDS: dict[str, dict[str, dict[str, Any]]] = {
    "tiny": {"squad": {"task.max_question_length": 12, "task.doc_stride": 8}, "sst2": {"task.test_split": ""}},
    "small": {"squad": {"num_train_steps": 300, **SQUAD_WINDOWS}, "sst2": {"num_train_steps": 300}},
    "gpu": {"squad": SQUAD_WINDOWS}, "base": {"squad": SQUAD_WINDOWS}}


def finetuning(budget: str, tasks: tuple[str, ...], sweep_file: str) -> dict:
  """The fine-tuning that follows each pretraining point of an ablation: every task with a preset (the others named
  on stderr) x SEEDS, with the budget's FINETUNE and TASK_FIELDS."""
  return {"config": "configs/finetune.py", "common": FINETUNE[budget],
          "points": seeds([{":task": t, **TASK_FIELDS.get(budget, {}).get(t, {})}
                           for t in available_presets(tasks, sweep_file)], SEEDS)}


def equal_flops_steps(size: str, fields: dict) -> int:
  """ELECTRA's steps whose FLOPs equal MLM's fields["num_train_steps"] (encoder.flops.step_flops, as the engine
  counts a step: ELECTRA's generator at every token; MLM's last block at [CLS] and the masked rows alone, which is all
  its head reads)."""
  config = pretrain.get_config(f"size={size},objectives=electra").unlock()
  config.update_from_flattened_dict(fields)
  cfg, length = from_fields(config.model.to_dict(), 30522), config.data.max_length
  mlm = flops.step_flops(cfg, 1, length, last_rows=1 + config.masking.max_predictions)
  electra = flops.step_flops(cfg, 1, length, extra=objective.extra_encoders(
      (registry.build("electra", config.electra.to_dict()),), cfg))
  return round(config.num_train_steps * mlm / electra)


def get_sweep(arg: str | None = None) -> dict:
  """5 pretraining points, each followed by 7 tasks x 2 seeds of fine-tuning (75 runs)."""
  budget = common.parse_arg(arg, budget="small").budget
  if budget not in PRETRAIN:
    raise ConfigError(f"configs/sweeps/objectives.py: budget={budget!r}; expected one of {', '.join(PRETRAIN)}")
  size, fields = PRETRAIN[budget]
  if budget == "tiny":  # configs/pretrain.py's runlocal model, spelled out (runlocal would fix the step count).
    size, fields = "tiny", fields | TINY_DATA | {"model.num_layers": 2, "model.hidden_size": 64,
                                                 "model.num_heads": 4, "model.intermediate_size": 256}
  electra = {"num_train_steps": equal_flops_steps(size, fields)}
  return {"config": f"configs/pretrain.py:size={size}", "common": fields,
          "points": [{":objectives": o, **(electra if o == "electra" else {})} for o in OBJECTIVES],
          "then": finetuning(budget, TASKS, "configs/sweeps/objectives.py")}

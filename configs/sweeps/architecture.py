"""Which architecture switches help? The plain BERT encoder against each switch of encoder.config.ARCHITECTURES
(pre-LN, rotary positions, GeGLU, SwiGLU, no biases, local/global attention) and ModernBERT's set, pretrained with MLM
on WikiText-2 for the same FLOPs, each then fine-tuned on the checkpoint suite's tasks with 2 seeds, as the
objectives ablation's points are (configs/sweeps/objectives.py: its TASKS, FINETUNE and TASK_FIELDS).

  python -m launch.experiments.sweep --sweep configs/sweeps/architecture.py:budget=small --root runs/arch  # 2 cores
  python -m launch.experiments.sweep --sweep configs/sweeps/architecture.py:budget=base --root runs/arch --print
  python -m launch.experiments.suite_report runs/arch --by-point --baseline arch-bert   # points x tasks, p-values

Equal compute: every point runs the same steps, batch and rows. The switches cost the same FLOPs per token as the
plain encoder except a gated feed-forward (GeGLU, SwiGLU, ModernBERT's), whose three matrices of intermediate width I
cost 3·H·I against BERT's 2·H·I: its points narrow I to 2/3 of the size's (rounded to a multiple of 8), so each
block's matmul FLOPs equal BERT's (encoder.flops counts 3·H·I). Local attention layers compute every score and mask
the far ones, so they save no FLOPs here. ModernBERT's set has no segment embeddings, so every point trains MLM alone
(rows of full sentences). String argument: budget, as configs/sweeps/objectives.py ("tiny", "small", "gpu", "base").
"""

from configs import common
from configs.sweeps.objectives import PRETRAIN, TASKS, TINY_DATA, finetuning
from encoder.config import PRESETS
from encoder.errors import ConfigError

ARCHES = ("bert", "pre_ln", "rope", "geglu", "swiglu", "no_bias", "local_global", "modernbert")
GATED = ("geglu", "swiglu", "modernbert")  # Narrowed to equal FLOPs (module docstring).


def equal_flops_width(intermediate_size: int) -> int:
  """The gated feed-forward width whose 3·H·I matmul FLOPs equal a dense one's 2·H·I, to a multiple of 8."""
  return 8 * round(2 * intermediate_size / 3 / 8)


def get_sweep(arg: str | None = None) -> dict:
  """8 pretraining points, each followed by 7 tasks x 2 seeds of fine-tuning (120 runs)."""
  budget = common.parse_arg(arg, budget="small").budget
  if budget not in PRETRAIN:
    raise ConfigError(f"configs/sweeps/architecture.py: budget={budget!r}; expected one of {', '.join(PRETRAIN)}")
  size, fields = PRETRAIN[budget]
  intermediate = PRESETS[size]["intermediate_size"]
  if budget == "tiny":  # configs/pretrain.py's runlocal model, spelled out (runlocal would fix the step count).
    intermediate = 256
    fields = fields | TINY_DATA | {"model.num_layers": 2, "model.hidden_size": 64, "model.num_heads": 4,
                                   "model.intermediate_size": intermediate}
  narrow = {"model.intermediate_size": equal_flops_width(intermediate)}
  points = [{":arch": arch, **(narrow if arch in GATED else {})} for arch in ARCHES]
  return {"config": f"configs/pretrain.py:size={size},objectives=mlm", "common": fields, "points": points,
          "then": finetuning(budget, TASKS, "configs/sweeps/architecture.py")}

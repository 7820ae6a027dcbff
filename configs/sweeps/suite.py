"""The checkpoint suite: one `init` fine-tuned on every task preset (SST-2, MRPC, SICK, SICK relatedness, CoNLL-2003,
UD POS, SQuAD) with several seeds, each with its preset's recipe; `launch.experiments.suite_report` gives the median
over seeds per task, the suite average, and compares two checkpoints task by task with paired-bootstrap p-values.

  python -m launch.experiments.sweep --sweep configs/sweeps/suite.py:budget=small --root runs/suite_minilm
  python -m launch.experiments.sweep --sweep configs/sweeps/suite.py:init=run:runs/mini,budget=small \
      --root runs/suite_mini
  python -m launch.experiments.suite_report runs/suite_minilm runs/suite_mini --out runs/suite_report

String arguments: init (as configs/finetune.py's: "hf:<name or directory>" or "run:<workdir>"; default MiniLM);
budget: "small" (seeds 0-2, every task 300 optimizer steps of batch 32 whatever its size: a 2-core CPU) or "full"
(seeds 0-4, the presets' epochs: an accelerator). A preset not in configs/finetune.py's TASK_PRESETS (a fork's
task not added yet) is left out with one line on stderr naming it; the report lists it as not run.
"""

from configs import common
from configs.sweeps.points import available_presets, grid, seeds
from encoder.errors import ConfigError

TASKS = ("sst2", "mrpc", "sick", "sick_relatedness", "conll2003", "ud_pos", "squad")  # Preset names, in table order.
# budget -> (seeds, overrides of every run).
BUDGETS = {
    "small": ((0, 1, 2), {"num_train_steps": 300}),
    "full": ((0, 1, 2, 3, 4), {}),
}


def get_sweep(arg: str | None = None) -> dict:
  """Every available task x the budget's seeds, fine-tuned from `init` (points `task-<preset>_seed-<n>`)."""
  args = common.parse_arg(arg, init="hf:all-MiniLM-L6-v2", budget="small")
  if args.budget not in BUDGETS:
    raise ConfigError(f"configs/sweeps/suite.py: budget={args.budget!r}; expected one of {', '.join(BUDGETS)}")
  seed_values, fields = BUDGETS[args.budget]
  tasks = available_presets(TASKS, "configs/sweeps/suite.py")
  return {"config": f"configs/finetune.py:init={args.init}", "common": fields,
          "points": seeds(grid(**{":task": tasks}), seed_values)}


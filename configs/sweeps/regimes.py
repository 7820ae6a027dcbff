"""Full fine-tuning against the minimal adjustments (issue 72): one regime and learning rate per sweep root, on the
checkpoint suite's tasks and seeds (configs/sweeps/suite.py, its small budget: 300 steps of batch 32), so that
`launch.experiments.suite_report FULL_ROOT OTHER_ROOT` compares two regimes task by task with paired-bootstrap
p-values (docs/results.md, "Regimes on the checkpoint suite").

  python -m launch.experiments.sweep --sweep configs/sweeps/regimes.py:regime=lora,lr=5e-4,seeds=0 --root runs/lora-5e-4
  python -m launch.experiments.sweep --sweep configs/sweeps/regimes.py:regime=full --root runs/full
  python -m launch.experiments.suite_report runs/full runs/lora-5e-4 --out runs/full_vs_lora

String arguments: regime (tasks.regimes.REGIMES; default full), lr (the AdamW peak learning rate; 0 keeps each
preset's), tasks ('+'-separated preset names; default the suite's), seeds ('+'-separated; default 0+1+2), init and
budget (as configs/sweeps/suite.py's). Each regime's other fields keep their defaults (LoRA rank 8 on query and value,
adapters of 64 after attention and FFN, every layer: tasks.regimes).
"""

from configs import common
from configs.sweeps import suite
from configs.sweeps.points import available_presets, grid, seeds
from encoder.errors import ConfigError
from tasks import regimes


def get_sweep(arg: str | None = None) -> dict:
  """The chosen tasks x seeds under one regime and learning rate (points `task-<preset>_seed-<n>`)."""
  args = common.parse_arg(arg, regime="full", lr=0.0, tasks="+".join(suite.TASKS), seeds="0+1+2",
                          init="hf:all-MiniLM-L6-v2", budget="small")
  where = "configs/sweeps/regimes.py"
  if args.regime not in regimes.REGIMES:
    raise ConfigError(f"{where}: regime={args.regime!r}; expected one of {', '.join(regimes.REGIMES)}")
  if args.budget not in suite.BUDGETS:
    raise ConfigError(f"{where}: budget={args.budget!r}; expected one of {', '.join(suite.BUDGETS)}")
  unknown = [t for t in args.tasks.split("+") if t not in suite.TASKS]
  if unknown or args.lr < 0:
    raise ConfigError(f"{where}: " + (f"tasks={args.tasks!r} names {', '.join(unknown)}; expected some of "
                                      f"{'+'.join(suite.TASKS)}" if unknown else f"lr={args.lr}; expected >= 0"))
  try:
    seed_values = [int(s) for s in args.seeds.split("+")]
  except ValueError:
    raise ConfigError(f"{where}: seeds={args.seeds!r}; expected integers joined by '+', e.g. 0+1+2") from None
  fields = dict(suite.BUDGETS[args.budget][1], regime=args.regime)
  if args.lr:
    fields["optimizer.learning_rate"] = args.lr
  tasks = available_presets(args.tasks.split("+"), where)
  return {"config": f"configs/finetune.py:init={args.init}", "common": fields,
          "points": seeds(grid(**{":task": tasks}), seed_values)}

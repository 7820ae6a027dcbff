"""The `make demo` run: a small MLM pretrained for about 3 minutes (2 CPU cores) on the sample corpus shipped with the
package (objectives/sample_corpus: whole WikiText-2 articles, CC BY-SA 3.0), MiniLM's uncased WordPiece vocabulary.

  python -m launch.demo                                           # train (or resume), then show what it learned
  python -m launch.main --config configs/demo.py --workdir runs/demo   # the same training through the engine CLI

String arguments: steps (optimizer steps; the default takes about 3 minutes on 2 CPU cores).
"""

from pathlib import Path

import ml_collections

from configs import common, pretrain

SAMPLE_DIR = Path(__file__).resolve().parents[1] / "objectives" / "sample_corpus"
SAMPLE_FILES = {"train": "wiki.train.txt", "heldout": "wiki.heldout.txt"}
DEMO_STEPS = 400  # About 3 minutes on 2 idle CPU cores (2.4 steps/s measured; see the README, "The main job").


def sample_file(split: str) -> Path:
  """The packaged sample corpus file of `split` ("train" or "heldout"); a clear error when the install lacks it."""
  if split not in SAMPLE_FILES:
    raise ValueError(f"unknown sample split {split!r}; choose one of {sorted(SAMPLE_FILES)}")
  path = SAMPLE_DIR / SAMPLE_FILES[split]
  if not path.is_file():
    raise FileNotFoundError(f"{path} is missing: the sample corpus ships with the package (the package "
                            "objectives.sample_corpus); reinstall with `pip install -e .`")
  return path


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """configs/pretrain.py's MLM config, shrunk to a model and schedule that learn something in 3 CPU minutes."""
  arg = common.parse_arg(arg, steps=DEMO_STEPS)
  config = pretrain.get_config(f"size=tiny,objectives=mlm,steps={arg.steps}")
  with config.unlocked():
    config.model = common.model_config("tiny", num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512,
                                       max_positions=64)
  config.data.train_files = str(sample_file("train"))
  config.data.eval_files = str(sample_file("heldout"))
  config.data.max_length = 64
  config.masking.max_predictions = 10
  config.batch_size = 64
  config.optimizer.learning_rate = 2e-3
  config.optimizer.warmup_steps = 100
  config.log_every_steps = 25
  config.eval_every_steps = 200
  config.eval_steps = -1  # The whole held-out split.
  config.checkpoint_every_steps = 200
  config.keep_checkpoints = 1
  config.measure_mfu = False
  return config

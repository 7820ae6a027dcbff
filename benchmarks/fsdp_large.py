"""A 560M-parameter encoder (the xlmr-large preset) built, sharded and trained on 8 CPU devices with FSDP, through
the engine itself (`launch.main` in a subprocess; MLM on WikiText-2 valid, rows of 128 tokens): the state each device
holds against the whole state, and the losses.

  python -m benchmarks.fsdp_large [--remat full] [--steps 2]   # last line: one JSON object

Needs about 19 GB of host memory (18.8 GB peak measured for one step): the 8 devices are one process, so the state
(parameters and two Adam moments, 6.3 GB), the gradients (2.1 GB) and the weights XLA gathers and keeps for the
backward all share the host's RAM; a second step needed more than the 23 GB VM had free.
"""

import json
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from benchmarks import determinism
from encoder import cli, errors
from encoder.config import PRESETS, REMAT_POLICIES, preset
from encoder.model import Encoder
from launch import sharding

DEVICES = 8


def main() -> None:
  parser = cli.ArgumentParser(prog="python -m benchmarks.fsdp_large", description=__doc__.splitlines()[0])
  parser.add_argument("--size", default="xlmr-large", choices=sorted(PRESETS), help="an encoder.config.PRESETS name")
  parser.add_argument("--remat", default="none", choices=REMAT_POLICIES, help="config.model.remat")
  parser.add_argument("--steps", type=cli.integer(1), default=1)
  parser.add_argument("--batch", type=cli.integer(DEVICES), default=8,
                      help="global batch (rows of 128 tokens; a multiple of the 8 devices)")
  args = parser.parse_args()
  if args.batch % DEVICES:
    parser.error(f"argument --batch: expected a multiple of the {DEVICES} devices, got {args.batch}")
  # The preset's vocabulary (XLM-R: 250,002 pieces; the WordPiece tokenizer used here fills the first 30,522) padded
  # for the 8 data devices, so that FSDP splits the embedding table by row (see the engine's warning otherwise).
  cfg = preset(args.size, vocab_size=sharding.padded_vocab_size(preset(args.size).vocab_size, DEVICES))
  shapes = jax.eval_shape(lambda: Encoder(cfg).init(jax.random.PRNGKey(0), jnp.ones((1, 4), jnp.int32)))
  parameters = sum(leaf.size for leaf in jax.tree.leaves(shapes))
  overrides = [f"--config.model.vocab_size={cfg.vocab_size}", f"--config.model.remat={args.remat}",
               "--config.fsdp=true", f"--config.num_train_steps={args.steps}", f"--config.batch_size={args.batch}",
               "--config.data.train_files=wikitext-2/raw/wiki.valid.raw", "--config.data.eval_files=",
               "--config.checkpoint_every_steps=0", "--config.best_metric="]
  with tempfile.TemporaryDirectory(prefix="fsdp-large-") as tmp:
    workdir = Path(tmp) / "run"
    start = time.perf_counter()
    result = determinism.run(workdir, overrides, devices=DEVICES, cache=Path(tmp) / "cache",
                             config=f"configs/pretrain.py:size={args.size}")
    wall = time.perf_counter() - start
    print(next(line for line in result.stdout.splitlines() if line.startswith("starting")))
    print(json.dumps({"size": args.size, "vocab_size": cfg.vocab_size, "parameters": parameters, "devices": DEVICES,
                      "remat": args.remat,
                      "state_mib_per_device": determinism.state_mib_per_device(result),
                      "whole_state_mib": round(3 * 4 * parameters / 2**20),  # float32 parameters + 2 Adam moments.
                      "losses": determinism.losses(workdir).tolist(), "wall_s": round(wall, 1)}))


if __name__ == "__main__":
  errors.run(main)

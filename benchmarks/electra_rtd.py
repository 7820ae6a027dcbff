"""How well an ELECTRA run's discriminator separates replaced from original tokens: the ROC AUC of its logits on the
run's held-out batches (the generator's samples in the masked positions, as evaluation draws them), beside the share
of replaced tokens and the mean logit of each kind. Accuracy alone cannot tell a discriminator that predicts
"original" everywhere from one that ranks well; AUC can (0.5: chance).

  python -m benchmarks.electra_rtd WORKDIR [--batches 8] [--split train]    # last line: one JSON object

--split train scores the first rows of the training corpus instead (masked as evaluation masks): a discriminator far
better there than on held-out text has memorized its corpus.
"""

import json
from pathlib import Path
from typing import Any, cast

import jax
import ml_collections
import numpy as np
import scipy.stats

from encoder import cli, errors, init_from
from launch import input_pipeline, workload
from launch.model import EncoderWithHeads, encoder_config
from objectives import data as pretraining_data, electra, registry


def auc(scores: np.ndarray, positive: np.ndarray) -> float:
  """ROC AUC of `scores` for the `positive` (bool) items: the chance that a positive outscores a negative, ties
  counting half (Mann-Whitney U over the counts)."""
  ranks = scipy.stats.rankdata(scores)
  n_positive = int(positive.sum())
  return float((ranks[positive].sum() - n_positive * (n_positive + 1) / 2) / (n_positive * (len(scores) - n_positive)))


def discriminator_scores(workdir: Path, batches: int, split: str = "eval") -> tuple[np.ndarray, np.ndarray]:
  """(logits, replaced) over the real tokens of the first `batches` batches of the run in `workdir`: of its held-out
  corpus (split "eval") or its training corpus ("train")."""
  config = ml_collections.ConfigDict(json.loads((workdir / "config.json").read_text()))
  _, params = init_from.run_params(workdir)
  data = pretraining_data.load(config, cache_dir=Path(config.data.cache_dir or workdir / "cache"))
  objectives = tuple(registry.build(name, workload.objective_options(config, name))
                     for name in config.objectives.split("+"))
  model = EncoderWithHeads(encoder_config(config.model, data.tokenizer.vocab_size), objectives)
  predict = jax.jit(lambda batch: cast(dict[str, Any], model.apply({"params": params}, batch, train=False))["electra"])
  rows = data.eval if split == "eval" else data.train
  if rows is None:
    raise errors.UserError(f"{workdir}: the run has no held-out corpus (config.data.eval_files is empty): score its "
                           "training corpus (--split train)")
  _, held_out = input_pipeline.eval_batches(rows, data.mask_options, global_batch=config.batch_size,
                                            seed=config.seed, max_batches=batches)
  logits, replaced = [], []
  for batch in held_out:
    out = predict(batch)
    tokens = np.asarray(batch["attention_segments"]) > 0
    logits.append(np.asarray(out["discriminator"])[tokens])
    original = electra.original_ids(batch)  # type: ignore[arg-type]  # a numpy batch: jnp takes it
    replaced.append(np.asarray(out["input_ids"] != original)[tokens])
  return np.concatenate(logits), np.concatenate(replaced)


def main() -> None:
  parser = cli.ArgumentParser(prog="python -m benchmarks.electra_rtd", description=__doc__.split("\n\n")[0])
  parser.add_argument("workdir", type=Path, help="an ELECTRA pretraining run's workdir")
  parser.add_argument("--batches", type=cli.integer(1), default=8, help="held-out batches to score (default 8)")
  parser.add_argument("--split", choices=("eval", "train"), default="eval", help="the corpus scored (default eval)")
  args = parser.parse_args()
  logits, replaced = discriminator_scores(args.workdir, args.batches, args.split)
  print(json.dumps({"split": args.split, "tokens": len(logits), "replaced_share": float(replaced.mean()),
                    "auc": auc(logits, replaced), "mean_logit_replaced": float(logits[replaced].mean()),
                    "mean_logit_original": float(logits[~replaced].mean())}))


if __name__ == "__main__":
  errors.run(main)

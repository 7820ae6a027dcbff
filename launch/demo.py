"""The README's main job (`make demo`), about 4 minutes on 2 CPU cores, on data shipped with the package:

1. pretrain a small MLM for a few hundred steps on the sample corpus and show what it learned: held-out MLM accuracy
   against the unigram baseline and the top-5 fillers of two masked sentences;
2. fine-tune the real all-MiniLM-L6-v2 checkpoint for part-of-speech tagging (UPOS) on a sample of UD English-EWT,
   print its accuracy on held-out EWT sentences, and tag a sentence (--sentence) with `launch.predict.Predictor`;
then say where the logs, checkpoints and predictions are.

  python -m launch.demo [--workdir runs/demo] [--fresh] [--steps N] [--sentence "Text to tag."]

Rerunning resumes the runs in --workdir (finished ones are only shown again); Ctrl-C saves a checkpoint and stops.
"""

import argparse
import shutil
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import jax
import ml_collections
import numpy as np

from configs import demo as demo_config, samples
from encoder import cli, errors, init_from
from encoder.tokenizer import load_tokenizer
from launch import compilation_cache, host_memory, input_pipeline, metrics_writer, predict, train, xla_flags
from launch.model import EncoderWithHeads, encoder_config
from objectives import data as pretraining_data, registry

FILL_SENTENCES = ("please turn your homework [MASK] .", "so long and thanks for all the [MASK] .")
MASK_TEXT = "[MASK]"
# Two words that are a verb and then a noun: "refuse" and "permit" (NLTK book, chapter 5).
SENTENCE = "They refuse to permit us to obtain the refuse permit."
RUNS = ("mlm", "pos")  # Subdirectories of --workdir, one per run.


def masked_batch(sentences: Sequence[str], tokenizer: Any) -> dict[str, np.ndarray]:
  """[CLS] sentence [SEP] rows, each with exactly one '[MASK]', as an MLM batch predicting at the mask."""
  rows, where = [], []
  for sentence in sentences:
    if sentence.count(MASK_TEXT) != 1:
      raise errors.UserError(f"sentence {sentence!r} must contain exactly one {MASK_TEXT}")
    left, right = (tokenizer.encode(part, add_special_tokens=False).input_ids if part.strip() else []
                   for part in sentence.split(MASK_TEXT))
    rows.append([tokenizer.cls_id, *left, tokenizer.mask_id, *right, tokenizer.sep_id])
    where.append(len(left) + 1)
  width = max(map(len, rows))
  ids = np.full((len(rows), width), tokenizer.pad_id, np.int32)
  for i, row in enumerate(rows):
    ids[i, :len(row)] = row
  real = (ids != tokenizer.pad_id).astype(np.int32)
  return {"input_ids": ids, "type_ids": np.zeros_like(ids), "positions": np.broadcast_to(np.arange(width), ids.shape),
          "attention_segments": real, "masked_positions": np.asarray(where, np.int32)[:, None]}


def fill_mask(config: ml_collections.ConfigDict, params: Any, tokenizer: Any, sentences: Sequence[str],
              k: int = 5) -> list[list[tuple[str, float]]]:
  """The k most probable tokens (softmax of the MLM head) at the [MASK] of each sentence, with probabilities."""
  model = EncoderWithHeads(encoder_config(config.model, tokenizer.vocab_size), (registry.build("mlm", config.model),))
  # Without mutable=, apply returns the module's output alone (not an (output, variables) pair).
  predictions = cast(dict[str, Any], model.apply({"params": params}, masked_batch(sentences, tokenizer)))
  logits = np.asarray(predictions["mlm"][:, 0], np.float64)
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  top = np.argsort(-probs, axis=-1)[:, :k]
  return [list(zip(tokenizer.ids_to_tokens(ids), probs[i, ids].tolist())) for i, ids in enumerate(top)]


def unigram_baseline(config: ml_collections.ConfigDict, cache_dir: Path) -> dict[str, float]:
  """Accuracy and loss on the engine's held-out rows and masks of a model that ignores the context: always the most
  frequent training token, probabilities = the training corpus's add-one smoothed token frequencies."""
  data = pretraining_data.load(config, cache_dir=cache_dir)
  if data.eval is None:
    raise errors.ConfigError("config.data.eval_files names no files: the unigram baseline is measured on the "
                             "held-out split; set it to the held-out corpus")
  unigram = np.bincount(data.train.corpus.tokens, minlength=data.tokenizer.vocab_size) + 1.0
  unigram[list(data.tokenizer.special_ids)] = 0.0  # Never a masked target.
  unigram /= unigram.sum()
  _, batches = input_pipeline.eval_batches(data.eval, data.mask_options, global_batch=config.batch_size,
                                           seed=config.seed, max_batches=config.eval_steps)
  correct = nll = count = 0.0
  for batch in batches:
    weights, targets = batch["masked_weights"], batch["masked_ids"]
    correct += float((weights * (targets == unigram.argmax())).sum())
    nll -= float((weights * np.log(np.maximum(unigram[targets], 1e-30))).sum())  # Padded slots: weight 0.
    count += float(weights.sum())
  token = data.tokenizer.ids_to_tokens([unigram.argmax()])[0]
  return {"accuracy": correct / count, "loss": nll / count, "token": token}


def last_eval(workdir: Path) -> dict[str, float]:
  """The newest evaluation record of the run's metrics.jsonl (also when this invocation trained nothing)."""
  records = [r for r in metrics_writer.read_jsonl(workdir / "metrics.jsonl") if "eval/mlm_accuracy" in r]
  return records[-1] if records else {}


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
  parser = cli.ArgumentParser(prog="python -m launch.demo", description=__doc__.split("\n\n")[0])
  parser.add_argument("--workdir", default="runs/demo", help="directory of the two runs (resumed when they exist)")
  parser.add_argument("--fresh", action="store_true", help="delete the previous runs in --workdir and start over")
  parser.add_argument("--steps", type=cli.integer(1), default=demo_config.DEMO_STEPS,
                      help="MLM optimizer steps to train for")
  parser.add_argument("--sentence", default=SENTENCE, help="a sentence for the POS tagger to tag")
  return parser.parse_args(argv)


def clear_runs(workdir: Path) -> None:
  """Removes the demo's previous runs; refuses a directory that does not look like one (never deletes user files)."""
  for run in (workdir / name for name in RUNS):
    if not run.exists():
      continue
    if not (run / "config.json").is_file():
      raise errors.UserError(f"--fresh: {run} exists but holds no config.json, so it is not a run directory; pick "
                                "another --workdir")
    shutil.rmtree(run)


def train_run(config: ml_collections.ConfigDict, workdir: Path) -> dict[str, Any] | None:
  """Trains (or resumes, or shows) one run; Ctrl-C saves a checkpoint and returns None, as does any early stop."""
  # Ctrl-C becomes the engine's SIGTERM: it saves the current step and returns, so a rerun resumes from there.
  previous = signal.signal(signal.SIGINT, lambda *_: signal.raise_signal(signal.SIGTERM))
  try:
    results = train.train_and_evaluate(config, workdir)
  finally:
    signal.signal(signal.SIGINT, previous)
  if results["stopped_early"]:
    print(f"stopped at step {results['step']}; run the demo again to resume")
    return None
  return results


def report_mlm(config: ml_collections.ConfigDict, workdir: Path) -> None:
  """Held-out MLM accuracy next to the unigram baseline, and the top-5 fillers of FILL_SENTENCES."""
  step, params = init_from.run_params(workdir)
  evaluation = last_eval(workdir)
  baseline = unigram_baseline(config, Path(config.data.cache_dir or workdir / "cache"))
  print(f"\nheld-out MLM ({samples.sample_file('heldout').name}, 15% of tokens masked, fixed seed) after step "
        f"{step}:\n  this model:        accuracy {evaluation['eval/mlm_accuracy']:6.1%}  loss "
        f"{evaluation['eval/mlm_loss']:.2f}\n  unigram baseline:  accuracy {baseline['accuracy']:6.1%}  loss "
        f"{baseline['loss']:.2f}  (always {baseline['token']!r}; training-corpus token frequencies)")
  tokenizer = load_tokenizer(config.data.tokenizer)
  print("top-5 fillers for [MASK]:")
  for sentence, fillers in zip(FILL_SENTENCES, fill_mask(config, jax.device_get(params), tokenizer, FILL_SENTENCES)):
    print(f"  {sentence}\n    " + "  ".join(f"{token} {p:.3f}" for token, p in fillers))
  print("Minutes of pretraining teach word frequencies and a little local context (punctuation, function words),\n"
        "not 'in' or 'fish': real pretraining runs for days on accelerators. Part 2 starts from a model that had them.")


def tagged(workdir: Path, sentence: str) -> list[tuple[str, str]]:
  """(word, UPOS tag) of each word of `sentence`, tagged by the fine-tuned run in `workdir` (launch.predict)."""
  output = predict.Predictor.from_workdir(workdir).predict([sentence])[0]
  return list(zip(output["words"], output["tags"]))


def report_pos(workdir: Path, results: dict[str, Any], sentence: str) -> None:
  """The run's held-out UPOS accuracy and `sentence` tagged by it."""
  words = sum(1 for line in (workdir / "predictions" / "dev.conll").read_text(encoding="utf-8").splitlines() if line)
  print(f"\nheld-out UPOS accuracy ({samples.ud_sample_file('heldout').name}: {words:,} words of EWT test, never "
        f"trained on): {results['dev']['accuracy']:.1f}%")
  print("tagged by the fine-tuned model (python -m launch.predict):\n  "
        + " ".join(f"{word}/{tag}" for word, tag in tagged(workdir, sentence)))


def main(argv: Sequence[str] | None = None) -> None:
  args = parse_args(sys.argv[1:] if argv is None else argv)
  host_memory.retain_freed_memory()
  xla_flags.apply_gpu_defaults()
  workdir = Path(args.workdir)
  if args.fresh:
    clear_runs(workdir)
  mlm, pos = demo_config.mlm_config(args.steps), demo_config.pos_config()
  compilation_cache.enable(mlm.compilation_cache)  # Both runs' (the engine's default), before the first compilation.
  m = mlm.model
  print(f"demo 1/2: pretraining a {m.num_layers}-layer, hidden-{m.hidden_size} BERT from scratch with masked language "
        f"modeling for {mlm.num_train_steps} steps\n  on {samples.sample_file('train')}\n  (whole WikiText-2 "
        f"articles, CC BY-SA 3.0; see its README.md), MiniLM's uncased WordPiece vocabulary.\n  workdir {workdir}: "
        "rerunning resumes, --fresh starts over, Ctrl-C saves a checkpoint and stops.", flush=True)
  if train_run(mlm, workdir / "mlm") is None:
    return
  report_mlm(mlm, workdir / "mlm")
  print(f"\ndemo 2/2: fine-tuning all-MiniLM-L6-v2 (6 layers, hidden 384, pretrained for days) for part-of-speech "
        f"tagging (UPOS),\n  {pos.epochs} epochs on {samples.ud_sample_file('train')}\n  (sentences of UD "
        "English-EWT, CC BY-SA 4.0; see its README.md).", flush=True)
  results = train_run(pos, workdir / "pos")
  if results is None:
    return
  report_pos(workdir / "pos", results, args.sentence)
  print(f"\nTensorBoard:  tensorboard --logdir {workdir}   (both runs: mlm/tensorboard, pos/tensorboard)\n"
        f"predictions:  {workdir / 'pos' / 'predictions' / 'dev.conll'} (word, gold, predicted), dev.jsonl\n"
        f"checkpoints:  {workdir / 'mlm' / 'checkpoints'}, {workdir / 'pos' / 'checkpoints'}; metrics.jsonl, "
        "results.json and config.json beside them\n"
        f"tag more:     echo \"Your sentence here.\" | python -m launch.predict --workdir {workdir / 'pos'} --input -")


if __name__ == "__main__":
  errors.run(main)

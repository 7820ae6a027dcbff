"""Corpus preparation at scale (objectives.prepare) vs HF `tokenizers` encode_batch, and reading from the shards.

Builds a corpus of about --words words from WikiText-2 train repeated (whole copies, the last one cut at a document
title, so documents are kept) as one file per copy in a temporary directory, then in one run:
  1. prepares it with --processes workers (default: all cores): words_per_s = words / wall seconds, where words is
     metadata.json's count (the words of the sentences after the reading rules);
  2. HF `tokenizers` (tokenizer.json of all-MiniLM-L6-v2, TOKENIZERS_PARALLELISM=true: all cores) encode_batch on the
     same files' lines, streamed in batches of 4,096 lines: hf_tokenizers_words_per_s = the same words / seconds;
  3. peak_rss_bytes: the peak over steps 1-2 of the summed RSS of this process and all its children (psutil, sampled
     every 20 ms);
  4. pretrain_read_ratio: pretraining tokens/s with rows read from the prepared shards over the same with the same
     rows held in memory (the EncodedCorpus the .npy cache holds, built from the shards: identical rows, as
     tests/objectives/test_prepare.py checks), same config (configs/pretrain.py, --size, default mini: rows of 128,
     batch 256): the engine's jitted training step fed by launch.input_pipeline.train_batches (shuffle, unigram
     masking, batching, prefetch threads), the next batch read while the step runs, as in launch.train;
     --train-rounds alternating rounds of --train-steps steps, medians;
  5. pipeline_read_ratio: the same over the input pipeline alone, without a step to hide behind (--rounds rounds of
     --batches batches): the strict form, what reading costs the host.

  python -m benchmarks.corpus_prepare [--words 100000000] [--processes N] [--shard-documents 256] [--size mini]
Last line: one JSON object (words, words_per_s, hf_tokenizers_words_per_s, peak_rss_bytes, pretrain_read_ratio,
pipeline_read_ratio, ...).
"""

import argparse
import contextlib
import functools
import json
import os
import re
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import psutil

from encoder import cli, errors, paths, pretrained
from encoder.config import PRESETS
from objectives import corpus as corpus_lib, prepare

TRAIN = "wikitext-2/raw/wiki.train.raw"


class PeakRss:
  """Samples the summed RSS of this process and its descendants on a thread; `peak` is the maximum seen."""

  def __init__(self, interval: float = 0.02):
    self.interval, self.peak, self._stop = interval, 0, threading.Event()
    self._thread = threading.Thread(target=self._run, daemon=True)

  def _run(self) -> None:
    me = psutil.Process()
    while not self._stop.is_set():
      total = 0
      for process in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):  # A worker that just exited.
          total += process.memory_info().rss
      self.peak = max(self.peak, total)
      self._stop.wait(self.interval)

  def __enter__(self) -> "PeakRss":
    self._thread.start()
    return self

  def __exit__(self, *exc) -> None:
    self._stop.set()
    self._thread.join()


def build_corpus(words: int, directory: Path) -> list[Path]:
  """Copies of WikiText-2 train (one file each) until `words` whitespace words, the last cut before a title line."""
  lines = paths.data_file(TRAIN).read_text(encoding="utf-8").splitlines(keepends=True)
  counts = np.cumsum([len(line.split()) for line in lines])
  titles = [i for i, line in enumerate(lines) if i > 0 and re.match(r" = [^=]", line)]  # Document titles.
  files: list[Path] = []
  left = words
  while left > 0:
    cut = len(lines)
    if counts[-1] > left:  # The first title after `left` words: the copy ends with whole documents.
      cut = next((t for t in titles if counts[t - 1] >= left), len(lines)) if titles else len(lines)
    path = directory / f"part-{len(files):05d}.txt"
    path.write_text("".join(lines[:cut]), encoding="utf-8")
    files.append(path)
    left -= int(counts[cut - 1])
  return files


def hf_encode_seconds(files: list[Path], batch_lines: int = 4096) -> float:
  """Seconds for HF tokenizers' encode_batch (all cores) over the files' lines, streamed in batches."""
  import tokenizers  # pylint: disable=import-outside-toplevel  (only the benchmark's reference)
  os.environ["TOKENIZERS_PARALLELISM"] = "true"
  hf = tokenizers.Tokenizer.from_file(str(pretrained.minilm_path() / "tokenizer.json"))
  start = time.perf_counter()
  for path in files:
    with path.open(encoding="utf-8") as f:
      while batch := [line for _, line in zip(range(batch_lines), f)]:
        hf.encode_batch(batch, add_special_tokens=False)
  return time.perf_counter() - start


def _timed_rounds(names: Sequence[str], rounds: int, run: Callable[[str, int], float]) -> dict[str, float]:
  """Median seconds of run(name, round) per name over `rounds` rounds, the order of the names alternating."""
  times: dict[str, list[float]] = {name: [] for name in names}
  for r in range(rounds):
    for name in names if r % 2 == 0 else names[::-1]:
      times[name].append(run(name, r))
  return {name: statistics.median(t) for name, t in times.items()}


def read_ratios(out: Path, size: str, rounds: int, batches: int, train_rounds: int,
                train_steps: int) -> dict[str, float]:
  """Pretraining tokens/s with the rows read from the shards and with the same rows in memory, alternating rounds:
  with the training step (`pretrain_read_ratio`) and of the input pipeline alone (`pipeline_read_ratio`)."""
  # pylint: disable=import-outside-toplevel  (JAX and grain only for this part)
  import jax

  from configs import pretrain
  from encoder.tokenizer import load_tokenizer
  from launch import input_pipeline, optimizer, steps
  from launch.model import EncoderWithHeads, encoder_config
  from objectives import data as pretraining_data, pipeline, prepared, registry
  config = pretrain.get_config(f"size={size}")
  tokenizer = load_tokenizer(config.data.tokenizer)
  view = prepared.open_prepared(out, tokenizer)
  chunks, row_offsets, _ = pipeline.full_sentence_layout(view, config.data.max_length)
  memory = corpus_lib.EncodedCorpus(view.tokens[:], view.word_starts[:], view.sentence_offsets, view.document_offsets)
  rows = {name: pipeline.PackedExamples(c, chunks, row_offsets, config.data.max_length, tokenizer.cls_id,
                                        tokenizer.sep_id, tokenizer.pad_id) for name, c in (("shards", view),
                                                                                             ("memory", memory))}
  m = config.masking
  options = pipeline.mask_options(tokenizer, max_predictions=m.max_predictions, rate=m.rate, mode=m.mode,
                                  replacement=m.replacement, mask_prob=m.mask_prob, random_prob=m.random_prob)
  options["unigram_probs"] = pipeline.corpus_unigram_probs(rows["shards"], tokenizer)
  batches_of = lambda name, seed, start: input_pipeline.train_batches(
      rows[name], options, global_batch=config.batch_size, seed=seed, start_step=start, prefetch=config.data.prefetch)

  def pipeline_round(name: str, r: int) -> float:
    iterator = batches_of(name, r, r * batches)
    next(iterator)  # Threads started, first batch ready.
    start = time.perf_counter()
    for _ in range(batches):
      next(iterator)
    return time.perf_counter() - start

  objectives = tuple(registry.build(n, config.model) for n in config.objectives.split("+"))
  fns = steps.StepFns(EncoderWithHeads(encoder_config(config.model, tokenizer.vocab_size), objectives), objectives,
                      dict(config.objective_weights),
                      optimizer.make_optimizer(config.optimizer, config.num_train_steps))
  example = pretraining_data.example_batch(rows["memory"], options)
  state = [jax.jit(functools.partial(steps.init_state, fns, seed=0))(example)]
  acc = [steps.zero_metrics(functools.partial(steps.train_step, fns, accum=1), state[0], example)]
  grad_step = jax.jit(functools.partial(steps.grad_step, fns, accum=1))
  apply_step = jax.jit(functools.partial(steps.apply_step, fns), donate_argnums=(0, 1))

  def train_round(name: str, r: int) -> float:
    """The engine's loop: the next batch is read while the dispatched step runs (as launch.train)."""
    iterator = batches_of(name, 100 + r, r * (train_steps + 1))
    start: float | None = None
    for step in range(train_steps + 1):  # The first step (compilation in round 0) is not timed.
      state[0], acc[0] = apply_step(state[0], acc[0], *grad_step(state[0], next(iterator)))
      if step == 0:
        jax.block_until_ready(state[0])
        start = time.perf_counter()
    jax.block_until_ready(state[0])
    if start is None:  # No step 0.
      raise errors.UserError(f"--train-steps {train_steps}: expected 0 or more")
    return time.perf_counter() - start

  result: dict[str, float] = {}
  for kind, rounds_, run, count in (("pipeline", rounds, pipeline_round, batches),
                                    ("pretrain", train_rounds, train_round, train_steps)):
    if rounds_ <= 0:
      continue
    seconds = _timed_rounds(list(rows), rounds_, run)
    rate = {name: count * config.batch_size * config.data.max_length / s for name, s in seconds.items()}
    result |= {f"{kind}_tokens_per_s_shards": rate["shards"], f"{kind}_tokens_per_s_memory": rate["memory"],
               f"{kind}_read_ratio": rate["shards"] / rate["memory"]}
  return result


def main() -> None:
  """Command line: module docstring."""
  parser = cli.ArgumentParser(prog="python -m benchmarks.corpus_prepare", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--words", type=cli.integer(1), default=100_000_000)
  parser.add_argument("--processes", type=cli.integer(1), default=os.cpu_count() or 1)
  parser.add_argument("--shard-documents", type=cli.integer(1), default=256)
  parser.add_argument("--rounds", type=cli.integer(1), default=8, help="alternating rounds of the input pipeline alone")
  parser.add_argument("--batches", type=cli.integer(1), default=8, help="batches timed per input-pipeline round")
  parser.add_argument("--size", default="mini", choices=sorted(PRESETS),
                      help="encoder.config preset of the training-step comparison")
  parser.add_argument("--train-rounds", type=cli.integer(1), default=8,
                      help="alternating rounds with the training step")
  parser.add_argument("--train-steps", type=cli.integer(1), default=4, help="steps timed per training round")
  args = parser.parse_args()
  with tempfile.TemporaryDirectory(prefix="corpus_prepare_") as tmp:
    files = build_corpus(args.words, Path(tmp))
    out = Path(tmp) / "prepared"
    with PeakRss() as rss:
      start = time.perf_counter()
      metadata = prepare.prepare([str(f) for f in files], "all-MiniLM-L6-v2", out, processes=args.processes,
                                 shard_documents=args.shard_documents)
      prepare_s = time.perf_counter() - start
      hf_s = hf_encode_seconds(files)
    result = {"words": metadata["words"], "words_per_s": metadata["words"] / prepare_s,
              "hf_tokenizers_words_per_s": metadata["words"] / hf_s, "peak_rss_bytes": rss.peak,
              "processes": args.processes, "prepare_s": prepare_s, "hf_tokenizers_s": hf_s,
              "documents": metadata["documents"], "tokens": metadata["tokens"], "shards": len(metadata["shards"]),
              "input_bytes": sum(f.stat().st_size for f in files)}
    result["ratio_to_hf"] = result["words_per_s"] / result["hf_tokenizers_words_per_s"]
    result.update(read_ratios(out, args.size, args.rounds, args.batches, args.train_rounds, args.train_steps))
  print(json.dumps(result))


if __name__ == "__main__":
  errors.run(main)

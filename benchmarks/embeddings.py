"""Contextual embeddings from the MiniLM checkpoint: encoding throughput against HF, anisotropy, WiC, WSD, a picture.

Throughput: the word vectors (mean of the subwords, every layer: [n_words, 7, 384]) of WikiText-2 validation, its
non-empty non-heading lines as whitespace-separated words, each cut after the last word whose subwords fit in 128
positions with [CLS] and [SEP] (the same words on both sides, so neither truncates). Ours: tasks.embeddings.extract
(length-sorted batches of 64 in a few jit shapes); HF (`--reference`): benchmarks.embeddings_reference, a plain user's
BertModel loop (file order, batches of 64 padded to their longest, float32, inference mode). Each side encodes the
corpus `--rounds` times, alternating (ours, HF, ours, HF, ...); the figure is each side's best run (ours' first run
compiles: `words_per_s_cold` counts it). Parity: the largest difference between the two sides' vectors.

Then, where the modules exist, each section on the same Embedder: anisotropy of WikiText-2 word vectors (whole
lines, last layer) raw and standardized (tasks.embeddings.anisotropy, standardize), WiC dev accuracy
(tasks.embeddings.wic), WSD ALL F1 and MFS (tasks.embeddings.wsd) and the sense picture of "die"
(tasks.embeddings.picture). With --reference, WiC and WSD score HF's vectors too, with the same methods and choices
(benchmarks.embeddings_reference.HFEmbedder, which pools by the mean: WSD's grid without first-subword pooling;
`hf_` keys): the reference figures of docs/wsd.md and docs/wic_anisotropy.md.

  python -m benchmarks.embeddings [--reference] [--limit N] [--rounds 2] [--skip throughput,wic,...]
Last line: one JSON object (anisotropy_raw, anisotropy_standardized, wic_dev_accuracy, wsd_all_f1, wsd_mfs_f1,
words_per_s, hf_words_per_s, picture, with --reference hf_wic_dev_accuracy, hf_wsd_all_f1, hf_wsd_mfs_f1, and the
details: ratio, padding, parity, cpu, matmul ceiling, ...).
"""

import argparse
import functools
import importlib.util
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import jax
import numpy as np

from benchmarks.encoder_speed import cpu_name
from encoder import cli, errors, paths, pretrained
from launch import flops
from tasks import batching
from tasks.embeddings.extract import Embedder, pack_rows

INIT = "hf:all-MiniLM-L6-v2"
SECTIONS = ("throughput", "anisotropy", "wic", "wsd", "picture")


def wikitext_sentences(tokenizer, limit: int | None = None, max_length: int = 128) -> list[list[str]]:
  """WikiText-2 validation's non-empty, non-heading lines as word lists, each cut to the words whose subwords fit in
  max_length positions with [CLS] and [SEP]."""
  lines = paths.data_file("wikitext-2/raw/wiki.valid.raw").read_text(encoding="utf-8").splitlines()
  sentences = [line.split() for line in lines if line.strip() and not line.strip().startswith("=")][:limit]
  out = []
  for words, encoding in zip(sentences, tokenizer.encode_batch(sentences, add_special_tokens=False)):
    fits = len(encoding.word_ids) <= max_length - 2
    out.append(words if fits else words[:encoding.word_ids[max_length - 2]])  # Up to the first word cut.
  return out


def padding_efficiency(lengths: Sequence[int], batch_size: int, embedder: Embedder | None = None) -> float:
  """Real tokens over computed tokens: HF's file-order batches padded to their longest (embedder None), or the
  embedder's (rows packed to max_length when it packs, sorted, each batch batch_size rows of a bucket's length)."""
  tokens = np.asarray(lengths)
  if embedder is None:
    computed = sum(len(b) * b.max() for b in np.split(tokens, range(batch_size, len(tokens), batch_size)))
    return float(tokens.sum() / computed)
  rows = pack_rows(tokens.tolist(), embedder.max_length if embedder.pack else 0)
  filled = np.sort([tokens[row].sum() for row in rows])
  computed = sum(batch_size * batching.bucket_length(int(filled[i:i + batch_size].max()), embedder.buckets)
                 for i in range(0, len(filled), batch_size))
  return float(tokens.sum() / computed)


def _consume(arrays) -> int:
  """The number of word vectors (each sentence's array, already on the host, dropped once counted)."""
  return sum(len(a) for a in arrays)


def throughput(embedder: Embedder, sentences: list[list[str]], reference: Path | None, rounds: int) -> dict:
  """Words/s of ours and (with `reference`, an HF checkpoint directory) HF's, alternating runs; the parity of their
  vectors on the first batch."""
  words = sum(len(s) for s in sentences)
  runs: dict[str, Callable[[], float]] = {
      "ours": lambda: _consume(a for _, a in embedder.iter_encode_words(sentences, layers="all", pooling="mean"))}
  result: dict = {}
  if reference:
    from benchmarks import embeddings_reference  # pylint: disable=import-outside-toplevel  (torch only when asked)
    model, hf_tokenizer = embeddings_reference.load(reference)
    runs["hf"] = lambda: _consume(embeddings_reference.iter_encode_words(model, hf_tokenizer, sentences))
    first = sentences[:64]
    ours = np.concatenate(embedder.encode_words(first, layers="all"))
    theirs = np.concatenate(list(embeddings_reference.iter_encode_words(model, hf_tokenizer, first)))
    result["parity_max_abs_diff"] = float(np.abs(ours - theirs).max())
  seconds: dict[str, list[float]] = {name: [] for name in runs}
  for round_index in range(rounds):
    for name, run in runs.items():
      start = time.perf_counter()
      count = run()
      seconds[name].append(time.perf_counter() - start)
      if count != words:
        raise SystemExit(f"{name} returned {count} word vectors for the {words} words")
      print(f"round {round_index + 1}/{rounds}: {name} {seconds[name][-1]:.1f} s, "
            f"{words / seconds[name][-1]:.0f} words/s", flush=True)
  lengths = [min(len(e.input_ids), embedder.max_length) for e in embedder.tokenizer.encode_batch(sentences)]
  result |= {
      "words_per_s": round(words / min(seconds["ours"]), 1),
      "words_per_s_cold": round(words / seconds["ours"][0], 1),
      "hf_words_per_s": round(words / min(seconds["hf"]), 1) if reference else None,
      "words": words, "sentences": len(sentences), "subwords": int(sum(lengths)) - 2 * len(sentences),
      "seconds": {name: [round(s, 2) for s in times] for name, times in seconds.items()},
      "real_token_fraction": round(padding_efficiency(lengths, embedder.batch_size, embedder), 3),
      "hf_real_token_fraction": round(padding_efficiency(lengths, 64), 3),
      "buckets": list(embedder.buckets), "batch_size": embedder.batch_size, "packed": embedder.pack,
  }
  if reference:
    result["ratio"] = round(result["words_per_s"] / result["hf_words_per_s"], 3)
  return result


def _have(module: str) -> bool:
  return importlib.util.find_spec(module) is not None


def anisotropy_section(embedder: Embedder) -> dict:
  """Anisotropy (expected cosine of random word-instance pairs, 95% bootstrap CI over lines) of the last layer's
  word vectors of WikiText-2 validation (whole lines, long ones in windows), raw and standardized with the mean/std
  fitted on the same vectors (python -m tasks.embeddings.anisotropy's reading and defaults)."""
  from tasks.embeddings import anisotropy, standardize  # pylint: disable=import-outside-toplevel
  lines = anisotropy.read_word_lines(paths.data_file("wikitext-2/raw/wiki.valid.raw"))
  vectors, line_of, _ = anisotropy.word_vectors(embedder, lines, "last")
  vectors = vectors[:, 0]
  raw = anisotropy.anisotropy(vectors, groups=line_of)
  standardized = anisotropy.anisotropy(standardize.Standardizer.fit(vectors).apply(vectors), groups=line_of)
  return {"anisotropy_raw": round(float(raw["mean"]), 4),
          "anisotropy_standardized": round(float(standardized["mean"]), 4),
          "anisotropy": {"raw": raw, "standardized": standardized, "layer": "last"}}


def wic_section(embedder: Embedder) -> dict:
  """WiC dev accuracy with the choices made on train (tasks.embeddings.wic.evaluate_wic)."""
  from tasks.embeddings import wic  # pylint: disable=import-outside-toplevel
  report = wic.evaluate_wic(embedder, paths.data_file("wic"), log=print)
  return {"wic_dev_accuracy": report["dev_accuracy"], "wic": {k: v for k, v in report.items() if k != "table"}}


def wsd_section(embedder: Embedder, cache_dir: Path, init: str, poolings: Sequence[str] | None = None) -> dict:
  """WSD ALL F1 of the method chosen on SemEval-2007 and of the most-frequent-sense baseline
  (tasks.embeddings.wsd.evaluate_wsd; SemCor's sense sums cached under cache_dir; every pooling unless given)."""
  from tasks.embeddings import wsd  # pylint: disable=import-outside-toplevel
  data_dir = paths.data_dir()
  if data_dir is None:
    raise FileNotFoundError(f"no data directory (WSD needs its semcor, wordnet and wsd_raganato2017): run "
                            f"`{paths.FETCH_HINT}`, or set ${paths.DATA_ENV}")
  report = wsd.evaluate_wsd(embedder, data_dir, cache_dir=cache_dir, cache_key=init, log=print,
                            poolings=poolings or wsd.POOLINGS)
  kept = ("chosen", "scores", "pos", "se07_f1", "mfs", "coverage", "chosen_coverage", "plain_1nn_last_f1")
  return {"wsd_all_f1": report["all_f1"], "wsd_mfs_f1": report["mfs_f1"], "wsd": {k: report[k] for k in kept}}


def reference_embedder(hf_dir: Path):
  """HF's word vectors behind the Embedder interface (benchmarks.embeddings_reference.HFEmbedder)."""
  from benchmarks import embeddings_reference  # pylint: disable=import-outside-toplevel  (torch only when asked)
  return embeddings_reference.HFEmbedder(hf_dir)


def prefixed(prefix: str, figures: dict) -> dict:
  """The same figures under prefixed names (the HF reference's beside ours)."""
  return {prefix + key: value for key, value in figures.items()}


def picture_section(embedder: Embedder) -> dict:
  """The sense picture of a word (tasks.embeddings.picture); its PNG's path."""
  from tasks.embeddings import picture  # pylint: disable=import-outside-toplevel
  report = picture.picture(embedder)
  return {"picture": report["path"], "picture_report": report}


def main() -> None:  # No launch.host_memory.retain_freed_memory(): one malloc arena slowed ours (CPU and GPU).
  parser = cli.ArgumentParser(prog="python -m benchmarks.embeddings", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--init", default=INIT, help='the checkpoint ("hf:<name or dir>"; "run:<workdir>" without '
                      "--reference)")
  parser.add_argument("--reference", action="store_true",
                      help="also HF BertModel (PyTorch) in this process: its speed, and its WiC and WSD scores")
  parser.add_argument("--limit", type=cli.integer(1), default=None, help="first N WikiText-2 lines only")
  parser.add_argument("--rounds", type=cli.integer(1), default=2, help="timed runs of each side (alternating)")
  parser.add_argument("--buckets", type=cli.integers(1), default="16,32,64,128", help="our padded lengths (jit shapes)")
  parser.add_argument("--no-pack", action="store_true", help="ours with one sentence per row (length buckets only)")
  parser.add_argument("--batch-size", type=cli.integer(1), default=64)
  parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="our compute dtype")
  parser.add_argument("--cache", type=Path, default=Path("runs/embeddings_benchmark"),
                      help="where WSD caches SemCor's sense sums")
  parser.add_argument("--skip", type=cli.Names(SECTIONS), default=(),
                      help=f"comma-separated sections to skip, of {','.join(SECTIONS)}")
  args = parser.parse_args()
  skip = set(args.skip)
  kind, _, where = args.init.partition(":")
  if args.reference and kind != "hf":
    parser.error(f"--reference needs an HF checkpoint (--init hf:...), got {args.init!r}")
  hf_dir = pretrained.resolve_checkpoint(where) if args.reference else None

  ceiling = flops.matmul_ceiling(repeats=3)
  print(f"cpu: {cpu_name()}, device: {jax.devices()[0].device_kind}, float32 matmul {ceiling / 1e9:.0f} GFLOP/s",
        flush=True)
  embedder = Embedder.from_init(args.init, batch_size=args.batch_size, dtype=args.dtype, pack=not args.no_pack,
                                buckets=args.buckets)
  sentences = wikitext_sentences(embedder.tokenizer, args.limit)
  result: dict = {"anisotropy_raw": None, "anisotropy_standardized": None, "wic_dev_accuracy": None,
                  "wsd_all_f1": None, "wsd_mfs_f1": None, "words_per_s": None, "hf_words_per_s": None,
                  "picture": None}
  if hf_dir:
    result |= {"hf_wic_dev_accuracy": None, "hf_wsd_all_f1": None, "hf_wsd_mfs_f1": None}

  @functools.cache
  def hf_embedder():
    assert hf_dir is not None  # Called only with --reference.
    return reference_embedder(hf_dir)

  sections: dict[str, tuple[str, Callable[[], dict]]] = {
      "throughput": ("", lambda: throughput(embedder, sentences, hf_dir, args.rounds)),
      "anisotropy": ("tasks.embeddings.anisotropy", lambda: anisotropy_section(embedder)),
      "wic": ("tasks.embeddings.wic", lambda: wic_section(embedder) | (
          prefixed("hf_", wic_section(hf_embedder())) if hf_dir else {})),
      "wsd": ("tasks.embeddings.wsd", lambda: wsd_section(embedder, args.cache, args.init) | (
          prefixed("hf_", wsd_section(hf_embedder(), args.cache, f"hf-reference-{args.init}", ("mean",)))
          if hf_dir else {})),  # HFEmbedder pools by the mean only: HF's choice is among the mean-pooled methods.
      "picture": ("tasks.embeddings.picture", lambda: picture_section(embedder)),
  }
  missing = []
  for name, (module, section) in sections.items():
    if name in skip:
      continue
    if module and not _have(module):
      missing.append(module)
      continue
    start = time.perf_counter()
    result |= section()
    print(f"{name}: {time.perf_counter() - start:.0f} s", flush=True)
  result |= {"cpu": cpu_name(), "device": jax.devices()[0].device_kind, "matmul_gflops": round(ceiling / 1e9, 1),
             "dtype": args.dtype, "missing_modules": missing, "init": args.init}
  print(json.dumps(result, default=float))


if __name__ == "__main__":
  errors.run(main)

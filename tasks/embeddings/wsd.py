"""1-nearest-neighbour word-sense disambiguation with contextual sense embeddings (spec, "Word Sense Disambiguation").

A sense embedding is the mean of the contextual vectors of the SemCor tokens tagged with that sense (eq. 11.6); a
test token takes the candidate sense (WordNet 3.0 senses of its lemma and POS) whose embedding has the highest
cosine with its vector (eq. 11.7), WordNet's sense 1 (the most frequent sense, MFS) where no candidate has one.
SemCor is encoded once with every layer returned, and the per-sense sums of every layer are kept ([senses, L + 1,
H] float32, cached as .npz), so each layer mix is a cheap reduction of the sums (the mix is linear).

Two extensions beat plain 1-NN: LMMS-style coverage (Loureiro & Jorge 2019) gives a sense SemCor never tags the mean
of its synset's seen senses, else of the nearest hypernyms that have some, else of its lexicographer file's (sense
vectors L2-normalised before averaging); and a sense-frequency prior, cos + lambda * log p(sense | lemma, POS) from
SemCor counts with +1 smoothing. Every choice (pooling, layers, extension, lambda) is made on SemEval-2007 only,
the framework's customary dev set, and reported on ALL (Raganato et al. 2017), scored as its Scorer.java.

The command:

  python -m tasks.embeddings.wsd --init hf:all-MiniLM-L6-v2 [--layers 4 last4_mean ...] [--pooling mean first]
                                 [--extension none lmms] [--lambdas 0 0.03 ...] [--out DIR] [--cache-dir runs/wsd_cache]
  python -m tasks.embeddings.wsd score --gold KEY --pred KEY

The first builds sense embeddings from SemCor (cached per init and pooling under --cache-dir), compares every
choice on SemEval-2007, predicts every dataset of Raganato et al. (2017) with the best one, writes the prediction
key files (`<dataset>.key.txt`, `ALL.key.txt`, `ALL.mfs.key.txt`), the table of choices (`choices.md`) and
`result.json` under --out, and prints P/R/F1 per dataset and per POS. `score` is the framework's Scorer.java (except
that an instance missing from gold is an error). Scores print as percentages; the last line is one JSON object.
"""

import argparse
import dataclasses
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import jax
import numpy as np

from encoder import cli, errors, paths
from encoder.array_files import load_npz
from tasks.embeddings.layers import parse_layers, select_layers
from tasks.readers import raganato, semcor, wordnet as wordnet_reader
from tasks.readers.lines import ReaderError

POOLINGS = ("mean", "first")
EXTENSIONS = ("none", "lmms")
LAMBDAS = (0.0, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2)
DEV = "semeval2007"  # Every choice is made here (SE07), then reported on ALL.
Log = Callable[[str], None] | None


@dataclasses.dataclass
class SenseSums:
  """Per-sense sums of contextual vectors over SemCor, every layer kept: sums[s] / counts[s] is eq. 11.6's v_s."""
  keys: list[str]  # Sense keys, sorted.
  counts: np.ndarray  # [senses] int64: tokens tagged with each sense (a multi-sense token counts for each).
  sums: np.ndarray  # [senses, num_layers + 1, hidden] float32.
  meta: dict  # What was encoded: cache key, pooling, sentences, tokens.

  def save(self, path: str | os.PathLike) -> None:
    """Writes one .npz (atomically: a temporary file renamed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".partial.npz")
    np.savez(temporary, keys=np.asarray(self.keys), counts=self.counts, sums=self.sums,
             meta=np.asarray(sorted(self.meta.items()), dtype=str))
    temporary.replace(path)

  @classmethod
  def load(cls, path: str | os.PathLike) -> "SenseSums":
    """Reads what `save` wrote (a damaged file is a UserError naming it)."""
    data = load_npz(path, ("keys", "counts", "sums", "meta"))
    return cls(data["keys"].tolist(), data["counts"], data["sums"], dict(data["meta"].tolist()))


def accumulate_sense_sums(embedder, sentences: Sequence[dict], *, pooling: str = "mean",
                          senses: Mapping[str, object] | None = None, log: Log = None) -> SenseSums:
  """Streams SemCor sentences ({"words", "keys", "lines", "path"} records) through the embedder (every layer) and
  sums each sense's token vectors. A key missing from `senses` (WordNet) is an error naming its file and line."""
  keys = sorted({key for sentence in sentences for token in sentence["keys"] for key in token})
  if senses is not None:
    for sentence in sentences:
      for token, line in zip(sentence["keys"], sentence["lines"]):
        for key in token:
          if key not in senses:
            raise ReaderError(sentence.get("path", "semcor"), line, f"a WordNet 3.0 sense key, got {key!r}")
  row = {key: i for i, key in enumerate(keys)}
  # Per sentence: the word position and sense row of each (token, key) pair.
  pairs = [(np.asarray([i for i, token in enumerate(s["keys"]) for _ in token], np.int64),
            np.asarray([row[key] for token in s["keys"] for key in token], np.int64)) for s in sentences]
  counts = np.bincount(np.concatenate([rows for _, rows in pairs] + [np.zeros(0, np.int64)]), minlength=len(keys))
  sums = np.zeros((len(keys), embedder.num_layers + 1, embedder.hidden_size), np.float32)
  start = time.perf_counter()
  encoded = embedder.iter_encode_words([s["words"] for s in sentences], layers="all", pooling=pooling)
  for done, (index, vectors) in enumerate(encoded, start=1):
    positions, rows = pairs[index]
    np.add.at(sums, rows, np.asarray(vectors, np.float32)[positions])
    if log and done % 2000 == 0:
      log(f"semcor: {done}/{len(sentences)} sentences, {done / (time.perf_counter() - start):.0f}/s")
  meta = {"pooling": pooling, "sentences": str(len(sentences)), "tagged_tokens": str(sum(len(p) for p, _ in pairs))}
  return SenseSums(keys, counts.astype(np.int64), sums, meta)


def embedder_fingerprint(embedder) -> str:
  """A short hash of what changes the vectors: the weights, max_length, stride and dtypes (for cache names)."""
  digest = hashlib.sha1()
  for leaf in jax.tree_util.tree_leaves(getattr(embedder, "params", {})):
    digest.update(np.asarray(leaf).tobytes())
  for name in ("num_layers", "hidden_size", "max_length", "stride", "dtype", "transfer_dtype"):
    digest.update(f"{name}={getattr(embedder, name, '')};".encode())
  return digest.hexdigest()[:12]


def cache_path(cache_dir: str | os.PathLike, label: str, pooling: str, embedder) -> Path:
  """Where the SemCor sense sums of one checkpoint and pooling are cached: the label (e.g. the init string) for
  people, the embedder's fingerprint so that other weights or settings (a retrained run:) never reuse them."""
  slug = re.sub(r"[^A-Za-z0-9.-]+", "_", label)[-60:].strip("_") or "model"
  return Path(cache_dir) / f"semcor-{slug}-{pooling}-{embedder_fingerprint(embedder)}.npz"


def semcor_sense_sums(embedder, semcor_dir: str | os.PathLike, *, pooling: str, senses: Mapping | None = None,
                      cache_dir: str | os.PathLike | None = None, cache_key: str = "", log: Log = None) -> SenseSums:
  """The sense sums of SemCor, read from the cache under cache_dir when there, else encoded (and cached)."""
  path = None if cache_dir is None else cache_path(cache_dir, cache_key, pooling, embedder)
  if path is not None and path.is_file():
    if log:
      log(f"semcor: sense sums from {path}")
    return SenseSums.load(path)
  sentences = list(semcor.read_semcor(semcor_dir))
  sums = accumulate_sense_sums(embedder, sentences, pooling=pooling, senses=senses, log=log)
  sums.meta["cache_key"] = cache_key
  if path is not None:
    sums.save(path)
    if log:
      log(f"semcor: sense sums cached in {path}")
  return sums


def unit(vectors: np.ndarray) -> np.ndarray:
  """Rows scaled to length 1 (zero rows stay zero)."""
  norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
  return vectors / np.where(norms > 0, norms, 1)


def sense_table(sums: SenseSums, layers: str) -> np.ndarray:
  """Unit sense embeddings [senses, H] in one layer mix: spec "Word Sense Disambiguation", eq. 11.6,
  v_s = (1/n) sum_i v_i over the n tokens tagged s."""
  return unit(select_layers(sums.sums, layers) / np.maximum(sums.counts, 1)[:, None])


def coverage_plan(wordnet: wordnet_reader.WordNet, seen: Iterable[str], wanted: Iterable[str]) -> dict:
  """LMMS-style coverage for each wanted sense SemCor never tags: (step, sources) with step "synset" or "hypernym"
  (sources: synsets holding seen senses) or "lexname" (sources: (lex_filenum,)); senses with none are left out."""
  seen_synsets = {wordnet.senses[key].synset for key in seen}
  seen_lexfiles = {wordnet_reader.parse_sense_key(key).lex_filenum for key in seen}
  plan: dict[str, tuple[str, tuple[str, ...] | tuple[int, ...]]] = {}
  for key in set(wanted) - set(seen):
    synset = wordnet.senses[key].synset
    if synset in seen_synsets:
      plan[key] = ("synset", (synset,))
      continue
    level, visited = list(wordnet.hypernyms.get(synset, ())), {synset}
    while level:  # Walk up one level of (instance) hypernyms at a time until some have seen senses.
      found = sorted(s for s in level if s in seen_synsets)
      if found:
        plan[key] = ("hypernym", tuple(found))
        break
      visited.update(level)
      level = sorted({h for s in level for h in wordnet.hypernyms.get(s, ()) if h not in visited})
    if key not in plan and (lexfile := wordnet_reader.parse_sense_key(key).lex_filenum) in seen_lexfiles:
      plan[key] = ("lexname", (lexfile,))
  return plan


def extend_table(table: np.ndarray, keys: Sequence[str], plan: Mapping, wordnet: wordnet_reader.WordNet
                 ) -> tuple[list[str], np.ndarray]:
  """The seen senses' unit vectors plus one per planned unseen sense: the mean of its sources' synset vectors (a
  synset vector is the mean of its seen senses' unit vectors) or of its lexicographer file's synset vectors."""
  synsets = sorted({wordnet.senses[key].synset for key in keys})
  synset_row = {synset: i for i, synset in enumerate(synsets)}
  of_sense = np.asarray([synset_row[wordnet.senses[key].synset] for key in keys], np.int64)
  synset_vectors = np.zeros((len(synsets), table.shape[1]), np.float64)
  np.add.at(synset_vectors, of_sense, table)
  synset_vectors /= np.bincount(of_sense, minlength=len(synsets))[:, None]
  lexfile_of_synset = np.asarray([wordnet_reader.parse_sense_key(wordnet.by_synset[s][0]).lex_filenum
                                  for s in synsets], np.int64)
  lexfile_vectors = np.zeros((max(wordnet.lexnames) + 1, table.shape[1]), np.float64)
  np.add.at(lexfile_vectors, lexfile_of_synset, synset_vectors)
  lexfile_vectors /= np.maximum(np.bincount(lexfile_of_synset, minlength=len(lexfile_vectors)), 1)[:, None]
  extra_keys = sorted(plan)
  extra_rows = [lexfile_vectors[plan[key][1][0]] if plan[key][0] == "lexname"
                else synset_vectors[[synset_row[s] for s in plan[key][1]]].mean(axis=0) for key in extra_keys]
  extra = unit(np.asarray(extra_rows, np.float32).reshape(len(extra_keys), table.shape[1]))
  return list(keys) + extra_keys, np.concatenate([table, extra])


def choose_senses(queries: np.ndarray, candidates: Sequence[Sequence[str]], keys: Sequence[str], table: np.ndarray,
                  counts: Mapping[str, int] | None = None, lam: float = 0.0) -> tuple[list[str], np.ndarray]:
  """Eq. 11.7: per query [N, H], the candidate with the highest cos(t, v_s) + lam * log(count(s) + 1) among those
  with a row in `table` (unit rows named by `keys`); the first candidate (WordNet sense 1, MFS) where none has one.
  Ties go to the lower sense number. Returns (senses, whether each query had a candidate with a vector)."""
  row = {key: i for i, key in enumerate(keys)}
  queries = unit(np.asarray(queries, np.float32))
  chosen, covered = [], np.zeros(len(candidates), bool)
  for query, options in zip(queries, candidates):
    rows = [(key, row[key]) for key in options if key in row]
    if not rows:
      chosen.append(options[0])
      continue
    score = table[[r for _, r in rows]] @ query
    if lam and counts is not None:  # log p(s | lemma) = log(count + 1) - log(Z); Z is the same for every candidate.
      score = score + lam * np.log1p(np.asarray([counts.get(key, 0) for key, _ in rows], np.float64))
    chosen.append(rows[int(np.argmax(score))][0])
    covered[len(chosen) - 1] = True
  return chosen, covered


def score_keys(gold: Mapping[str, Sequence[str]], pred: Mapping[str, Sequence[str]], *, gold_name: str = "gold",
               pred_name: str = "predictions") -> dict:
  """The framework's Scorer.java: an answer is right when among the instance's gold keys (k answers to one
  instance earn a share 1/k each); P = right / answered, R = right / gold instances, F1 their harmonic mean.
  Unlike Scorer.java, which skips them, an instance missing from gold is an error."""
  extra = [i for i in pred if i not in gold]
  if extra:
    raise errors.UserError(f"{pred_name}: {len(extra)} instance ids not in {gold_name}, the first {extra[0]!r}: "
                           "score against the gold keys of the same dataset")
  right = wrong = 0.0
  for instance, given in pred.items():
    answers = set(given)
    hits = len(answers & set(gold[instance]))
    right, wrong = right + hits / len(answers), wrong + (len(answers) - hits) / len(answers)
  precision = right / (right + wrong) if right + wrong else 0.0
  recall = right / len(gold) if gold else 0.0
  f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
  return {"precision": precision, "recall": recall, "f1": f1, "right": right, "answered": len(pred),
          "instances": len(gold)}


def layer_choices(num_layers: int) -> tuple[str, ...]:
  """Every single layer (0 = embeddings .. L) and the mean of the last four (when there are four; their sum,
  the spec's suggestion, has the same cosines)."""
  return tuple(str(i) for i in range(num_layers + 1)) + (("last4_mean",) if num_layers >= 4 else ())


def instance_vectors(embedder, sentences: Sequence[dict], pooling: str) -> np.ndarray:
  """Every instance's word vector in every layer, [instances, L + 1, H], in the sentences' instance order."""
  out = []
  for sentence, vectors in zip(sentences, embedder.encode_words([s["words"] for s in sentences], layers="all",
                                                                 pooling=pooling)):
    out += [vectors[instance["index"]] for instance in sentence["instances"]]
  return np.asarray(out, np.float32)


def breakdown(gold: Mapping[str, Sequence[str]], pred: Mapping[str, Sequence[str]], groups: Mapping[str, str]
              ) -> dict[str, dict]:
  """`score_keys` within each group of instances (instance id -> group name), in the mapping's order of groups."""
  names = list(dict.fromkeys(groups.values()))
  return {name: score_keys({i: k for i, k in gold.items() if groups[i] == name},
                           {i: k for i, k in pred.items() if groups[i] == name}) for name in names}


def test_instances(data_dir: Path, wordnet: wordnet_reader.WordNet) -> tuple[list[dict], list[dict], list, dict]:
  """The framework's ALL: (sentences, instances, each instance's WordNet candidates, gold keys), checked: every
  instance has a candidate and every gold key is a WordNet 3.0 sense key."""
  sentences, gold = raganato.read_all(data_dir / "wsd_raganato2017")
  instances = [instance for sentence in sentences for instance in sentence["instances"]]
  candidates = [wordnet.candidates(i["lemma"], raganato.WORDNET_POS[i["pos"]]) for i in instances]
  for instance, options in zip(instances, candidates):
    if not options:
      raise errors.UserError(f"instance {instance['id']}: WordNet 3.0 has no sense of {instance['lemma']!r} as "
                             f"{instance['pos']}")
  for instance_id, keys in gold.items():
    if unknown := [key for key in keys if key not in wordnet.senses]:
      raise errors.UserError(f"gold keys of instance {instance_id}: {unknown[0]!r} is not a WordNet 3.0 sense "
                             "key")
  return sentences, instances, candidates, gold


def evaluate_wsd(embedder, data_dir: str | os.PathLike, *, cache_dir: str | os.PathLike | None = None,
                 cache_key: str = "", poolings: Sequence[str] = POOLINGS,
                 layers: Sequence[str] | None = None, extensions: Sequence[str] = EXTENSIONS,
                 lambdas: Sequence[float] = LAMBDAS, log: Log = None) -> dict:
  """Sense embeddings from SemCor, every choice compared on SemEval-2007, the best one's scores on every dataset.

  data_dir holds `semcor/semcor3.0`, `wordnet/wordnet-3.0` and `wsd_raganato2017`. The SemCor sense sums are cached
  under cache_dir (None: no cache), named by cache_key (the init string), pooling and the embedder's fingerprint.
  Returns the chosen method ("chosen"; ties on SE07 go to the first in grid order), its P/R/F1 per dataset
  ("scores", SE2 ... ALL) and per POS on ALL ("pos"), "all_f1", the MFS baseline ("mfs" per dataset and POS,
  "mfs_f1" on ALL), the share of ALL instances with a candidate seen in SemCor ("coverage"), "table" (every
  choice with its SE07 and ALL F1) and the "predictions" of the chosen method and of MFS ("mfs_predictions"; ALL
  instance id -> sense key).
  """
  layers = tuple(layers or layer_choices(embedder.num_layers))
  for layer in layers:  # Checked before SemCor is encoded: a bad spec must not cost an encoding.
    spec = parse_layers(layer)
    spec.indices(embedder.num_layers)  # A layer the model lacks raises here.
    if spec.width(embedder.num_layers) is not None:
      raise errors.UserError(f"layer spec {layer!r} keeps several layers apart; give one layer or a mean/sum of "
                             "several")
  for name, values, allowed in (("pooling", poolings, POOLINGS), ("extension", extensions, EXTENSIONS)):
    if unknown := [v for v in values if v not in allowed]:
      raise errors.UserError(f"{name} {unknown[0]!r} is not one of {list(allowed)}")
  data_dir = Path(data_dir)
  wordnet = wordnet_reader.load_wordnet(data_dir / "wordnet" / "wordnet-3.0")
  sentences, instances, candidates, gold = test_instances(data_dir, wordnet)
  ids = [i["id"] for i in instances]
  dev_gold = {i: keys for i, keys in gold.items() if i.startswith(DEV + ".")}
  as_keys = lambda chosen: {i: (key,) for i, key in zip(ids, chosen)}
  rows: list[dict] = []
  best: tuple[dict, list[str]] | None = None  # (its table row, its senses) of the best choice on SE07 so far.
  seen: set[str] = set()
  for pooling in poolings:
    sums = semcor_sense_sums(embedder, data_dir / "semcor" / "semcor3.0", pooling=pooling, senses=wordnet.senses,
                             cache_dir=cache_dir, cache_key=cache_key, log=log)
    counts, seen = dict(zip(sums.keys, sums.counts.tolist())), set(sums.keys)
    plan = coverage_plan(wordnet, sums.keys, {key for options in candidates for key in options})
    queries = instance_vectors(embedder, sentences, pooling)
    for layer in layers:
      table, query = sense_table(sums, layer), select_layers(queries, layer)
      for extension in extensions:
        keys, vectors = (sums.keys, table) if extension == "none" else extend_table(table, sums.keys, plan, wordnet)
        for lam in lambdas:
          chosen, covered = choose_senses(query, candidates, keys, vectors, counts, lam)
          predicted = as_keys(chosen)
          row = {"pooling": pooling, "layers": layer, "extension": extension, "lambda": lam,
                 "se07_f1": score_keys(dev_gold, {i: predicted[i] for i in dev_gold})["f1"],
                 "all_f1": score_keys(gold, predicted)["f1"], "covered": float(covered.mean())}
          rows.append(row)
          if best is None or row["se07_f1"] > best[0]["se07_f1"]:
            best = (row, chosen)
          if log:
            log(" ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))
  if best is None:
    raise errors.UserError("nothing to choose from: poolings, layers, extensions and lambdas each need a value")
  row, chosen = best
  mfs = [options[0] for options in candidates]
  dataset_of = {i: raganato.SHORT_NAMES[i.split(".", 1)[0]] for i in ids}
  pos_of = {i["id"]: i["pos"] for i in sorted(instances, key=lambda i: list(raganato.WORDNET_POS).index(i["pos"]))}
  scores = breakdown(gold, as_keys(chosen), dataset_of) | {"ALL": score_keys(gold, as_keys(chosen))}
  mfs_scores = breakdown(gold, as_keys(mfs), dataset_of) | {"ALL": score_keys(gold, as_keys(mfs))}
  plain = [r["all_f1"] for r in rows if (r["pooling"], r["layers"], r["extension"], r["lambda"])
           == (poolings[0], str(embedder.num_layers), "none", 0)]
  return {"chosen": {k: row[k] for k in ("pooling", "layers", "extension", "lambda")}, "scores": scores,
          "pos": breakdown(gold, as_keys(chosen), pos_of),
          "all_f1": scores["ALL"]["f1"], "se07_f1": scores["SE07"]["f1"],
          "mfs": {name: s["f1"] for name, s in mfs_scores.items()} | {name: s["f1"] for name, s in breakdown(
              gold, as_keys(mfs), pos_of).items()}, "mfs_f1": mfs_scores["ALL"]["f1"],
          "coverage": float(np.mean([any(key in seen for key in options) for options in candidates])),
          "chosen_coverage": row["covered"], "plain_1nn_last_f1": plain[0] if plain else None, "table": rows,
          "predictions": dict(zip(ids, chosen)), "mfs_predictions": dict(zip(ids, mfs))}


def format_choices(table: Sequence[dict]) -> str:
  """The table of choices as markdown: one row per (pooling, layers, extension), "SE07 / ALL" F1 per lambda."""
  lambdas = sorted({r["lambda"] for r in table})
  cells: dict[tuple, dict] = {}
  for r in table:
    cells.setdefault((r["pooling"], r["layers"], r["extension"]), {})[r["lambda"]] = r
  lines = ["| pooling | layers | extension | " + " | ".join(f"λ={lam:g}" for lam in lambdas) + " |",
           "|---|---|---|" + "---|" * len(lambdas)]
  for (pooling, layer, extension), row in cells.items():
    values = [f"{100 * row[lam]['se07_f1']:.1f} / {100 * row[lam]['all_f1']:.1f}" if lam in row else ""
              for lam in lambdas]
    lines.append(f"| {pooling} | {layer} | {extension} | " + " | ".join(values) + " |")
  return "\n".join(lines)


def score_command(args: argparse.Namespace) -> dict:
  """`score`: P, R and F1 of a prediction key file against a gold key file."""
  result = score_keys(raganato.read_key_file(args.gold), raganato.read_key_file(args.pred),
                          gold_name=args.gold, pred_name=args.pred)
  for name, short in (("precision", "P"), ("recall", "R"), ("f1", "F1")):
    print(f"{short}=\t{100 * result[name]:.1f}%")
  return result


def write_keys(path: Path, predictions: dict[str, str], prefix: str = "") -> None:
  """One `id key` line per instance whose id starts with `prefix` (removed)."""
  path.write_text("".join(f"{i[len(prefix):]} {key}\n" for i, key in predictions.items() if i.startswith(prefix)))


def predict_command(args: argparse.Namespace) -> dict:
  """Builds, chooses, predicts, writes and prints (module docstring)."""
  from tasks.embeddings.extract import Embedder  # Imported here: `score` needs no model code.
  data_dir = Path(args.data_dir) if args.data_dir else paths.data_dir()
  if data_dir is None:
    raise FileNotFoundError(f"no data directory: pass --data-dir or set ${paths.DATA_ENV}")
  embedder = Embedder.from_init(args.init, max_length=args.max_length, batch_size=args.batch_size)
  log = lambda message: print(message, file=sys.stderr, flush=True)
  result = evaluate_wsd(embedder, data_dir, cache_dir=None if args.no_cache else args.cache_dir,
                            cache_key=args.init, poolings=args.pooling, layers=args.layers,
                            extensions=args.extension, lambdas=args.lambdas, log=log)
  out = Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  predictions = result.pop("predictions")
  write_keys(out / "ALL.key.txt", predictions)
  for name in raganato.DATASETS:
    write_keys(out / f"{name}.key.txt", predictions, f"{name}.")
    _, gold = raganato.dataset_paths(data_dir / "wsd_raganato2017", name)
    written = score_keys(raganato.read_key_file(gold), raganato.read_key_file(out / f"{name}.key.txt"))
    if abs(written["f1"] - result["scores"][raganato.SHORT_NAMES[name]]["f1"]) > 1e-12:
      raise RuntimeError(f"{out / f'{name}.key.txt'} scores {written['f1']} against {gold}, not the evaluated "
                         f"{result['scores'][raganato.SHORT_NAMES[name]]['f1']}")
  write_keys(out / "ALL.mfs.key.txt", result.pop("mfs_predictions"))
  (out / "choices.md").write_text(format_choices(result["table"]) + "\n")
  (out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
  chosen = result["chosen"]
  print(f"chosen on SE07: pooling {chosen['pooling']}, layers {chosen['layers']}, extension {chosen['extension']}, "
        f"lambda {chosen['lambda']:g}; coverage {100 * result['coverage']:.1f}% of ALL instances have a candidate "
        "seen in SemCor")
  print(f"{'':<8}{'P':>7}{'R':>7}{'F1':>7}{'MFS F1':>8}{'n':>6}")
  for name, s in list(result["scores"].items()) + list(result["pos"].items()):
    print(f"{name:<8}{100 * s['precision']:>7.1f}{100 * s['recall']:>7.1f}{100 * s['f1']:>7.1f}"
          f"{100 * result['mfs'][name]:>8.1f}{s['instances']:>6}")
  print(f"wrote {out}/{{ALL,{','.join(raganato.DATASETS)}}}.key.txt, choices.md, result.json")
  return {k: result[k] for k in ("chosen", "all_f1", "se07_f1", "mfs_f1", "coverage", "plain_1nn_last_f1")}


def parser(score: bool) -> argparse.ArgumentParser:
  """The command line of `score` or of the main command (module docstring)."""
  if score:
    root = cli.ArgumentParser(prog="python -m tasks.embeddings.wsd score", description="the framework's Scorer.java")
    root.add_argument("--gold", required=True, help="gold key file: 'id key [key ...]' per line")
    root.add_argument("--pred", required=True, help="prediction key file, the same format")
    return root
  root = cli.ArgumentParser(prog="python -m tasks.embeddings.wsd", description=__doc__.split("\n")[0])
  root.add_argument("--init", required=True, help="checkpoint: hf:all-MiniLM-L6-v2, hf:/hf/dir or run:/workdir")
  root.add_argument("--layers", nargs="+", default=None,
                    help="layer specs to compare (default: every layer 0..L and last4_mean)")
  root.add_argument("--pooling", nargs="+", default=list(POOLINGS), choices=POOLINGS,
                    help="subword pooling of a word's vector")
  root.add_argument("--extension", nargs="+", default=list(EXTENSIONS), choices=EXTENSIONS,
                    help="none: plain 1-NN; lmms: cover unseen senses by synset, hypernyms, lexicographer file")
  root.add_argument("--lambdas", nargs="+", type=cli.number(0), default=list(LAMBDAS),
                    help="weights of the sense-frequency prior log p(sense) (0: cosine only)")
  root.add_argument("--data-dir", default=None, help="shared data directory (default: $ENCODERLAB_DATA or "
                    "../shared/data)")
  root.add_argument("--cache-dir", default="runs/wsd_cache", help="where SemCor sense sums are cached")
  root.add_argument("--no-cache", action="store_true", help="encode SemCor again and write no cache")
  root.add_argument("--out", default="runs/wsd", help="directory for the key files and the table")
  root.add_argument("--max-length", type=cli.integer(3), default=128,
                    help="subwords per window (longer sentences: windows)")
  root.add_argument("--batch-size", type=cli.integer(1), default=64, help="sentences per encoder batch")
  return root


def directory_flag(value: str, flag: str) -> None:
  """Refuses a directory flag that names an existing file, before any work is done."""
  if Path(value).exists() and not Path(value).is_dir():
    raise errors.UserError(f"{value}: {flag} must be a directory, found a file; give another {flag}")


def main(argv: Sequence[str] | None = None) -> None:
  """`score` or the main command (module docstring); the last line is one JSON object."""
  argv = list(sys.argv[1:] if argv is None else argv)
  score = bool(argv) and argv[0] == "score"
  args = parser(score).parse_args(argv[1:] if score else argv)
  if not score:
    directory_flag(args.out, "--out")
    directory_flag(args.cache_dir, "--cache-dir")
  print(json.dumps(score_command(args) if score else predict_command(args)))


if __name__ == "__main__":
  errors.run(main)

"""A picture of a word's senses in contextual embedding space, like the spec's figure of "die" (spec, "Contextual
Embeddings and Word Sense"; Coenen et al., 2019).

Every occurrence of the word in a set of sentences gets its contextual vector (mean of its subwords, one layer or a
mix); the vectors are projected to 2-D (PCA by numpy's SVD; UMAP when `umap-learn` is installed and asked for) and
drawn as a scatter PNG, one colour per label, with a few occurrences annotated with their context. Labels are the
SemCor sense of each tagged occurrence (with WordNet's gloss), or a user's label per input line.

The command:

  python -m tasks.embeddings.picture --init hf:all-MiniLM-L6-v2 --word die --out die.png \\
      [--input FILE [--labels FILE]] [--forms die,died,dies,dying] [--layers last] [--projection auto|pca|umap] \\
      [--annotate 6]

Occurrences: the words equal to one of --forms (default: --word; case-insensitive). Without --input they are
SemCor's tokens tagged with a sense of --word, coloured by WordNet sense (from the data directory), or, when SemCor
is absent or never tags the word, WikiText-2 train's occurrences. --input: one text per line, whitespace-separated
words; --labels: one label per line of --input (same number of lines), the colour of that line's occurrences.
PCA by default; UMAP with --projection umap (or auto) when umap-learn is installed. The last line is one JSON object.
"""

import argparse
import dataclasses
import importlib.util
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from encoder import cli, errors, paths
from tasks.embeddings.extract import Embedder
from tasks.readers import semcor as semcor_reader
from tasks.readers.lines import ReaderError, numbered_lines
from tasks.readers.wordnet import parse_sense_key, read_index_sense

PROJECTIONS = ("pca", "umap", "auto")
MAX_LABELS = 8  # Colours shown; rarer labels are drawn grey as "other".


@dataclasses.dataclass
class Occurrences:
  """Where the word occurs: sentence, word position and label of each occurrence."""
  sentences: list[list[str]]
  positions: list[tuple[int, int]]  # (sentence, word index)
  labels: list[str]


def find_occurrences(sentences: Sequence[Sequence[str]], forms: Sequence[str],
                     labels: Sequence[str] | None = None, default_label: str = "text") -> Occurrences:
  """Every word equal to one of `forms` (case-insensitive), labelled by its sentence's label."""
  wanted = {form.lower() for form in forms}
  kept, positions, out_labels = [], [], []
  for index, words in enumerate(sentences):
    hits = [i for i, word in enumerate(words) if word.lower() in wanted]
    if hits:
      kept.append(list(words))
      positions += [(len(kept) - 1, i) for i in hits]
      out_labels += [labels[index] if labels is not None else default_label] * len(hits)
  return Occurrences(kept, positions, out_labels)


def semcor_occurrences(semcor_dir: str | os.PathLike, lemma: str, wordnet_dir: str | os.PathLike | None = None,
                       forms: Sequence[str] | None = None) -> Occurrences:
  """SemCor tokens tagged with a sense of `lemma` (any inflection, or only `forms`), labelled by sense."""
  glosses = load_glosses(wordnet_dir) if wordnet_dir else None
  wanted = None if forms is None else {form.lower() for form in forms}
  kept, positions, labels = [], [], []
  for sentence in semcor_reader.read_semcor(semcor_dir):
    hits = [(i, keys[0]) for i, keys in enumerate(sentence["keys"])
            if keys and keys[0].split("%")[0] == lemma.lower() and (wanted is None or sentence["words"][i].lower()
                                                                     in wanted)]
    if hits:
      kept.append(sentence["words"])
      positions += [(len(kept) - 1, i) for i, _ in hits]
      labels += [sense_label(key, glosses) for _, key in hits]
  return Occurrences(kept, positions, labels)


@dataclasses.dataclass(frozen=True)
class Glosses:
  """WordNet's index.sense (sense key -> synset offset, sense number) and the directory of its data.* files."""
  senses: dict
  directory: Path


def load_glosses(wordnet_dir: str | os.PathLike) -> Glosses:
  """What `sense_label` needs from a WordNet 3.0 directory (glosses are read from data.* at the synset's offset)."""
  return Glosses(read_index_sense(Path(wordnet_dir) / "index.sense"), Path(wordnet_dir))


def sense_label(key: str, glosses: Glosses | None) -> str:
  """'die (v, 1): pass from physical life and lose...' from a sense key (the key itself without WordNet)."""
  if glosses is None or key not in glosses.senses:
    return key
  sense = glosses.senses[key]
  offset, pos = int(sense.synset[:8]), parse_sense_key(key).pos
  data = {"n": "data.noun", "v": "data.verb", "a": "data.adj", "r": "data.adv"}[pos]
  with open(glosses.directory / data, "rb") as f:
    f.seek(offset)  # A synset's offset is its line's byte offset in data.<pos>.
    gloss = f.readline().decode("utf-8").partition(" | ")[2].split(";")[0].strip()
  gloss = gloss if len(gloss) <= 64 else gloss[:63].rstrip() + "…"
  return f"{key.split('%')[0]} ({pos}, {sense.number}): {gloss}"


def pca_2d(vectors: np.ndarray) -> np.ndarray:
  """[n, H] -> [n, 2]: the centred vectors on their top two principal axes (signs fixed: largest |loading| > 0)."""
  x = np.asarray(vectors, np.float64)
  x = x - x.mean(axis=0)
  _, _, vt = np.linalg.svd(x, full_matrices=False)
  axes = vt[:2] * np.sign(vt[:2, np.argmax(np.abs(vt[:2]), axis=1)].diagonal())[:, None]
  return x @ axes.T


def project(vectors: np.ndarray, method: str = "auto", seed: int = 0) -> tuple[np.ndarray, str]:
  """(points [n, 2], the method used): PCA, or UMAP ("umap"; "auto" = UMAP when umap-learn is installed)."""
  if method not in PROJECTIONS:
    raise errors.UserError(f"projection {method!r} is not one of {PROJECTIONS}")
  have_umap = importlib.util.find_spec("umap") is not None
  if method == "umap" and not have_umap:
    raise errors.UserError("projection 'umap' needs the umap-learn package (pip install umap-learn); or use 'pca'")
  if method == "pca" or not have_umap or len(vectors) < 5:
    return pca_2d(vectors), "pca"
  import umap  # pylint: disable=import-outside-toplevel
  reducer = umap.UMAP(n_components=2, n_neighbors=min(15, len(vectors) - 1), random_state=seed)
  return reducer.fit_transform(np.asarray(vectors, np.float32)), "umap"


def context(words: Sequence[str], index: int, width: int = 4) -> str:
  """'... a few words [target] a few words ...' around one occurrence."""
  left, right = words[max(0, index - width):index], words[index + 1:index + 1 + width]
  return " ".join((["…"] if index > width else []) + list(left) + [f"[{words[index]}]"] + list(right)
                  + (["…"] if index + 1 + width < len(words) else []))


def pick_annotations(points: np.ndarray, labels: Sequence[str] | np.ndarray, count: int) -> list[int]:
  """Up to `count` occurrences to annotate: each label's most central point, then the farthest from those chosen."""
  labels = np.asarray(labels)
  chosen = []
  for label in sorted(set(labels), key=lambda name: -np.sum(labels == name)):
    members = np.flatnonzero(labels == label)
    centre = points[members].mean(axis=0)
    chosen.append(int(members[np.argmin(np.linalg.norm(points[members] - centre, axis=1))]))
  chosen = chosen[:count]
  while len(chosen) < min(count, len(points)):
    distance = np.min(np.linalg.norm(points[:, None] - points[chosen][None], axis=2), axis=1)
    chosen.append(int(np.argmax(distance)))
  return chosen


def draw(points: np.ndarray, labels: Sequence[str] | np.ndarray, notes: dict[int, str], path: str | os.PathLike,
         title: str) -> None:
  """Scatter PNG, one colour per label (the MAX_LABELS most frequent; others grey), notes beside their points."""
  import matplotlib as mpl  # pylint: disable=import-outside-toplevel
  mpl.use("Agg")
  from matplotlib import pyplot as plt  # pylint: disable=import-outside-toplevel
  labels = np.asarray(labels)
  names, counts = np.unique(labels, return_counts=True)
  ranked = [names[i] for i in np.argsort(-counts, kind="stable")]
  shown = ranked[:MAX_LABELS]
  colours = plt.get_cmap("tab10")
  figure, axes = plt.subplots(figsize=(11, 7.5), dpi=120)
  for rank, name in enumerate(shown):
    members = labels == name
    axes.scatter(points[members, 0], points[members, 1], s=44, alpha=0.8, color=colours(rank % 10),
                 edgecolors="white", linewidths=0.4, label=f"{name}  ({int(members.sum())})")
  other = ~np.isin(labels, shown)
  if other.any():
    axes.scatter(points[other, 0], points[other, 1], s=30, alpha=0.5, color="0.6", label=f"other ({other.sum()})")
  span = np.ptp(points, axis=0) + 1e-12
  centre = points.mean(axis=0)
  for index, note in notes.items():
    direction = np.sign(points[index] - centre) + (points[index] == centre)  # Push text away from the middle.
    axes.annotate(note, points[index], xytext=(12 * direction[0], 14 * direction[1]), textcoords="offset points",
                  fontsize=8, ha="left" if direction[0] > 0 else "right", va="center",
                  bbox={"boxstyle": "round,pad=0.25", "fc": "white", "ec": "0.7", "alpha": 0.9},
                  arrowprops={"arrowstyle": "-", "color": "0.4", "lw": 0.6})
  axes.set_xlim(points[:, 0].min() - 0.35 * span[0], points[:, 0].max() + 0.35 * span[0])
  axes.set_ylim(points[:, 1].min() - 0.15 * span[1], points[:, 1].max() + 0.15 * span[1])
  axes.set_title(title, fontsize=11)
  axes.set_xticks([])
  axes.set_yticks([])
  axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.02), fontsize=8.5, frameon=False,
              ncol=1 if len(shown) < 4 else 2)
  figure.tight_layout()
  Path(path).parent.mkdir(parents=True, exist_ok=True)
  figure.savefig(path)
  plt.close(figure)


def sense_picture(embedder, occurrences: Occurrences, out: str | os.PathLike, *, word: str, layers: str = "last",
                  projection: str = "auto", annotate: int = 6, seed: int = 0) -> dict:
  """Embeds the occurrences, projects them and writes the PNG; returns {"path", "points", "labels", ...}."""
  if not occurrences.positions:
    raise errors.UserError(f"no occurrence of {word!r} to draw")
  used = sorted({sentence for sentence, _ in occurrences.positions})  # Only sentences with a drawn occurrence.
  arrays = dict(zip(used, embedder.encode_words([occurrences.sentences[s] for s in used], layers=layers)))
  vectors = np.stack([arrays[s][i] for s, i in occurrences.positions])
  if vectors.ndim != 2:
    raise errors.UserError(f"layers {layers!r} gives several vectors per word; give one layer or a mix (last4_mean)")
  points, method = project(vectors, projection, seed)
  notes = {i: context(occurrences.sentences[occurrences.positions[i][0]], occurrences.positions[i][1])
           for i in pick_annotations(points, occurrences.labels, annotate)}
  title = (f"contextual embeddings of '{word}': {len(points)} occurrences, layers {layers!r}, "
           f"{method.upper()} to 2-D")
  draw(points, occurrences.labels, notes, out, title)
  counts = {label: occurrences.labels.count(label) for label in sorted(set(occurrences.labels))}
  return {"path": str(out), "word": word, "points": len(points), "projection": used, "layers": layers,
          "labels": counts, "annotated": list(notes.values())}


def picture(embedder, *, word: str = "die", out: str | os.PathLike = "runs/pictures/die.png",
            layers: str = "last", projection: str = "auto") -> dict:
  """The benchmark's picture: SemCor's sense-tagged occurrences of the form `word`, labelled with WordNet glosses."""
  occurrences = semcor_occurrences(paths.data_file("semcor/semcor3.0"), word, paths.data_file("wordnet/wordnet-3.0"),
                                   forms=[word])
  return sense_picture(embedder, occurrences, out, word=word, layers=layers, projection=projection)


def read_text_and_labels(input_path: str, labels_path: str | None) -> tuple[list[list[str]], list[str] | None]:
  """Words of every line of --input and, with --labels, the label of every line (the files must align)."""
  if not Path(input_path).is_file():
    raise FileNotFoundError(f"{input_path}: no such file")
  sentences = [line.split() for _, line in numbered_lines(input_path)]
  if labels_path is None:
    return sentences, None
  if not Path(labels_path).is_file():
    raise FileNotFoundError(f"{labels_path}: no such file")
  labels = []
  for number, line in numbered_lines(labels_path):
    if number > len(sentences):
      raise ReaderError(labels_path, number, f"no more labels: {input_path} has {len(sentences)} lines")
    if not line.strip() and sentences[number - 1]:
      raise ReaderError(labels_path, number, f"a label for line {number} of {input_path}, got a blank line")
    labels.append(line.strip())
  if len(labels) < len(sentences):
    raise ReaderError(labels_path, len(labels) + 1, f"a label for line {len(labels) + 1} of {input_path}, but the "
                      f"file ended (one label per input line)")
  return sentences, labels


def occurrences(args: argparse.Namespace, forms: list[str]) -> tuple[Occurrences, str]:
  """The occurrences to draw and where they came from."""
  if args.input:
    sentences, labels = read_text_and_labels(args.input, args.labels)
    return find_occurrences(sentences, forms, labels, default_label=Path(args.input).name), args.input
  root = paths.data_dir()
  if root is not None and (root / "semcor/semcor3.0").is_dir():
    semcor, wordnet = root / "semcor/semcor3.0", root / "wordnet/wordnet-3.0"
    found = semcor_occurrences(semcor, args.word, wordnet if wordnet.is_dir() else None, forms)
    if found.positions:
      return found, str(semcor)
  wikitext = paths.data_file("wikitext-2/raw/wiki.train.raw")
  sentences = [line.split() for _, line in numbered_lines(wikitext)]
  return find_occurrences(sentences, forms, default_label="WikiText-2 (no sense labels)"), str(wikitext)


def parser() -> argparse.ArgumentParser:
  """The command line (module docstring)."""
  p = cli.ArgumentParser(prog="python -m tasks.embeddings.picture", description=__doc__.split("\n")[0])
  p.add_argument("--init", required=True, help='the checkpoint: "hf:all-MiniLM-L6-v2", "hf:DIR" or "run:WORKDIR"')
  p.add_argument("--word", required=True, help="the word (a SemCor lemma when coloured by sense)")
  p.add_argument("--out", required=True, help="the PNG to write")
  p.add_argument("--input", help="text file, one text per line (default: SemCor, else WikiText-2 train)")
  p.add_argument("--labels", help="one label per line of --input")
  p.add_argument("--forms", help="comma-separated word forms to collect (default: --word)")
  p.add_argument("--layers", default="last", help='one layer or a mix: "last", "3", "last4_mean"')
  p.add_argument("--projection", default="auto", choices=PROJECTIONS)
  p.add_argument("--annotate", type=cli.integer(0), default=6, help="occurrences annotated with their context")
  p.add_argument("--max-points", type=cli.integer(1), default=2000,
                 help="draw at most this many occurrences (the first)")
  return p


def main(argv: Sequence[str] | None = None) -> None:
  """Draws the picture (module docstring); the last line is one JSON object."""
  args = parser().parse_args(argv)
  if args.labels and not args.input:
    raise errors.UserError("--labels needs --input (one label per input line)")
  if Path(args.out).is_dir():
    raise errors.UserError(f"{args.out}: --out must be the PNG file to write, found a directory")
  forms = [form.strip() for form in (args.forms or args.word).split(",") if form.strip()]
  found, source = occurrences(args, forms)
  found.positions, found.labels = found.positions[:args.max_points], found.labels[:args.max_points]
  if not found.positions:
    raise errors.UserError(f"no occurrence of {forms} in {source}")
  report = sense_picture(Embedder.from_init(args.init), found, args.out, word=args.word, layers=args.layers,
                         projection=args.projection, annotate=args.annotate)
  print(f"{report['points']} occurrences of {forms} from {source} -> {report['path']} ({report['projection']})")
  for label, count in report["labels"].items():
    print(f"  {count:5d}  {label}")
  print(json.dumps({"source": source, **report}))


if __name__ == "__main__":
  errors.run(main)

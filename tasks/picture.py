"""Draw a word's contextual embeddings in 2-D, coloured by sense (spec, "Contextual Embeddings and Word Sense").

  python -m tasks.picture --init hf:all-MiniLM-L6-v2 --word die --out die.png \\
      [--input FILE [--labels FILE]] [--forms die,died,dies,dying] [--layers last] [--projection auto|pca|umap] \\
      [--annotate 6]

Occurrences: the words equal to one of --forms (default: --word; case-insensitive). Without --input they are
SemCor's tokens tagged with a sense of --word, coloured by WordNet sense (from the data directory), or, when SemCor
is absent or never tags the word, WikiText-2 train's occurrences. --input: one text per line, whitespace-separated
words; --labels: one label per line of --input (same number of lines), the colour of that line's occurrences.
PCA by default; UMAP with --projection umap (or auto) when umap-learn is installed. The last line is one JSON object.
"""

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from configs import paths
from encoder.hf_checkpoint import CheckpointError
from tasks.embeddings import picture
from tasks.embeddings.extract import Embedder
from tasks.readers.lines import ReaderError, numbered_lines


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


def occurrences(args: argparse.Namespace, forms: list[str]) -> tuple[picture.Occurrences, str]:
  """The occurrences to draw and where they came from."""
  if args.input:
    sentences, labels = read_text_and_labels(args.input, args.labels)
    return picture.find_occurrences(sentences, forms, labels, default_label=Path(args.input).name), args.input
  root = paths.data_dir()
  semcor, wordnet = (None, None) if root is None else (root / "semcor/semcor3.0", root / "wordnet/wordnet-3.0")
  if semcor is not None and semcor.is_dir():
    found = picture.semcor_occurrences(semcor, args.word, wordnet if wordnet.is_dir() else None, forms)
    if found.positions:
      return found, str(semcor)
  wikitext = paths.data_file("wikitext-2/raw/wiki.train.raw")
  sentences = [line.split() for _, line in numbered_lines(wikitext)]
  return picture.find_occurrences(sentences, forms, default_label="WikiText-2 (no sense labels)"), str(wikitext)


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="python -m tasks.picture", description=__doc__.split("\n")[0])
  p.add_argument("--init", required=True, help='the checkpoint: "hf:all-MiniLM-L6-v2", "hf:DIR" or "run:WORKDIR"')
  p.add_argument("--word", required=True, help="the word (a SemCor lemma when coloured by sense)")
  p.add_argument("--out", required=True, help="the PNG to write")
  p.add_argument("--input", help="text file, one text per line (default: SemCor, else WikiText-2 train)")
  p.add_argument("--labels", help="one label per line of --input")
  p.add_argument("--forms", help="comma-separated word forms to collect (default: --word)")
  p.add_argument("--layers", default="last", help='one layer or a mix: "last", "3", "last4_mean"')
  p.add_argument("--projection", default="auto", choices=picture.PROJECTIONS)
  p.add_argument("--annotate", type=int, default=6, help="occurrences annotated with their context")
  p.add_argument("--max-points", type=int, default=2000, help="draw at most this many occurrences (the first)")
  return p


def main(argv: Sequence[str] | None = None) -> None:
  args = parser().parse_args(argv)
  if args.labels and not args.input:
    sys.exit("error: --labels needs --input (one label per input line)")
  forms = [form.strip() for form in (args.forms or args.word).split(",") if form.strip()]
  try:
    found, source = occurrences(args, forms)
    found.positions, found.labels = found.positions[:args.max_points], found.labels[:args.max_points]
    if not found.positions:
      raise ValueError(f"no occurrence of {forms} in {source}")
    report = picture.sense_picture(Embedder.from_init(args.init), found, args.out, word=args.word,
                                   layers=args.layers, projection=args.projection, annotate=args.annotate)
  except (ReaderError, FileNotFoundError, CheckpointError, ValueError) as err:
    sys.exit(f"error: {err}")
  print(f"{report['points']} occurrences of {forms} from {source} -> {report['path']} ({report['projection']})")
  for label, count in report["labels"].items():
    print(f"  {count:5d}  {label}")
  print(json.dumps({"source": source, **report}))


if __name__ == "__main__":
  main()

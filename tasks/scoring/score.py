"""Score prediction files against gold, and compare two systems with the paired bootstrap.

  python -m tasks.scoring.score conll  --gold FILE --pred FILE [--mode conlleval|strict] [--scheme IOB1|IOB2|IOE|BIOES]
  python -m tasks.scoring.score labels --gold FILE --pred FILE
  python -m tasks.scoring.score scores --gold FILE --pred FILE
  python -m tasks.scoring.score squad  --gold dev-v1.1.json --pred predictions.json
  python -m tasks.scoring.score spans  --gold dev.jsonl --pred runs/X/predictions/dev.jsonl [--scheme IOB2]
  python -m tasks.scoring.score bootstrap --gold FILE --pred-a A --pred-b B [--samples 10000] [--seed 0]
                                  [--task conll|labels|scores|squad]

CoNLL files: one token per line, the tag in the LAST whitespace-separated column, blank lines between
sentences, `-DOCSTART-` lines skipped. Label files: one example per non-blank line, the label in the last
column; score files (regression) the same with a number there. SQuAD: the gold is SQuAD JSON (v1.1 or v2.0; or a
run's predictions/<split>.jsonl), the predictions the official {question id: answer text} JSON (tasks.scoring.squad).
Spans: the gold is a span file (JSON lines {"words", "spans"}; spans may nest), the predictions a word task's
predictions/<split>.jsonl, the same sentences in order, each "prediction" a span run's [[start, end, type], ...] or a
tagger's tags (--scheme; words past max_length untagged); scored as exact-match span sets, the outer and the inner
(nested) entities also apart, so a flat tagger is scored against nested gold as a nested run is.
Every score (table and JSON) is a fraction in
[0, 1] (correlations in [-1, 1]; MSE in the data's units); the last printed line is one JSON object.

Nothing is scored from a file that is not UTF-8, holds no sentences (labels), is misaligned with gold, or has a tag
that is not O or B-, I-, E-, S- + a type (in --mode strict: a tag of --scheme): one line `error: path:line: ...`
on stderr and exit status 1 instead.
"""

import argparse
import json
from typing import Any, Sequence

from encoder import errors
from tasks.scoring import bootstrap, metrics, squad, tag_schemes
from tasks.readers.lines import ReaderError, numbered_lines
from tasks.readers.spans import read_spans_jsonl

Column = tuple[list[list[str]], list[list[int]]]  # (sentences of tags, their 1-based line numbers)
LENIENT_SCHEME = "BIOES"  # conlleval mode reads any scheme: O or B-, I-, E-, S- + a type.


def read_tag_column(path: str) -> Column:
  """Sentences of last-column tags from a CoNLL file, with the line number of every tag; none is an error, and so
  is a token line whose number of columns differs from the first one's (conlleval refuses such a file too)."""
  sentences, lines, tags, numbers = [], [], [], []
  width = first = None
  for number, line in numbered_lines(path):
    fields = line.split()
    if fields and not fields[0].startswith("-DOCSTART-"):
      width, first = (len(fields), number) if width is None else (width, first)
      if len(fields) != width:
        raise ReaderError(path, number, f"{width} whitespace-separated columns as in line {first}, got "
                          f"{len(fields)}: {line.strip()!r}")
      tags.append(fields[-1])
      numbers.append(number)
    elif tags:  # A blank (or -DOCSTART-) line closes the sentence.
      sentences.append(tags)
      lines.append(numbers)
      tags, numbers = [], []
  if tags:
    sentences.append(tags)
    lines.append(numbers)
  if not sentences:
    raise errors.UserError(f"{path}: expected sentences (token lines 'word ... TAG', a blank line between "
                        "sentences), found none")
  return sentences, lines


def read_label_column(path: str) -> Column:
  """Labels (last column of each non-blank line) as one-token 'sentences', with their line numbers; none is an
  error."""
  rows = [(line.split()[-1], n) for n, line in numbered_lines(path) if line.strip()]
  if not rows:
    raise errors.UserError(f"{path}: expected one example per line (the label or score in the last column), found none")
  return [[label] for label, _ in rows], [[n] for _, n in rows]


def read_score_column(path: str) -> tuple[list[float], list[int]]:
  """Numbers (last column of each non-blank line) with their line numbers; a non-number names its line."""
  labels, lines = read_label_column(path)
  values = []
  for (text,), (number,) in zip(labels, lines):
    try:
      values.append(float(text))
    except ValueError:
      raise ReaderError(path, number, f"a number in the last column, got {text!r}") from None
  return values, [n for (n,) in lines]


def load_scores(gold_path: str, pred_paths: Sequence[str]) -> tuple[list[float], list[list[float]]]:
  """Gold and predicted numbers, one per example; files of different lengths fail naming both."""
  gold, _ = read_score_column(gold_path)
  preds = []
  for path in pred_paths:
    pred, lines = read_score_column(path)
    if len(pred) != len(gold):
      raise errors.UserError(f"{path}: {len(pred)} scores but {gold_path} has {len(gold)}"
                          + (f" (line {lines[len(gold)]} is the first extra)" if len(pred) > len(gold) else "")
                          + ": the files must have the same examples")
    preds.append(pred)
  return gold, preds


def check_aligned(gold_path: str, gold: Column, pred_path: str, pred: Column, unit: str = "token") -> None:
  """Raises a UserError at the first sentence (or label) boundary where pred does not line up with gold."""
  (gold_tags, gold_lines), (pred_tags, pred_lines) = gold, pred
  for i, (g, p) in enumerate(zip(gold_lines, pred_lines)):
    if len(g) != len(p):
      j = min(len(g), len(p))
      at = lambda lines: lines[j] if j < len(lines) else lines[-1] + 1
      raise errors.UserError(f"{pred_path}:{at(p)}: sentence {i + 1} has {len(p)} {unit}s but in {gold_path} "
                          f"(line {at(g)}) it has {len(g)}: pred needs the same {unit}s and blank lines as gold")
  if len(gold_tags) != len(pred_tags):
    longer, lines = (gold_path, gold_lines) if len(gold_tags) > len(pred_tags) else (pred_path, pred_lines)
    short, groups = min(len(gold_tags), len(pred_tags)), "sentences" if unit == "token" else "labels"
    raise errors.UserError(f"{longer}:{lines[short][0]}: {gold_path} has {len(gold_tags)} {groups} and "
                        f"{pred_path} has {len(pred_tags)}: the files must have the same {groups}")


def check_scheme(path: str, column: Column, scheme: str, mode: str = "strict") -> None:
  """Raises a ReaderError at the first tag that is not of the scheme: strict mode needs `scheme`'s tags, conlleval
  mode O or B-, I-, E-, S- + a type (any scheme); a word ('Peter') or another prefix ('X-PER') is never scored."""
  for tags, lines in zip(*column):
    for tag, line in zip(tags, lines):
      if mode == "strict" and not tag_schemes.is_scheme_tag(tag, scheme):
        raise ReaderError(path, line, f"a tag of the {tag_schemes.canonical_scheme(scheme)} scheme in the last column, "
                          f"got {tag!r}; use --mode conlleval or the --scheme the file is written in")
      if mode != "strict" and not tag_schemes.is_scheme_tag(tag, LENIENT_SCHEME):
        raise ReaderError(path, line, f"a tag in the last column: O or B-, I-, E-, S- + a type (e.g. B-PER), got "
                          f"{tag!r}")


def load(args: argparse.Namespace, pred_paths: Sequence[str], task: str) -> tuple[list[list[str]], list]:
  """Gold and each prediction file (tags per sentence, or [label] per example), checked against gold."""
  read, unit = (read_tag_column, "token") if task == "conll" else (read_label_column, "label")
  gold = read(args.gold)
  if task == "conll":
    check_scheme(args.gold, gold, args.scheme, args.mode)
  preds = []
  for path in pred_paths:
    pred = read(path)
    check_aligned(args.gold, gold, path, pred, unit)
    if task == "conll":
      check_scheme(path, pred, args.scheme, args.mode)
    preds.append(pred[0])
  return gold[0], preds


def format_table(scores: dict[str, Any], first: str) -> str:
  """Per-class rows then micro/macro/weighted averages, as fractions."""
  head = f"{first:<14}{'precision':>10}{'recall':>10}{'f1':>10}{'gold':>8}{'pred':>8}{'tp':>8}"
  row = lambda name, r: (f"{name:<14}{r['precision']:>10.4f}{r['recall']:>10.4f}{r['f1']:>10.4f}"
                         f"{r.get('gold', r['support']):>8}{r.get('pred', ''):>8}{r.get('tp', ''):>8}")
  rows = [row(name, r) for name, r in scores["per_type"].items()]
  rows += [row(f"{avg} avg", scores[avg]) for avg in ("micro", "macro", "weighted")]
  return "\n".join([head] + rows + ([f"{'accuracy':<14}{scores['accuracy']:>10.4f}"] if "accuracy" in scores else []))


def regression_command(args: argparse.Namespace) -> dict[str, Any]:
  """`scores`: Pearson, Spearman and MSE of predicted numbers."""
  gold, (pred,) = load_scores(args.gold, [args.pred])
  scores = metrics.regression_scores(gold, pred)
  print("  ".join(f"{name} {value:.4f}" for name, value in scores.items()))
  return dict(task="scores", **scores, examples=len(gold))


def squad_command(args: argparse.Namespace) -> dict[str, Any]:
  """`squad`: exact match and F1 as the official evaluation script defines them (as fractions)."""
  ids, golds, version2 = squad.read_gold(args.gold)
  result = squad.scores(golds, squad.read_predictions(args.pred, ids), version2)
  print(f"exact_match {result['exact_match']:.4f}  f1 {result['f1']:.4f}")
  return dict(task="squad", **result, questions=len(ids), version="2.0" if version2 else "1.1")


def read_predicted_spans(path: str, gold: Sequence[dict], gold_path: str, scheme: str) -> list[set]:
  """Each sentence's predicted (type, start, end) spans from a run's predictions/<split>.jsonl, checked line by line
  against the gold sentences."""
  rows = [(n, line) for n, line in numbered_lines(path) if line.strip()]
  if len(rows) != len(gold):
    raise errors.UserError(f"{path}: {len(rows)} sentences but {gold_path} has {len(gold)}: the files must have the "
                           "same sentences")
  predicted = []
  for (number, line), record in zip(rows, gold):
    try:
      row = json.loads(line)
    except json.JSONDecodeError as err:
      raise ReaderError(path, number, f"a JSON object (a run's prediction line); invalid JSON: {err.msg}") from None
    if not isinstance(row, dict) or row.get("words") != record["words"] or not isinstance(row.get("prediction"), list):
      raise ReaderError(path, number, 'a run\'s prediction line {"words", ..., "prediction"} with the words of '
                        f"the same sentence in {gold_path}")
    prediction = row["prediction"]
    if all(isinstance(tag, str) for tag in prediction):  # A tagger's tags.
      if not all(tag_schemes.is_scheme_tag(tag, LENIENT_SCHEME) for tag in prediction):
        raise ReaderError(path, number, f"tags O or B-, I-, E-, S- + a type, got {prediction[:8]!r}")
      predicted.append(set(tag_schemes.spans_from_tags(prediction, scheme)))
    elif all(isinstance(s, list) and len(s) == 3 for s in prediction):
      predicted.append({(label, start, end) for start, end, label in prediction})
    else:
      raise ReaderError(path, number, f'a "prediction" of [start, end, type] spans or of tags, got {prediction[:4]!r}')
  return predicted


def spans_command(args: argparse.Namespace) -> dict[str, Any]:
  """`spans`: exact-match span P/R/F1 per type and micro, and the outer and inner entities apart."""
  gold_records = list(read_spans_jsonl(args.gold))
  gold = [{(s["label"], s["start"], s["end"]) for s in r["spans"]} for r in gold_records]
  pairs = list(zip(gold, read_predicted_spans(args.pred, gold_records, args.gold, args.scheme)))
  types, counts = metrics.span_counts(pairs)
  scores = metrics.scores_from_counts(types, counts.sum(axis=0))
  nesting = metrics.nesting_scores(pairs)
  print(format_table(scores, "type"))
  print("  ".join(f"{name} {value:.4f}" for name, value in nesting.items()))
  average = scores["micro"]
  return dict(task="spans", precision=average["precision"], recall=average["recall"], f1=average["f1"], **nesting,
              sentences=len(gold))


def score_command(args: argparse.Namespace) -> dict[str, Any]:
  """`conll` / `labels`: print the table, return the summary."""
  gold, (pred,) = load(args, [args.pred], args.command)
  if args.command == "conll":
    scores = metrics.entity_scores(gold, pred, args.mode, args.scheme)
    average = scores["micro"]
    extra = dict(mode=args.mode, scheme=tag_schemes.canonical_scheme(args.scheme), sentences=len(gold),
                 tokens=sum(map(len, gold)))
  else:
    scores = metrics.label_scores([g[0] for g in gold], [p[0] for p in pred])
    average = scores["macro"]
    extra = dict(examples=len(gold))
  print(format_table(scores, "type" if args.command == "conll" else "label"))
  return dict(task=args.command, precision=average["precision"], recall=average["recall"], f1=average["f1"],
              accuracy=scores["accuracy"], **extra)


def bootstrap_command(args: argparse.Namespace) -> dict[str, Any]:
  """`bootstrap`: paired bootstrap p-value that A beats B (entity micro F1 for conll, accuracy for labels, Pearson's
  r for scores, the mean per-question F1 for squad)."""
  if args.task == "scores":
    gold, (a, b) = load_scores(args.gold, [args.pred_a, args.pred_b])
    result, name = bootstrap.pearson_bootstrap(gold, a, b, args.samples, args.seed), "pearson"
  elif args.task == "squad":
    ids, golds, version2 = squad.read_gold(args.gold)
    a, b = (squad.read_predictions(path, ids) for path in (args.pred_a, args.pred_b))
    result, name = bootstrap.squad_f1_bootstrap(golds, a, b, args.samples, args.seed, version2), "f1"
  else:
    gold, (a, b) = load(args, [args.pred_a, args.pred_b], args.task)
  if args.task == "conll":
    result, name = bootstrap.entity_f1_bootstrap(gold, a, b, args.samples, args.seed, args.mode, args.scheme), "f1"
  elif args.task == "labels":
    result, name = bootstrap.accuracy_bootstrap(gold, a, b, args.samples, args.seed), "accuracy"
  print(f"{name}: A {result.metric_a:.4f}  B {result.metric_b:.4f}  delta {result.delta:+.4f}")
  print(f"p-value that A beats B: {result.p_value:.4f} ({result.samples} samples, seed {result.seed})"
        + ("" if result.delta > 0 else "  [delta <= 0: A does not beat B on this test set]"))
  return dict(task=args.task, metric=name, a=result.metric_a, b=result.metric_b, delta=result.delta,
              p_value=result.p_value, samples=result.samples, seed=result.seed)


def parser() -> argparse.ArgumentParser:
  """The command-line interface (see the module docstring)."""
  root = argparse.ArgumentParser(prog="python -m tasks.scoring.score", description=__doc__.split("\n")[0])
  commands = root.add_subparsers(dest="command", required=True)
  for name in ("conll", "labels", "scores", "squad", "spans", "bootstrap"):
    sub = commands.add_parser(name)
    sub.add_argument("--gold", required=True, help="gold file")
    if name == "bootstrap":
      sub.add_argument("--pred-a", required=True, help="system A's predictions (is A better than B?)")
      sub.add_argument("--pred-b", required=True, help="system B's predictions")
      sub.add_argument("--samples", type=int, default=10_000, help="bootstrap samples b")
      sub.add_argument("--seed", type=int, default=0, help="seed of the resampling")
      sub.add_argument("--task", choices=("conll", "labels", "scores", "squad"), default="conll")
    else:
      sub.add_argument("--pred", required=True, help="predictions, aligned line by line with gold")
    if name not in ("labels", "scores", "squad", "spans"):
      sub.add_argument("--mode", choices=("conlleval", "strict"), default="conlleval",
                       help="conlleval: lenient chunking (seqeval default); strict: only well-formed entities")
    if name not in ("labels", "scores", "squad"):
      sub.add_argument("--scheme", type=str.upper, default="IOB2", choices=sorted(tag_schemes.SCHEME_NAMES),
                       help="tag scheme for --mode strict (spans: of a tagger's predictions): IOB1, IOB2 (= BIO), IOE, "
                            "BIOES (= IOBES), IO")
  return root


def score_files(argv: Sequence[str] | None = None) -> None:
  """Parses the command line, scores, prints the table and the JSON summary."""
  args = parser().parse_args(argv)
  commands = {"bootstrap": bootstrap_command, "scores": regression_command, "squad": squad_command,
              "spans": spans_command}
  print(json.dumps(commands.get(args.command, score_command)(args)))


def main(argv: Sequence[str] | None = None) -> None:
  """`score` with user errors (a missing file, a bad tag, misaligned files) as one line `error: path:line: ...`."""
  errors.run(score_files, argv)


if __name__ == "__main__":
  main()

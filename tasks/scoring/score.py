"""Score prediction files against gold, and compare two systems with the paired bootstrap.

  python -m tasks.scoring.score conll  --gold FILE --pred FILE [--mode conlleval|strict] [--scheme IOB1|IOB2|IOE|BIOES]
  python -m tasks.scoring.score labels --gold FILE --pred FILE
  python -m tasks.scoring.score scores --gold FILE --pred FILE
  python -m tasks.scoring.score squad  --gold dev-v1.1.json --pred predictions.json
  python -m tasks.scoring.score spans  --gold dev.jsonl --pred runs/X/predictions/dev.jsonl [--scheme IOB2]
  python -m tasks.scoring.score bootstrap --gold FILE --pred-a A --pred-b B [--samples 10000] [--seed 0]
                                  [--task conll|labels|scores|squad]

A subcommand per scoring kind of tasks.scoring.kinds (its readers in tasks.scoring.columns).

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
on stderr and exit status 1 instead. Prediction files are checked as gold files are: a score that is not a finite
number, a question id given twice or an answer that is not a string, a span outside its sentence, a duplicate span,
or span fields in another order than [start, end, type] are refused at their line in either file.
"""

import argparse
import json
from collections.abc import Sequence
from typing import Any

from encoder import cli, errors
from tasks.scoring import kinds, tag_schemes


def bootstrap_command(args: argparse.Namespace) -> dict[str, Any]:
  """`bootstrap`: paired bootstrap p-value that A beats B on the --task kind's metric (tasks.scoring.kinds: entity
  micro F1 for conll, accuracy for labels, Pearson's r for scores, the mean per-question F1 for squad)."""
  bootstrap = kinds.KINDS[args.task].bootstrap
  if bootstrap is None:
    raise errors.UserError(f"task {args.task!r} has no paired bootstrap: use one of {list(kinds.bootstrapped())}")
  result, name = bootstrap(args)
  print(f"{name}: A {result.metric_a:.4f}  B {result.metric_b:.4f}  delta {result.delta:+.4f}")
  print(f"p-value that A beats B: {result.p_value:.4f} ({result.samples} samples, seed {result.seed})"
        + ("" if result.delta > 0 else "  [delta <= 0: A does not beat B on this test set]"))
  return dict(task=args.task, metric=name, a=result.metric_a, b=result.metric_b, delta=result.delta,
              p_value=result.p_value, samples=result.samples, seed=result.seed)


def _add_options(sub: argparse.ArgumentParser, options: Sequence[str]) -> None:
  """The chunking options a kind (or the bootstrap) reads."""
  if "mode" in options:
    sub.add_argument("--mode", choices=("conlleval", "strict"), default="conlleval",
                     help="conlleval: lenient chunking (seqeval default); strict: only well-formed entities")
  if "scheme" in options:
    sub.add_argument("--scheme", type=str.upper, default="IOB2", choices=sorted(tag_schemes.SCHEME_NAMES),
                     help="tag scheme for --mode strict (spans: of a tagger's predictions): IOB1, IOB2 (= BIO), IOE, "
                          "BIOES (= IOBES), IO")


def parser() -> argparse.ArgumentParser:
  """The command-line interface (see the module docstring): a subcommand per scoring kind, and `bootstrap`."""
  root = cli.ArgumentParser(prog="python -m tasks.scoring.score", description=__doc__.split("\n")[0])
  commands = root.add_subparsers(dest="command", required=True)
  for name, kind in kinds.KINDS.items():
    sub = commands.add_parser(name)
    sub.add_argument("--gold", required=True, help="gold file")
    sub.add_argument("--pred", required=True, help="predictions, aligned line by line with gold")
    _add_options(sub, kind.options)
  sub = commands.add_parser("bootstrap")
  sub.add_argument("--gold", required=True, help="gold file")
  sub.add_argument("--pred-a", required=True, help="system A's predictions (is A better than B?)")
  sub.add_argument("--pred-b", required=True, help="system B's predictions")
  sub.add_argument("--samples", type=cli.integer(1), default=10_000, help="bootstrap samples b")
  sub.add_argument("--seed", type=cli.integer(0), default=0, help="seed of the resampling")
  sub.add_argument("--task", choices=kinds.bootstrapped(), default="conll")
  _add_options(sub, ("mode", "scheme"))
  return root


def score_files(argv: Sequence[str] | None = None) -> None:
  """Parses the command line, scores, prints the table and the JSON summary."""
  args = parser().parse_args(argv)
  command = bootstrap_command if args.command == "bootstrap" else kinds.KINDS[args.command].score
  print(json.dumps(command(args)))


def main(argv: Sequence[str] | None = None) -> None:
  """`score` with user errors (a missing file, a bad tag, misaligned files) as one line `error: path:line: ...`."""
  errors.run(score_files, argv)


if __name__ == "__main__":
  main()

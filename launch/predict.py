"""Label new data with a fine-tuned run: its config.json, the parameters of its best-dev (or latest) checkpoint, and
the evaluation's own code paths.

  python -m launch.predict --workdir runs/conll --input new.txt                 # JSON lines, one per input line
  echo "EU rejects German call" | python -m launch.predict --workdir runs/conll --input - --output conll
  python -m launch.predict --workdir runs/sick --input pairs.tsv --format tsv --out predictions.jsonl
  python -m launch.predict --workdir runs/squad --input questions.jsonl --format jsonl   # {"question", "context"}
  python -m launch.predict --workdir runs/copa --input items.txt   # context<TAB>choice 1<TAB>choice 2[<TAB>...]

  from launch.predict import Predictor
  Predictor.from_workdir("runs/conll").predict(["EU rejects German call to boycott British lamb ."])

Inputs are encoded as the run encoded its data (`tasks.finetune_data.split_of`), batched into the run's length buckets
with its evaluation batch size (`tasks.finetune_data.eval_batches`: a handful of jit shapes, each compiled once), run
through the same jitted outputs and decoded by the same functions as the run's evaluation
(`tasks.evaluation.device_outputs` and `decode`, through the run's task family: argmax or CRF Viterbi as trained,
tags in the trained scheme, span NER with the threshold tuned on dev). So the dev split gives back the run's own
`predictions/dev.*` (tested). The program is the evaluation's own (`launch.programs.outputs_program`, on a mesh of
the first device): after a run on one device, the persistent compilation cache holds it for each dev and test batch
shape, compiled ahead during training, so predict compiles only shapes the run never evaluated.

Raw text for word tasks is split into words the way CoNLL-2003 and UD English were tokenized (`split_words`).
"""

import argparse
import dataclasses
import functools
import json
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import ml_collections

from encoder import cli, errors, files, init_from
from encoder.config import AUTO, PLATFORM_FIELDS
from encoder.files import Path
from encoder.tokenizer import load_tokenizer
from launch import checkpointing, compilation_cache, sharding, xla_flags
from launch.model import EncoderWithHeads, run_encoder_config
from launch.programs import outputs_program
from tasks import alignment, evaluation, finetune_data, registry, tfds_builders
from tasks.family import TaskFamily
from tasks.readers import UD_WORDS, ReaderError, numbered_lines, read_conllu, read_tsv
from tasks.readers.lines import json_objects

FORMATS = ("text", "words", "tsv", "conll", "conllu", "jsonl")
STDIN = "-"

# Words as CoNLL-2003 and UD English-EWT have them (Penn Treebank conventions): abbreviations and initials (U.S., e.g.,
# J., Mr., Inc.) and numbers with inner punctuation (1,000.5 10:30 1996-08-30) stay whole, the clitics n't 's 're 've
# 'll 'm 'd are split off ("don't" -> "do n't"), a run of one punctuation character is a word ("...", "!!!"), every
# other non-alphanumeric character is a word of its own. Hyphenated words stay whole for CoNLL-2003 and are split for
# UD, which tokenizes "Al-Zaman" as "Al - Zaman". (On the sentences of tasks/sample_ud, split_words(`# text`) gives
# exactly the treebank's words for 280 of the 314 training sentences and 182 of the 208 held-out ones.)
_CLITIC = r"n['’]t\b|['’](?:s|re|ve|ll|m|d)\b"
_WORD_PARTS = (r"(?:[^\W\d_]\.)+|(?:Mr|Mrs|Ms|Dr|Prof|St|Jr|Sr|Inc|Ltd|Co|Corp|vs|etc)\.", r"\d+(?:[.,:/-]\d+)*",
               r"\w+(?=n['’]t\b)", _CLITIC)
_WORDS = {hyphens: re.compile("|".join(_WORD_PARTS + ((r"\w+",) if hyphens else (r"\w+(?:-\w+)*",))
                                       + (r"([^\w\s])\1*",)), re.IGNORECASE)
          for hyphens in (True, False)}


def split_words(text: str, split_hyphens: bool = False) -> list[str]:
  """'I don't like U.S. fast-food.' -> ['I', 'do', "n't", 'like', 'U.S.', 'fast-food', '.'] (UD: split_hyphens)."""
  return [match.group(0) for match in _WORDS[split_hyphens].finditer(text)]


def word_pattern(task: ml_collections.ConfigDict) -> str:
  """The regular expression (re.IGNORECASE) whose matches are the words `split_words` makes of raw text for a run
  with config.task `task` (UD-style when it trained on CoNLL-U): what an HF export's pipeline splits text with."""
  return _WORDS[reader_options(task)["format"] in UD_WORDS].pattern


def run_config(workdir: Path, expected: str) -> ml_collections.ConfigDict:
  """The resolved config a run saved in workdir/config.json; `expected` says which run the command takes, e.g. "a
  fine-tuning run: python -m launch.main --config configs/finetune.py:... --workdir DIR"."""
  path = workdir / "config.json"
  if not path.is_file():
    raise errors.UserError(f"{path} does not exist: {workdir} is not a run directory (give the --workdir of "
                           f"{expected})")
  try:
    config = ml_collections.ConfigDict(files.read_json(path))
  except (json.JSONDecodeError, UnicodeDecodeError) as err:
    raise errors.UserError(f"{path}: expected the JSON config the run wrote, found unreadable text ({err})") from None
  if not isinstance(config.get("model"), ml_collections.ConfigDict):
    raise errors.UserError(f"{path}: expected the config.json a run wrote (with a model block), found keys "
                           f"{sorted(config.keys())[:8]}")
  if isinstance(config.get("task"), ml_collections.ConfigDict):  # Fields added since the run: their defaults.
    config.task = ml_collections.ConfigDict(registry.complete_task(config.task.to_dict()))
  return config


def read_config(workdir: Path) -> ml_collections.ConfigDict:
  """The resolved config a fine-tuning run saved in workdir/config.json."""
  config = run_config(workdir, "a fine-tuning run: python -m launch.main --config configs/finetune.py:... "
                      "--workdir DIR")
  path = workdir / "config.json"
  if not isinstance(config.get("task"), ml_collections.ConfigDict):
    raise errors.UserError(f"{path}: expected a fine-tuning run (a config with a task block); this is a pretraining "
                           "run, which has no task head to predict with")
  return config


def read_results(workdir: Path) -> dict[str, Any]:
  """The run's results.json ({} when it has none)."""
  path = workdir / "results.json"
  return files.read_json(path) if path.is_file() else {}


def labels_and_buckets(config: ml_collections.ConfigDict, results: dict[str, Any]
                       ) -> tuple[list[str], tuple[int, ...]]:
  """The run's label vocabulary (index order) and evaluation length buckets: from results.json when it records them,
  else rebuilt from the training split exactly as the run built them (`tasks.finetune_data.load`)."""
  if "labels" in results and "buckets" in results:
    return list(results["labels"]), tuple(results["buckets"])
  try:
    data = finetune_data.load(config)
  except (OSError, ValueError) as err:
    raise errors.UserError(f"the run's results.json does not record its labels and length buckets, and reading its "
                        f"training data to rebuild them failed: {err}") from None
  return data.task["labels"], data.buckets


def restore_params(workdir: Path, config: ml_collections.ConfigDict, checkpoint: str = "best") -> tuple[int, Any]:
  """(step, evaluation parameters) of the best-dev checkpoint (as the run's test predictions) or the latest one.

  Only the parameters are read (orbax partial restore): the moving average when the run kept one
  (`launch.optimizer.evaluation_params`), else the trained parameters.
  """
  if checkpoint not in ("best", "latest"):
    raise errors.UserError(f"checkpoint={checkpoint!r}: expected 'best' or 'latest'")
  best = None
  if checkpoint == "best" and (workdir / "checkpoints").is_dir():
    manager = checkpointing.create_manager(workdir, config)
    best = checkpointing.best_step(manager, config.best_metric, config.best_mode)
    manager.close()
  return init_from.run_params(workdir, best, evaluation=True)


def reader_options(task: ml_collections.ConfigDict) -> dict[str, Any]:
  """The run's reader options (TSV columns, header) and format: its tfds preset's or its task.columns."""
  if task.dataset:
    preset = tfds_builders.PRESETS[task.dataset]
    return dict(preset.options) | {"format": preset.format}
  return finetune_data.reader_options(task.columns) | {"format": task.format}


@dataclasses.dataclass(frozen=True)
class Predictor:
  """A fine-tuned run ready to label new inputs (build it with `Predictor.from_workdir`)."""
  family: TaskFamily  # The run's task family, built from its task mapping (tasks.finetune_data.task_mapping).
  tokenizer: Any
  params: Any  # On the first device.
  outputs: Callable  # jitted (params, batch) -> per-row outputs (launch.programs.outputs_program, as the run's).
  to_device: Callable  # A host batch -> the program's input layout.
  batch_size: int  # The run's evaluation batch (rows per jit call).
  buckets: tuple[int, ...]  # The run's padded token lengths (jit shapes).
  threshold: float | None  # A decoding threshold the run tuned on dev (results.json), if any.
  reader_options: dict[str, Any]  # The run's data format and reader options (TSV columns, header).
  step: int  # The checkpoint's step.

  @classmethod
  def from_workdir(cls, workdir: str | Path, checkpoint: str = "best") -> "Predictor":
    """The run in `workdir` with its best-dev ("best") or newest ("latest") checkpoint."""
    workdir = files.reachable(workdir)
    config = read_config(workdir)
    step, params = restore_params(workdir, config, checkpoint)
    results = read_results(workdir)
    labels, buckets = labels_and_buckets(config, results)
    family = registry.family(finetune_data.task_mapping(config.task, labels))
    tokenizer = load_tokenizer(config.data.tokenizer)
    # The run's platform choices may not run (cudnn on a CPU) or suit this machine; the values agree to rounding.
    config.model.update(dict.fromkeys(PLATFORM_FIELDS, AUTO))
    model = EncoderWithHeads(run_encoder_config(config, tokenizer.vocab_size), (family.objective(),))
    # The run's evaluation program on a mesh of the first device: after a one-device run, its cached compilations.
    mesh = sharding.make_mesh(1, jax.devices()[:1])
    params_shardings = sharding.state_shardings(params, mesh)
    return cls(family, tokenizer, jax.device_put(params, params_shardings),
               outputs_program(model, family, mesh, params_shardings),
               functools.partial(sharding.global_batch, mesh=mesh, accum=1, parallelism="jit"),
               config.batch_size // config.grad_accum_steps, buckets, results.get("threshold"),
               reader_options(config.task), step)

  @property
  def task(self) -> dict[str, Any]:
    """The run's task mapping."""
    return self.family.task

  @property
  def word_task(self) -> bool:
    """Whether the run labels words rather than whole texts."""
    return self.family.word_level

  @property
  def pairs(self) -> bool:
    """Whether the run reads two texts per input (the family's `reads_pairs`: sentence pairs, a question and its
    context)."""
    return self.family.reads_pairs(self.reader_options)

  @property
  def split_hyphens(self) -> bool:
    """Whether raw text is split UD-style (the run trained on a format of UD's words: CoNLL-U)."""
    return self.reader_options["format"] in UD_WORDS

  def words_kept(self, words: Sequence[str]) -> int:
    """How many of `words` get a prediction: those whose first subword fits the run's task.max_length."""
    encoding = self.tokenizer.encode(list(words), max_length=self.task["max_length"])
    return len(alignment.first_subword_positions(encoding.word_ids))

  def record(self, item: str | Sequence[str] | dict) -> dict:
    """One input as a reader record: text (split into words for word tasks), a word list, texts (a (text_a, text_b)
    pair; the family's `text_record`: a context and its choices), or a record dict ({"words": [...]} or {"text_a":
    ..., "text_b": ...})."""
    if isinstance(item, dict):
      return item
    if self.word_task:
      return {"words": split_words(item, self.split_hyphens) if isinstance(item, str) else list(item)}
    return self.family.text_record([item] if isinstance(item, str) else list(item))

  def predict(self, inputs: Iterable[str | Sequence[str] | dict]) -> list[dict]:
    """One output dict per input, as the run's family writes it (`TaskFamily.output`): e.g. {"label",
    "probabilities"} for classification, {"words", "tags"} for tagging (None for words past max_length)."""
    return self.predict_records([self.record(item) for item in inputs])

  def predict_records(self, records: Sequence[dict], where: Sequence[str] | None = None) -> list[dict]:
    """`predict` for reader records; `where` names each record in an error ("file:line"; default "inputs[i]")."""
    records = [self._checked(where[i] if where else f"inputs[{i}]", r) for i, r in enumerate(records)]
    if not records:
      return []
    unlabelled = [self.family.unlabelled(r) for r in records]
    split = finetune_data.split_of("input", self.family, self.tokenizer, unlabelled)
    raw = evaluation.raw_predictions(self.outputs, self.params, split, batch_size=self.batch_size,
                                     buckets=self.buckets, widths=self.family.widths(), to_device=self.to_device)
    decoded = evaluation.decode(self.family, split, raw, self.threshold)
    return [self.family.output(record, example, r, d) for record, example, r, d in
            zip(records, evaluation.per_record(split, split.examples), evaluation.per_record(split, raw), decoded)]

  def _checked(self, where: str, record: dict) -> dict:
    """The record, or a UserError naming it (`where`) when it cannot be labelled by this run."""
    self.family.check_input(where, record, self.pairs)
    return record

  def conll(self, output: dict) -> str:
    """A word task's output as CoNLL lines `word tag` (tags in the trained scheme; untagged words "O", as the run's
    own .conll files), a blank line after the sentence: what `python -m tasks.scoring.score` reads."""
    return self.family.conll(output)


def read_inputs(path: str, input_format: str, predictor: Predictor) -> tuple[list[dict], list[int]]:
  """(records, the input line of each) from `path` ("-": stdin) in `input_format` (FORMATS); malformed lines raise
  ReaderError naming the file and line."""
  source = "/dev/stdin" if path == STDIN else path
  try:
    if input_format == "jsonl":
      records, lines = _json_lines(source)
    elif input_format == "tsv" and predictor.reader_options["format"] == "tsv":  # The run's own columns.
      records, lines = _tsv(source, predictor)
    elif input_format in ("conll", "conllu"):
      records, lines = _sentences(source, input_format)
    else:
      records, lines = _lines(source, input_format, predictor)
  except ReaderError as err:
    raise ReaderError("<stdin>" if path == STDIN else err.path, err.line, err.expected) from None
  if not records:
    raise errors.UserError(f"{'<stdin>' if path == STDIN else path}: expected at least one input "
                        f"({'a sentence' if predictor.word_task else 'a line'}), found none")
  return records, lines


def _lines(path: str, input_format: str, predictor: Predictor) -> tuple[list[dict], list[int]]:
  """text: one example per non-blank line, its tab-separated texts read by the family (`TaskFamily.line_record`: one
  text, a pair, a context and its choices); words: whitespace-separated words per line."""
  records, lines = [], []
  for number, line in numbered_lines(path):
    if not line.strip():
      continue
    if input_format == "words":
      record = {"words": line.split()}
    elif predictor.word_task:
      record = {"words": split_words(line, predictor.split_hyphens)}
    else:
      record = predictor.family.line_record(path, number, [text.strip() for text in line.split("\t")],
                                            predictor.pairs)
    if predictor.word_task and not record["words"]:
      raise ReaderError(path, number, f"words, got {line!r}")
    records.append(record)
    lines.append(number)
  return records, lines


def _json_lines(path: str) -> tuple[list[dict], list[int]]:
  """One JSON object (a record: {"question", "context"}, {"text_a", "text_b"}, {"words"}) per non-blank line."""
  numbered = list(json_objects(path, '{"question": ..., "context": ...}'))
  return [record for _, record in numbered], [number for number, _ in numbered]


def _tsv(path: str, predictor: Predictor) -> tuple[list[dict], list[int]]:
  """The run's own TSV columns (by header name or index; label and score columns are not needed)."""
  options = predictor.reader_options
  records = list(read_tsv(path, text_a=options["text_a"], text_b=options.get("text_b"),
                          header=options.get("header", True)))
  # read_tsv skips the header and blank lines; number the records by their lines for the output.
  numbers = [n for n, line in numbered_lines(path) if line.strip()][1 if options.get("header", True) else 0:]
  return records, numbers


def _sentences(path: str, input_format: str) -> tuple[list[dict], list[int]]:
  """conll: the first column of each token line, blank lines between sentences, -DOCSTART- skipped; conllu: the FORMs
  of the word lines (multiword ranges and empty nodes skipped, as the CoNLL-U reader does for training)."""
  if input_format == "conllu":
    return [{"words": r["words"]} for r in read_conllu(path)], _block_starts(path)
  records, lines, words, start = [], [], [], 0
  for number, line in numbered_lines(path):
    fields = line.split()
    if fields and fields[0] != "-DOCSTART-":
      words.append(fields[0])
      start = start or number
    elif words:
      records.append({"words": words})
      lines.append(start)
      words, start = [], 0
  if words:
    records.append({"words": words})
    lines.append(start)
  return records, lines


def _block_starts(path: str) -> list[int]:
  """The line of the first word line of each CoNLL-U sentence block (comments skipped)."""
  starts, inside = [], False
  for number, line in numbered_lines(path):
    if not line.strip():
      inside = False
    elif not line.startswith("#") and not inside:
      starts.append(number)
      inside = True
  return starts


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
  parser = cli.ArgumentParser(prog="python -m launch.predict", description=__doc__.split("\n\n")[0])
  parser.add_argument("--workdir", required=True, help="the fine-tuning run's directory (config.json, checkpoints/)")
  parser.add_argument("--checkpoint", choices=("best", "latest"), default="best",
                      help="best-dev checkpoint (what the run's test predictions used) or the newest one")
  parser.add_argument("--input", required=True, help="input file, or - for stdin")
  parser.add_argument("--format", choices=FORMATS, default="text",
                      help="text: one example per line, tab-separated texts as the run's task family reads them "
                           "(pairs, QA's question and context, a context and its choices; word tasks split the line "
                           "into words); words: whitespace-separated words per line; tsv: the run's TSV columns "
                           "(header as in its data); conll: word in the first column, blank line between sentences; "
                           "conllu: CoNLL-U FORMs; jsonl: one JSON record of the run's family per line "
                           "(docs/predict.md lists each family's)")
  parser.add_argument("--output", choices=("jsonl", "conll"), default="jsonl",
                      help="jsonl: one JSON object per input; conll: `word tag` lines (word tasks), what "
                           "`python -m tasks.scoring.score` reads")
  parser.add_argument("--out", default=STDIN, help="output file (default: stdout)")
  return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
  args = parse_args(sys.argv[1:] if argv is None else argv)
  if args.out != STDIN and files.reachable(args.out).is_dir():
    raise errors.UserError(f"--out {args.out}: expected the file to write the predictions to, found a directory")
  xla_flags.apply_gpu_defaults()  # The run's XLA flags (part of a cached program's key), before JAX starts.
  # Where the run cached its programs (a run saved before the field existed: the default).
  compilation_cache.enable(read_config(files.reachable(args.workdir)).get("compilation_cache",
                                                                          compilation_cache.DEFAULT))
  predictor = Predictor.from_workdir(args.workdir, args.checkpoint)
  kind = "word-level" if predictor.word_task else "text"
  if (args.format in ("words", "conll", "conllu")) != predictor.word_task and args.format not in ("text", "jsonl"):
    raise errors.UserError(f"--format {args.format} is for {'text' if predictor.word_task else 'word'}-level tasks; "
                        f"{args.workdir} is a {kind} task ({predictor.task['name']}): use --format "
                        f"{'text, words, conll or conllu' if predictor.word_task else 'text or tsv'}")
  if args.output == "conll" and not predictor.word_task:
    raise errors.UserError(f"--output conll is for word-level tasks; {args.workdir} is a {predictor.task['name']} "
                           "task: use --output jsonl")
  records, lines = read_inputs(args.input, args.format, predictor)
  name = "<stdin>" if args.input == STDIN else args.input
  outputs = predictor.predict_records(records, [f"{name}:{line}" for line in lines])
  cut = [line for line, record in zip(lines, records)
         if predictor.word_task and predictor.words_kept(record["words"]) < len(record["words"])]
  if cut:
    print(f"warning: {len(cut)} of {len(records)} inputs are longer than the run's task.max_length "
          f"({predictor.task['max_length']} subwords): their last words get no prediction (first: {name}:{cut[0]})",
          file=sys.stderr)
  text = "".join(predictor.conll(o) if args.output == "conll" else json.dumps({"line": n} | o, ensure_ascii=False)
                 + "\n" for n, o in zip(lines, outputs))
  if args.out == STDIN:
    sys.stdout.write(text)
  else:
    files.atomic_write(args.out, text)


if __name__ == "__main__":
  errors.run(main)

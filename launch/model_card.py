"""The model card (README.md) `launch.export` writes: what the model computes and how to load it (HF's own class, or
the remote code beside it, with the exact from_pretrained and pipeline calls), the task, the data and its licence,
the dev and test scores of results.json, the init, and a command that trains the run again.

The run's config.json holds the resolved config, not the command line that made it, so `training_command` finds the
command: the config file argument (a configs/finetune.py preset, configs/demo.py, a configs/pretrain.py size and
architecture) whose config differs from the run's in the fewest fields, plus a --config override for each of those
(tested: absl's config flags build the run's config back from it).
"""

import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import ml_collections

from configs import checks, demo, finetune, pretrain
from encoder import errors, paths
from encoder.config import ARCHITECTURES, PRESETS
from launch import predict
from tasks import tfds_builders

CONFIGS = Path(finetune.__file__).parent  # configs/, as commands name it.
_LICENCE_LINE = re.compile(r"^\s*-\s*Licen[cs]e[^:]*:\s*(.*)$")
_LICENCE_HEADING = re.compile(r"^#+ .*licen[cs]e", re.IGNORECASE)


class Export(NamedTuple):
  """What `launch.export` wrote."""
  architecture: str  # config.json's class.
  auto_class: str  # The Auto class that loads it.
  remote: bool  # Whether the class is the remote code's (modeling_encoderlab.py) rather than HF's.
  remote_pipeline: bool  # Whether its pipeline is the remote code's (pipeline_encoderlab.py).
  pipeline: str | None  # The transformers pipeline task that runs it, if any.
  head: dict[str, Any]  # config.json's encoderlab_head (what remote code reads), {} when it has none.
  one_label: bool  # Whether a sequence classifier has one output (a score: HF's pipeline would apply a sigmoid).
  task: dict[str, Any] | None  # A fine-tuned run's task mapping (with its labels).
  checkpoint: str  # "best" or "latest".
  step: int  # The checkpoint's step.
  note: str  # Why some head parameters are saved beside ("" when none are).
  beside: list[str]  # Their names in head.safetensors.


def _leaves(tree: Any, prefix: str = "") -> dict[str, Any]:
  """{dotted path: leaf} of a JSON-like config (tuples as lists, as config.json holds them)."""
  if isinstance(tree, dict):
    return {k: v for key, value in tree.items() for k, v in _leaves(value, f"{prefix}{key}.").items()}
  return {prefix[:-1]: tree}


def _as_json(config: ml_collections.ConfigDict) -> dict[str, Any]:
  return json.loads(json.dumps(checks.to_dict(config)))


def _candidates(config: ml_collections.ConfigDict) -> Iterator[str]:
  """`--config` arguments whose config may be the run's but for a few fields."""
  inits = [""] + ([f"init={config.init}"] if config.get("init") is not None else [])
  if isinstance(config.get("task"), ml_collections.ConfigDict):
    for preset in finetune.TASK_PRESETS:
      for runlocal in ("", ",runlocal"):
        yield from (f"finetune.py:task={preset}{runlocal}{',' + init if init else ''}" for init in inits)
    yield from ("demo.py:pos", "demo.py:pos,runlocal")
    return
  steps = f",steps={config.num_train_steps}"
  if config.get("init"):  # The checkpoint is the model: size= and arch= beside an init are refused (configs.given).
    yield from (f"pretrain.py:objectives={config.objectives}{steps}{runlocal},init={config.init}"
                for runlocal in ("", ",runlocal"))
  for size in PRESETS:
    for arch in ARCHITECTURES:
      for runlocal in ("", ",runlocal"):
        yield f"pretrain.py:size={size},arch={arch},objectives={config.objectives}{steps}{runlocal}"
  yield f"demo.py:steps={config.num_train_steps}"


def _build(argument: str) -> dict[str, Any] | None:
  """The config of `--config configs/<argument>`, None when it cannot be built here (e.g. an init's files)."""
  module, _, arg = argument.partition(":")
  try:
    return _as_json({"finetune.py": finetune, "demo.py": demo, "pretrain.py": pretrain}[module].get_config(arg))
  except (errors.UserError, ValueError, OSError, KeyError):
    return None


def _flag_value(value: Any) -> str:
  """A config leaf as absl's config flags parse it (tuples and lists as Python literals)."""
  if isinstance(value, bool):
    return "true" if value else "false"
  if isinstance(value, list):
    return repr(tuple(value))
  return str(value)


def training_command(config: ml_collections.ConfigDict, workdir: str = "RUN") -> str:
  """`python -m launch.main --config configs/...:... [--config.key=value ...] --workdir RUN`, which builds the run's
  config: the nearest config file argument, and an override for each field that differs from it."""
  run = _leaves(_as_json(config))
  best = None
  for argument in _candidates(config):
    built = _build(argument)
    if built is None:
      continue
    base = _leaves(built)
    overrides = {key: value for key, value in run.items() if key not in base or base[key] != value}
    if best is None or len(overrides) < len(best[1]):
      best = argument, overrides
  if best is None:
    return f"python -m launch.main --config <a config file> --workdir {workdir}  # see config.json in the run"
  argument, overrides = best
  flags = [f"--config={CONFIGS.name}/{argument}"] + [f"--config.{key}={_flag_value(value)}"
                                                      for key, value in sorted(overrides.items())]
  return " ".join(["python -m launch.main", *map(shlex.quote, flags), f"--workdir {workdir}"])


def data_licence(files: list[str]) -> str:
  """The licence the data's own notes state (the `License:` line or section of a SOURCE.md or README.md beside the
  data's files, or in a folder above them), with the note's path; "not recorded" when there is none."""
  root = paths.data_dir()
  for file in files:
    path = Path(file) if Path(file).is_absolute() or root is None else root / file
    for folder in list(path.parents)[:3]:
      for note in (folder / "SOURCE.md", folder / "README.md"):
        if note.is_file() and (text := _licence_in(note.read_text(encoding="utf-8"))):
          return f"{text} (from {note.name} of {folder.name}/)"
  return "not recorded (see the data's source)"


def _licence_in(text: str) -> str:
  """The licence statement of a data note: a `- License...: ...` bullet with its continuation lines, or the bullets
  of a licence section; "" when it has none."""
  lines = text.splitlines()
  for i, line in enumerate(lines):
    if match := _LICENCE_LINE.match(line):
      found = [match.group(1)]
      found += [more.strip() for more in _continuation(lines[i + 1:])]
      return " ".join(found)
    if _LICENCE_HEADING.match(line):
      section = []
      for more in lines[i + 1:]:
        if more.startswith("#"):
          break
        section.append(more.strip().removeprefix("- "))
      return " ".join(part for part in section if part)
  return ""


def _continuation(lines: list[str]) -> Iterator[str]:
  for line in lines:
    if not line.startswith("  ") or line.strip().startswith("- "):
      return
    yield line


def _data(config: ml_collections.ConfigDict) -> tuple[str, list[str]]:
  """(what the data is, its files) of a fine-tuning or pretraining config."""
  if isinstance(config.get("task"), ml_collections.ConfigDict):
    task = config.task
    if task.dataset:
      preset = tfds_builders.PRESETS[task.dataset]
      return f"`{task.dataset}`: {preset.description}", list(preset.files.values())
    files = [part.partition(":")[2] for part in task.files.split(",") if part]
    return f"files {', '.join(f'`{f}`' for f in files)} ({task.format})", files
  files = [f for f in str(config.data.get("train_files", "")).split(",") if f]
  return (f"`{config.data.prepared}` (prepared)" if config.data.get("prepared") else
          ", ".join(f"`{f}`" for f in files) or "the config's corpus"), files


def _scores(results: dict[str, Any]) -> list[str]:
  """Markdown table rows of results.json's dev and test scores."""
  rows = []
  for split in ("dev", "test"):
    scores = results.get(split)
    if isinstance(scores, dict):
      rows += [f"| {split} | {metric} | {value:.4g} |" for metric, value in sorted(scores.items())
               if isinstance(value, (int, float)) and not isinstance(value, bool)]
  return rows


def _usage(export: Export, config: ml_collections.ConfigDict) -> list[str]:
  """How to load and run the export, as Python lines."""
  trust = ", trust_remote_code=True" if export.remote else ""
  lines = [f"from transformers import AutoTokenizer, {export.auto_class}, pipeline", "",
           f'model = {export.auto_class}.from_pretrained("DIR"{trust})',
           f'tokenizer = AutoTokenizer.from_pretrained("DIR"{trust})']
  if export.pipeline is None:
    return lines
  pairs = export.task is not None and predict.reader_options(config.task).get("text_b") is not None
  call = {"text-classification": ('{"text": "A man plays a guitar.", "text_pair": "Someone plays music."}' if pairs
                                  else '"A gripping, funny film."')
                                 + (', function_to_apply="none"' if export.one_label else ", top_k=None")
                                 + ", truncation=True",
          "token-classification": '"EU rejects German call to boycott British lamb."'
                                  + ("" if export.head.get("kind") == "spans" else ", ignore_labels=[]"),
          "question-answering": 'question="Who plays?", context="A man plays a guitar."',
          "fill-mask": '"Paris is the [MASK] of France."'}[export.pipeline]
  trust = ", trust_remote_code=True" if export.remote or export.remote_pipeline else ""
  return lines + [f'run = pipeline("{export.pipeline}", model="DIR"{trust})', f"run({call})"]


def _head_notes(export: Export, config: ml_collections.ConfigDict) -> list[str]:
  """What HF computes natively and what through remote code, and where its pipelines cut and decode."""
  head = export.head
  if export.remote:
    encoder = "ModernBertModel" if "ModernBert" in export.architecture else "BertModel"
    notes = [f"`{export.architecture}` is remote code: `modeling_encoderlab.py` (with `configuration_encoderlab.py`) "
             f"beside the weights, which imports only torch and transformers. The encoder is HF's own `{encoder}`; "
             "the head is what HF has no class for (its model_type is the remote config's). With "
             "`trust_remote_code=False` the Auto classes refuse to load it; left unset, transformers asks on a "
             "terminal whether to run the custom code (15 s; no answer or stdin at its end: refused)."]
  else:
    notes = [f"`{export.architecture}` is HF's own class: it computes the run's outputs with no remote code."]
  max_length = config.task.max_length if export.task else None
  if export.pipeline == "text-classification":
    notes.append(f"With `truncation=True` HF's pipeline cuts inputs at `model_max_length` = {max_length} tokens (the "
                 "run's `task.max_length`), as `launch.predict` does.")
  if export.one_label:
    notes.append('The score is the one logit: pass `function_to_apply="none"` (the text-classification pipeline '
                 "applies a sigmoid to a single label otherwise).")
  if export.pipeline == "token-classification" and export.remote_pipeline:
    threshold = head.get("threshold")
    notes.append("The token-classification pipeline is `pipeline_encoderlab.py` (config.json's `custom_pipelines`): "
                 "it splits raw text into words as `launch.predict` does (or takes a word list with "
                 f"`is_split_into_words=True`), cuts at the run's `task.max_length` ({max_length} tokens), passes "
                 "word boundaries and word shapes to the model and returns one entry per word (`ignore_labels=[]` "
                 'keeps "O"), or entity groups with `aggregation_strategy`' + (
                     f"; span NER keeps the spans whose probability reaches the threshold tuned on dev "
                     f"({threshold:.4g})" if head.get("kind") == "spans" and threshold is not None else "") + ".")
  elif export.pipeline == "token-classification":
    notes.append("The run tags each word at its first token. HF's pipeline cuts at `model_max_length` = "
                 f"{max_length} tokens (the run's `task.max_length`); its token entry that starts at a word's first "
                 "character carries the run's tag (`aggregation_strategy=\"first\"` groups the words of HF's "
                 'tokenizer, which also splits at punctuation inside a word such as "U.S.").')
  if export.pipeline == "question-answering":
    notes.append("The question-answering pipeline is `pipeline_encoderlab.py` (config.json's `custom_pipelines`; "
                 f"transformers 5 has no extractive one): it cuts the question at {head['max_question_length']} "
                 f"tokens, reads the context in windows of {head['max_length']} tokens whose starts are "
                 f"{head['doc_stride']} tokens apart and answers with the best start and end among each window's "
                 f"{head['n_best']} best, at most {head['max_answer_length']} tokens apart, by the sum of their logits "
                 "(BERT's run_squad), as `launch.predict` does"
                 + (f"; the empty answer when the [CLS] score beats it by more than {head['threshold']:.4g}, the "
                    "threshold tuned on dev" if head["unanswerable"] and head["threshold"] is not None else "") + ".")
  if export.beside:
    notes.append(f"`head.safetensors` holds {', '.join(export.beside)}, which no class loads: {export.note}.")
  return notes


def card(config: ml_collections.ConfigDict, results: dict[str, Any], export: Export) -> str:
  """README.md of an export of the run with `config` and `results` (results.json, {} when it has none)."""
  task = export.task
  description, files = _data(config)
  title = (f"{config.task.dataset or 'custom data'}: {task['name']}, fine-tuned with encoderlab" if task else
           f"An encoder pretrained with encoderlab ({config.objectives})")
  labels = f" Labels: {', '.join(f'`{label}`' for label in task['labels'])}." if task and task.get("labels") else ""
  model = config.model
  rows = _scores(results)
  lines = ["---", "library_name: transformers", "tags: [encoderlab" + (f", {task['name']}" if task else "") + "]",
           *([f"pipeline_tag: {export.pipeline}"] if export.pipeline else []), "---", "", f"# {title}", "",
           f"Exported by `python -m launch.export` from the run's {export.checkpoint} checkpoint (step {export.step}) "
           f"as `{export.architecture}`: {model.num_layers} layers, hidden size {model.hidden_size}, "
           f"{model.num_heads} heads.{labels}", "", "## Use", "", "```python", *_usage(export, config), "```", "",
           *(f"- {note}" for note in _head_notes(export, config)), "",
           "## Training", "", f"- Data: {description}; licence: {data_licence(files)}.",
           f"- Init: {f'`{config.init}`' if config.get('init') else 'random'}.",
           "- Command (rebuilds the run's config from configs/):", "", "```bash", training_command(config), "```", ""]
  if rows:
    lines += ["## Results", "", "From the run's results.json, in percent (the test split scored with the best-dev "
              "parameters).",
              "", "| split | metric | value |", "|---|---|---|", *rows, ""]
  return "\n".join(lines)

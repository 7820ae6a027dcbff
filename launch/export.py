"""Export a run to HuggingFace transformers: its encoder and heads in HF's own classes where one computes them
exactly, else in remote code written beside (launch/hf_modeling), with a model card.

  python -m launch.export --workdir runs/conll --out exported/conll            # best-dev checkpoint
  python -m launch.export --workdir runs/mini --checkpoint latest --out exported/mini

Writes config.json, model.safetensors, the run's tokenizer files (tokenizer.json / vocab.txt with their
tokenizer_config.json; a fine-tuned run's model_max_length is its task.max_length, where launch.predict cuts inputs)
and README.md, the model card (`launch.model_card`), into --out, which must not exist or be empty.

The class: a pretraining run's MLM and NSP heads go into BertForPreTraining (MLM only: BertForMaskedLM); an ELECTRA
run's discriminator into ElectraForPreTraining and its generator into --out/generator as ElectraForMaskedLM; a run of
the ModernBERT switches (configs/pretrain.py:arch=modernbert) into ModernBertForMaskedLM, or, when HF's head cannot
hold its MLM head's biases or it has NSP (which reads BERT's pooler), EncoderlabModernBertForMaskedLM /
EncoderlabModernBertForPreTraining. A fine-tuned head goes where its task family says (`TaskFamily.hf_head`): HF's
BertFor* class when it computes the head exactly (a classifier or regressor on the pooled [CLS], plain tagging,
question answering), else launch/hf_modeling's class for it (a classifier on the raw [CLS] or the token mean, a
tagger with a CRF, word shapes or word endings, span NER with the run's threshold, every head on a ModernBERT
encoder). Remote code is configuration_encoderlab.py and modeling_encoderlab.py, copied as they are; config.json's
model_type ("encoderlab-bert", "encoderlab-modernbert") and auto_map name them, so

  AutoModelForTokenClassification.from_pretrained(out, trust_remote_code=True)

loads the run's head; with trust_remote_code=False transformers refuses it (a ValueError), and left unset it asks
"Do you wish to run the custom code? [y/N]" on a terminal (15 s; "n", no answer or stdin at its end: the ValueError;
docs/design.md). Word-level remote heads and extractive QA also get
pipeline_encoderlab.py (config.json's custom_pipelines), which splits words and decodes answers as launch.predict.
What no class computes (SBO; a family's head with no HF form) is saved beside as head.safetensors with head.json
saying what it is, and one line on stderr says so.
"""

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import safetensors.numpy

from encoder import cli, errors, hf, peft_format
from encoder.files import atomic_path
from encoder.tokenizer import load_tokenizer, tokenizer_files
from launch import hf_modeling, model_card, predict, workload
from launch.model import run_encoder_config
from objectives import hf_heads
from tasks import finetune_data, registry
from tasks.family import not_in_hf

BESIDE_WEIGHTS = "head.safetensors"  # Head parameters no class holds: {"<objective>/<path>": array}.
BESIDE_NOTE = "head.json"  # What they are, why no class holds them, the task they were trained for.
CARD = "README.md"  # The model card.
PEFT_ADAPTER = "peft_adapter"  # --peft-adapter: where a LoRA run's unmerged adapter goes (encoder.peft_format).
TOKENIZER_CONFIG = "tokenizer_config.json"
_EXPECTED_RUN = ("a pretraining or fine-tuning run: python -m launch.main --config configs/pretrain.py:... (or "
                 "configs/finetune.py:...) --workdir DIR")
# The Auto class that loads a class of task t (HfHead.task, "MultipleChoice") is AutoModelFor<t> (`auto_class`); the
# pipeline that runs it, if any:
PIPELINES = {"AutoModelForSequenceClassification": "text-classification",
             "AutoModelForTokenClassification": "token-classification",
             "AutoModelForQuestionAnswering": "question-answering", "AutoModelForMaskedLM": "fill-mask",
             "AutoModelForPreTraining": "fill-mask"}
# config.json's custom_pipelines (pipeline_encoderlab.py): word-level remote heads, which read word boundaries and
# casing HF's own token-classification pipeline does not pass; extractive QA, which transformers 5 has no pipeline for.
PIPELINES_OF = {
    "TokenClassification": {"token-classification": {"impl": "pipeline_encoderlab.WordClassificationPipeline",
                                                     "pt": ["AutoModelForTokenClassification"], "type": "text"}},
    "QuestionAnswering": {"question-answering": {"impl": "pipeline_encoderlab.QuestionAnsweringPipeline",
                                                 "pt": ["AutoModelForQuestionAnswering"], "type": "text"}}}
MODEL_CODE = ("configuration_encoderlab.py", "modeling_encoderlab.py")  # A remote class's files.
PIPELINE_CODE = "pipeline_encoderlab.py"


class Plan(NamedTuple):
  """What an export writes (`plan`)."""
  architecture: str  # config.json's class.
  auto_class: str  # The transformers Auto class that loads it.
  code: tuple[str, ...]  # The files of launch/hf_modeling the export holds (a remote class's; a remote pipeline's).
  heads: dict[str, Any]  # Pretraining heads the class holds.
  task_head: hf.Heads | None  # A fine-tuned head.
  config_fields: dict[str, Any]  # config.json fields of remote code (model_type, auto_map, ...).
  beside: dict[str, Any]  # Head parameters no class holds, saved beside.
  note: str  # Why `beside` is not loaded ("" when nothing is beside).
  task: dict[str, Any] | None = None  # A fine-tuned run's task mapping (with its labels).

  @property
  def remote(self) -> bool:
    """Whether the class is launch/hf_modeling's (remote code) rather than HF's."""
    return MODEL_CODE[1] in self.code


def auto_class(task: str) -> str:
  """The transformers Auto class of HF's (or launch/hf_modeling's) classes for `task`: AutoModelFor<task>."""
  return f"AutoModelFor{task}"


def checked_out(out: Path) -> Path:
  """--out, when it can take the export: absent or an empty directory (never over other files)."""
  if out.exists() and not out.is_dir():
    raise errors.UserError(f"--out {out}: expected a directory to create, found a file")
  if out.is_dir() and any(out.iterdir()):
    raise errors.UserError(f"--out {out}: the directory is not empty ({sorted(p.name for p in out.iterdir())[:5]}); "
                           "give a new or empty directory")
  return out


def flat(tree: dict[str, Any], prefix: str = "") -> dict[str, np.ndarray]:
  """A parameter tree as {"a/b/leaf": array} (safetensors names)."""
  arrays: dict[str, np.ndarray] = {}
  for key, value in tree.items():
    name = f"{prefix}{key}"
    arrays |= flat(value, name + "/") if isinstance(value, dict) else {name: np.asarray(value)}
  return arrays


def remote_fields(layout: str, architecture: str, auto_classes: dict[str, str], head: dict[str, Any]
                  ) -> dict[str, Any]:
  """config.json's fields for launch/hf_modeling's `architecture` on a `layout` ("bert", "modernbert") encoder:
  its model_type, auto_map ({Auto class: class}, with the config class and the bare encoder) and the head's fields."""
  base = {"bert": "Bert", "modernbert": "ModernBert"}[layout]
  classes = {"AutoConfig": f"configuration_encoderlab.Encoderlab{base}Config",
             "AutoModel": f"modeling_encoderlab.Encoderlab{base}Model"}
  classes |= {auto: f"modeling_encoderlab.{name}" for auto, name in auto_classes.items()}
  model_type = next(k for k, v in hf.REMOTE_MODEL_TYPES.items() if v == layout)
  return {"architectures": [architecture], "model_type": model_type, "auto_map": classes, "encoderlab_head": head}


def pretraining_plan(params: dict[str, Any], cfg) -> Plan:
  """A pretraining run's classes: the heads HF's classes hold (on ModernBERT, launch/hf_modeling's when its MLM head
  has biases HF's lacks, or with NSP, which needs BERT's pooler), the others beside."""
  names = [name for name in params if name != "encoder"]
  layout = hf_heads.layout_of(cfg, names)
  # HF's class, or launch/hf_modeling's when it holds more (ModernBERT's MLM and NSP, on BERT's pooler).
  holds = max(hf_heads.held(names, layout), hf_heads.held(names, layout, remote=True), key=len)
  heads = {name: tree for name, tree in params.items() if name in holds}
  beside = {name: tree for name, tree in params.items() if name not in heads and name != "encoder"}
  note = (f"pretraining head(s) {sorted(beside)} (e.g. SpanBERT's span boundary objective) have no place in HF's "
          "classes, which hold only the MLM and NSP heads (ELECTRA's: the discriminator's; ModernBERT's: MLM, or MLM "
          "and NSP)") if beside else ""
  if layout == "modernbert" and any(head.pooler for name, head in hf_heads.layouts().items() if name in beside):
    beside["pooler"] = params["encoder"]["pooler"]  # What the head beside reads (NSP's).
  native = hf_heads.held(heads, layout) == tuple(sorted(heads)) and hf_heads.exact(cfg, layout, heads)
  remote = hf_heads.remote_classes(layout)
  auto_of = lambda name: ("AutoModelForPreTraining" if name.endswith("ForPreTraining") else
                          "AutoModelForMaskedLM" if name.endswith("ForMaskedLM") else "AutoModel")
  if heads and not native and tuple(sorted(heads)) in remote:  # No HF class holds the heads (exactly): a remote one.
    architecture = remote[tuple(sorted(heads))]
    classes = {auto_of(architecture): architecture} | {auto_of(name): name for together, name in remote.items()
                                                       if set(together) <= set(heads)}  # Also those of fewer heads.
    fields = remote_fields(layout, architecture, classes, {"objectives": sorted(heads)})
    return Plan(architecture, auto_of(architecture), MODEL_CODE, heads, None, fields, beside, note)
  architecture = hf_heads.architecture_of(heads, layout)
  return Plan(architecture, auto_of(architecture), (), heads, None, {}, beside, note)


def finetuned_plan(config, params: dict[str, Any], layout: str, results: dict[str, Any]) -> Plan:
  """A fine-tuned run's class: HF's BertFor* when its task family says one computes the head exactly (on a BERT
  encoder), else launch/hf_modeling's for the head's task; a head with no class at all goes beside."""
  labels, _ = predict.labels_and_buckets(config, results)
  family = registry.family(finetune_data.task_mapping(config.task, labels))
  name = family.objective().name
  head = family.hf_head(params[name], results.get("threshold"))
  native = head.native if layout == "bert" else None
  if head.task is not None and not native and not head.remote:  # Only HF's class holds it, not on this encoder.
    head = not_in_hf(params[name], f"HF's {head.native} holds a {name} head on a BERT encoder only, not on a "
                     f"{layout} one, and launch/hf_modeling has no class for it")
  if head.task is None:
    architecture = hf_heads.architecture_of((), layout)
    return Plan(architecture, "AutoModel", (), {}, None, {}, {name: head.beside}, head.note, family.task)
  fields = head.head | ({"word_pattern": predict.word_pattern(config.task), "max_length": config.task.max_length}
                        if family.word_level else {})
  pipelines = PIPELINES_OF.get(head.task, {}) if head.task == "QuestionAnswering" or not native else {}
  pipeline = {"custom_pipelines": pipelines} if pipelines else {}
  code = (() if native else MODEL_CODE) + ((PIPELINE_CODE,) if pipelines else ())
  auto = auto_class(head.task)
  if native:
    head_config = head.config | ({"encoderlab_head": fields} | pipeline if pipelines else {})
    task_head = hf.Heads(native, head.tensors, head_config, head.pooler)
    return Plan(native, auto, code, {}, task_head, {}, {}, "", family.task)
  architecture = f"Encoderlab{'ModernBert' if layout == 'modernbert' else 'Bert'}For{head.task}"
  task_head = hf.Heads(architecture, head.tensors, head.config, head.pooler)
  config_fields = remote_fields(layout, architecture, {auto: architecture}, fields) | pipeline
  return Plan(architecture, auto, code, {}, task_head, config_fields, {}, "", family.task)


def tokenizer_config(files: list[Path], max_length: int | None) -> dict[str, str]:
  """{tokenizer_config.json: its text} with model_max_length = max_length (a fine-tuned run's task.max_length: HF's
  pipelines then cut inputs where launch.predict does); {} when there is nothing to change."""
  if max_length is None:
    return {}
  source = next((path for path in files if path.name == TOKENIZER_CONFIG), None)
  fields = json.loads(source.read_text(encoding="utf-8")) if source else {}
  return {TOKENIZER_CONFIG: json.dumps(fields | {"model_max_length": max_length}, indent=2, sort_keys=True) + "\n"}


def write_beside(out: Path, beside: dict[str, Any], note: str, task: dict[str, Any] | None) -> None:
  """head.safetensors (the arrays) and head.json (the note, their shapes, the task mapping) in `out`."""
  arrays = flat(beside)
  with atomic_path(out / BESIDE_WEIGHTS) as weights:
    safetensors.numpy.save_file(arrays, weights)
  description = {"note": note, "tensors": {name: list(array.shape) for name, array in arrays.items()},
                 "task": task}
  with atomic_path(out / BESIDE_NOTE) as path:
    path.write_text(json.dumps(description, indent=2, sort_keys=True, default=list) + "\n", encoding="utf-8")


def export(workdir: str | Path, out: str | Path, checkpoint: str = "best", peft_adapter: bool = False
           ) -> tuple[str, str]:
  """Write the run in `workdir` (its best-dev or latest checkpoint's evaluation parameters) to `out` in HF layout, a
  LoRA run's branches merged into the dense weights (and, with `peft_adapter`, also unmerged in PEFT's format in
  out/PEFT_ADAPTER); -> (the class config.json names, the note on what was saved beside: "" when nothing was)."""
  workdir, out = Path(workdir), checked_out(Path(out))
  config = predict.run_config(workdir, _EXPECTED_RUN)
  step, params = predict.restore_params(workdir, config, checkpoint)
  cfg = run_encoder_config(config, load_tokenizer(config.data.tokenizer).vocab_size)
  if peft_adapter and not cfg.lora_rank:
    raise errors.UserError(f"--peft-adapter: the run in {workdir} has config.regime={config.get('regime', 'full')!r}; "
                           "only a LoRA run (regime 'lora') has a PEFT adapter to write")
  branched, lora_cfg = params["encoder"], cfg  # Every export is a plain HF model: LoRA folded into the weights.
  if cfg.lora_rank or cfg.adapter_size:  # (adapters cannot fold: a one-line refusal)
    params, cfg = params | {"encoder": peft_format.merge_lora(cfg, branched)}, peft_format.base_config(cfg)
  layout, results = hf.hf_layout(cfg), predict.read_results(workdir)
  finetuned = workload.is_finetuning(config)
  plan = finetuned_plan(config, params, layout, results) if finetuned else pretraining_plan(params, cfg)
  tokenizer = tokenizer_files(config.data.tokenizer)
  code = {name: text for name, text in hf_modeling.sources().items() if name in plan.code}
  fields = plan.config_fields | (dict(plan.task_head.config) if plan.task_head else {})
  card = model_card.card(config, results, model_card.Export(
      plan.architecture, plan.auto_class, plan.remote, PIPELINE_CODE in plan.code, PIPELINES.get(plan.auto_class),
      fields.get("encoderlab_head") or {}, len(fields.get("id2label", ())) == 1, plan.task, checkpoint, step, plan.note,
      sorted(flat(plan.beside))))
  files = code | tokenizer_config(tokenizer, config.task.max_length if finetuned else None) | {CARD: card}
  if plan.task_head is not None:
    hf.save_hf_checkpoint(out, cfg, params["encoder"], plan.task_head, tokenizer, config_fields=plan.config_fields,
                          files=files)
  else:
    hf_heads.save_hf_checkpoint(out, cfg, params["encoder"], plan.heads, tokenizer, config_fields=plan.config_fields,
                                files=files)
  if plan.beside:
    write_beside(out, plan.beside, plan.note, plan.task)
  if peft_adapter:
    write_peft_adapter(out / PEFT_ADAPTER, config, lora_cfg, branched, plan)
  return plan.architecture, plan.note


def write_peft_adapter(directory: Path, config, cfg, encoder_params: dict[str, Any], plan: Plan) -> None:
  """The run's unmerged LoRA in PEFT's format (encoder.peft_format) in `directory`, for the base it started from (an
  hf: init's name or directory); the task head travels with it (task_type, modules_to_save) when HF's own class
  holds it, so that peft.PeftModel.from_pretrained(AutoModelFor<task>.from_pretrained(base), directory) gives the
  export's outputs."""
  kind, _, where = str(config.init).partition(":")
  base = where if kind == "hf" else (peft_format.read_config(where).get("base_model_name_or_path")
                                     if kind == "peft" else None)
  native = plan.task_head is not None and not plan.remote
  task = plan.auto_class.removeprefix("AutoModelFor") if native else None
  peft_format.write_adapter(directory, cfg, encoder_params, base, task if task in peft_format.TASK_TYPES else None,
                            plan.task_head.tensors if native and plan.task_head else None)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
  parser = cli.ArgumentParser(prog="python -m launch.export", description=__doc__.split("\n\n")[0])
  parser.add_argument("--workdir", required=True, help="the run's directory (config.json, checkpoints/)")
  parser.add_argument("--checkpoint", choices=("best", "latest"), default="best",
                      help="the checkpoint best by the run's best_metric (what its test scores used) or the newest")
  parser.add_argument("--out", required=True, help="the directory to write (must not exist, or be empty)")
  parser.add_argument("--peft-adapter", action="store_true",
                      help=f"a LoRA run: also write its unmerged adapter in PEFT's format to OUT/{PEFT_ADAPTER}")
  return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
  args = parse_args(sys.argv[1:] if argv is None else argv)
  architecture, note = export(args.workdir, args.out, args.checkpoint, args.peft_adapter)
  print(f"wrote {args.out}: {architecture}")
  if note:
    print(f"note: HF loads {architecture} from {args.out} without the head in {BESIDE_WEIGHTS}: {note} (see "
          f"{BESIDE_NOTE})", file=sys.stderr)


if __name__ == "__main__":
  errors.run(main)

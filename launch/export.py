"""Export a run to HuggingFace transformers: its encoder, and its heads in the matching BertFor* class.

  python -m launch.export --workdir runs/conll --out exported/conll            # best-dev checkpoint
  python -m launch.export --workdir runs/mini --checkpoint latest --out exported/mini

Writes config.json, model.safetensors and the run's tokenizer files (tokenizer.json / vocab.txt with their
tokenizer_config.json) into --out, which must not exist or be empty. A pretraining run's MLM and NSP heads go into
BertForPreTraining (MLM only: BertForMaskedLM); an ELECTRA run's discriminator into ElectraForPreTraining and its
generator into --out/generator as ElectraForMaskedLM; a fine-tuned head into the class its task family names
(`TaskFamily.hf_head`: BertForSequenceClassification with id2label, BertForTokenClassification). What no HF class
computes (SBO, a CRF, word shapes, span NER, a classifier on the raw [CLS]) is saved beside as head.safetensors with
head.json saying what it is and why HF cannot load it, and one line on stderr says so. A run of the ModernBERT
switches (configs/pretrain.py:arch=modernbert; encoder.hf_checkpoint.hf_layout) exports as ModernBertModel, its
heads and its pooler (ModernBERT has none) beside.
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import safetensors.numpy

from encoder import errors, hf_checkpoint
from encoder.files import atomic_path
from encoder.tokenizer import load_tokenizer, tokenizer_files
from launch import predict, workload
from launch.model import encoder_config
from tasks import finetune_data, registry

BESIDE_WEIGHTS = "head.safetensors"  # Head parameters HF has no place for: {"<objective>/<path>": array}.
BESIDE_NOTE = "head.json"  # What they are, why HF cannot load them, the task they were trained for.
_EXPECTED_RUN = ("a pretraining or fine-tuning run: python -m launch.main --config configs/pretrain.py:... (or "
                 "configs/finetune.py:...) --workdir DIR")


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
  arrays = {}
  for key, value in tree.items():
    name = f"{prefix}{key}"
    arrays |= flat(value, name + "/") if isinstance(value, dict) else {name: np.asarray(value)}
  return arrays


def pretraining_heads(params: dict[str, Any]) -> tuple[dict, dict, str]:
  """(the heads HF's BertForPreTraining (an ELECTRA run: ElectraForPreTraining) holds, the other heads, why those are
  not loadable) of a pretraining run."""
  holds = ("electra",) if "electra" in params else hf_checkpoint.PRETRAINING_HEADS
  heads = {name: tree for name, tree in params.items() if name in holds}
  rest = {name: tree for name, tree in params.items() if name not in heads and name != "encoder"}
  note = (f"pretraining head(s) {sorted(rest)} (e.g. SpanBERT's span boundary objective) have no place in HF's "
          "BERT classes, which hold only the MLM and NSP heads (ELECTRA's: the discriminator's)") if rest else ""
  return heads, rest, note


def write_beside(out: Path, beside: dict[str, Any], note: str, task: dict[str, Any] | None) -> None:
  """head.safetensors (the arrays) and head.json (the note, their shapes, the task mapping) in `out`."""
  arrays = flat(beside)
  with atomic_path(out / BESIDE_WEIGHTS) as weights:
    safetensors.numpy.save_file(arrays, weights)
  description = {"note": note, "tensors": {name: list(array.shape) for name, array in arrays.items()},
                 "task": task}
  with atomic_path(out / BESIDE_NOTE) as path:
    path.write_text(json.dumps(description, indent=2, sort_keys=True, default=list) + "\n", encoding="utf-8")


def export(workdir: str | Path, out: str | Path, checkpoint: str = "best") -> tuple[str, str]:
  """Write the run in `workdir` (its best-dev or latest checkpoint's evaluation parameters) to `out` in HF layout;
  -> (the HF class config.json names, the note on what was saved beside: "" when nothing was)."""
  workdir, out = Path(workdir), checked_out(Path(out))
  config = predict.run_config(workdir, _EXPECTED_RUN)
  _, params = predict.restore_params(workdir, config, checkpoint)
  cfg = encoder_config(config.model, load_tokenizer(config.data.tokenizer).vocab_size)
  task_head, task = None, None
  if hf_checkpoint.hf_layout(cfg) == "modernbert":  # Only the encoder has a place in HF's ModernBERT classes.
    heads, beside = {}, {name: tree for name, tree in params.items() if name != "encoder"}
    beside["pooler"] = params["encoder"]["pooler"]
    note = (f"ModernBertModel holds the encoder only (no pooler; HF's ModernBERT heads are laid out unlike ours), so "
            f"{sorted(beside)} are saved beside")
    architecture = hf_checkpoint.architecture_of((), "modernbert")
    if workload.is_finetuning(config):
      labels, _ = predict.labels_and_buckets(config, predict.read_results(workdir))
      task = registry.family(finetune_data.task_mapping(config.task, labels)).task
  elif workload.is_finetuning(config):
    labels, _ = predict.labels_and_buckets(config, predict.read_results(workdir))
    family = registry.family(finetune_data.task_mapping(config.task, labels))
    name = family.objective().name
    head = family.hf_head(params[name])
    heads, beside, note, task = {}, ({name: head.beside} if head.beside else {}), head.note, family.task
    architecture = head.architecture or hf_checkpoint.architecture_of(())
    task_head = (architecture, head.tensors, head.config) if head.architecture else None
  else:
    heads, beside, note = pretraining_heads(params)
    architecture = hf_checkpoint.architecture_of(heads, electra="electra" in heads)
  hf_checkpoint.save_hf_checkpoint(out, cfg, params["encoder"], heads, tokenizer_files(config.data.tokenizer),
                                   task_head=task_head)
  if beside:
    write_beside(out, beside, note, task)
  return architecture, note if beside else ""


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(prog="python -m launch.export", description=__doc__.split("\n\n")[0])
  parser.add_argument("--workdir", required=True, help="the run's directory (config.json, checkpoints/)")
  parser.add_argument("--checkpoint", choices=("best", "latest"), default="best",
                      help="the checkpoint best by the run's best_metric (what its test scores used) or the newest")
  parser.add_argument("--out", required=True, help="the directory to write (must not exist, or be empty)")
  return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
  args = parse_args(sys.argv[1:] if argv is None else argv)
  architecture, note = export(args.workdir, args.out, args.checkpoint)
  print(f"wrote {args.out}: {architecture}")
  if note:
    print(f"note: HF loads {architecture} from {args.out} without the head in {BESIDE_WEIGHTS}: {note} (see "
          f"{BESIDE_NOTE})", file=sys.stderr)


if __name__ == "__main__":
  errors.run(main)

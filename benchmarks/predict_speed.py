"""Labelling throughput of `launch.predict` against an HF token-classification pipeline on the same device.

Input: the sentences of CoNLL-2003 test, joined with spaces and repeated up to --sentences (10,000 by default), as
raw text a user would pass to `Predictor.predict`. Ours: the fine-tuned word-tagging run in --workdir (e.g. one
`benchmarks.finetune --task conll2003_crf` trained), its best checkpoint; each round labels every sentence (the first
round compiles each length bucket: `sentences_per_s_cold`); the figure is the best round. HF: a
`transformers.pipeline("token-classification")` over BertForTokenClassification built from the MiniLM checkpoint
with as many labels (the speed of the same encoder; its head is untrained), batch size the run's, on the device
benchmarks.torch_device picks, in bfloat16 weights where the run computes in bfloat16 and the device has bf16 units.

  python -m benchmarks.predict_speed --workdir RUN [--sentences 10000] [--rounds 2] [--no-hf]
Last line: one JSON object (predict_sentences_per_s, sentences_per_s_cold, hf_pipeline_sentences_per_s, ratio, ...).
"""

import argparse
import itertools
import json
from pathlib import Path

import jax

from benchmarks import torch_device
from benchmarks.timing import timed
from encoder import cli, errors, paths
from encoder.pretrained import minilm_path
from launch import xla_flags
from launch.predict import Predictor, read_config
from tasks.readers.conll import read_conll


def sentences(path: Path, count: int) -> list[str]:
  """`count` raw sentences: the file's, repeated."""
  text = [" ".join(record["words"]) for record in read_conll(path)]
  return list(itertools.islice(itertools.cycle(text), count))


def hf_pipeline(num_labels: int, batch_size: int, bf16: bool):
  """The HF reference (module docstring) and its dtype's name."""
  import torch  # pylint: disable=import-outside-toplevel  (benchmarks only)
  import transformers  # pylint: disable=import-outside-toplevel
  device = torch_device.torch_device()
  bf16 = bf16 and torch_device.autocast_skip_reason(device) is None
  model = transformers.BertForTokenClassification.from_pretrained(minilm_path(), num_labels=num_labels).eval()
  model = model.to(device, torch.bfloat16 if bf16 else torch.float32)
  tokenizer = transformers.BertTokenizer.from_pretrained(minilm_path())
  return (transformers.pipeline("token-classification", model=model, tokenizer=tokenizer, device=device,
                                batch_size=batch_size), "bfloat16" if bf16 else "float32")


def main() -> None:
  parser = cli.ArgumentParser(prog="python -m benchmarks.predict_speed", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--workdir", type=Path, required=True, help="a fine-tuned word-tagging run")
  parser.add_argument("--text", type=Path, default=None, help="default: <data>/conll2003/bio/test.txt")
  parser.add_argument("--sentences", type=cli.integer(1), default=10_000)
  parser.add_argument("--rounds", type=cli.integer(1), default=2, help="labelling passes of ours (the first compiles)")
  parser.add_argument("--no-hf", action="store_true", help="skip the HF pipeline")
  args = parser.parse_args()
  xla_flags.apply_gpu_defaults()

  predictor = Predictor.from_workdir(args.workdir)
  if not predictor.word_task:
    raise errors.UserError(f"{args.workdir}: not a word-tagging run; fine-tune e.g. conll2003_crf for this benchmark")
  inputs = sentences(args.text or paths.data_file("conll2003/bio/test.txt"), args.sentences)
  ours = timed(lambda: predictor.predict(inputs), args.rounds)
  result = {"predict_sentences_per_s": round(len(inputs) / min(ours), 1),
            "sentences_per_s_cold": round(len(inputs) / ours[0], 1), "hf_pipeline_sentences_per_s": None,
            "ratio": None, "sentences": len(inputs), "batch_size": predictor.batch_size,
            "buckets": list(predictor.buckets)}
  print(f"ours: {len(inputs)} sentences in {min(ours):.2f} s (first round {ours[0]:.2f} s)", flush=True)
  if not args.no_hf:
    bf16 = read_config(args.workdir).model.dtype == "bfloat16"
    pipe, dtype = hf_pipeline(len(predictor.task["labels"]), predictor.batch_size, bf16)
    pipe(inputs[:predictor.batch_size])  # Warm-up.
    seconds = min(timed(lambda: pipe(inputs), 1))
    result |= {"hf_pipeline_sentences_per_s": round(len(inputs) / seconds, 1), "hf_dtype": dtype,
               "ratio": round(seconds / min(ours), 3)}
    print(f"HF pipeline ({dtype}): {seconds:.2f} s", flush=True)
  print(json.dumps(result | {"device": jax.devices()[0].device_kind}))


if __name__ == "__main__":
  errors.run(main)

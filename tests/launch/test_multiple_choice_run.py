"""The multiple-choice family end to end on a fixture dataset (a few JSON lines written here; no multiple-choice data
is in the data directory): it trains and evaluates through the engine, `launch.predict` reads a context and its
choices per input line, and `launch.export` writes HF's own BertForMultipleChoice, whose outputs on the same inputs
are predict's. (The family's parts and its parity with BertForMultipleChoice: tests/tasks/test_multiple_choice.py.)"""

import json

import numpy as np
import pytest

from configs import finetune
from launch import export, predict, train
from tests.conftest import require_package

torch = require_package("torch")
transformers = require_package("transformers")

pytestmark = pytest.mark.slow  # It trains a run (docs/testing.md).

# Ours and HF's float32 models on the same weights, other kernels and sums: test_export's measured bound (its 2-layer
# encoders agree to ~1e-6); predict rounds probabilities to 6 decimals; a misplaced weight moves them by O(0.1).
TOLERANCE = 1e-4
ITEMS = [("The man turned on the faucet.", ["The toilet filled with water.", "Water flowed from the spout."], 1),
         ("The girl found a bug in her cereal.", ["She poured milk in the bowl.", "She lost her appetite."], 1),
         ("The woman retired.", ["She received her pension.", "She paid off her mortgage.", "She sang."], 0),
         ("I wanted to conserve energy.", ["I swept the floor.", "I shut off the light.", "I ran."], 1),
         ("The hamburger meat browned.", ["The cook froze it.", "The cook grilled it."], 1),
         ("The runner wore shorts.", ["The forecast was hot.", "She planned to run on the beach."], 0)]


def _write(path, items) -> str:
  path.write_text("".join(json.dumps({"context": c, "choices": k, "label": y}) + "\n" for c, k, y in items))
  return str(path)


def test_a_multiple_choice_run_trains_predicts_and_exports_to_bert_for_multiple_choice(tmp_path):
  config = finetune.get_config("task=sst2,runlocal")  # Its tiny encoder and schedule; the task is ours.
  config.task.update(name="multiple_choice", dataset="", format="choices", train_split="train",
                     eval_split="validation", test_split="", pooling="cls",
                     files=f"train:{_write(tmp_path / 'train.jsonl', ITEMS)},"
                           f"validation:{_write(tmp_path / 'dev.jsonl', ITEMS[:4])}")
  config.batch_size, config.epochs = 4, 2
  workdir = tmp_path / "run"
  train.train_and_evaluate(config, workdir)
  results = json.loads((workdir / "results.json").read_text())
  assert set(results["dev"]) >= {"accuracy"}
  rows = [json.loads(line) for line in (workdir / "predictions" / "dev.jsonl").read_text().splitlines()]
  assert len(rows) == 4 and all(r["prediction"] in range(len(r["choices"])) for r in rows)

  lines = tmp_path / "inputs.txt"  # predict's text format: context<TAB>choice<TAB>choice[...] per line.
  lines.write_text("".join("\t".join([c, *k]) + "\n" for c, k, _ in ITEMS[:4]))
  out = tmp_path / "predictions.jsonl"
  predict.main(["--workdir", str(workdir), "--input", str(lines), "--out", str(out)])
  ours = [json.loads(line) for line in out.read_text().splitlines()]
  assert [o["line"] for o in ours] == [1, 2, 3, 4]
  assert [o["label"] for o in ours] == [r["prediction"] for r in rows]  # As the run's own evaluation.

  exported = tmp_path / "hf"
  assert export.export(workdir, exported) == ("BertForMultipleChoice", "")
  model, report = transformers.AutoModelForMultipleChoice.from_pretrained(exported, output_loading_info=True)
  assert type(model).__name__ == "BertForMultipleChoice"
  assert not report["missing_keys"] and not report["unexpected_keys"] and not report["mismatched_keys"], report
  tokenizer = transformers.AutoTokenizer.from_pretrained(exported)
  for (context, choices, _), o in zip(ITEMS[:4], ours):
    inputs = tokenizer([context] * len(choices), choices, truncation=True, padding=True, return_tensors="pt")
    with torch.no_grad():
      logits = model.eval()(**{k: v[None] for k, v in inputs.items()}).logits[0].double()
    theirs = torch.softmax(logits, -1).numpy()
    difference = np.abs(theirs - np.asarray(o["probabilities"])).max()
    print(f"max |difference| of the probabilities: {difference:.2e}")
    assert difference <= TOLERANCE and int(theirs.argmax()) == o["label"]

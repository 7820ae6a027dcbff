"""benchmarks.accelerator without a device: its plan names every part with a command, its JSON line holds every figure
of the issues (null, with a reason), and its arguments are checked."""

import json

import pytest

from benchmarks import accelerator

ISSUE_KEYS = {"pretraining": ("mfu_peak", "mfu", "ratio", "remat_batch_gain", "remat_time_cost", "device"),
              "finetuning": ("encoder_forward_ratio_bf16", "encoder_train_ratio_bf16", "embed_words_per_s_ratio",
                             "finetune_speedup", "predict_sentences_per_s", "device")}


@pytest.mark.parametrize("section", sorted(accelerator.SECTIONS))
@pytest.mark.parametrize("tiny", [False, True])
def test_plan_has_every_part_and_figure(section, tiny, capsys, tmp_path):
  summary = accelerator.main(["--section", section, "--plan", "--out", str(tmp_path)] + (["--tiny"] if tiny else []))
  assert json.loads(capsys.readouterr().out.splitlines()[-1]) == summary
  parts = accelerator.SECTIONS[section]
  assert {name for name, record in summary["parts"].items() if record["status"] == "planned"} == {
      part.name for part in parts}
  for key in ISSUE_KEYS[section] + tuple(key for part in parts for key in part.keys):
    assert key in summary
    assert summary[key] is not None or key in summary["reasons"] or key == "device"
  assert not list(tmp_path.iterdir())  # A plan writes nothing.


def test_plan_commands_use_the_sizes_of_the_issues(capsys, tmp_path):
  accelerator.main(["--section", "pretraining", "--plan", "--out", str(tmp_path)])
  out = capsys.readouterr().out
  assert "pretrain_throughput --size base --seq 128 --batch 256" in out
  assert "pretrain_throughput --size large --seq 512" in out
  assert all(f"remat_memory --policy {policy} --size base --seq 512" in out for policy in accelerator.REMAT_POLICIES)


def test_only_selects_parts_and_rejects_unknown_ones(capsys, tmp_path):
  summary = accelerator.main(["--section", "finetuning", "--plan", "--only", "predict", "--out", str(tmp_path)])
  assert list(summary["parts"]) == ["predict"]
  assert summary["reasons"]["finetune_speedup"].startswith("finetune_sick: not selected")
  with pytest.raises(SystemExit):
    accelerator.main(["--section", "finetuning", "--only", "remat"])
  assert "the finetuning section's parts are" in capsys.readouterr().err


def test_a_failing_part_is_recorded_and_the_next_runs(monkeypatch, tmp_path):
  def broken(ctx):
    raise RuntimeError("out of memory")
  parts = (accelerator.Part("first", 10, ("mfu",), broken),
           accelerator.Part("second", 10, ("ratio",), lambda ctx: {"ratio": 1.5, "device": "test"}))
  monkeypatch.setitem(accelerator.SECTIONS, "pretraining", parts)
  summary = accelerator.main(["--section", "pretraining", "--out", str(tmp_path)])
  assert summary["parts"]["first"]["status"] == "error"
  assert summary["reasons"]["mfu"] == "first: RuntimeError: out of memory"
  assert summary["ratio"] == 1.5 and summary["device"] == "test"
  assert json.loads((tmp_path / "pretraining.json").read_text(encoding="utf-8"))["ratio"] == 1.5


def test_remat_policies_choose_the_remat_commands(capsys, tmp_path):
  accelerator.main(["--section", "pretraining", "--plan", "--remat-policies", "none,full", "--out", str(tmp_path)])
  out = capsys.readouterr().out
  assert "remat_memory --policy full" in out and "remat_memory --policy dots_saveable" not in out
  for wrong in ("full,none", "none,all"):
    with pytest.raises(SystemExit):
      accelerator.main(["--section", "pretraining", "--plan", "--remat-policies", wrong])
    assert "expected 'none' first" in capsys.readouterr().err


@pytest.mark.parametrize("rows,length", [(256, 128), (32, 512)])
def test_nsp_rows_fill_the_row_length_from_wikitext(rows, length):
  """Rows of 512 tokens need several paragraphs of an article (one paragraph pair filled none on the H200 run)."""
  from benchmarks.pretrain_throughput import nsp_batch
  from encoder.pretrained import minilm_path
  from encoder.tokenizer import load_tokenizer
  from tests.conftest import require_data
  text = require_data("wikitext-2/raw/wiki.valid.raw")
  tokenizer = load_tokenizer(minilm_path())
  batch = nsp_batch(text, tokenizer, rows, length, seed=0)
  assert batch["input_ids"].shape == (rows, length)
  ids = batch["input_ids"]
  assert (ids[:, 0] == tokenizer.cls_id).all() and (ids[:, -1] == tokenizer.sep_id).all()
  assert ((ids == tokenizer.sep_id).sum(axis=1) == 2).all()  # [CLS] A [SEP] B [SEP], no padding.
  assert 0 < batch["nsp_label"].mean() < 1

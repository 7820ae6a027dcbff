"""benchmarks.accelerator without a device: its plan names every part with a command, its JSON line holds every figure
of the issues (null, with a reason), its arguments are checked, the attention parts' figures are read from their
modules' JSON lines, and the base pretraining part runs each attention variant at tiny size on the CPU."""

import json

import pytest

from benchmarks import accelerator
from encoder import errors

ISSUE_KEYS = {"pretraining": ("mfu_peak", "mfu", "ratio", "remat_batch_gain", "remat_time_cost", "device",
                             "attention_equal", "attention", "attention_mfu_peak", "attention_tokens_per_s",
                             "remat_max_batch", "remat_mfu_peak", "remat_attention", "profile_transpose_share"),
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
  assert "--attention cudnn:bfloat16,xla:bfloat16,matmul" in out  # Every path, the new step first.
  assert "pretrain_throughput --size large --seq 512" in out
  assert all(f"remat_memory --policy {policy} --size base --seq 512" in out for policy in accelerator.REMAT_POLICIES)
  assert "--seq 512 --probe-batch 8 --steps 3 --attention cudnn:bfloat16" in out
  assert "benchmarks.attention_check" in out and "step_profile" in out
  assert "--xla_gpu_enable_cublaslt=true' -m benchmarks.pretrain_throughput --size base" in out  # The xla_flags part.
  accelerator.main(["--section", "pretraining", "--plan", "--tiny", "--profile-matmul", "--out", str(tmp_path)])
  tiny = capsys.readouterr().out
  assert "--attention cudnn" not in tiny  # A CPU cannot trace cuDNN: XLA's fused attention stands in.
  assert "--attention xla:bfloat16,matmul" in tiny


def test_only_selects_parts_and_rejects_unknown_ones(tmp_path):
  summary = accelerator.main(["--section", "finetuning", "--plan", "--only", "predict", "--out", str(tmp_path)])
  assert list(summary["parts"]) == ["predict"]
  assert summary["reasons"]["finetune_speedup"].startswith("finetune_sick: not selected")
  with pytest.raises(errors.UserError, match="the finetuning section's parts are"):
    accelerator.main(["--section", "finetuning", "--only", "remat"])


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
    with pytest.raises(errors.UserError, match="expected 'none' first"):
      accelerator.main(["--section", "pretraining", "--plan", "--remat-policies", wrong])


def test_attention_figures_come_from_the_parts(monkeypatch, tmp_path):
  """Each part's JSON line (as its module prints it) fills the section's figures: per attention variant, the remat
  part's rows and MFU at length 512, the profile's transpose share."""
  lines = {
      "attention_check": {"equal": {"cudnn:bfloat16": True}, "errors": {"matmul": {"output": 0.01}},
                          "xla_f32_equal": True, "bf16_bound": {"output": 0.02}, "skipped": {}},
      "pretrain_throughput": {"mfu_peak": 0.47, "ratio": 1.6, "attention": {"cudnn:bfloat16": "cudnn",
                                                                             "matmul": "matmul"},
                              "attention_mfu_peak": {"cudnn:bfloat16": 0.47, "matmul": 0.26}, "device": "GPU"},
      "remat_memory": {"max_batch": 1024, "bytes_per_row": 2**27, "memory_limit_bytes": 2**37, "tokens_per_s": 9e5,
                       "mfu_peak": 0.41, "attention": "cudnn", "activation_dtype": "bfloat16", "step_s": 0.5,
                       "seconds_per_token": 1e-6, "time_batch": 1024},
      "step_profile": {"top": [["fusion", 1.0, 0.5, ""]], "traced_ms_per_step": 30.0, "trace": "t",
                       "variants": {"cudnn:bfloat16": {"transpose_share": 0.01, "step_s": 0.03, "top": []}}}}
  commands = []

  def run_child(command, timeout, env):
    commands.append(command)
    return lines[command[2].removeprefix("benchmarks.")]

  monkeypatch.setattr(accelerator, "run_child", run_child)
  summary = accelerator.main(["--section", "pretraining", "--only", "attention_check,throughput_base,remat,profile",
                              "--remat-policies", "none", "--out", str(tmp_path)])
  assert [c[2] for c in commands] == ["benchmarks.attention_check", "benchmarks.pretrain_throughput",
                                      "benchmarks.remat_memory", "benchmarks.step_profile"]
  assert summary["attention_equal"] == {"cudnn:bfloat16": True} and summary["attention_xla_f32_equal"]
  assert summary["mfu_peak"] == 0.47 and summary["attention_mfu_peak"]["matmul"] == 0.26
  assert summary["remat_max_batch"] == {"none": 1024} and summary["remat_mfu_peak"] == {"none": 0.41}
  assert summary["remat_bytes_per_row_mib"] == {"none": 128.0}
  assert summary["remat_attention"] == "cudnn, bfloat16 activations"
  assert summary["profile_transpose_share"] == {"cudnn:bfloat16": 0.01}


@pytest.mark.slow
def test_tiny_base_part_times_each_attention_variant(tmp_path):
  """The base pretraining part for real at tiny size on the CPU: our step on each variant (XLA's fused attention
  with bf16 activations standing in for cuDNN, and the matmul path) and HF in the same rounds."""
  summary = accelerator.main(["--section", "pretraining", "--tiny", "--only", "throughput_base", "--budget-s", "900",
                              "--out", str(tmp_path)])
  assert summary["parts"]["throughput_base"]["status"] == "ok", summary["parts"]
  assert summary["attention"] == {"xla:bfloat16": "xla", "matmul": "matmul"}
  assert set(summary["attention_tokens_per_s"]) == {"xla:bfloat16", "matmul"}
  assert summary["tokens_per_s"] == summary["attention_tokens_per_s"]["xla:bfloat16"] > 0


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

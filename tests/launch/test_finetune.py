"""Fine-tuning through the engine (configs/finetune.py runlocal: a tiny encoder on slices of real data): batches as a
pure function of the step, best-dev checkpoint and test scores re-scored by seqeval from the written .conll file,
warm start from our own run (frozen encoder stays bitwise equal) and from the imported MiniLM checkpoint."""

import json

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
import scipy.stats
import seqeval.metrics

from configs import common, finetune
from encoder import errors, pretrained
from launch import train, workload
from launch.model import EncoderWithHeads, encoder_config
from objectives import hf_heads
from tasks import evaluation, finetune_data, regimes
from tests.conftest import require_data


def _config(arg: str, **overrides):
  config = finetune.get_config(arg)
  config.update_from_flattened_dict(overrides)
  return config


def _encoder(workdir) -> dict:
  """params["encoder"] of the newest checkpoint of a run, as numpy."""
  manager = ocp.CheckpointManager((workdir / "checkpoints").absolute(), item_handlers=ocp.StandardCheckpointHandler())
  state = manager.restore(manager.latest_step())
  manager.close()
  return jax.tree.map(np.asarray, state["params"]["encoder"])


@pytest.fixture(scope="module")
def conll_run(trained):
  workdir = trained("conll2003")
  return workdir, json.loads((workdir / "results.json").read_text())


def test_batch_of_a_step_is_a_pure_function_of_the_step():
  require_data("conll2003/bio/train.txt")
  config = _config("task=conll2003,runlocal", **{"task.train_split": "train[:40]"})
  data = finetune_data.load(config)
  schedule = finetune_data.batch_schedule(data)
  assert data.schedule[:2] == (16, 0) and data.schedule.steps_per_epoch == 3
  for epoch in range(2):  # Every example exactly once per epoch; the short last batch is padded with masked rows.
    batches = [schedule(3 * epoch + i) for i in range(3)]
    assert all(b["input_ids"].shape[0] == 16 and b["input_ids"].shape[1] in data.buckets for b in batches)
    assert sum(b["example_mask"].sum() for b in batches) == 40
    words = sorted(tuple(b["word_labels"][r][b["word_labels"][r] >= 0]) for b in batches for r in range(16)
                   if b["example_mask"][r])
    assert words == sorted(tuple(e["word_labels"]) for e in data.train.examples)
  resumed = finetune_data.train_batches(data._replace(schedule=data.schedule._replace(total_steps=6)), start_step=4,
                                        prefetch=1)
  for step, batch in zip((4, 5), resumed, strict=True):
    fresh = finetune_data.batch_schedule(data)(step)
    assert all(np.array_equal(batch[k], fresh[k]) for k in fresh)
  other_seed = finetune_data.batch_schedule(data._replace(schedule=data.schedule._replace(seed=1)))(0)
  assert not np.array_equal(other_seed["input_ids"], schedule(0)["input_ids"])


@pytest.mark.slow
def test_best_dev_checkpoint_scores_test_and_predictions_rescore(conll_run):
  workdir, results = conll_run
  evals = [r for r in map(json.loads, (workdir / "metrics.jsonl").read_text().splitlines()) if "eval/f1" in r]
  assert [r["step"] for r in evals] == [4, 8]  # Every epoch (4 steps of 16 of the 64 sentences).
  best = max(evals, key=lambda r: (r["eval/f1"], r["step"]))  # A tie: the later step (launch.checkpointing._rank).
  assert results["best_step"] == best["step"]
  # Re-evaluated with the restored best params: the same predictions, so the same F1 (float64, approx's 1e-6 relative).
  assert results["dev"]["f1"] == pytest.approx(100 * best["eval/f1"])
  for split, count in (("dev", 32), ("test", 32)):
    blocks = (workdir / "predictions" / f"{split}.conll").read_text().strip().split("\n\n")
    rows = [[line.split() for line in block.splitlines()] for block in blocks]
    assert len(rows) == count
    gold, pred = [[r[1] for r in s] for s in rows], [[r[2] for r in s] for s in rows]
    assert results[split]["f1"] == pytest.approx(100 * seqeval.metrics.f1_score(gold, pred), abs=1e-6)  # Float64.
    jsonl = [json.loads(line) for line in (workdir / "predictions" / f"{split}.jsonl").read_text().splitlines()]
    assert [r["prediction"] + ["O"] * (len(r["words"]) - len(r["prediction"])) for r in jsonl] == pred


@pytest.mark.slow
def test_warm_start_from_our_run_with_a_frozen_encoder(conll_run, tmp_path):
  source, _ = conll_run
  config = _config("task=sick,runlocal", init=f"run:{source}", regime="frozen", num_train_steps=3)
  results = train.train_and_evaluate(config, tmp_path)
  assert results["step"] == 3 and set(results["dev"]) == {"accuracy", "macro_f1"}
  before, after = _encoder(source), _encoder(tmp_path)
  del before["pooler"], after["pooler"]  # tasks.regimes trains the pooler with the head (it sits above the body).
  assert jax.tree.all(jax.tree.map(np.array_equal, before, after))
  assert len((tmp_path / "predictions" / "test.labels").read_text().splitlines()) == 32


@pytest.mark.slow
def test_init_from_the_imported_minilm_checkpoint(tmp_path):
  require_data("sick/SICK_train.txt")
  directory = pretrained.minilm_path()
  config = _config("task=sick,runlocal", init="hf:all-MiniLM-L6-v2", regime="top_k", top_k=1, num_train_steps=1,
                   **{"task.test_split": "", "task.eval_split": "validation[:16]", "data.tokenizer": str(directory)})
  with config.unlocked():
    config.model = common.model_from_init(config.init)[0]
  results = train.train_and_evaluate(config, tmp_path)
  assert results["step"] == 1 and results["test"] == {}
  _, expected, _ = hf_heads.load_hf_checkpoint(directory)
  trained = _encoder(tmp_path)
  assert np.array_equal(trained["layer_0"]["mlp"]["output"]["kernel"], expected["layer_0"]["mlp"]["output"]["kernel"])
  assert np.array_equal(trained["embeddings"]["word_embeddings"]["embedding"],
                        expected["embeddings"]["word_embeddings"]["embedding"])
  top = trained["layer_5"]["mlp"]["output"]["kernel"]
  assert not np.array_equal(top, expected["layer_5"]["mlp"]["output"]["kernel"])  # top_k=1: only layer 5 trains.


@pytest.mark.slow
def test_pos_preset_trains_with_word_endings_and_writes_every_word(tmp_path):
  require_data("ud_english_ewt/en_ewt-ud-train.conllu")
  config = _config("task=ud_pos,runlocal", num_train_steps=2)
  assert config.task.last_subword and config.task.case_features
  results = train.train_and_evaluate(config, tmp_path)
  assert results["step"] == 2
  rows = [json.loads(line) for line in (tmp_path / "predictions" / "test.jsonl").read_text().splitlines()]
  assert len(rows) == 32 and all(len(r["prediction"]) <= len(r["words"]) for r in rows)  # Past truncation: none.
  # test.conll writes every word of every sentence (word, gold, predicted; "O" past truncation, so wrong).
  blocks = [[line.split(" ") for line in block.splitlines()]
            for block in (tmp_path / "predictions" / "test.conll").read_text().split("\n\n")]
  assert [[w for w, _, _ in block] for block in blocks] == [r["words"] for r in rows]
  assert [[g for _, g, _ in block] for block in blocks] == [r["tags"] for r in rows]
  padded = [r["prediction"] + ["O"] * (len(r["words"]) - len(r["prediction"])) for r in rows]
  assert [[p for _, _, p in block] for block in blocks] == padded
  words = [(g, p) for block in blocks for _, g, p in block]
  assert results["test"]["accuracy"] == pytest.approx(100 * np.mean([g == p for g, p in words]))  # %, float64.


@pytest.mark.slow
def test_parameter_ema_is_checkpointed_resumed_and_evaluated(tmp_path):
  """optimizer.ema_decay: the average rides in the optimizer state through checkpoints and a resume, and the dev
  and test scores are those of the averaged parameters (re-scored here from the checkpoint)."""
  require_data("sick/SICK_train.txt")
  config = _config("task=sick,runlocal", num_train_steps=2, **{"optimizer.ema_decay": 0.5})
  train.train_and_evaluate(config, tmp_path)
  config = _config("task=sick,runlocal", num_train_steps=3, **{"optimizer.ema_decay": 0.5})
  results = train.train_and_evaluate(config, tmp_path)  # Resumes from step 2.
  assert results["step"] == 3
  manager = ocp.CheckpointManager((tmp_path / "checkpoints").absolute(), item_handlers=ocp.StandardCheckpointHandler())
  state = manager.restore(3)
  manager.close()
  params = state["params"]
  ema = regimes.merge(params, state["opt_state"]["ema"])  # SICK's top_k keeps the embeddings out of the average.
  kernel = lambda tree: np.asarray(tree["encoder"]["layer_1"]["mlp"]["output"]["kernel"])
  assert not np.allclose(kernel(ema), kernel(params))  # A guard: the average lags the parameters by far more.
  work = workload.build(config, tmp_path)
  predict = jax.jit(evaluation.device_outputs(EncoderWithHeads(encoder_config(config.model, work.vocab_size),
                                                               work.objectives), work.data.family))
  labels = lambda params: evaluation.decode(work.data.family, work.data.test, evaluation.raw_predictions(
      predict, params, work.data.test, batch_size=config.batch_size, buckets=work.data.buckets,
      widths=work.data.widths, to_device=lambda batch: batch))
  assert (tmp_path / "predictions" / "test.labels").read_text().split() == labels(ema)


@pytest.mark.slow
def test_sick_relatedness_regression_and_its_predictions_rescore(tmp_path):
  """Task "regression" (preset sick_relatedness): dev selects on Pearson; written test scores re-score with scipy."""
  require_data("sick/SICK_train.txt")
  results = train.train_and_evaluate(_config("task=sick_relatedness,runlocal", num_train_steps=3), tmp_path)
  assert results["metric"] == "pearson" and set(results["dev"]) == {"pearson", "spearman", "mse"}
  rows = [json.loads(line) for line in (tmp_path / "predictions" / "test.jsonl").read_text().splitlines()]
  scores = [float(line) for line in (tmp_path / "predictions" / "test.labels").read_text().split()]
  assert [r["prediction"] for r in rows] == pytest.approx(scores) and len(rows) == 32  # The same floats, twice written.
  gold = [r["score"] for r in rows]
  # Float64 scores of the same 32 predictions on both sides: rounding only (~1e-13 in percent).
  assert results["test"]["pearson"] == pytest.approx(100 * scipy.stats.pearsonr(gold, scores).statistic, abs=1e-6)
  assert results["test"]["mse"] == pytest.approx(np.mean((np.asarray(gold) - scores) ** 2), rel=1e-6)


@pytest.mark.slow
def test_auxiliary_score_trains_and_needs_a_score_column(tmp_path):
  require_data("sick/SICK_train.txt")
  config = _config("task=sick,runlocal", num_train_steps=2, **{"task.score_weight": 1.0})
  results = train.train_and_evaluate(config, tmp_path)
  assert results["train"]["train/classification_score_mse"] > 0 and set(results["dev"]) == {"accuracy", "macro_f1"}
  with pytest.raises(errors.ConfigError, match=r"trains on scores, but 'train\[:64\]' of sst2 has none"):
    finetune_data.load(_config("task=sst2,runlocal", **{"task.score_weight": 1.0}))

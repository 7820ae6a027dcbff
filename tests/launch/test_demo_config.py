"""The demo's MLM config resolves, finds its packaged sample corpus (whole WikiText articles, split with no overlap),
and the demo's [MASK] batches and fill-in step are right (a hand-made model, not the demo's training). The POS part:
tests/launch/test_demo.py."""

import re

import jax
import numpy as np
import pytest

from configs import checks, demo as demo_config, samples
from encoder import paths
from encoder.tokenizer import load_tokenizer
from launch import demo
from launch.model import EncoderWithHeads, encoder_config
from objectives import corpus, data as pretraining_data, masking, registry

TITLE = re.compile(r"^ ?= ([^=].*) = ?$")


@pytest.fixture(scope="module")
def config():
  return demo_config.get_config()


@pytest.fixture(scope="module")
def tokenizer(config):
  return load_tokenizer(config.data.tokenizer)


def _titles(path):
  return [m.group(1) for m in map(TITLE.match, path.read_text(encoding="utf-8").splitlines()) if m]


def test_config_resolves_and_passes_the_engine_checks(config):
  checks.check_config(config)
  assert config.objectives == "mlm" and config.num_train_steps == demo_config.DEMO_STEPS
  assert demo_config.get_config("steps=7").num_train_steps == 7
  assert config.data.max_length <= config.model.max_positions
  assert paths.resolve_files(config.data.train_files, "train_files") == [samples.sample_file("train")]
  assert paths.resolve_files(config.data.eval_files, "eval_files") == [samples.sample_file("heldout")]
  # Runnable through the engine CLI too, and the saved config round-trips to JSON.
  assert checks.to_dict(config)["data"]["train_files"].endswith("wiki.train.txt")


def test_sample_corpus_is_whole_articles_small_and_licensed():
  train_file, heldout_file = samples.sample_file("train"), samples.sample_file("heldout")
  for path in (train_file, heldout_file):
    assert path.stat().st_size < 5_000_000
    lines = path.read_text(encoding="utf-8").splitlines()
    assert TITLE.match(next(line for line in lines if line.strip())), f"{path} must start with an article title"
  assert train_file.stat().st_size > 2_000_000 and heldout_file.stat().st_size > 200_000
  train_titles, heldout_titles = _titles(train_file), _titles(heldout_file)
  assert train_titles[0] == "Valkyria Chronicles III" and heldout_titles[0] == "2010 Haiti earthquake"
  assert not set(train_titles) & set(heldout_titles)
  license_text = (samples.SAMPLE_DIR / "LICENSE").read_text()
  assert "CC BY-SA 3.0" in license_text and "Merity" in license_text
  assert "CC BY-SA 3.0" in (samples.SAMPLE_DIR / "README.md").read_text()
  with pytest.raises(ValueError, match="heldout"):
    samples.sample_file("test")


def test_sample_corpus_reads_as_wikitext_documents():
  train_docs = corpus.read_documents([samples.sample_file("train")])
  heldout_docs = corpus.read_documents([samples.sample_file("heldout")])
  assert (len(train_docs), len(heldout_docs)) == (122, 14)
  assert heldout_docs[0][0].startswith("The 2010 Haiti earthquake") and heldout_docs[-1][0].startswith("The Moro River")
  assert not {s for d in train_docs for s in d} & {s for d in heldout_docs for s in d if len(s) > 80}


def test_masked_batch_puts_the_mask_where_the_text_has_it(tokenizer):
  batch = demo.masked_batch(demo.FILL_SENTENCES, tokenizer)
  ids = batch["input_ids"]
  rows = [tokenizer.ids_to_tokens(row[row != tokenizer.pad_id]) for row in ids]
  assert rows[0] == ["[CLS]", "please", "turn", "your", "homework", "[MASK]", ".", "[SEP]"]
  assert rows[1][-3:] == ["[MASK]", ".", "[SEP]"] and rows[1][:3] == ["[CLS]", "so", "long"]
  np.testing.assert_array_equal(ids[np.arange(2), batch["masked_positions"][:, 0]], [tokenizer.mask_id] * 2)
  np.testing.assert_array_equal(batch["attention_segments"], ids != tokenizer.pad_id)
  with pytest.raises(ValueError, match="exactly one"):
    demo.masked_batch(["no mask here"], tokenizer)


@pytest.mark.slow
def test_fill_mask_ranks_the_softmax_of_the_mlm_head(config, tokenizer):
  """Against a numpy softmax of the same model's logits, with an output bias that makes 'fish' the clear winner."""
  model = EncoderWithHeads(encoder_config(config.model, tokenizer.vocab_size), (registry.build("mlm", config.model),))
  batch = demo.masked_batch(demo.FILL_SENTENCES, tokenizer)
  params = jax.device_get(model.init(jax.random.key(0), batch)["params"])
  fish = tokenizer.token_to_id("fish")
  params["mlm"]["output_bias"] = np.asarray(params["mlm"]["output_bias"]).copy()
  params["mlm"]["output_bias"][fish] = 20.0
  fillers = demo.fill_mask(config, params, tokenizer, demo.FILL_SENTENCES, k=5)
  logits = np.asarray(model.apply({"params": params}, batch)["mlm"][:, 0], np.float64)
  expected = np.exp(logits - logits.max(-1, keepdims=True))
  expected /= expected.sum(-1, keepdims=True)
  for row, top in enumerate(fillers):
    assert top[0][0] == "fish" and len(top) == 5
    order = np.argsort(-expected[row])[:5]
    assert [t for t, _ in top] == tokenizer.ids_to_tokens(order)
    np.testing.assert_allclose([p for _, p in top], expected[row, order], rtol=1e-6)


def test_unigram_baseline_against_brute_force(config, tmp_path):
  """Always-the-most-frequent-token accuracy on the engine's held-out masks (seed + 1), recomputed row by row."""
  small = demo_config.get_config()
  small.data.train_files = small.data.eval_files  # The small held-out file as both splits: tokenized in seconds.
  baseline = demo.unigram_baseline(small, tmp_path)
  data = pretraining_data.load(small, cache_dir=tmp_path)
  counts = np.bincount(data.train.corpus.tokens, minlength=data.tokenizer.vocab_size) + 1.0
  counts[list(data.tokenizer.special_ids)] = 0
  top, probs = int(np.argmax(counts)), counts / counts.sum()
  assert data.tokenizer.ids_to_tokens([top]) == ["the"] == [baseline["token"]]
  hits, nll, total = 0, 0.0, 0
  for i in range(len(data.eval) // small.batch_size * small.batch_size):
    masked = masking.mask_example(data.eval[i], masking.example_rng(small.seed + pretraining_data.EVAL_SEED_OFFSET, i),
                                  **data.mask_options)
    targets = masked["masked_ids"][masked["masked_weights"] > 0]
    hits, nll, total = hits + int((targets == top).sum()), nll - np.log(probs[targets]).sum(), total + len(targets)
  assert baseline["accuracy"] == pytest.approx(hits / total, rel=1e-9)
  assert baseline["loss"] == pytest.approx(nll / total, rel=1e-9)
  assert 0.03 < baseline["accuracy"] < 0.15

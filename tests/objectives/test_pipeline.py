"""Packing into fixed-length rows: full sentences (RoBERTa), NSP pairs (BERT), packed segments; data.check."""

import flax.linen as nn
import jax
import numpy as np
import pytest
from scipy.special import log_softmax

from encoder import Encoder, preset
from encoder.errors import ConfigError
from encoder.tokenizer import load_tokenizer
from objectives import corpus, data, masking, pairs, pipeline, registry
from objectives.objective import Requirement
from tests.conftest import require_data


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
  """40 plain-text documents of 3-12 sentences of 2-12 common words; one sentence of 150 words (longer than a row)."""
  rng = np.random.default_rng(0)
  words = ("the of and to in is was for on as with by he at from his an were are which this be had not first "
           "one their its new after who they have her she two been other when there all during into school time "
           "may years more most only over city some world would where later up such used many can state about "
           "national out known university united then made").split()
  sentence = lambda n: " ".join(rng.choice(words, n)).capitalize() + "."
  documents = [" ".join(sentence(int(rng.integers(2, 13))) for _ in range(int(rng.integers(3, 13))))
               for _ in range(40)]
  documents[5] += " " + sentence(150)
  path = tmp_path_factory.mktemp("text") / "docs.txt"
  path.write_text("\n\n".join(documents) + "\n", encoding="utf-8")
  return path


def _sequences(row):
  """[(ids, types, positions)] of each packed sequence of a row."""
  out = []
  for k in range(1, row["attention_segments"].max() + 1):
    where = row["attention_segments"] == k
    out.append((row["input_ids"][where], row["type_ids"][where], row["positions"][where]))
  return out


def _real(ids, tokenizer):
  return [t for t in ids.tolist() if t not in tokenizer.special_ids]


def test_full_sentences_rows_cover_corpus_in_order(text_file, tokenizer, tmp_path):
  examples = pipeline.pretraining_examples(files=[text_file], tokenizer=tokenizer, max_length=64,
                                           packing="full_sentences", cache_dir=tmp_path)
  encoded = examples.corpus
  pieces = pipeline.sentence_pieces(encoded, 62)
  assert len(pieces) > len(encoded.sentence_offsets) - 1  # The long sentence is cut into row-sized pieces.
  sentence_ends = set(pieces[:, 0].tolist()) | {len(encoded.tokens)}
  document_ends = set(encoded.sentence_offsets[encoded.document_offsets].tolist())
  stream, at = [], 0
  for i in range(len(examples)):
    row = examples[i]
    (ids, types, positions), = _sequences(row)
    assert ids[0] == tokenizer.cls_id and ids[-1] == tokenizer.sep_id and (types == 0).all()
    np.testing.assert_array_equal(positions, np.arange(len(ids)))
    assert (row["input_ids"][len(ids):] == tokenizer.pad_id).all()
    body = _real(ids, tokenizer)
    # Rows hold whole sentences; every [SEP] inside a row sits at a document boundary.
    assert at in sentence_ends and at + len(body) in sentence_ends
    seps = np.flatnonzero(ids[1:-1] == tokenizer.sep_id)
    for s in seps:
      assert at + s - list(seps).index(s) in document_ends
    # Greedy fill: the next sentence (piece) would not have fitted.
    if i + 1 < len(examples):
      nxt = np.searchsorted(pieces[:, 0], at + len(body))
      new_document = pieces[nxt, 2] != pieces[nxt - 1, 2]  # Would add its own [SEP].
      assert len(ids) + pieces[nxt, 1] - pieces[nxt, 0] + new_document > 64
    stream += body
    at += len(body)
  np.testing.assert_array_equal(stream, encoded.tokens)


def test_segments_packing_restarts_positions(text_file, tokenizer, tmp_path):
  examples = pipeline.pretraining_examples(files=[text_file], tokenizer=tokenizer, max_length=48,
                                           packing="segments", cache_dir=tmp_path)
  seen = []
  for i in range(len(examples)):
    row = examples[i]
    for ids, _, positions in _sequences(row):
      assert ids[0] == tokenizer.cls_id and ids[-1] == tokenizer.sep_id
      np.testing.assert_array_equal(positions, np.arange(len(ids)))
      seen.append(tuple(_real(ids, tokenizer)))
  pieces = pipeline.sentence_pieces(examples.corpus, 46)
  expected = [tuple(examples.corpus.tokens[start:end].tolist()) for start, end, _ in pieces]
  assert sorted(seen) == sorted(expected)  # Every sentence (piece) exactly once.
  pads = np.mean([(examples[i]["attention_segments"] == 0).mean() for i in range(len(examples))])
  assert examples.padding_waste() == pytest.approx(pads)  # Float64 means of the same counts, in another order.
  print(f"segments padding waste (synthetic, L=48): {examples.padding_waste():.4f}")
  assert examples.padding_waste() < 0.05


def _synthetic_corpus(rng, sentence_lengths):
  doc_sizes = rng.integers(20, 60, 1500)
  lengths = sentence_lengths(doc_sizes.sum())
  return corpus.EncodedCorpus(
      tokens=np.arange(lengths.sum(), dtype=np.int32), word_starts=np.ones(lengths.sum(), np.int8),
      sentence_offsets=np.concatenate([[0], np.cumsum(lengths)]),
      document_offsets=np.concatenate([[0], np.cumsum(doc_sizes)]))


def test_nsp_is_50_50_and_true_pairs_adjacent():
  """1-token sentences and no short sequences: no truncation ever happens, and pairs whose A has >= 2 sentences
  come from chunks of >= 2 sentences, whose IsNext/NotNext choice is the fair coin (single-sentence chunks are
  always NotNext in BERT)."""
  encoded = _synthetic_corpus(np.random.default_rng(1), lambda n: np.ones(n, np.int64))
  chunks, offsets, labels = pairs.nsp_layout(encoded, 40, np.random.default_rng(2), short_seq_prob=0.0)
  assert len(chunks) == 2 * len(labels) and len(offsets) == len(labels) + 1
  doc_of = lambda t: np.searchsorted(encoded.sentence_offsets[encoded.document_offsets], t, side="right") - 1
  a, b = chunks[0::2], chunks[1::2]
  assert ((a[:, 1] - a[:, 0]) + (b[:, 1] - b[:, 0]) <= 37).all() and (a[:, 2] == 0).all() and (b[:, 2] == 1).all()
  for (a0, a1, *_), (b0, b1, *_), label in zip(a, b, labels):
    if label == pairs.IS_NEXT:
      assert a1 == b0 and doc_of(a0) == doc_of(b1 - 1)  # B is exactly the text that follows A.
    else:
      assert doc_of(a0) != doc_of(b0) and doc_of(b0) == doc_of(b1 - 1)
  fair = labels[(a[:, 1] - a[:, 0]) >= 2]
  n, rate = len(fair), fair.mean()
  print(f"NSP: {n} pairs from multi-sentence chunks, NotNext rate {rate:.4f} (all pairs {labels.mean():.4f})")
  assert abs(rate - 0.5) < 5 * np.sqrt(0.25 / n)
  # Counter-check: the forced-NotNext single-sentence chunks make the overall rate detectably higher.
  assert labels.mean() > rate


def test_nsp_truncation_keeps_pairs_within_budget():
  encoded = _synthetic_corpus(np.random.default_rng(3), lambda n: np.random.default_rng(4).integers(1, 30, n))
  chunks, _, labels = pairs.nsp_layout(encoded, 40, np.random.default_rng(5))
  a, b = chunks[0::2], chunks[1::2]
  sizes = (a[:, 1] - a[:, 0]) + (b[:, 1] - b[:, 0])
  assert (sizes <= 37).all() and (a[:, 1] > a[:, 0]).all() and (b[:, 1] > b[:, 0]).all()
  assert (sizes < 37).any() and (sizes == 37).mean() > 0.3  # Some short (short_seq_prob) and many truncated.
  next_pairs = labels == pairs.IS_NEXT
  assert (b[next_pairs, 0] >= a[next_pairs, 1]).all()


def test_nsp_pairs_on_wikitext(tokenizer, tmp_path):
  examples = pipeline.pretraining_examples(files=[require_data("wikitext-2/raw/wiki.valid.raw")], tokenizer=tokenizer,
                                           max_length=128, packing="nsp_pairs", cache_dir=tmp_path, seed=3)
  labels = examples.row_fields["nsp_label"]
  encoded = examples.corpus
  doc_of = lambda t: np.searchsorted(encoded.sentence_offsets[encoded.document_offsets], t, side="right") - 1
  for i in range(0, len(examples), 7):
    row = examples[i]
    ids, types = row["input_ids"], row["type_ids"]
    n = int((row["attention_segments"] > 0).sum())
    seps = np.flatnonzero(ids[:n] == tokenizer.sep_id)
    assert ids[0] == tokenizer.cls_id and len(seps) == 2 and seps[1] == n - 1
    np.testing.assert_array_equal(types[:n], np.r_[np.zeros(seps[0] + 1), np.ones(n - seps[0] - 1)])
    (a0, a1, *_), (b0, _, *_) = examples.chunks[2 * i:2 * i + 2]
    same = doc_of(a0) == doc_of(b0)
    assert same == (labels[i] == pairs.IS_NEXT)
    if same:
      assert 0 <= b0 - a1 < 128  # B follows A (up to what truncation removed).
  rate = labels.mean()
  print(f"WikiText valid NSP: {len(labels)} pairs, NotNext rate {rate:.4f}, padding waste "
        f"{examples.padding_waste():.4f}")
  # Single-sentence chunks are always NotNext (BERT), so the rate is at or slightly above one half.
  assert 0.5 - 5 * np.sqrt(0.25 / len(labels)) < rate < 0.6


def test_segments_waste_on_wikitext(tokenizer, tmp_path):
  path = require_data("wikitext-2/raw/wiki.valid.raw")
  examples = pipeline.pretraining_examples(files=[path], tokenizer=tokenizer, max_length=128, packing="segments",
                                           cache_dir=tmp_path)
  full = pipeline.pretraining_examples(files=[path], tokenizer=tokenizer, max_length=128, packing="full_sentences",
                                       cache_dir=tmp_path)
  print(f"WikiText valid L=128: segments {len(examples)} rows, waste {examples.padding_waste():.4f}; "
        f"full_sentences {len(full)} rows, waste {full.padding_waste():.4f}")
  assert examples.padding_waste() < 0.05
  row = examples[0]
  assert (row["input_ids"] != tokenizer.pad_id).sum() == (row["attention_segments"] > 0).sum()


TINY = preset("tiny", vocab_size=30522, max_positions=64, hidden_size=32, num_heads=2, intermediate_size=64,
              hidden_dropout=0.0, attention_dropout=0.0)


class _MLM(nn.Module):
  @nn.compact
  def __call__(self, batch):
    encoder = Encoder(TINY, name="encoder")
    outputs = encoder(batch["input_ids"], batch["type_ids"], batch["positions"], batch["attention_segments"])
    return registry.build("mlm").head.clone(parent=self, name="mlm")(outputs, batch, encoder.attend)


@pytest.mark.slow
def test_packed_row_losses_equal_unpacked(text_file, tokenizer, tmp_path):
  """Each packed sequence's per-token MLM losses equal those of the sequence run alone through the encoder."""
  examples = pipeline.pretraining_examples(files=[text_file], tokenizer=tokenizer, max_length=48,
                                           packing="segments", cache_dir=tmp_path)
  row = next(examples[i] for i in range(len(examples)) if examples[i]["attention_segments"].max() >= 3)
  options = pipeline.mask_options(tokenizer, max_predictions=12, replacement="uniform")
  packed = masking.mask_example(row, masking.example_rng(0, 0), **options)
  model = _MLM()
  batch = {k: v[None] for k, v in packed.items()}
  params = jax.jit(model.init)(jax.random.key(0), batch)
  apply = jax.jit(model.apply)
  nll = lambda logits, ids: -np.take_along_axis(log_softmax(np.asarray(logits, np.float64), -1), ids[..., None],
                                                -1)[..., 0]
  packed_nll = nll(apply(params, batch)[0], packed["masked_ids"])
  k = int(packed["masked_weights"].sum())
  checked = 0
  for segment in range(1, row["attention_segments"].max() + 1):
    where = np.flatnonzero(packed["attention_segments"] == segment)
    mine = [j for j in range(k) if packed["masked_positions"][j] in where]
    alone = {key: np.zeros(48, np.int32) for key in ("input_ids", "type_ids", "positions", "attention_segments")}
    n = len(where)
    for key in alone:
      alone[key][:n] = packed[key][where]
    alone["attention_segments"][:n] = 1
    alone["masked_positions"] = np.zeros(12, np.int32)
    alone["masked_positions"][:len(mine)] = packed["masked_positions"][mine] - where[0]
    logits = apply(params, {key: v[None] for key, v in alone.items()})[0]
    # A sequence alone and packed: other key counts, other summation orders (measured equal on Zen 3).
    np.testing.assert_allclose(nll(logits[:len(mine)], packed["masked_ids"][mine]), packed_nll[mine],
                               rtol=1e-4, atol=1e-5)
    checked += len(mine)
  assert checked == k > 0


def test_examples_are_deterministic(text_file, tokenizer, tmp_path):
  make = lambda seed: pipeline.pretraining_examples(files=[text_file], tokenizer=tokenizer, max_length=48,
                                                    packing="nsp_pairs", cache_dir=tmp_path, seed=seed)
  a, b, c = make(5), make(5), make(6)
  np.testing.assert_array_equal(a.chunks, b.chunks)
  np.testing.assert_array_equal(a.row_fields["nsp_label"], b.row_fields["nsp_label"])
  assert len(a.chunks) != len(c.chunks) or not np.array_equal(a.chunks, c.chunks)


def test_an_objective_states_what_it_needs_of_the_data(monkeypatch):
  """validate reads each objective's own declarations (Objective.packing, masking, excludes), so a new objective
  registered from a test states its needs without a table elsewhere."""
  pairs_only = lambda config=None: registry.build("mlm")._replace(
      name="pairs_only", packing=Requirement("nsp_pairs", "pairs of the test"), excludes=Requirement(("sbo",), "why"))
  monkeypatch.setitem(registry.OBJECTIVES, "pairs_only", pairs_only)
  data.check(["pairs_only", "nsp"], "nsp_pairs")
  with pytest.raises(ConfigError, match=r"objective 'pairs_only' needs 'nsp_pairs' \(pairs of the test\)"):
    data.check(["pairs_only"], "full_sentences")
  with pytest.raises(ConfigError, match=r"'pairs_only' cannot be combined with \['sbo'\]: why"):
    data.check(["pairs_only", "sbo"], "nsp_pairs", "span")


def test_validate_and_bad_inputs(tmp_path, tokenizer, text_file):
  data.check(["mlm", "nsp"], "nsp_pairs")
  data.check(["mlm", "sbo"], "full_sentences", "span")
  with pytest.raises(ConfigError, match=r"config.data.packing='full_sentences': objective 'nsp' needs 'nsp_pairs'"):
    data.check(["mlm", "nsp"], "full_sentences")
  with pytest.raises(ConfigError, match=r"config.masking.mode='token': objective 'sbo' needs 'span'"):
    data.check(["sbo"], "segments", "token")
  with pytest.raises(ConfigError, match="unknown objective 'rtd'"):
    data.check(["mlm", "rtd"], "segments")
  data.check(["electra", "nsp"], "nsp_pairs")
  with pytest.raises(ConfigError, match=r"'electra' cannot be combined with \['mlm'\]"):
    data.check(["mlm", "electra"], "full_sentences")
  with pytest.raises(ConfigError, match="packing 'docs'"):
    pipeline.pretraining_examples(files=[text_file], tokenizer=tokenizer, max_length=64, packing="docs")
  short = tmp_path / "short.txt"
  short.write_text("One sentence only.\n\nTwo here. And two.\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"short.txt:1: document 'One sentence only.' has 1 sentence"):
    pipeline.pretraining_examples(files=[short], tokenizer=tokenizer, max_length=64, packing="nsp_pairs")
  # A vocabulary without [MASK]: the tokenizer refuses it; a tokenizer object lacking mask_id is refused here.
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"\[MASK\]"):
    load_tokenizer(vocab)
  no_mask = type("NoMask", (), {"mask_id": None, "vocab_size": 5, "special_ids": {0, 1}})()
  with pytest.raises(ValueError, match=r"no \[MASK\] token"):
    pipeline.mask_options(no_mask)


@pytest.mark.parametrize("mode", ["whole_word", "span"])
def test_word_level_masking_respects_wordpiece_words(mode, tokenizer, tmp_path):
  """On real rows, whole-word and span masking never split a word: a masked '##' piece has its word's head masked
  and the token after a masked unit is never a '##' continuation of it."""
  examples = pipeline.pretraining_examples(files=[require_data("wikitext-2/raw/wiki.valid.raw")], tokenizer=tokenizer,
                                           max_length=128, packing="full_sentences", cache_dir=tmp_path)
  options = pipeline.mask_options(tokenizer, max_predictions=20, replacement="uniform", mode=mode)
  continuation = np.array([t.startswith("##") for t in tokenizer.ids_to_tokens(range(tokenizer.vocab_size))])
  masked_continuations = 0
  for i in range(300):
    row = examples[i]
    out = masking.mask_example(row, masking.example_rng(1, i), **options)
    k = int(out["masked_weights"].sum())
    selected = np.zeros(128, bool)
    selected[out["masked_positions"][:k]] = True
    is_continuation = continuation[row["input_ids"]]
    assert not (is_continuation & ~selected & np.roll(selected, 1)).any()  # Unit ends mid-word.
    assert not (is_continuation & selected & ~np.roll(selected, 1)).any()  # Unit starts mid-word.
    masked_continuations += (is_continuation & selected).sum()
  assert masked_continuations > 0  # The check above really met multi-piece words.

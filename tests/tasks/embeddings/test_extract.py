"""Word vectors of the Embedder against the encoder run on each sentence alone, pooled and mixed in numpy.

Both sides run the same float32 encoder (hidden 32, post-LN states of size ~1) on other batch shapes, buckets, packing
or windows: the same sums in other orders. rtol 1e-5 with atol 1e-5 is measured, not derived: on Zen 3 the largest
difference used 2.4% of it (7.2e-7), and the suite passed at it on the AMX Xeon and Zen 5 VMs; a token attending
across packed sentences, a wrong window or a word pooled from the wrong subwords moves vectors by 1e-2 or more.
"""

import functools

import jax
import numpy as np
import pytest

from encoder import errors
from encoder.config import EncoderConfig
from encoder.model import Encoder
from encoder.pretrained import minilm_path
from encoder.tokenizer import load_tokenizer
from tasks.embeddings.extract import Embedder, output_rows_size, pack_rows, plan_windows, pool_words, word_starts

# The tests marked numerics compare float results with bounds set by the CPU's summation order (docs/testing.md:
# the lane reruns them ISA-capped); the rest check shapes, errors and exact results.
SENTENCES = [
    ["The", "bank", "of", "the", "river", "."],
    ["New York", "is", "", "unbelievably", "big", "!"],  # A multi-word expression; an empty word ([UNK]).
    ["Hi"],
    [],
    ("Tokenization of antidisestablishmentarianism , hyperparameters and subwords works " * 3).split(),
]


@pytest.fixture(scope="module")
def tokenizer():
  return load_tokenizer(minilm_path())


@pytest.fixture(scope="module")
def tiny(tokenizer):
  """(cfg, params) of a random 4-layer encoder over the MiniLM vocabulary."""
  cfg = EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=4, num_heads=2,
                      intermediate_size=64, max_positions=512)
  ids = np.zeros((1, 8), np.int32)
  return cfg, jax.jit(Encoder(cfg).init)(jax.random.PRNGKey(0), ids)["params"]  # One program, not one per operation.


@pytest.fixture(scope="module")
def embedder(tiny, tokenizer):
  return Embedder(*tiny, tokenizer, batch_size=4, buckets=(8, 16, 32))


@functools.lru_cache
def _encoder(cfg):
  """The encoder on one row padded to 64 (one jit shape for every reference; padding never changes an output)."""
  return jax.jit(lambda params, ids, segments: Encoder(cfg).apply({"params": params}, ids,
                                                                   attention_segments=segments).hidden_states)


def reference_hidden(tiny, ids: list[int]) -> np.ndarray:
  """[length, layers + 1, H]: the encoder on one row of ids (specials included), on its own."""
  cfg, params = tiny
  padded, segments = np.zeros((1, 64), np.int32), np.zeros((1, 64), np.int32)
  padded[0, :len(ids)], segments[0, :len(ids)] = ids, 1
  states = _encoder(cfg)(params, padded, segments)
  return np.stack([np.asarray(h[0, :len(ids)]) for h in states], axis=1)


def reference_words(tiny, tokenizer, words: list[str], pooling: str) -> np.ndarray:
  """[n_words, layers + 1, H]: each word's subword rows pooled by a plain loop."""
  encoding = tokenizer.encode(list(words))
  hidden = reference_hidden(tiny, encoding.input_ids)
  pooled = []
  for word in range(len(words)):
    rows = [i for i, w in enumerate(encoding.word_ids) if w == word]
    pooled.append(hidden[rows[0]] if pooling == "first" else hidden[rows].sum(axis=0) / len(rows))
  return np.asarray(pooled).reshape((len(words),) + hidden.shape[1:])


@pytest.mark.numerics
@pytest.mark.slow
@pytest.mark.parametrize("pooling", ["mean", "first"])
def test_word_vectors_equal_the_encoder_on_each_sentence_alone(embedder, tiny, tokenizer, pooling):
  got = embedder.encode_words(SENTENCES, layers="all", pooling=pooling)
  for words, vectors in zip(SENTENCES, got):
    assert vectors.shape == (len(words), 5, 32) and vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, reference_words(tiny, tokenizer, words, pooling), rtol=1e-5, atol=1e-5)


@pytest.mark.numerics
@pytest.mark.slow
def test_layer_mixes_are_computed_on_the_device_as_numpy_would(embedder, tiny, tokenizer):
  words = SENTENCES[1]
  full = reference_words(tiny, tokenizer, words, "mean")
  expected = {"last4_mean": full[:, 1:].mean(axis=1), "sum:0,2": full[:, 0] + full[:, 2], "1,3": full[:, [1, 3]]}
  for spec, want in expected.items():
    np.testing.assert_allclose(embedder.encode_words([words], layers=spec)[0], want, rtol=1e-5, atol=1e-5)


@pytest.mark.numerics
@pytest.mark.slow
def test_length_bucketing_gives_the_vectors_of_each_sentence_encoded_alone(embedder):
  together = embedder.encode_words(SENTENCES * 3, layers="last")  # 15 sentences: several buckets and batches.
  for index, vectors in enumerate(together):
    alone = embedder.encode_words([SENTENCES[index % len(SENTENCES)]], layers="last")[0]
    np.testing.assert_allclose(vectors, alone, rtol=1e-5, atol=1e-5)


@pytest.mark.numerics
def test_one_sentence_per_row_gives_the_same_vectors(tiny, tokenizer, embedder):
  unpacked = Embedder(*tiny, tokenizer, batch_size=4, buckets=(8, 16, 32), pack=False)
  for packed, alone in zip(*(e.encode_words(SENTENCES, layers="last") for e in (embedder, unpacked))):
    np.testing.assert_allclose(packed, alone, rtol=1e-5, atol=1e-5)


def test_rows_are_packed_best_fit_decreasing():
  assert pack_rows([5, 3, 10, 2, 4], 10) == [[2], [0, 4], [1, 3]]  # 10 alone; 5 + 4 fills tighter than 5 + 3 + 2.
  assert pack_rows([5, 3], 0) == [[0], [1]]
  lengths = list(np.random.default_rng(0).integers(3, 129, size=500))
  rows = pack_rows(lengths, 128)
  assert sorted(i for row in rows for i in row) == list(range(500))
  assert all(sum(lengths[i] for i in row) <= 128 for row in rows) and len(rows) < 1.1 * sum(lengths) / 128


def test_iter_encode_words_yields_each_sentence_once_and_streams(embedder):
  indices = [index for index, _ in embedder.iter_encode_words(iter(SENTENCES * 2), layers="last")]
  assert sorted(indices) == list(range(2 * len(SENTENCES)))


def test_pool_words_equals_a_loop():
  subwords = np.random.default_rng(1).normal(size=(7, 3, 2)).astype(np.float32)
  starts = np.asarray([0, 1, 4, 6])
  groups = [[0], [1, 2, 3], [4, 5], [6]]
  np.testing.assert_allclose(pool_words(subwords, starts, "mean"),
                             [subwords[g].sum(axis=0) / len(g) for g in groups], rtol=1e-6)
  np.testing.assert_array_equal(pool_words(subwords, starts, "first"), subwords[[0, 1, 4, 6]])
  np.testing.assert_array_equal(pool_words(subwords, starts, "subword"), subwords)


@pytest.mark.numerics
def test_subword_pooling_returns_every_subword(embedder, tiny, tokenizer):
  words = SENTENCES[1]
  ids = tokenizer.encode(list(words)).input_ids
  got = embedder.encode_words([words], layers="all", pooling="subword")[0]
  np.testing.assert_allclose(got, reference_hidden(tiny, ids)[1:-1], rtol=1e-5, atol=1e-5)


def test_raw_texts_are_split_as_the_pre_tokenizer_does(embedder):
  (words, vectors), = embedder.encode_texts(["Café déjà vu, don't!"], layers="last")
  assert words == ["Café", "déjà", "vu", ",", "don", "'", "t", "!"]
  np.testing.assert_array_equal(vectors, embedder.encode_words([words], layers="last")[0])


def test_float16_transfer_is_float32_with_float16_rounding(tiny, tokenizer, embedder):
  half = Embedder(*tiny, tokenizer, batch_size=4, buckets=(8, 16, 32), transfer_dtype="float16")
  got = half.encode_words(SENTENCES[:3], layers="last")
  for vectors, full in zip(got, embedder.encode_words(SENTENCES[:3], layers="last")):
    assert vectors.dtype == np.float32 and not np.array_equal(vectors, full)
    np.testing.assert_allclose(vectors, full, rtol=2e-3, atol=2e-3)  # float16's rounding: 2^-11 = 4.9e-4 relative.


@pytest.mark.parametrize("length,size,stride", [(10, 4, 2), (9, 4, 4), (50, 14, 7), (23, 14, 5), (14, 14, 7)])
def test_each_subword_is_owned_by_its_most_central_window(length, size, stride):
  windows = plan_windows(length, size, stride)
  owned = [p for _, _, lo, hi in windows for p in range(lo, hi)]
  assert owned == list(range(length))  # Every subword exactly once, in order.
  starts = list(range(0, max(length - size, 0), stride)) + [max(length - size, 0)]
  for start, end, lo, hi in windows:
    assert end - start == min(size, length) and start in starts
    for position in range(lo, hi):  # No window holding the position has it further from both edges.
      centrality = min(position - start, end - 1 - position)
      assert all(min(position - s, s + size - 1 - position) <= centrality for s in starts if s <= position < s + size)


@pytest.mark.numerics
def test_long_sentences_take_each_subword_from_its_most_central_window(tiny, tokenizer):
  windowed = Embedder(*tiny, tokenizer, max_length=16, stride=5, batch_size=4, buckets=(8, 16))
  words = SENTENCES[4]  # 40-odd subwords: several windows of 14.
  ids = tokenizer.encode(list(words), add_special_tokens=False).input_ids
  got = windowed.encode_words([words], layers="all", pooling="subword")[0]
  assert len(ids) > 30 and got.shape[0] == len(ids)
  for start, end, lo, hi in plan_windows(len(ids), 14, 5):
    hidden = reference_hidden(tiny, [tokenizer.cls_id, *ids[start:end], tokenizer.sep_id])
    np.testing.assert_allclose(got[lo:hi], hidden[1 + lo - start:1 + hi - start], rtol=1e-5, atol=1e-5)


@pytest.mark.numerics
def test_a_sentence_that_fits_is_encoded_whole_whatever_the_window(tiny, tokenizer, embedder):
  words = SENTENCES[4]
  direct = Embedder(*tiny, tokenizer, max_length=512, batch_size=4, buckets=(64,)).encode_words([words])[0]
  np.testing.assert_allclose(embedder.encode_words([words])[0], direct, rtol=1e-5, atol=1e-5)  # max_length 128.
  np.testing.assert_allclose(direct, reference_words(tiny, tokenizer, words, "mean"), rtol=1e-5, atol=1e-5)


@pytest.mark.numerics
def test_windows_approximate_the_whole_sentence_on_a_trained_model():
  """MiniLM, 165 words: windows of 62 subwords give vectors near the whole paragraph's (median cos 0.945)."""
  whole = Embedder.from_init("hf:all-MiniLM-L6-v2", max_length=256, batch_size=1, buckets=(256,))
  windowed = Embedder(whole.cfg, whole.params, whole.tokenizer, max_length=64, batch_size=4, buckets=(64,))
  words = ("The bank of the river was flooded after the storm , and the people who lived near it moved their "
           "boats to higher ground while the council met to discuss the damage . ").split() * 5
  a, b = (e.encode_words([words], layers="last")[0] for e in (whole, windowed))
  cosines = np.sum(a * b, axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
  assert len(words) > 150 and np.median(cosines) > 0.9 and cosines.min() > 0.5


def test_bad_arguments_are_refused(embedder, tiny, tokenizer):
  with pytest.raises(ValueError, match="pooling 'max'"):
    embedder.encode_words([["a"]], pooling="max")
  with pytest.raises(ValueError, match="accepted forms"):
    embedder.encode_words([["a"]], layers="top")
  with pytest.raises(errors.UserError, match="encode_texts"):
    embedder.encode_words(["a raw text"])
  with pytest.raises(ValueError, match="max_length 600"):
    Embedder(*tiny, tokenizer, max_length=600)


@pytest.mark.numerics
@pytest.mark.parametrize("layers", ["last", "1,3", "last4_mean"])  # One layer, several kept apart, a reduction.
def test_pooling_on_the_device_equals_pooling_the_subwords_on_the_host(tiny, tokenizer, embedder, layers):
  """Each pooling, sentences in one window (pooled on the device) and in several (pooled on the host): the same as
  `pool_words` on the subword vectors of the same batches. Both add a word's subwords in order in float32 and divide
  once by their count, but XLA on a CPU divides by a count broadcast over the features as a multiplication by its
  reciprocal (1 ulp off in ~20% of quotients): 2^-24 = 6e-8 relative, on post-LN states of size ~1 (measured on Zen 3,
  also with --xla_cpu_max_isa=AVX2: 1.2e-7 at most for the mean, 0 for the first subword). A word pooled from a wrong
  subword is off by ~1."""
  windowed = Embedder(*tiny, tokenizer, max_length=16, stride=5, batch_size=4, buckets=(8, 16))
  encodings = tokenizer.encode_batch([list(s) for s in SENTENCES], add_special_tokens=False)
  for each in (embedder, windowed):
    subwords = each.encode_words(SENTENCES, layers=layers, pooling="subword")
    for pooling in ("mean", "first"):
      for words, encoding, sub, got in zip(SENTENCES, encodings, subwords,
                                           each.encode_words(SENTENCES, layers=layers, pooling=pooling)):
        want = pool_words(sub, word_starts(encoding.word_ids, len(words), "test"), pooling)
        assert got.shape == want.shape == (len(words),) + each.feature_shape(layers) and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_output_rows_are_padded_to_eighths_of_the_positions():
  assert [output_rows_size(n, 64) for n in (0, 1, 8, 9, 63, 64)] == [8, 8, 8, 16, 64, 64]
  assert output_rows_size(100, 30) == 100 and output_rows_size(1, 3) == 1

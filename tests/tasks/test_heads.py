"""Fine-tuning heads: subword alignment, bucketed collate, classification and span-NER heads vs numpy.

The heads are compared with numpy restatements on hidden size 8: float32 dots of at most 24 terms and losses over a
few examples, each within sum_bound(24) ~ 1.8e-6 of the magnitudes summed (tests/tolerances.py), on both sides. The
bounds (rtol 1e-5, atol at most 1e-5 of the values' scale) leave room for that; measured on Zen 3 every comparison
used at most 1.4% of its bound, while a wrong pooling, row or span boundary moves a logit by its own size.
"""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import erf, logsumexp

from encoder import EncoderOutput, errors
from tasks import alignment, batching, classification, registry, span_ner, tagging


@dataclasses.dataclass
class _Encoding:
  input_ids: list
  type_ids: list
  word_ids: list


class ChunkTokenizer:
  """Test double: each word splits into 3-character subwords; [CLS]=1, [SEP]=2, ids are stable hashes."""
  pad_id = 0

  def encode(self, words, pair=None, max_length=None):
    ids, word_ids = [1], [None]
    for index, word in enumerate(words):
      for k in range(0, len(word), 3):
        ids.append(3 + sum(map(ord, word[k:k + 3])) % 90)
        word_ids.append(index)
    if max_length is not None:
      ids, word_ids = ids[:max_length - 1], word_ids[:max_length - 1]
    return _Encoding(ids + [2], [0] * (len(ids) + 1), word_ids + [None])


def test_first_subword_positions_and_labels():
  word_ids = [None, 0, 0, 1, 2, 2, 2, None]
  assert alignment.first_subword_positions(word_ids) == [1, 3, 4]
  np.testing.assert_array_equal(alignment.subword_labels(word_ids, [5, 6, 7], "first"), [-1, 5, -1, 6, 7, -1, -1, -1])
  np.testing.assert_array_equal(alignment.subword_labels(word_ids, [5, 6, 7], "all"), [-1, 5, 5, 6, 7, 7, 7, -1])
  with pytest.raises(ValueError, match="alignment 'last'"):
    alignment.subword_labels(word_ids, [5, 6, 7], "last")


def test_last_subword_positions_point_at_each_words_end():
  assert alignment.last_subword_positions([None, 0, 0, 1, 2, 2, 2, None]).tolist() == [0, 2, 2, 3, 6, 6, 6, 7]
  example = alignment.encode_words(ChunkTokenizer(), ["Sanitas", "is"], [1, 0], max_length=4, last_subword=True)
  assert example["last_positions"].tolist() == [0, 2, 2, 3]  # "Sanitas" cut after 2 of its 3 subwords.


def test_encode_words_drops_truncated_words_but_keeps_the_count():
  example = alignment.encode_words(ChunkTokenizer(), ["Sanitas", "is", "in", "Canyon"], [1, 0, 0, 1], max_length=6)
  np.testing.assert_array_equal(example["word_positions"], [1, 4])
  np.testing.assert_array_equal(example["word_labels"], [1, 0])
  assert int(example["num_words"]) == 4


def test_collate_pads_to_bucket_and_batch_size():
  a = {"input_ids": np.arange(1, 6), "label": np.asarray(1), "word_positions": np.asarray([1, 2, 3])}
  b = {"input_ids": np.arange(1, 12), "label": np.asarray(0), "word_positions": np.asarray([1])}
  batch = batching.collate([a, b], buckets=(8, 16, 32), batch_size=4)
  assert batch["input_ids"].shape == (4, 16)
  assert batch["word_positions"].shape == (4, 4)
  np.testing.assert_array_equal(batch["attention_segments"].sum(1), [5, 11, 0, 0])
  np.testing.assert_array_equal(batch["example_mask"], [1, 1, 0, 0])
  np.testing.assert_array_equal(batch["label"], [1, 0, 0, 0])
  assert batching.bucket_length(17, (8, 16, 32)) == 32


@pytest.mark.parametrize("name", ["tagging", "span_ner"])
def test_collate_gives_word_and_span_fields_one_width_per_bucket(name):
  rng = np.random.default_rng(0)
  widths = registry.family({"name": name, "max_span_width": 4, "labels": []}).widths()
  buckets, shapes = (8, 16, 32), {}
  for _ in range(200):  # Random batches of random sentences, some cut by max_length: one shape per bucket.
    words = [["".join("abcdefg"[k] for k in rng.integers(0, 7, rng.integers(1, 8))) for _ in range(rng.integers(1, 14))]
             for _ in range(rng.integers(1, 5))]
    encoded = [alignment.encode_words(ChunkTokenizer(), w, [0] * len(w), max_length=32) if name == "tagging" else
               span_ner.encode_spans(ChunkTokenizer(), w, [], max_length=32, max_width=4) for w in words]
    batch = batching.collate(encoded, buckets, batch_size=4, widths=widths,
                            layout=tagging.LAYOUT if name == "tagging" else span_ner.LAYOUT)
    shape = {k: v.shape for k, v in batch.items()}
    assert shapes.setdefault(shape["input_ids"], shape) == shape
    field = "word_positions" if name == "tagging" else "span_starts"
    for row, example in enumerate(encoded):  # Nothing cut: every word / span is in its row.
      np.testing.assert_array_equal(batch[field][row, :len(example[field])], example[field])
  assert len(shapes) == 3


def test_prune_buckets_is_the_cheapest_subset():
  rng = np.random.default_rng(0)
  buckets = (8, 12, 16, 24, 32, 48, 64)
  for _ in range(50):
    lengths = rng.integers(3, 65, rng.integers(1, 40))
    cost = float(rng.choice([0.0, 10.0, 100.0, 500.0]))
    total = lambda kept: sum(batching.bucket_length(n, kept) for n in lengths) + cost * len(kept)  # noqa: B023  (called within the iteration)
    subsets = [c + (64,) for r in range(len(buckets)) for c in itertools.combinations(buckets[:-1], r)]
    chosen = batching.prune_buckets(lengths, buckets, cost)
    assert chosen[-1] == 64 and total(chosen) == pytest.approx(min(map(total, subsets)))
  assert batching.prune_buckets([10] * 3, buckets, 0.0) == buckets  # 0: every bucket kept.
  assert batching.prune_buckets([10] * 3 + [60], buckets, 1000.0) == (64,)


def _outputs(rng, batch=2, length=6, hidden=8):
  last = jnp.asarray(rng.normal(size=(batch, length, hidden)), jnp.float32)
  return EncoderOutput(hidden_states=(last,), cls=last[:, 0], pooled=jnp.tanh(last[:, 0]))


def _gelu(x):
  return 0.5 * x * (1 + erf(x / np.sqrt(2)))


def test_classification_head_and_loss_match_numpy():
  rng = np.random.default_rng(0)
  outputs = _outputs(rng)
  batch = {"label": jnp.asarray([2, 0]), "attention_segments": jnp.ones((2, 6), jnp.int32)}
  objective = classification.build({"num_labels": 3, "pooling": "cls"})
  params = objective.head.init(jax.random.key(0), outputs, batch)
  predictions = objective.head.apply(params, outputs, batch)
  assert set(predictions) == {"logits"} and set(params["params"]) == {"classifier"}
  kernel, bias = (np.asarray(params["params"]["classifier"][k]) for k in ("kernel", "bias"))
  expected = np.asarray(outputs.cls) @ kernel + bias
  np.testing.assert_allclose(predictions["logits"], expected, rtol=1e-5, atol=1e-6)
  loss, metrics = objective.loss(predictions, batch)
  log_probs = expected - np.log(np.exp(expected).sum(1, keepdims=True))
  np.testing.assert_allclose(loss, -log_probs[[0, 1], [2, 0]].mean(), rtol=1e-5)
  assert float(metrics["classification_accuracy"][1]) == 2


def test_auxiliary_score_adds_weighted_squared_error():
  """score_weight: a second linear output on the same [CLS] vector regresses the score; loss = mean cross-entropy +
  weight * mean squared error over the real examples (padding rows ignored), and the engine's classification_loss
  sum carries both."""
  rng = np.random.default_rng(4)
  outputs = _outputs(rng, batch=3)
  batch = {"label": jnp.asarray([2, 0, 1]), "score": jnp.asarray([4.5, 1.0, 9.0]),
           "example_mask": jnp.asarray([1.0, 1.0, 0.0]), "attention_segments": jnp.ones((3, 6), jnp.int32)}
  objective = classification.build({"num_labels": 3, "score_weight": 0.3, "score_mean": 3.5})
  params = objective.head.init(jax.random.key(0), outputs, batch)
  assert float(params["params"]["score"]["bias"][0]) == 3.5  # Starts at the training mean.
  predictions = objective.head.apply(params, outputs, batch)
  w_s, b_s = (np.asarray(params["params"]["score"][k]) for k in ("kernel", "bias"))
  score = (np.asarray(outputs.cls) @ w_s + b_s)[:, 0]
  np.testing.assert_allclose(predictions["score"], score, rtol=1e-5, atol=1e-6)
  kernel, bias = (np.asarray(params["params"]["classifier"][k]) for k in ("kernel", "bias"))
  logits = np.asarray(outputs.cls) @ kernel + bias
  nll = -(logits - np.log(np.exp(logits).sum(1, keepdims=True)))[[0, 1], [2, 0]]
  squares = (score[:2] - np.asarray([4.5, 1.0])) ** 2
  loss, metrics = objective.loss(predictions, batch)
  np.testing.assert_allclose(loss, nll.mean() + 0.3 * squares.mean(), rtol=1e-5)
  np.testing.assert_allclose(metrics["classification_loss"], (nll.sum() + 0.3 * squares.sum(), 2), rtol=1e-5)
  np.testing.assert_allclose(metrics["classification_score_mse"], (squares.sum(), 2), rtol=1e-5)


def test_regression_head_and_loss_match_numpy():
  """Task "regression": one linear output on [CLS] (no classifier), trained on the mean squared error."""
  from tasks import regression  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(5)
  outputs = _outputs(rng)
  batch = {"score": jnp.asarray([3.2, 4.9]), "attention_segments": jnp.ones((2, 6), jnp.int32)}
  objective = regression.build({"pooling": "cls"})
  params = objective.head.init(jax.random.key(0), outputs, batch)
  predictions = objective.head.apply(params, outputs, batch)
  assert set(predictions) == {"score"} and set(params["params"]) == {"score"}
  w_s, b_s = (np.asarray(params["params"]["score"][k]) for k in ("kernel", "bias"))
  score = (np.asarray(outputs.cls) @ w_s + b_s)[:, 0]
  loss, metrics = objective.loss(predictions, batch)
  np.testing.assert_allclose(loss, ((score - [3.2, 4.9]) ** 2).mean(), rtol=1e-5)
  assert set(metrics) == {"regression_loss"} and float(metrics["regression_loss"][1]) == 2


def test_rdrop_loss_matches_numpy():
  """Adjacent rows are two dropout samples of one example: cross-entropy of both plus alpha * symmetric KL / 2 per
  pair, over the real examples; without `train_copy` (evaluation) the plain cross-entropy."""
  rng = np.random.default_rng(2)
  logits = rng.normal(size=(6, 3)).astype(np.float32)
  labels, mask = np.asarray([2, 2, 0, 0, 1, 1]), np.asarray([1, 1, 1, 1, 0, 0], np.float32)
  batch = {"label": jnp.asarray(labels), "example_mask": jnp.asarray(mask), "train_copy": jnp.arange(6) % 2}
  objective = classification.build({"num_labels": 3, "rdrop": 0.7})
  assert objective.train_copies == 2 and classification.build({"num_labels": 3}).train_copies == 1
  loss, metrics = objective.loss({"logits": jnp.asarray(logits)}, batch)
  log_p = logits - np.log(np.exp(logits).sum(1, keepdims=True))
  cross_entropy = -(log_p[np.arange(6), labels] * mask).sum()
  p, q = np.exp(log_p[0::2]), np.exp(log_p[1::2])
  symmetric_kl = 0.5 * ((p * np.log(p / q)).sum(1) + (q * np.log(q / p)).sum(1))
  kl = (symmetric_kl * mask[0::2]).sum()
  np.testing.assert_allclose(loss, (cross_entropy + 0.7 * kl) / 4, rtol=1e-5)
  np.testing.assert_allclose(metrics["classification_rdrop_kl"], (kl, 2), rtol=1e-5)
  assert float(metrics["classification_loss"][1]) == 4
  plain, plain_metrics = objective.loss({"logits": jnp.asarray(logits)},
                                        {k: v for k, v in batch.items() if k != "train_copy"})
  np.testing.assert_allclose(plain, cross_entropy / 4, rtol=1e-5)
  assert "classification_rdrop_kl" not in plain_metrics


@pytest.mark.parametrize("rdrop, score_weight", [(0.5, 0.0), (0.0, 0.4), (0.5, 0.4)])
def test_classification_loss_of_the_hf_reference_equals_ours(rdrop, score_weight):
  """benchmarks.finetune_reference trains HF with the same R-Drop and auxiliary-score losses (same outputs -> same
  value): its model's last output is our `score` head."""
  import torch  # pylint: disable=import-outside-toplevel

  from benchmarks import finetune_reference  # pylint: disable=import-outside-toplevel
  copies = 2 if rdrop else 1
  outputs = np.random.default_rng(3).normal(size=(4 * copies, 3 + (score_weight > 0))).astype(np.float32)
  labels, scores = np.asarray([2, 0, 1, 1]), np.asarray([1.5, 4.0, 3.3, 2.0], np.float32)

  def model(input_ids):
    assert input_ids.tolist() == np.repeat(np.arange(4), copies).tolist()  # Each example `copies` times, adjacent.
    return dataclasses.make_dataclass("Out", ["logits"])(torch.from_numpy(outputs))

  theirs = finetune_reference.classification_loss(
      model, {"input_ids": torch.arange(4)}, torch.from_numpy(labels), rdrop=rdrop,
      scores=torch.from_numpy(scores), score_weight=score_weight)
  ours = classification.build({"num_labels": 3, "rdrop": rdrop, "score_weight": score_weight}).loss
  predictions = {"logits": jnp.asarray(outputs[:, :3]), "score": jnp.asarray(outputs[:, -1])}
  batch = {"label": jnp.asarray(np.repeat(labels, copies)), "score": jnp.asarray(np.repeat(scores, copies))}
  value, _ = ours(predictions, batch | ({"train_copy": jnp.arange(4 * copies) % 2} if rdrop else {}))
  np.testing.assert_allclose(float(theirs), float(value), rtol=1e-5)


def test_classification_mean_pooling_ignores_padding():
  rng = np.random.default_rng(1)
  outputs = _outputs(rng)
  segments = jnp.asarray([[1, 1, 1, 0, 0, 0], [1] * 6])
  head = classification.ClassificationHead(3, pooling="mean", dropout=0.0)
  params = head.init(jax.random.key(0), outputs, {"attention_segments": segments})
  logits = head.apply(params, outputs, {"attention_segments": segments})["logits"]
  mean0 = np.asarray(outputs.last[0, :3]).mean(0)
  kernel, bias = (np.asarray(params["params"]["classifier"][k]) for k in ("kernel", "bias"))
  np.testing.assert_allclose(logits[0], mean0 @ kernel + bias, rtol=1e-5, atol=1e-6)


def test_enumerate_and_encode_spans():
  assert len(span_ner.enumerate_spans(5, 5)) == 5 * 6 // 2
  assert len(span_ner.enumerate_spans(5, 2)) == 5 + 4
  example = span_ner.encode_spans(ChunkTokenizer(), ["Jane", "Villanueva", "spoke"], [(0, 2, 1)], max_length=32,
                                  max_width=3)
  # Subwords: [CLS] Jan e Vil lan uev a spo ke [SEP]; words start at 1, 3, 7 and end at 2, 6, 8.
  pairs = [tuple(w) for w in example["span_words"]]
  assert pairs == [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)]
  np.testing.assert_array_equal(example["span_starts"], [1, 1, 1, 3, 3, 7])
  np.testing.assert_array_equal(example["span_ends"], [2, 6, 8, 6, 8, 8])
  np.testing.assert_array_equal(example["span_labels"], [0, 1, 0, 0, 0, 0])


@pytest.mark.slow
@pytest.mark.parametrize("pooling", ["mean", "attention"])
def test_span_head_matches_numpy(pooling):
  rng = np.random.default_rng(2)
  outputs = _outputs(rng, batch=1, length=7)
  batch = {"span_starts": jnp.asarray([[1, 2, 4]]), "span_ends": jnp.asarray([[1, 4, 6]]),
           "span_labels": jnp.asarray([[0, 1, -1]])}
  head = span_ner.SpanClassifierHead(2, pooling=pooling, boundary_ffn=True, hidden=5, dropout=0.0)
  params = head.init(jax.random.key(0), outputs, batch)
  logits = np.asarray(head.apply(params, outputs, batch))[0]
  p = jax.tree.map(np.asarray, params["params"])
  z = np.asarray(outputs.last[0])
  start_rep = _gelu(z @ p["ffn_start"]["kernel"] + p["ffn_start"]["bias"])
  end_rep = _gelu(z @ p["ffn_end"]["kernel"] + p["ffn_end"]["bias"])
  for s, (i, j) in enumerate([(1, 1), (2, 4), (4, 6)]):
    if pooling == "mean":
      summary = z[i:j + 1].mean(0)
    else:
      scores = (z @ p["span_attention"]["kernel"] + p["span_attention"]["bias"])[i:j + 1, 0]
      weights = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
      summary = weights @ z[i:j + 1]
    rep = np.concatenate([start_rep[i], end_rep[j], summary])
    h = _gelu(rep @ p["ffn"]["kernel"] + p["ffn"]["bias"])
    want = h @ p["classifier"]["kernel"] + p["classifier"]["bias"]  # ~1e-3: atol relative to the terms summed.
    terms = np.abs(h) @ np.abs(p["classifier"]["kernel"]) + np.abs(p["classifier"]["bias"])
    np.testing.assert_allclose(logits[s], want, rtol=2e-5, atol=2e-5 * terms.max())
  _, metrics = span_ner.span_loss(jnp.asarray(logits[None]), batch)
  assert float(metrics["span_ner_loss"][1]) == 2  # The -1 span is padding.


def test_span_loss_weights_null_spans_as_numpy():
  rng = np.random.default_rng(3)
  logits = rng.normal(size=(2, 5, 3)).astype(np.float32)
  labels = np.asarray([[0, 1, 0, 2, -1], [0, 0, 2, -1, -1]])
  nll = logsumexp(logits, axis=-1) - np.take_along_axis(logits, np.maximum(labels, 0)[..., None], -1)[..., 0]
  for null_weight in (1.0, 0.25):
    weights = np.where(labels == 0, null_weight, 1.0) * (labels >= 0)
    loss, metrics = span_ner.span_loss(jnp.asarray(logits), {"span_labels": jnp.asarray(labels)}, null_weight)
    assert float(loss) == pytest.approx((nll * weights).sum() / weights.sum(), rel=1e-6)
    assert float(metrics["span_ner_loss"][1]) == pytest.approx(weights.sum())
  with pytest.raises(errors.ConfigError, match=r"config.task.null_weight=0.0: expected a loss weight > 0"):
    span_ner.build({"num_labels": 2, "null_weight": 0.0})


def test_label_prior_counts_every_candidate_span_and_starts_the_head_there():
  records = [{"words": list("abcdef"), "spans": [(0, 3, 1), (1, 2, 2), (2, 6, 1)]},  # (2, 6): wider than 3.
             {"words": list("ab"), "spans": [(0, 1, 2)]}]
  counts = np.zeros(3)
  for record in records:
    gold = {(start, end): label for start, end, label in record["spans"]}
    for start, end in itertools.combinations(range(len(record["words"]) + 1), 2):
      if end - start <= 3:
        counts[gold.get((start, end), 0)] += 1
  assert counts.tolist() == [15, 1, 2]  # 6 + 5 + 4 spans of 1-3 words in the first record, 2 + 1 in the second.
  np.testing.assert_allclose(span_ner.label_prior(records, 2, max_width=3), np.log(counts / counts.sum()), rtol=1e-12)
  weighted = counts * [0.5, 1, 1]
  np.testing.assert_allclose(span_ner.label_prior(records, 2, max_width=3, null_weight=0.5),
                             np.log(weighted / weighted.sum()), rtol=1e-12)
  family = registry.family({"name": "span_ner", "labels": ["X", "Y"], "max_span_width": 3, "prior_bias": True})
  fields = family.train_fields([{"words": r["words"], "spans": [{"start": s, "end": e, "label": "XY"[label - 1]}
                                                                for s, e, label in r["spans"]]} for r in records])
  np.testing.assert_allclose(fields["label_bias"], np.log(counts / counts.sum()), rtol=1e-12)
  head = span_ner.build({"num_labels": 2, "span_hidden": 4, "label_bias": fields["label_bias"]}).head
  outputs = _outputs(np.random.default_rng(0), batch=1, length=4)
  batch = {"span_starts": jnp.asarray([[1]]), "span_ends": jnp.asarray([[2]])}
  params = head.init(jax.random.key(0), outputs, batch)["params"]
  np.testing.assert_allclose(params["classifier"]["bias"], fields["label_bias"], rtol=1e-6)
  assert registry.family({"name": "span_ner", "labels": ["X"], "prior_bias": False}).train_fields(records) == {}


def test_decode_spans_flat_nested_and_threshold():
  span_words = np.asarray([[0, 1], [1, 2], [0, 0], [3, 3]])
  probs = np.asarray([[0.1, 0.8, 0.1],   # (0,1) label 1, score .8
                      [0.2, 0.1, 0.7],   # (1,2) label 2, overlaps (0,1)
                      [0.3, 0.6, 0.1],   # (0,0) label 1, nested in (0,1)
                      [0.5, 0.45, 0.05]])  # (3,3): NULL wins under argmax
  assert span_ner.decode_spans(probs, span_words) == [(0, 2, 1)]
  assert span_ner.decode_spans(probs, span_words, nested=True) == [(0, 1, 1), (0, 2, 1), (1, 3, 2)]
  assert span_ner.decode_spans(probs, span_words, threshold=0.4) == [(0, 2, 1), (3, 4, 1)]
  assert span_ner.decode_spans(probs, span_words, threshold=0.85) == []


def test_tune_threshold_finds_the_best_dev_threshold():
  span_words = [np.asarray([[0, 0], [1, 1]])]
  probs = [np.asarray([[0.45, 0.55], [0.6, 0.4]])]
  # Gold has both spans: a threshold <= 0.4 recovers both; argmax only finds the first.
  threshold = span_ner.tune_threshold(probs, span_words, [[(0, 1, 1), (1, 2, 1)]], grid=(0.3, 0.5, 0.9))
  assert threshold == 0.3
  threshold = span_ner.tune_threshold(probs, span_words, [[(0, 1, 1)]], grid=(0.3, 0.5, 0.9))
  assert threshold == 0.5


def _tagging_batch():
  return {"word_positions": jnp.asarray([[1, 2, 4], [1, 3, 0]]),
          "word_labels": jnp.asarray([[1, 2, 0], [0, 1, -1]]),
          "label_ids": jnp.asarray([[-1, 1, 2, -1, 0, -1], [-1, 0, -1, 1, -1, -1]])}


def test_tagging_softmax_loss_and_first_subword_decoding():
  from tasks import tagging
  rng = np.random.default_rng(3)
  outputs, batch = _outputs(rng), _tagging_batch()
  objective = tagging.build({"tags": ["O", "B-PER", "I-PER"], "crf": False, "dropout": 0.0})
  params = objective.head.init(jax.random.key(0), outputs, batch)
  predictions = objective.head.apply(params, outputs, batch)
  logits = np.asarray(predictions["logits"])
  labels = np.asarray(batch["label_ids"])
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  real = labels >= 0
  expected = -log_probs[real, labels[real]].mean()
  loss, _ = objective.loss(predictions, batch)
  np.testing.assert_allclose(loss, expected, rtol=1e-5)
  decoded = np.asarray(tagging.decode(predictions, batch))
  np.testing.assert_array_equal(decoded[0], logits[0, [1, 2, 4]].argmax(-1))
  assert decoded[1, 2] == -1


def test_tagging_head_with_last_subword_is_a_dense_layer_over_both_states():
  from tasks import tagging
  rng = np.random.default_rng(6)
  outputs = _outputs(rng)
  batch = _tagging_batch() | {"last_positions": jnp.asarray([[0, 1, 3, 3, 4, 5], [0, 2, 2, 3, 4, 5]])}
  objective = tagging.build({"tags": ["O", "B-PER", "I-PER"], "dropout": 0.0, "last_subword": True})
  params = objective.head.init(jax.random.key(0), outputs, batch)
  kernel, bias = (np.asarray(params["params"]["classifier"][k]) for k in ("kernel", "bias"))
  hidden = np.asarray(outputs.last)
  both = np.concatenate([hidden, hidden[np.arange(2)[:, None], np.asarray(batch["last_positions"])]], -1)
  np.testing.assert_allclose(objective.head.apply(params, outputs, batch)["logits"], both @ kernel + bias, rtol=1e-5,
                             atol=1e-6)


def _bio_paths_brute_force(emissions, transitions, start, end):
  """{path: score} over every well-formed O/B-PER/I-PER path (I-PER only after B-PER or I-PER), in float64."""
  valid = lambda path: all(tag != 2 or (i > 0 and path[i - 1] in (1, 2)) for i, tag in enumerate(path))
  return {path: start[path[0]] + sum(emissions[i, tag] for i, tag in enumerate(path))
          + sum(transitions[a, b] for a, b in itertools.pairwise(path)) + end[path[-1]]
          for path in itertools.product(range(3), repeat=len(emissions)) if valid(path)}


@pytest.mark.slow
def test_tagging_crf_decoding_respects_bio():
  """With emissions pushed toward I-PER, Viterbi never starts or follows O with it; the head's loss (mean NLL per
  sentence) and decoding equal a brute-force enumeration of the well-formed paths, with random CRF parameters."""
  from tasks import tagging
  rng = np.random.default_rng(4)
  outputs, batch = _outputs(rng), _tagging_batch()
  objective = tagging.build({"tags": ["O", "B-PER", "I-PER"], "crf": True, "scheme": "IOB2", "dropout": 0.0})
  params = objective.head.init(jax.random.key(0), outputs, batch)
  # Push emissions toward I-PER everywhere: a greedy tagger emits an invalid O/start -> I-PER, the CRF cannot.
  params = jax.tree.map(jnp.asarray, params)  # A fresh tree that the next lines may edit.
  params["params"]["classifier"]["bias"] = jnp.asarray([0.0, 0.0, 5.0])
  crf = {name: rng.normal(size=params["params"]["crf"][name].shape) for name in ("transitions", "start", "end")}
  params["params"]["crf"] = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), crf)
  predictions = objective.head.apply(params, outputs, batch)
  decoded = np.asarray(tagging.decode(predictions, batch))
  assert decoded[0, 0] != 2 and decoded[1, 0] != 2  # A sentence never starts with I-PER.
  loss, metrics = objective.loss(predictions, batch)
  assert float(metrics["tagging_loss"][1]) == 2
  emissions, labels = np.asarray(predictions["word_logits"], np.float64), np.asarray(batch["word_labels"])
  nll = []
  for row in range(2):
    length = int((labels[row] >= 0).sum())
    scores = _bio_paths_brute_force(emissions[row, :length], crf["transitions"], crf["start"], crf["end"])
    nll.append(logsumexp(list(scores.values())) - scores[tuple(labels[row, :length])])
    assert tuple(decoded[row, :length]) == max(scores, key=scores.get)
  np.testing.assert_allclose(float(loss), np.mean(nll), rtol=1e-5)
  grads = jax.grad(lambda p: objective.loss(objective.head.apply(p, outputs, batch), batch)[0])(params)
  assert all(np.all(np.isfinite(np.asarray(g))) for g in jax.tree.leaves(grads))


def test_length_bucketed_batches_cover_every_example_once_and_are_deterministic():
  rng = np.random.default_rng(5)
  lengths = rng.integers(3, 120, size=1000)
  batches = batching.length_bucketed_batches(lengths, 32, seed=1, epoch=0, pool=4)
  flat = sorted(i for b in batches for i in b)
  assert flat == list(range(1000))
  assert batches == batching.length_bucketed_batches(lengths, 32, seed=1, epoch=0, pool=4)
  assert batches != batching.length_bucketed_batches(lengths, 32, seed=1, epoch=1, pool=4)
  # Bucketing keeps padding small: the mean in-batch spread is far below a random batching's.
  spread = np.mean([np.ptp(lengths[b]) for b in batches])
  random_spread = np.mean([np.ptp(lengths[rng.permutation(1000)[:32]]) for _ in range(20)])
  assert spread < 0.3 * random_spread
  evaluation = batching.length_bucketed_batches(lengths, 32, seed=0, epoch=0, shuffle=False)
  assert sorted(i for b in evaluation for i in b) == list(range(1000))

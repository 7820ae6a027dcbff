"""Word-shape (casing) features: shape classes, subword alignment, and the heads' concatenated embedding."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder import EncoderOutput
from tasks import alignment, batching, span_ner, tagging, word_shape
from tests.tasks.test_heads import ChunkTokenizer


def test_word_shapes():
  shapes = {w: word_shape.SHAPES[word_shape.word_shape(w)] for w in
            ["germany", "Germany", "EU", "I", "McDonald", "1996", "U.S.", "-", "iPhone", "B-52", "Ölbaum", "ÖL"]}
  assert shapes == {"germany": "lower", "Germany": "title", "EU": "upper", "I": "title", "McDonald": "mixed",
                    "1996": "numeric", "U.S.": "upper", "-": "other", "iPhone": "mixed", "B-52": "numeric",
                    "Ölbaum": "title", "ÖL": "upper"}


def test_case_ids_follow_words_and_skip_specials():
  example = alignment.encode_words(ChunkTokenizer(), ["Sanitas", "is", "IN", "1996"], [1, 0, 0, 0], max_length=32,
                                   case_features=True)
  title, lower, upper, numeric = (word_shape.SHAPES.index(s) for s in ("title", "lower", "upper", "numeric"))
  np.testing.assert_array_equal(example["case_ids"], [0, title, title, title, lower, upper, numeric, numeric, 0])
  assert "case_ids" not in alignment.encode_words(ChunkTokenizer(), ["a"], [0], max_length=8)
  batch = batching.collate([example], buckets=(16,), layout=tagging.LAYOUT)
  assert batch["case_ids"].shape == batch["input_ids"].shape  # A token field: padded to the bucket.


def _batch_and_outputs(case_features: bool):
  examples = [span_ner.encode_spans(ChunkTokenizer(), words, [(0, 1, 1)], max_length=16, max_width=2,
                                    case_features=case_features)
              for words in (["Anna", "is", "here"], ["the", "EU"])]
  for example, words in zip(examples, (["Anna", "is", "here"], ["the", "EU"])):
    tagged = alignment.encode_words(ChunkTokenizer(), words, [1] + [0] * (len(words) - 1), max_length=16,
                                    case_features=case_features)
    example.update({k: v for k, v in tagged.items() if k not in example})
  batch = {k: jnp.asarray(v) for k, v in batching.collate(examples, buckets=(8,), layout=tagging.LAYOUT).items()}
  rng = np.random.default_rng(0)
  last = jnp.asarray(rng.normal(size=batch["input_ids"].shape + (8,)), jnp.float32)
  return batch, EncoderOutput(hidden_states=(last,), cls=last[:, 0], pooled=last[:, 0])


@pytest.mark.slow
def test_heads_concatenate_the_shape_embedding():
  batch, outputs = _batch_and_outputs(case_features=True)
  head = tagging.build({"tags": ["O", "B-X", "I-X"], "case_features": 4}).head
  params = head.init(jax.random.key(0), outputs, batch)["params"]
  assert params["case_embeddings"]["embedding"].shape == (len(word_shape.SHAPES), 4)
  assert params["classifier"]["kernel"].shape == (8 + 4, 3)
  # The shape of each token changes its logits exactly through its row of the table.
  logits = head.apply({"params": params}, outputs, batch)["logits"]
  table, kernel = params["case_embeddings"]["embedding"], params["classifier"]["kernel"]
  expected = (outputs.last @ kernel[:8] + table[batch["case_ids"]] @ kernel[8:] + params["classifier"]["bias"])
  # float32 dots of 12 terms on both sides (~1e-7 of logits ~0.2): measured 1.5e-8 on Zen 3, 1/200 of the bound.
  np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-6)
  spans = span_ner.build({"num_labels": 1, "case_features": 4, "span_hidden": 6}).head
  span_params = spans.init(jax.random.key(0), outputs, batch)["params"]
  assert span_params["case_embeddings"]["embedding"].shape == (len(word_shape.SHAPES), 4)
  assert span_params["ffn"]["kernel"].shape == (3 * (8 + 4), 6)


def test_missing_case_ids_is_a_clear_error():
  batch, outputs = _batch_and_outputs(case_features=False)
  head = tagging.build({"tags": ["O", "B-X", "I-X"], "case_features": 4}).head
  with pytest.raises(ValueError, match="needs 'case_ids' in the batch"):
    head.init(jax.random.key(0), outputs, batch)

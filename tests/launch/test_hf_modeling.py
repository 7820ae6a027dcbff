"""launch/hf_modeling, the remote code exports carry, against the library it must agree with: word shapes, word
boundaries, the HF tokenizer's word alignment, CRF Viterbi decoding and span decoding give exactly what tasks/ gives
on the same inputs; the files import only torch, transformers and the standard library; their model types are those
encoder.hf reads back. (tests/launch/test_export.py runs them on trained runs.)"""

import ast
import sys

import jax.numpy as jnp
import numpy as np
import pytest

from encoder import hf
from encoder.pretrained import minilm_path
from encoder.tokenizer import load_tokenizer
from launch import hf_modeling
from tasks import alignment, crf, span_ner, word_shape
from tasks.scoring import tag_schemes

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from launch.hf_modeling import configuration_encoderlab, modeling_encoderlab, pipeline_encoderlab  # noqa: E402  (they import torch: after its importorskip)

WORDS = ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", ".", "U.S.", "1996-08-30", "McDonald",
         "iPhone", "naïve", "ÉCOLE", "--", "I", "x2", "", "\u00a0"]


def test_files_import_only_torch_transformers_and_the_standard_library():
  allowed = {"torch", "transformers"} | set(sys.stdlib_module_names)
  for name, text in hf_modeling.sources().items():
    tree = ast.parse(text)
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.level == 0}
    relative = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level}
    assert imported <= allowed, (name, imported - allowed)
    assert {f"{module}.py" for module in relative} <= set(hf_modeling.FILES), name


def test_model_types_are_those_the_importer_reads():
  assert {configuration_encoderlab.EncoderlabBertConfig.model_type: "bert",
          configuration_encoderlab.EncoderlabModernBertConfig.model_type: "modernbert"} == (
              hf.REMOTE_MODEL_TYPES)


def test_word_shapes_are_the_libraries():
  assert pipeline_encoderlab.SHAPES == word_shape.SHAPES
  assert [word_shape.SHAPES.index(pipeline_encoderlab.word_shape(w)) for w in WORDS] == [
      word_shape.word_shape(w) for w in WORDS]


def test_word_boundaries_are_the_alignments():
  rng = np.random.default_rng(0)
  rows = []
  for _ in range(50):
    lengths = rng.integers(1, 4, rng.integers(0, 6))
    rows.append([None] + [w for w, n in enumerate(lengths) for _ in range(n)] + [None])
  width = max(map(len, rows))
  word_ids = torch.tensor([[-1 if w is None else w for w in row] + [-1] * (width - len(row)) for row in rows])
  firsts, mask = modeling_encoderlab.first_positions(word_ids)
  lasts = modeling_encoderlab.last_positions(word_ids)
  for row, first, real, last in zip(rows, firsts, mask, lasts):
    assert first[real].tolist() == alignment.first_subword_positions(row)
    assert last[:len(row)].tolist() == alignment.last_subword_positions(row).tolist()


def test_encode_words_aligns_as_the_runs_tokenizer():
  """The HF tokenizer of an export (MiniLM's files) gives the ids, word ids and shapes our tokenizer gives, cut at
  max_length alike."""
  hf_tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_path())
  ours = load_tokenizer("all-MiniLM-L6-v2")
  words = [w for w in WORDS if w.strip()]
  for max_length in (8, 64):
    theirs = pipeline_encoderlab.encode_words(hf_tokenizer, words, max_length, list(word_shape.SHAPES))
    example = alignment.encode_words(ours, words, [0] * len(words), max_length=max_length, case_features=True)
    assert theirs["input_ids"][0].tolist() == example["input_ids"].tolist()
    firsts, _ = modeling_encoderlab.first_positions(theirs["word_ids"])
    assert firsts[0].tolist() == example["word_positions"].tolist()
    assert theirs["case_ids"][0].tolist() == example["case_ids"].tolist()


def test_viterbi_is_the_crfs():
  """Random emissions, the IOB2 constraints (forbidden moves at crf.FORBIDDEN) and ragged rows: the same paths."""
  tags = tag_schemes.tag_vocab(["LOC", "PER", "ORG"], "IOB2")
  allowed = tag_schemes.allowed_transitions(tags, "IOB2")
  rng = np.random.default_rng(1)
  emissions = rng.normal(size=(16, 9, len(tags))).astype(np.float32)
  mask = np.arange(9)[None] < rng.integers(0, 10, 16)[:, None]
  scores = [rng.normal(size=shape).astype(np.float32) for shape in ((len(tags), len(tags)), (len(tags),), (len(tags),))]
  constrained = [np.asarray(x) for x in crf.constrain(*map(jnp.asarray, scores), allowed)]
  ours, _ = crf.viterbi(jnp.asarray(emissions), jnp.asarray(mask), *map(jnp.asarray, constrained))
  theirs = modeling_encoderlab.viterbi(torch.tensor(emissions), torch.tensor(mask), *map(torch.tensor, constrained))
  np.testing.assert_array_equal(theirs.numpy(), np.asarray(ours))


@pytest.mark.parametrize("threshold, nested", [(None, False), (0.45, False), (0.45, True), (None, True)])
def test_span_decoding_is_span_ners(threshold, nested):
  rng = np.random.default_rng(2)
  spans = np.asarray(span_ner.enumerate_spans(7, 3))
  for _ in range(20):
    logits = rng.normal(scale=2.0, size=(len(spans), 4)).astype(np.float32)
    probabilities = np.asarray(torch.softmax(torch.tensor(logits), -1))
    ours = span_ner.decode_spans(probabilities, spans, threshold=threshold, nested=nested)
    theirs = modeling_encoderlab.decode_spans(torch.tensor(probabilities), torch.tensor(spans), threshold, nested)
    assert [(s, e, label) for s, e, label, _ in theirs] == ours

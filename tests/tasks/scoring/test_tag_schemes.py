"""Tag schemes: chunkers equal seqeval's, lossless conversions, allowed transitions, real CoNLL-2003 IOB1 -> BIO."""

import itertools
import random
import warnings

import pytest
from seqeval.metrics.sequence_labeling import get_entities
from seqeval.scheme import IOB1, IOB2, IOBES, IOE2, Tokens

from tasks.scoring import metrics, tag_schemes
from tests.conftest import conll_tags

SEQEVAL = {"IOB1": IOB1, "IOB2": IOB2, "IOE": IOE2, "BIOES": IOBES}
PREFIXES = {"IO": "I", "IOB1": "IB", "IOB2": "IB", "IOE": "IE", "BIOES": "BIES"}


def random_tags(rng: random.Random, pool: list[str], max_length: int = 10) -> list[str]:
  return [rng.choice(pool) for _ in range(rng.randint(0, max_length))]


def all_span_layouts(length: int, types: str = "AB"):
  """Every set of non-overlapping typed spans over `length` tokens (brute force)."""
  if length == 0:
    yield []
    return
  for rest in all_span_layouts(length - 1, types):  # Token 0 outside.
    yield [(t, s + 1, e + 1) for t, s, e in rest]
  for n in range(1, length + 1):  # A span [0, n).
    for kind in types:
      for rest in all_span_layouts(length - n, types):
        yield [(kind, 0, n)] + [(t, s + n, e + n) for t, s, e in rest]


def test_conlleval_spans_equal_seqeval_default_on_random_and_ill_formed_tags():
  rng = random.Random(0)
  pool = ["O", "B-A", "I-A", "E-A", "S-A", "B-B", "I-B", "E-B", "S-B", "X", "B", "I-A-x", ".", "ORG", "B--A"]
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # seqeval warns about the non-NE tags on purpose.
    for _ in range(3000):
      tags = random_tags(rng, pool)
      expected = [(t, s, e + 1) for t, s, e in get_entities(tags)]  # seqeval's end is inclusive.
      assert tag_schemes.conlleval_spans(tags) == expected, tags


@pytest.mark.parametrize("scheme", sorted(SEQEVAL))
def test_strict_spans_equal_seqeval_strict(scheme):
  rng = random.Random(1)
  pool = ["O"] + [f"{p}-{t}" for p in PREFIXES[scheme] for t in "AB"]
  for _ in range(2000):
    tags = random_tags(rng, pool)
    expected = [(e.tag, e.start, e.end) for e in Tokens(tags, SEQEVAL[scheme]).entities]
    assert tag_schemes.strict_spans(tags, scheme) == expected, tags


@pytest.mark.parametrize("scheme,tag", [("IOB2", "E-PER"), ("IOB2", "X"), ("IOE", "B-PER"), ("IOB1", "S-LOC")])
def test_strict_spans_reject_tags_outside_the_scheme_like_seqeval(scheme, tag):
  with pytest.raises((KeyError, ValueError)):
    _ = Tokens(["O", tag], SEQEVAL[scheme]).entities  # The property raises.
  with pytest.raises(ValueError, match="position 1"):
    tag_schemes.strict_spans(["O", tag], scheme)


def test_spec_figure_io_bio_bioes_columns():
  # Spec, "BIO Tagging", Figure 11.12: Jane Villanueva of United Airlines Holding discussed the Chicago route .
  bio = ["B-PER", "I-PER", "O", "B-ORG", "I-ORG", "I-ORG", "O", "O", "B-LOC", "O", "O"]
  io = ["I-PER", "I-PER", "O", "I-ORG", "I-ORG", "I-ORG", "O", "O", "I-LOC", "O", "O"]
  bioes = ["B-PER", "E-PER", "O", "B-ORG", "I-ORG", "E-ORG", "O", "O", "S-LOC", "O", "O"]
  assert tag_schemes.convert(bio, "BIO", "IO") == io
  assert tag_schemes.convert(bio, "BIO", "BIOES") == bioes
  assert tag_schemes.convert(bioes, "BIOES", "BIO") == bio
  assert tag_schemes.spans_from_tags(bio, "BIO") == [("PER", 0, 2), ("ORG", 3, 6), ("LOC", 8, 9)]
  assert len(tag_schemes.tag_vocab(["PER", "ORG", "LOC", "MISC"], "BIO")) == 2 * 4 + 1  # 2n + 1 tags.
  assert tag_schemes.tag_vocab(["PER"], "BIOES") == ["O", "B-PER", "I-PER", "E-PER", "S-PER"]


@pytest.mark.parametrize("length", [1, 2, 3, 4, 5])
def test_every_layout_round_trips_through_every_lossless_scheme(length):
  for spans in all_span_layouts(length):
    for scheme in ("IOB1", "IOB2", "IOE", "BIOES"):
      tags = tag_schemes.tags_from_spans(spans, length, scheme)
      assert tag_schemes.spans_from_tags(tags, scheme, "conlleval") == spans, (scheme, tags)
      assert tag_schemes.spans_from_tags(tags, scheme, "strict") == spans, (scheme, tags)
      for target in ("IOB1", "IOB2", "IOE", "BIOES"):
        assert tag_schemes.convert(tags, scheme, target) == tag_schemes.tags_from_spans(spans, length, target)


def test_io_is_lossy_for_adjacent_same_type_entities():
  bio = ["B-PER", "B-PER", "I-PER", "O", "B-LOC", "B-PER"]
  with pytest.raises(ValueError, match="IO cannot separate"):
    tag_schemes.convert(bio, "BIO", "IO")
  io = tag_schemes.convert(bio, "BIO", "IO", allow_lossy=True)
  assert io == ["I-PER", "I-PER", "I-PER", "O", "I-LOC", "I-PER"]
  assert tag_schemes.spans_from_tags(io, "IO") == [("PER", 0, 3), ("LOC", 4, 5), ("PER", 5, 6)]


def test_conversion_rejects_tags_of_another_scheme():
  with pytest.raises(ValueError, match="not a IOB2 tag"):
    tag_schemes.convert(["B-PER", "E-PER"], "BIO", "BIOES")
  with pytest.raises(ValueError, match="unknown tag scheme"):
    tag_schemes.canonical_scheme("BILOU")


@pytest.mark.parametrize("scheme", ["IO", "IOB1", "IOB2", "IOE", "BIOES"])
def test_allowed_transitions_are_exactly_those_of_well_formed_sequences(scheme):
  vocab = tag_schemes.tag_vocab("AB", scheme)
  index = {t: i for i, t in enumerate(vocab)}
  seen = set()
  for length in range(1, 6):
    for spans in all_span_layouts(length):
      tags = tag_schemes.tags_from_spans(spans, length, scheme, allow_lossy=True)
      ids = ["start"] + [index[t] for t in tags] + ["end"]
      seen |= set(itertools.pairwise(ids))
  trans, start, end = tag_schemes.allowed_transitions(vocab, scheme)
  assert {(i, j) for i in range(len(vocab)) for j in range(len(vocab)) if trans[i, j]} == {
      (i, j) for i, j in seen if i != "start" and j != "end"}
  assert {j for j in range(len(vocab)) if start[j]} == {j for i, j in seen if i == "start"}
  assert {i for i in range(len(vocab)) if end[i]} == {i for i, j in seen if j == "end"}


def test_bio_forbidden_transitions_from_the_issue():
  vocab = tag_schemes.tag_vocab(["PER", "LOC"], "BIO")
  trans, start, end = tag_schemes.allowed_transitions(vocab, "BIO")
  at = {t: i for i, t in enumerate(vocab)}
  assert not trans[at["O"], at["I-PER"]] and not trans[at["B-PER"], at["I-LOC"]]
  assert not trans[at["I-LOC"], at["I-PER"]] and not start[at["I-PER"]]
  assert trans[at["B-PER"], at["I-PER"]] and trans[at["I-PER"], at["B-PER"]] and end.all()


def test_real_conll2003_iob1_converts_to_the_bio_copy_exactly():
  iob1 = conll_tags("conll2003/iob1/eng.testa")  # First -DOCSTART- moved to the end.
  bio = conll_tags("conll2003/bio/valid.txt")
  assert len(iob1) == len(bio) == 3250
  assert [tag_schemes.convert(s, "IOB1", "IOB2") for s in iob1] == bio
  assert metrics.entity_scores(iob1, bio)["micro"]["f1"] == 1.0  # conlleval chunking reads either scheme.
  assert [tag_schemes.convert(tag_schemes.convert(s, "BIO", "BIOES"), "BIOES", "IOB1") for s in bio] == iob1
  counts = {}
  for s in bio:
    for kind, _, _ in tag_schemes.spans_from_tags(s, "BIO", "strict"):
      counts[kind] = counts.get(kind, 0) + 1
  assert counts == {"PER": 1842, "LOC": 1837, "ORG": 1341, "MISC": 922}  # SOURCE.md's published counts.

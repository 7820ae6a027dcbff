"""Corpus reading (WikiText and plain text), sentence splitting, tokenization cache, and bad-input errors."""

import re

import numpy as np
import pytest

from objectives import corpus
from tests.conftest import require_data

WIKI = """ 
 = First Title = 
 
 The first paragraph . It has two sentences . 
 
 = = A heading = = 
 
 Second paragraph with 3 @,@ 000 people and a well @-@ known name . Mr. Smith said " Yes . " Then he left . 
 
 = Second Title = 
 
 Another document , with one sentence H. americanus . 
 Note : GP 
 = Games Played ; TOI = 
 Time On Ice 
"""  # noqa: W291, W293  (WikiText's raw lines end in a space: the bytes the reader is given)


def test_split_sentences_rules():
  assert corpus.split_sentences("It rained . Then it stopped !  Did it ? yes it did .") == [
      "It rained .", "Then it stopped !", "Did it ? yes it did ."]
  assert corpus.split_sentences("Mr. Smith met Dr. Who in the U.S. Army. H. americanus lives. 3 fish swam.") == [
      "Mr. Smith met Dr. Who in the U.S. Army.", "H. americanus lives.", "3 fish swam."]
  assert corpus.split_sentences('He said " Stop . " Then left.') == ['He said " Stop . "', "Then left."]


def test_wikitext_documents(tmp_path):
  path = tmp_path / "wiki.raw"
  path.write_text(WIKI, encoding="utf-8")
  documents = corpus.read_documents([path])
  assert documents == [
      ["The first paragraph .", "It has two sentences .",
       "Second paragraph with 3,000 people and a well-known name .", 'Mr. Smith said " Yes . "', "Then he left ."],
      ["Another document , with one sentence H. americanus .", "Note : GP", "= Games Played ; TOI =",
       "Time On Ice"]]


def test_plain_text_documents_and_short_documents(tmp_path):
  path = tmp_path / "plain.txt"
  path.write_text("One. Two.\nThree.\n\n\nAlone here.\n\nFour. Five.\n", encoding="utf-8")
  assert corpus.read_documents([path]) == [["One.", "Two.", "Three."], ["Alone here."], ["Four.", "Five."]]
  assert corpus.read_documents([path], min_document_sentences=2) == [["One.", "Two.", "Three."], ["Four.", "Five."]]
  with pytest.raises(ValueError, match=r"plain.txt:5: document 'Alone here.' has 1 sentence.*min_document_sentences=2"):
    corpus.read_documents([path], min_document_sentences=2, short_documents="error")


def test_empty_corpus_names_files(tmp_path):
  path = tmp_path / "empty.txt"
  path.write_text("\n  \n\n", encoding="utf-8")
  with pytest.raises(corpus.CorpusError, match=r"empty.txt: empty corpus file: expected text, found only whitespace"):
    corpus.read_documents([path])
  path.write_bytes(b"text\n\0\0\n")
  with pytest.raises(corpus.CorpusError, match=r"empty.txt:2: a NUL byte: expected UTF-8 text, found a binary file"):
    corpus.read_documents([path])
  with pytest.raises(FileNotFoundError, match=re.escape("missing.txt")):
    corpus.read_documents([tmp_path / "missing.txt"])


def test_non_utf8_names_file_and_line(tmp_path):
  path = tmp_path / "latin1.txt"
  path.write_bytes("fine line\nsecond\ncaf\xe9 au lait\n".encode("latin-1"))
  with pytest.raises(ValueError, match=r"latin1.txt:3: not valid UTF-8"):
    corpus.read_documents([path])


def test_encode_documents_and_cache(tmp_path, tokenizer, monkeypatch):
  documents = [["Hello world, unaffable.", "Second one."], ["Third sentence here."]]
  encoded = corpus.encode_documents(documents, tokenizer, tmp_path)
  assert encoded.document_offsets.tolist() == [0, 2, 3]
  first = encoded.sentence(0)
  assert tokenizer.decode(first) == "hello world, unaffable."
  assert not set(encoded.tokens.tolist()) & tokenizer.special_ids
  pieces = tokenizer.ids_to_tokens(first)
  np.testing.assert_array_equal(encoded.word_starts[:len(first)], [not p.startswith("##") for p in pieces])
  assert len(list(tmp_path.glob("*/*.npy"))) == 4
  monkeypatch.setattr(type(tokenizer), "encode_batch", lambda *a, **k: pytest.fail("cache not used"))
  again = corpus.encode_documents(documents, tokenizer, tmp_path)
  for a, b in zip(encoded, again):
    np.testing.assert_array_equal(a, b)


def test_text_of_only_unknown_tokens_names_the_file(tmp_path, tokenizer):
  path = tmp_path / "emoji.txt"
  path.write_text("\u2603\ufe0f \U0001F600\U0001F600\n", encoding="utf-8")
  assert set(tokenizer.encode(path.read_text()).input_ids[1:-1]) == {tokenizer.unk_id}
  with pytest.raises(corpus.CorpusError, match=r"emoji.txt: no usable text: .* maps all 2 tokens of it to \[UNK\]"):
    corpus.load_corpus([path], tokenizer, tmp_path / "cache")
  assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.npy"))  # Nothing cached.


def test_load_corpus_cache_keyed_by_file_content(tmp_path, tokenizer):
  path = tmp_path / "a.txt"
  path.write_text("Alpha beta. Gamma.\n\nDelta.\n", encoding="utf-8")
  first = corpus.load_corpus([path], tokenizer, tmp_path / "cache")
  path.write_text("Alpha beta. Gamma.\n\nEpsilon zeta.\n", encoding="utf-8")
  second = corpus.load_corpus([path], tokenizer, tmp_path / "cache")
  assert len(list((tmp_path / "cache").iterdir())) == 2
  assert tokenizer.decode(second.sentence(2)) == "epsilon zeta." != tokenizer.decode(first.sentence(2))


@pytest.mark.parametrize("split,articles", [("train", 600), ("valid", 60)])
def test_wikitext_reads_real_articles(split, articles):
  documents = corpus.read_documents([require_data(f"wikitext-2/raw/wiki.{split}.raw")])
  assert len(documents) == articles  # WikiText-2's article counts (Merity et al., 2016), not its table rows.
  sentences = [s for d in documents for s in d]
  assert 100 < len(sentences) / articles < 150
  assert not any(s.startswith("= = ") or "@-@" in s for s in sentences)  # Headings dropped, joins undone.

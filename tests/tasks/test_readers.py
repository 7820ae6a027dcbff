"""Readers: exact counts on the shared data (SOURCE.md), the format traps, and `path:line:` errors."""

import collections
import pickle
import random
import re

import pytest

from tasks.readers import (
  ReaderError,
  numbered_lines,
  outermost_spans,
  read_conll,
  read_conllu,
  read_spans_jsonl,
  read_tsv,
  spans_to_tagging,
  tagging_to_spans,
)
from tests.conftest import require_data

SICK = dict(text_a="sentence_A", text_b="sentence_B", label="entailment_judgment",
            label_names=("ENTAILMENT", "NEUTRAL", "CONTRADICTION"))


def _write(tmp_path, name, text, newline="\n"):
  path = tmp_path / name
  path.write_bytes(text.replace("\n", newline).encode("utf-8"))
  return path


def _error(reader, path, **options) -> str:
  with pytest.raises(ReaderError) as info:
    list(reader(path, **options))
  return str(info.value)


def test_numbered_lines_strip_crlf_and_bom_but_split_only_at_newline(tmp_path):
  path = tmp_path / "mixed.txt"
  path.write_bytes(b"\xef\xbb\xbfone\r\ntwo\rstill two\n\nlast\tfield\r")
  assert list(numbered_lines(path)) == [(1, "one"), (2, "two\rstill two"), (3, ""), (4, "last\tfield")]


# --- CoNLL-2003 column files -----------------------------------------------------------------------------------------

CONLL_IOB2 = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- -X- O

BRUSSELS NNP B-NP B-LOC
"""
# The same in IOB1 with the first -DOCSTART- moved to the end and no final newline (the iob1/ copy's layout).
CONLL_IOB1 = """EU NNP I-NP I-ORG
rejects VBZ I-VP O
German JJ I-NP I-MISC

Peter NNP I-NP I-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- O O

BRUSSELS NNP I-NP I-LOC

-DOCSTART- -X- O O"""


def test_conll_sentences_documents_and_columns(tmp_path):
  iob2 = list(read_conll(_write(tmp_path, "iob2.txt", CONLL_IOB2)))
  assert [r["words"] for r in iob2] == [["EU", "rejects", "German"], ["Peter", "Blackburn"], ["BRUSSELS"]]
  assert [r["tags"] for r in iob2] == [["B-ORG", "O", "B-MISC"], ["B-PER", "I-PER"], ["B-LOC"]]
  assert [r["doc_index"] for r in iob2] == [0, 0, 1]
  iob1 = list(read_conll(_write(tmp_path, "iob1.txt", CONLL_IOB1)))
  assert [r["doc_index"] for r in iob1] == [0, 0, 1]
  assert [tagging_to_spans(r, "IOB1") for r in iob1] == [tagging_to_spans(r) for r in iob2]
  pos = list(read_conll(tmp_path / "iob2.txt", tag_column="pos"))
  assert pos[0]["tags"] == ["NNP", "VBZ", "JJ"]
  assert list(read_conll(tmp_path / "iob2.txt", tag_column=2))[1]["tags"] == ["B-NP", "I-NP"]
  with pytest.raises(ValueError, match="tag column 'ne'"):
    read_conll(tmp_path / "iob2.txt", tag_column="ne").__next__()


def test_conll_crlf_and_tab_delimited_words_with_spaces(tmp_path):
  crlf = _write(tmp_path, "crlf.txt", CONLL_IOB2, newline="\r\n")
  assert list(read_conll(crlf)) == list(read_conll(_write(tmp_path, "lf.txt", CONLL_IOB2)))
  tabs = _write(tmp_path, "tabs.txt", "New York\tNNP\tB-NP\tB-LOC\nis\tVBZ\tB-VP\tO\n", newline="\r\n")
  assert next(read_conll(tabs, delimiter="\t")) == {"words": ["New York", "is"], "tags": ["B-LOC", "O"],
                                                    "doc_index": 0}


def test_conll_errors_name_file_line_and_expectation(tmp_path):
  path = _write(tmp_path, "bad.txt", "EU NNP B-NP B-ORG\nrejects VBZ O\n")
  assert re.fullmatch(rf"{re.escape(str(path))}:2: expected 4 columns \(word pos chunk ner\) .*got 3: 'rejects VBZ O'",
                      _error(read_conll, path))
  empty = _write(tmp_path, "empty.txt", "EU\tNNP\tB-NP\tB-ORG\n\tNNP\tB-NP\tO\n")
  assert _error(read_conll, empty, delimiter="\t").startswith(f"{empty}:2: expected a non-empty word")
  error = pickle.loads(pickle.dumps(ReaderError(path, 2, "x")))
  assert (str(error), error.path, error.line, error.expected) == (f"{path}:2: expected x", str(path), 2, "x")
  latin1 = tmp_path / "latin1.txt"
  latin1.write_bytes("EU NNP B-NP B-ORG\n\nM\xfcnchen NNP B-NP B-LOC\n".encode("latin-1"))
  assert _error(read_conll, latin1).startswith(f"{latin1}:3: expected UTF-8 text, found byte 0xfc at column 2")


def test_conll_and_conllu_label_names_refuse_other_tags_at_their_line(tmp_path):
  conll = _write(tmp_path, "a.conll", "EU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nPeter NNP B-NP Peter\n")
  assert _error(read_conll, conll, label_names=("O", "B-ORG", "I-ORG")) == (
      f"{conll}:4: expected a ner tag of the task (B-ORG, I-ORG, O), got 'Peter'")
  assert len(list(read_conll(conll, label_names=("O", "B-ORG", "Peter")))) == 2
  conllu = _write(tmp_path, "a.conllu", "1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n"
                                        "2\tdog\tdog\tNOUN\tNN\t_\t0\troot\t_\t_\n")
  assert _error(read_conllu, conllu, label_names=("DET",)).startswith(f"{conllu}:2: expected a UPOS of the task (DET)")


# --- TSV (GLUE style) ------------------------------------------------------------------------------------------------


def test_tsv_columns_by_name_or_index_crlf_and_trailing_spaces(tmp_path):
  text = ("pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
          "1\tA dog runs \tA dog is running\t4.5\tENTAILMENT\n\n2\tA cat\tNo cat\t3.6\tCONTRADICTION\n")
  path = _write(tmp_path, "sick.txt", text, newline="\r\n")
  expected = [{"text_a": "A dog runs", "text_b": "A dog is running", "label": "ENTAILMENT"},
              {"text_a": "A cat", "text_b": "No cat", "label": "CONTRADICTION"}]
  assert list(read_tsv(path, **SICK)) == expected
  no_header = _write(tmp_path, "rows.tsv", "".join(text.splitlines(keepends=True)[1:]))
  assert list(read_tsv(no_header, text_a=1, text_b=2, label=4, header=False)) == expected
  single = list(read_tsv(path, text_a="sentence_B"))
  assert single[0] == {"text_a": "A dog is running", "text_b": None, "label": None}
  with pytest.raises(ValueError, match="header=False"):
    next(read_tsv(no_header, text_a="sentence_A", header=False))
  with pytest.raises(ValueError, match="without a label column"):
    next(read_tsv(path, text_a="sentence_A", label_names=("ENTAILMENT",)))
  with pytest.raises(ValueError, match="negative"):
    next(read_tsv(no_header, text_a=-1, header=False))


def test_tsv_score_column_is_a_finite_float(tmp_path):
  text = "s1\ts2\tscore\tlabel\nA man\tA person\t4.5\tyes\nA cat\tA dog\t1\tno\n"
  path = _write(tmp_path, "scores.tsv", text, newline="\r\n")
  records = list(read_tsv(path, text_a="s1", text_b="s2", score="score"))
  assert records == [{"text_a": "A man", "text_b": "A person", "label": None, "score": 4.5},
                     {"text_a": "A cat", "text_b": "A dog", "label": None, "score": 1.0}]
  assert "score" not in next(read_tsv(path, text_a="s1", label="label"))  # Only when a score column is named.
  for bad in ("high", "nan", "inf"):
    broken = _write(tmp_path, f"{bad}.tsv", text.replace("\t1\t", f"\t{bad}\t"))
    assert _error(read_tsv, broken, text_a="s1", score="score") == (
        f"{broken}:3: expected a finite number in score column 'score', got {bad!r}")


def test_tsv_errors_name_file_line_and_expectation(tmp_path):
  header = "sentence_A\tsentence_B\tentailment_judgment\n"
  unknown = _write(tmp_path, "unknown.tsv", header + "a\tb\tNEUTRAL\na\tb\tneutral\n")
  message = _error(read_tsv, unknown, **SICK)
  assert message.startswith(f"{unknown}:3: expected a label in column 'entailment_judgment' that is one of")
  assert message.endswith("got 'neutral'")
  short = _write(tmp_path, "short.tsv", header + "a\tNEUTRAL\n")
  assert _error(read_tsv, short, **SICK).startswith(f"{short}:2: expected 3 tab-separated columns as in line 1, got 2")
  long = _write(tmp_path, "long.tsv", header + "a\tb\tc\tNEUTRAL\n")
  assert "a tab inside a text?" in _error(read_tsv, long, **SICK)
  empty = _write(tmp_path, "empty.tsv", header + "a\t \tNEUTRAL\n")
  assert _error(read_tsv, empty, **SICK) == f"{empty}:2: expected a non-empty text_b in column 'sentence_B'"
  renamed = _write(tmp_path, "renamed.tsv", "s1\ts2\tgold\n")
  assert _error(read_tsv, renamed, **SICK).startswith(f"{renamed}:1: expected a header with a column named")


# --- CoNLL-U ---------------------------------------------------------------------------------------------------------

CONLLU = """# newdoc id = d1
# sent_id = 1
# text = I don't know.
1\tI\tI\tPRON\tPRP\t_\t4\tnsubj\t_\t_
2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
2\tdo\tdo\tAUX\tVBP\t_\t4\taux\t_\t_
3\tn't\tnot\tPART\tRB\t_\t4\tadvmod\t_\t_
4\tknow\tknow\tVERB\tVB\t_\t0\troot\t_\t_
4.1\tknow\tknow\tVERB\tVB\t_\t_\t_\t0:root\tCopyOf=4
5\t.\t.\tPUNCT\t.\t_\t4\tpunct\t_\t_

# sent_id = 2
1\tchủ tịch\tchủ tịch\tNOUN\tN\t_\t0\troot\t_\t_

# newdoc id = d2
# sent_id = 3
1\tYes\tyes\tINTJ\tUH\t_\t0\troot\t_\t_"""


def test_conllu_skips_multiword_tokens_empty_nodes_and_comments(tmp_path):
  records = list(read_conllu(_write(tmp_path, "a.conllu", CONLLU)))
  assert records == [
      {"words": ["I", "do", "n't", "know", "."], "tags": ["PRON", "AUX", "PART", "VERB", "PUNCT"], "doc_index": 0},
      {"words": ["chủ tịch"], "tags": ["NOUN"], "doc_index": 0},
      {"words": ["Yes"], "tags": ["INTJ"], "doc_index": 1}]
  assert next(read_conllu(tmp_path / "a.conllu", tag_column="xpos"))["tags"] == ["PRP", "VBP", "RB", "VB", "."]
  with pytest.raises(ValueError, match="tag_column 'pos'"):
    next(read_conllu(tmp_path / "a.conllu", tag_column="pos"))


def test_conllu_errors_name_file_line_and_expectation(tmp_path):
  lines = CONLLU.splitlines()
  spaces = _write(tmp_path, "spaces.conllu", "\n".join(lines[:3] + [lines[3].replace("\t", " ")]))
  assert _error(read_conllu, spaces).startswith(f"{spaces}:4: expected 10 tab-separated CoNLL-U columns, got 1")
  gap = _write(tmp_path, "gap.conllu", "\n".join(lines[:4] + lines[6:]))
  assert _error(read_conllu, gap).startswith(f"{gap}:5: expected word ID 2 (or a range N-M, or an empty node N.M), "
                                             "got '3'")
  no_form = _write(tmp_path, "noform.conllu", "1\t\t_\tX\t_\t_\t0\troot\t_\t_\n")
  assert _error(read_conllu, no_form).startswith(f"{no_form}:1: expected a non-empty FORM and UPOS")


# --- JSON-lines spans and the BIO <-> spans converters ---------------------------------------------------------------


def test_spans_jsonl_nested_and_sorted(tmp_path):
  path = _write(tmp_path, "nested.jsonl", '{"words": ["New", "York", "Times"], "id": 7, "spans": ['
                '{"start": 0, "end": 2, "label": "LOC"}, {"start": 0, "end": 3, "label": "ORG"}]}\n\n'
                '{"words": ["hi"], "spans": []}\n')
  assert list(read_spans_jsonl(path, label_names=["LOC", "ORG"])) == [
      {"words": ["New", "York", "Times"], "spans": [{"start": 0, "end": 3, "label": "ORG"},
                                                    {"start": 0, "end": 2, "label": "LOC"}]},
      {"words": ["hi"], "spans": []}]


@pytest.mark.parametrize("line,expected", [
    ('{"words": ["a"], "spans": [}', "expected a JSON object"),
    ('["a"]', "expected a JSON object"),
    ('{"words": ["a", "b"]}', "with keys ['words']"),
    ('{"words": ["a", ""], "spans": []}', 'expected "words" to be a non-empty list of non-empty strings'),
    ('{"words": ["a", "b"], "spans": [{"start": 1, "end": 3, "label": "X"}]}', "0 <= start < end <= 2"),
    ('{"words": ["a", "b"], "spans": [{"start": 1, "end": 1, "label": "X"}]}', "0 <= start < end <= 2"),
    ('{"words": ["a", "b"], "spans": [{"start": 0, "end": 1.0, "label": "X"}]}', '"end": int'),
    ('{"words": ["a", "b"], "spans": [{"start": 0, "end": 1, "label": "Y"}]}', "a label in ['X']"),
    ('{"words": ["a"], "spans": [{"start": 0, "end": 1, "label": "X"}, {"start": 0, "end": 1, "label": "X"}]}',
     "spans[1] not to repeat an earlier span"),
])
def test_spans_jsonl_errors_name_file_line_and_expectation(tmp_path, line, expected):
  path = _write(tmp_path, "bad.jsonl", '{"words": ["ok"], "spans": []}\n' + line + "\n")
  message = _error(read_spans_jsonl, path, label_names=["X"])
  assert message.startswith(f"{path}:2: expected") and expected in message


def test_spans_jsonl_outermost_keeps_the_spans_inside_no_other(tmp_path):
  line = ('{"words": ["a", "b", "c", "d", "e"], "spans": [{"start": 0, "end": 3, "label": "X"}, '
          '{"start": 1, "end": 2, "label": "Y"}, {"start": 0, "end": 1, "label": "Y"}, {"start": 3, "end": 5, '
          '"label": "Y"}, {"start": 3, "end": 5, "label": "X"}]}\n')
  path = _write(tmp_path, "nested.jsonl", line)
  everything = next(read_spans_jsonl(path))["spans"]
  assert next(read_spans_jsonl(path, outermost=True))["spans"] == [  # (3, 5) twice: neither is inside the other.
      {"start": 0, "end": 3, "label": "X"}, {"start": 3, "end": 5, "label": "X"}, {"start": 3, "end": 5, "label": "Y"}]
  assert outermost_spans(everything) == [s for s in everything if (s["start"], s["end"]) in ((0, 3), (3, 5))]
  # flat checks the kept spans: the two (3, 5) spans still overlap; without them the outer spans are flat.
  assert "expected spans that do not overlap" in _error(read_spans_jsonl, path, flat=True, outermost=True)
  assert "config.task.columns=outermost:true" in _error(read_spans_jsonl, path, flat=True)
  flat = _write(tmp_path, "flat.jsonl", line.replace(', {"start": 3, "end": 5, "label": "X"}', ""))
  assert len(next(read_spans_jsonl(flat, flat=True, outermost=True))["spans"]) == 2


def test_tagging_spans_round_trip_and_overlap_error():
  rng = random.Random(1)
  for _ in range(100):
    cuts = sorted(rng.sample(range(13), 6))
    spans = [{"start": a, "end": b, "label": rng.choice("XY")} for a, b in zip(cuts[::2], cuts[1::2])]
    record = {"words": ["w"] * 12, "spans": spans}
    for scheme in ("IOB1", "IOB2", "BIOES"):
      assert tagging_to_spans(spans_to_tagging(record, scheme), scheme) == record
  record = {"words": ["a", "b", "c"], "spans": [{"start": 1, "end": 3, "label": "X"}]}
  assert spans_to_tagging(record) == {"words": ["a", "b", "c"], "tags": ["O", "B-X", "I-X"]}
  assert tagging_to_spans({"words": ["a", "b", "c"], "tags": ["I-X", "B-X", "I-X"], "doc_index": 0}, "IOB1")[
      "spans"] == [{"start": 0, "end": 1, "label": "X"}, {"start": 1, "end": 3, "label": "X"}]
  nested = {"words": ["a", "b", "c"],
            "spans": [{"start": 0, "end": 2, "label": "X"}, {"start": 1, "end": 3, "label": "Y"}]}
  with pytest.raises(ValueError, match="overlap"):
    spans_to_tagging(nested)


# --- The shared data: counts from each SOURCE.md ---------------------------------------------------------------------

CONLL_SPLITS = {"train": ("train.txt", "eng.train", 14041, 203621, 946, (6600, 7140, 6321, 3438)),
                "validation": ("valid.txt", "eng.testa", 3250, 51362, 216, (1842, 1837, 1341, 922)),
                "test": ("test.txt", "eng.testb", 3453, 46435, 231, (1617, 1668, 1661, 702))}
IOB1_B_TAGS = {"train": {"B-LOC": 11, "B-MISC": 35, "B-ORG": 24}, "validation": {"B-MISC": 4},
               "test": {"B-LOC": 6, "B-MISC": 9, "B-ORG": 5}}


@pytest.fixture(scope="module")
def conll2003():
  """split -> (records of bio/, records of iob1/), with the POS column read separately."""
  out = {}
  for split, (bio, iob1, *_) in CONLL_SPLITS.items():
    bio_path, iob1_path = require_data(f"conll2003/bio/{bio}"), require_data(f"conll2003/iob1/{iob1}")
    out[split] = (list(read_conll(bio_path)), list(read_conll(iob1_path)),
                  list(read_conll(bio_path, tag_column="pos")), list(read_conll(iob1_path, tag_column="pos")))
  return out


@pytest.mark.parametrize("split", list(CONLL_SPLITS))
def test_conll2003_counts_and_the_two_copies_agree(conll2003, split):
  _, _, sentences, tokens, documents, (per, loc, org, misc) = CONLL_SPLITS[split]
  bio, iob1, bio_pos, iob1_pos = conll2003[split]
  for records in (bio, iob1):
    assert len(records) == sentences
    assert sum(len(r["words"]) for r in records) == tokens
    assert len({r["doc_index"] for r in records}) == records[-1]["doc_index"] + 1 == documents
  assert [(r["words"], r["doc_index"]) for r in bio] == [(r["words"], r["doc_index"]) for r in iob1]
  assert [r["tags"] for r in bio_pos] == [r["tags"] for r in iob1_pos]
  bio_spans = [tagging_to_spans(r) for r in bio]
  entities = collections.Counter(s["label"] for r in bio_spans for s in r["spans"])
  assert entities == {"PER": per, "LOC": loc, "ORG": org, "MISC": misc}
  assert collections.Counter(t for r in bio for t in r["tags"] if t.startswith("B-")) == {
      f"B-{k}": v for k, v in entities.items()}
  assert collections.Counter(t for r in iob1 for t in r["tags"] if t.startswith("B-")) == IOB1_B_TAGS[split]
  assert [tagging_to_spans(r, "IOB1") for r in iob1] == bio_spans
  assert [spans_to_tagging(r, "IOB1")["tags"] for r in bio_spans] == [r["tags"] for r in iob1]
  assert [spans_to_tagging(r)["tags"] for r in bio_spans] == [r["tags"] for r in bio]  # bio/ is well-formed IOB2.


def test_genia_nested_counts():
  """genia_nested/SOURCE.md: sentences, entities per type, entities inside another, the longest; and what the
  outermost reader option keeps (those not inside another: every record then flat)."""
  counts = {"train": (1400, {"protein": 2320, "DNA": 926, "cell_type": 476, "cell_line": 353, "RNA": 81}, 470, 15),
            "dev": (227, None, 80, 10)}
  for split, (sentences, types, inside, longest) in counts.items():
    path = require_data(f"genia_nested/{split}.jsonl")
    records = list(read_spans_jsonl(path))
    spans = [s for r in records for s in r["spans"]]
    assert len(records) == sentences and max(s["end"] - s["start"] for s in spans) == longest
    assert types is None or collections.Counter(s["label"] for s in spans) == types
    assert len(spans) == (4156 if split == "train" else 633)
    inner = sum(any(o is not s and o["start"] <= s["start"] and s["end"] <= o["end"] for o in r["spans"])
                for r in records for s in r["spans"])
    assert inner == inside
    outer = list(read_spans_jsonl(path, outermost=True, flat=True))
    assert sum(len(r["spans"]) for r in outer) == len(spans) - inside


def test_sst2_counts_labels_and_trailing_spaces_stripped():
  train_path = require_data("sst2/train.tsv")
  assert b" \t" in train_path.read_bytes()[:200]  # The trap is there to strip.
  options = dict(text_a="sentence", label="label", label_names=("0", "1"))
  train = list(read_tsv(train_path, **options))
  dev = list(read_tsv(require_data("sst2/dev.tsv"), **options))
  test = list(read_tsv(require_data("sst2/test.tsv"), text_a="sentence"))
  assert (len(train), len(dev), len(test)) == (67349, 872, 1821)
  assert collections.Counter(r["label"] for r in train) == {"0": 29780, "1": 37569}
  assert collections.Counter(r["label"] for r in dev) == {"0": 428, "1": 444}
  assert train[0] == {"text_a": "hide new secretions from the parental units", "text_b": None, "label": "0"}
  assert all(r["text_a"] == r["text_a"].strip() for r in train + dev + test)
  assert all(r["label"] is None for r in test)


def test_sick_counts_labels_and_crlf_stripped():
  counts = {"SICK_train.txt": (1299, 2536, 665), "SICK_trial.txt": (144, 282, 74),
            "SICK_test_annotated.txt": (1414, 2793, 720)}
  test_path = require_data("sick/SICK_test_annotated.txt")
  assert test_path.read_bytes().count(b"\r\n") == 4928  # The trap is there to strip.
  for name, (entailment, neutral, contradiction) in counts.items():
    records = list(read_tsv(require_data(f"sick/{name}"), **SICK))
    assert collections.Counter(r["label"] for r in records) == {
        "ENTAILMENT": entailment, "NEUTRAL": neutral, "CONTRADICTION": contradiction}
    assert not any("\r" in r["text_a"] + r["text_b"] for r in records)
  relatedness = [r["score"] for r in read_tsv(require_data("sick/SICK_trial.txt"), **SICK, score="relatedness_score")]
  assert len(relatedness) == 500 and min(relatedness) == 1.0 and max(relatedness) == 5.0


def test_mrpc_counts_bom_stripped_and_unbalanced_quotes_read_verbatim():
  options = dict(text_a="#1 String", text_b="#2 String", label="Quality", label_names=("0", "1"))
  counts = {"train": (3668, 2474), "dev": (408, 279), "test": (1725, 1147)}  # SOURCE.md: pairs, paraphrases.
  for split, (pairs, paraphrases) in counts.items():
    path = require_data(f"mrpc/{split}.tsv")
    assert path.read_bytes().startswith(b"\xef\xbb\xbfQuality\t")  # The traps are there: a byte-order mark, and
    records = list(read_tsv(path, **options))  # the header is found only without it.
    assert (len(records), sum(r["label"] == "1" for r in records)) == (pairs, paraphrases)
  train = list(read_tsv(require_data("mrpc/train.tsv"), **options))
  raw = require_data("mrpc/train.tsv").read_text(encoding="utf-8-sig").splitlines()[56].split("\t")  # Line 57.
  assert raw[3].count('"') == 1  # One unbalanced quote: a CSV reader with quoting on would swallow lines after it.
  assert train[55] == {"text_a": raw[3], "text_b": raw[4], "label": "1"}
  assert train[55]["text_a"].endswith('many years to come."')
  assert sum(r["text_a"].count('"') % 2 + r["text_b"].count('"') % 2 for r in train) > 0


UD_COUNTS = {"ud_english_ewt/en_ewt-ud": ((12544, 2001, 2077), (204577, 25147, 25094)),
             "ud_multilingual/UD_Vietnamese-VTB/vi_vtb-ud": ((1400, 1123, 800), (20215, 26162, 11692)),
             "ud_multilingual/UD_French-Sequoia/fr_sequoia-ud": ((2231, 412, 456), (50502, 9999, 10044)),
             "ud_multilingual/UD_Turkish-IMST/tr_imst-ud": ((3435, 1100, 1100), (37522, 10542, 10032))}


@pytest.mark.parametrize("prefix", list(UD_COUNTS))
def test_conllu_sentence_and_word_counts(prefix):
  sentences, words = UD_COUNTS[prefix]
  for part, n_sentences, n_words in zip(("train", "dev", "test"), sentences, words):
    path = require_data(f"{prefix}-{part}.conllu")
    records = list(read_conllu(path))
    assert len(records) == n_sentences
    assert sum(len(r["words"]) for r in records) == n_words
    assert all(len(r["words"]) == len(r["tags"]) for r in records)


def test_ewt_multiword_tokens_empty_nodes_and_xpos():
  path = require_data("ud_english_ewt/en_ewt-ud-dev.conllu")
  text = path.read_text(encoding="utf-8")
  assert re.search(r"^\d+-\d+\t", text, re.M) and re.search(r"^\d+\.\d+\t", text, re.M)  # Both traps are present.
  upos, xpos = list(read_conllu(path)), list(read_conllu(path, tag_column="xpos"))
  assert {t for r in upos for t in r["tags"]} <= {
      "ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN", "PUNCT", "SCONJ",
      "SYM", "VERB", "X"}
  assert {"NNP", "VBZ", "-LRB-"} <= {t for r in xpos for t in r["tags"]}
  first_multiword = re.search(r"^(\d+)-(\d+)\t(\S+)", text, re.M)
  assert first_multiword.group(3) not in {w for r in upos for w in r["words"]}  # "didn't" etc. are never words.
  assert len({r["doc_index"] for r in upos}) == text.count("# newdoc") == 318


def test_vietnamese_words_keep_their_spaces():
  records = list(read_conllu(require_data("ud_multilingual/UD_Vietnamese-VTB/vi_vtb-ud-train.conllu")))
  assert sum(" " in w for r in records for w in r["words"]) > 1000

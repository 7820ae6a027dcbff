"""WSD readers: SemCor 3.0, WordNet 3.0 and the Raganato et al. framework; exact counts on the shared data
(SOURCE.md), the format traps, and `path:line:` errors."""

import pytest

from tasks.readers import raganato, semcor, wordnet
from tasks.readers.lines import ReaderError
from tests.conftest import require_data

SEMCOR = """<contextfile concordance=brown>
<context filename=br-z01 paras=yes>
<p pnum=1>
<s snum=1>
<wf cmd=ignore pos=DT>The</wf>
<wf cmd=done rdf=group pos=NNP lemma=group wnsn=1 lexsn=1:03:00:: pn=group>Fulton_County_Grand_Jury</wf>
<wf cmd=done pos=VB lemma=see wnsn=7;1 lexsn=2:39:03::;2:39:00::>saw</wf>
<wf cmd=done pos=JJ lemma=previous wnsn=1 lexsn=5:00:00:preceding(a):00>previous</wf>
<wf cmd=done pos=JJ lemma=such wnsn=0 lexsn=5:00:01:specified:00>such</wf>
<wf cmd=done pos=NN lemma=year wnsn=0;2 lexsn=1:28:03::;1:28:02::>years</wf>
<wf cmd=done rdf= pos=NN ot=notag>65</wf>
<wf cmd=done sep="-" pos=JJ lemma=down wnsn=4 lexsn=5:00:00:out(p):02>down</wf>
<punc>.</punc>
</s>
</p>
<p pnum=2>
<s snum=2>
<wf cmd=done pos=VB lemma=take_place wnsn=1 lexsn=2:30:00::>took_place</wf>
</s>
</p>
</context>
</contextfile>
"""

INDEX_SENSE = """bank%1:14:00:: 08420278 1 24
bank%1:17:01:: 09213565 2 25
bank%2:40:00:: 02343595 1 2
depository_financial_institution%1:14:00:: 08420278 1 0
previous%5:00:00:preceding:00 00127137 1 24
previous%5:00:00:past:00 01729566 2 1
"""
DATA_NOUN = """  1 This software and database is being provided to you, the LICENSEE, by  
08420278 14 n 03 depository_financial_institution 0 bank 0 banking_concern 0 002 @ 08054721 n 0000 ~ 08420000 n \
0000 | a financial institution
08054721 14 n 01 institution 0 001 @i 08053576 n 0000 | an organization founded
"""  # noqa: W291  (WordNet's data.noun licence lines end in two spaces, as here)
XML = """<?xml version="1.0" encoding="UTF-8" ?>
<corpus lang="en" source="toy">
<text id="d000">
<sentence id="d000.s000">
<wf lemma="the" pos="DET">The</wf>
<instance id="d000.s000.t000" lemma="bank" pos="NOUN">bank</instance>
<wf lemma="in" pos="ADP">in</wf>
<instance id="d000.s000.t001" lemma="new_york" pos="NOUN">New York</instance>
</sentence>
<sentence id="d000.s001">
<instance id="d000.s001.t000" lemma="bank" pos="VERB">banked</instance>
</sentence>
</text>
</corpus>
"""


def _write(tmp_path, name, text):
  path = tmp_path / name
  path.write_text(text, encoding="utf-8")
  return path


def _error(function, *args) -> str:
  with pytest.raises(ReaderError) as info:
    result = function(*args)
    list(result) if result is not None else None
  return str(info.value)


# --- SemCor ----------------------------------------------------------------------------------------------------------

def test_semcor_keys_multiword_multisense_satellite_and_wnsn0(tmp_path):
  first, second = semcor.read_semcor_file(_write(tmp_path, "br-z01", SEMCOR))
  assert first["words"] == ["The", "Fulton County Grand Jury", "saw", "previous", "such", "years", "65", "down", "."]
  assert first["keys"] == [[], ["group%1:03:00::"], ["see%2:39:03::", "see%2:39:00::"],
                           ["previous%5:00:00:preceding:00"], [], ["year%1:28:02::"], [], ["down%5:00:00:out:02"], []]
  assert first["lines"] == list(range(5, 14)) and first["pos"][-1] == "punc" and first["snum"] == 1
  assert second["words"] == ["took place"] and second["keys"] == [["take_place%2:30:00::"]]


@pytest.mark.parametrize("line, expected", [
    ("<wf cmd=done pos=VB lemma=see wnsn=1;2 lexsn=2:39:03::>saw</wf>", "as many ';'-separated wnsn as lexsn"),
    ("<wf cmd=done pos=VB lemma=see wnsn=1 lexsn=2:39>saw</wf>", "lexsn 'ss_type:lex_filenum"),
    ("<wf cmd=done pos=VB wnsn=1 lexsn=2:39:00::>saw</wf>", "lemma= and lexsn= with wnsn="),
    ("<wf cmd=done pos=VB>saw", "one <wf ...>word</wf>"),
])
def test_semcor_malformed_token_names_file_and_line(tmp_path, line, expected):
  path = _write(tmp_path, "bad", "<s snum=1>\n<wf cmd=ignore pos=DT>The</wf>\n" + line + "\n</s>\n")
  message = _error(semcor.read_semcor_file, path)
  assert message.startswith(f"{path}:3: expected") and expected in message


def test_semcor_structure_errors(tmp_path):
  assert ":1: expected words inside <s" in _error(semcor.read_semcor_file, _write(tmp_path, "a", "<punc>.</punc>\n"))
  assert ":2: expected </s> closing sentence 1 before the end" in _error(
      semcor.read_semcor_file, _write(tmp_path, "b", "<s snum=1>\n<punc>.</punc>\n"))
  assert ":2: expected </s> before the next <s>" in _error(
      semcor.read_semcor_file, _write(tmp_path, "c", "<s snum=1>\n<s snum=2>\n"))
  assert ":2: expected </s> closing a sentence with words" in _error(
      semcor.read_semcor_file, _write(tmp_path, "d", "<s snum=1>\n</s>\n"))
  with pytest.raises(FileNotFoundError, match="no SemCor tag files"):
    semcor.semcor_files(tmp_path)


@pytest.mark.slow
def test_semcor_counts_equal_source_md():
  root = require_data("semcor/semcor3.0")
  senses = wordnet.read_index_sense(require_data("wordnet/wordnet-3.0/index.sense"))
  sentences = tagged = multi = words = 0
  for sentence in semcor.read_semcor(root):
    sentences += 1
    words += len(sentence["words"])
    for keys in sentence["keys"]:
      tagged += bool(keys)
      multi += len(keys) > 1
      assert all(key in senses for key in keys), (sentence["path"], keys)
  assert (sentences, tagged) == (37_176, 226_036)
  assert words == 676_546 + 102_041  # <wf> and <punc> tokens.
  assert multi == 656  # Of the 703 tokens with several wnsn, 47 have a wnsn=0 part.


# --- WordNet ---------------------------------------------------------------------------------------------------------

def test_parse_sense_key():
  assert wordnet.parse_sense_key("art%1:09:00::") == wordnet.SenseKey("art", "n", "1", 9, 0, "")
  assert wordnet.parse_sense_key("previous%5:00:00:preceding:00").head_word == "preceding"
  assert wordnet.parse_sense_key("previous%5:00:00:preceding:00").pos == "a"
  for bad in ("art", "art%1:09:00", "art%6:09:00::", "previous%5:00:00::", "art%1:09:00:head:01", "art%1:9:00::"):
    with pytest.raises(ValueError, match="malformed sense key"):
      wordnet.parse_sense_key(bad)


def _wordnet_dir(tmp_path):
  shuffled = "".join(reversed(INDEX_SENSE.splitlines(keepends=True)))  # Candidates come out in sense-number order.
  _write(tmp_path, "index.sense", shuffled)
  _write(tmp_path, "data.noun", DATA_NOUN)
  _write(tmp_path, "data.verb", "")
  _write(tmp_path, "lexnames", "00\tadj.all\t3\n14\tnoun.group\t1\n17\tnoun.object\t1\n40\tverb.possession\t2\n")
  return tmp_path


def test_wordnet_candidates_mfs_synsets_hypernyms_lexnames(tmp_path):
  net = wordnet.load_wordnet(_wordnet_dir(tmp_path))
  assert net.candidates("bank", "n") == ("bank%1:14:00::", "bank%1:17:01::")
  assert net.candidates("Bank", "v") == ("bank%2:40:00::",) and net.candidates("bank", "a") == ()
  assert net.candidates("previous", "a") == ("previous%5:00:00:preceding:00", "previous%5:00:00:past:00")
  assert net.most_frequent_sense("bank", "n") == "bank%1:14:00::" and net.most_frequent_sense("x", "n") is None
  assert net.senses["bank%1:17:01::"] == wordnet.Sense("09213565n", 2, 25)
  assert set(net.by_synset["08420278n"]) == {"bank%1:14:00::", "depository_financial_institution%1:14:00::"}
  assert net.hypernyms == {"08420278n": ("08054721n",), "08054721n": ("08053576n",)}
  assert net.lexname("bank%1:17:01::") == "noun.object"


def test_wordnet_errors_name_file_and_line(tmp_path):
  path = _write(tmp_path, "index.sense", INDEX_SENSE + "bank%1:14:00:: 08420278 1 24\n")
  assert f"{path}:7: expected each sense key once" in _error(wordnet.read_index_sense, path)
  path = _write(tmp_path, "index.sense", "bank%1:14:00:: 0842027 1 24\n")
  assert f"{path}:1: expected 'sense_key synset_offset" in _error(wordnet.read_index_sense, path)
  path = _write(tmp_path, "index.sense", "bank%1:14:00 08420278 1 24\n")
  assert "expected a well-formed sense key (malformed sense key 'bank%1:14:00'" in _error(
      wordnet.read_index_sense, path)
  path = _write(tmp_path, "data.noun", DATA_NOUN.replace("002 @ 08054721", "003 @ 08054721"))
  assert f"{path}:2: expected 3 pointers" in _error(wordnet.read_hypernyms, path)


def test_wordnet_counts_equal_source_md():
  net = wordnet.load_wordnet(require_data("wordnet/wordnet-3.0"))
  assert len(net.senses) == 206_941 and len(net.by_lemma) == 155_287 and len(net.by_synset) == 117_659
  assert sum(len(keys) > 1 for keys in net.by_lemma.values()) == 26_896
  assert net.senses["run%2:38:00::"].synset == "01926311v" and net.candidates("run", "v")[0] == "run%2:38:00::"
  assert net.hypernyms["01926311v"] == ("02055649v",)  # run.v.01 -> travel_rapidly.v.01.


# --- Raganato et al. XML and key files -------------------------------------------------------------------------------

def test_raganato_xml_sentences_and_instances(tmp_path):
  first, second = raganato.read_raganato_xml(_write(tmp_path, "toy.data.xml", XML))
  assert first["words"] == ["The", "bank", "in", "New York"] and first["id"] == "d000.s000"
  assert first["lemmas"] == ["the", "bank", "in", "new_york"] and first["pos"][1] == "NOUN"
  assert [(i["id"], i["index"], i["lemma"], i["pos"], i["line"]) for i in first["instances"]] == [
      ("d000.s000.t000", 1, "bank", "NOUN", 6), ("d000.s000.t001", 3, "new_york", "NOUN", 8)]
  assert second["instances"][0]["pos"] == "VERB"


@pytest.mark.parametrize("old, new, line, expected", [
    ('</instance>\n<wf lemma="in"', '</instanc>\n<wf lemma="in"', 6, "well-formed XML (mismatched tag"),
    ('id="d000.s000.t001" ', "", 8, "with id, lemma and pos attributes, missing ['id']"),
    ('id="d000.s001.t000"', 'id="d000.s000.t000"', 11, "unique instance ids, 'd000.s000.t000' is also on line 6"),
    ('pos="VERB"', 'pos="X"', 11, "pos one of ['ADJ', 'ADV', 'NOUN', 'VERB'], got 'X'"),
    ('<sentence id="d000.s001">', '<sentence id="d000.s001"><sentence>', 10, "got <sentence> inside <sentence>"),
    ('<text id="d000">', "<sentence>", 3, "got <sentence> inside <corpus>"),
    (">banked<", "> <", 11, "a non-empty word in <instance>"),
    ('<wf lemma="in" pos="ADP">in</wf>', "stray", 7, "text only inside <wf> or <instance>, got 'stray'"),
])
def test_raganato_xml_errors_name_line(tmp_path, old, new, line, expected):
  path = _write(tmp_path, "bad.data.xml", XML.replace(old, new, 1))
  message = _error(raganato.read_raganato_xml, path)
  assert message.startswith(f"{path}:{line}: expected") and expected in message


def test_key_file_and_instance_checks(tmp_path):
  path = _write(tmp_path, "toy.gold.key.txt", "d000.s000.t000 bank%1:14:00:: bank%1:17:01::\n\n"
                "d000.s000.t001 new_york%1:15:00::\nd000.s001.t000 bank%2:40:00::\n")
  keys = raganato.read_key_file(path)
  assert keys["d000.s000.t000"] == ("bank%1:14:00::", "bank%1:17:01::") and len(keys) == 3
  sentences = raganato.read_raganato_xml(_write(tmp_path, "toy.data.xml", XML))
  raganato.check_same_instances(keys, path, sentences, "toy.data.xml")
  with pytest.raises(ValueError, match=r"1 instance ids that toy.data.xml lacks, the first 'd009.s000.t000'"):
    raganato.check_same_instances(keys | {"d009.s000.t000": ("x%1:00:00::",)}, path, sentences, "toy.data.xml")
  with pytest.raises(ValueError, match=r"no keys for 1 instances of toy.data.xml, the first 'd000.s001.t000'"):
    raganato.check_same_instances({k: v for k, v in keys.items() if k != "d000.s001.t000"}, path, sentences,
                                  "toy.data.xml")
  for text, line, expected in [("a bank%1:14:00::\nb\n", 2, "'instance_id sense_key [sense_key ...]'"),
                               ("a bank%1:14:00::\na bank%1:14:00::\n", 2, "each instance id once"),
                               ("a bank%1:14:00:: bank%1:14\n", 1, "sense keys for instance a (malformed sense key")]:
    assert f":{line}: expected {expected}" in _error(raganato.read_key_file, _write(tmp_path, "bad.key", text))


def test_raganato_counts_equal_source_md():
  root = require_data("wsd_raganato2017")
  sizes = {"senseval2": 2282, "senseval3": 1850, "semeval2007": 455, "semeval2013": 1644, "semeval2015": 1022}
  for name, size in sizes.items():
    sentences, gold = raganato.read_dataset(root, name)
    assert len(gold) == size == sum(len(s["instances"]) for s in sentences)
  sentences, gold = raganato.read_all(root)
  assert len(gold) == 7_253 and sum(len(keys) > 1 for keys in gold.values()) == 340
  pos = [i["pos"] for s in sentences for i in s["instances"]]
  assert [pos.count(p) for p in ("NOUN", "VERB", "ADJ", "ADV")] == [4300, 1652, 955, 346]

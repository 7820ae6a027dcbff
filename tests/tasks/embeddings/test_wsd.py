"""1-NN word-sense disambiguation: sense sums, the classifier and its prior on hand-computed toy cases, LMMS-style
coverage, the framework's scorer, and `evaluate_wsd` / the command end to end on a tiny data directory."""

import json
import math
import re

import numpy as np
import pytest

from encoder import errors
from tasks.embeddings import wsd
from tasks.readers import wordnet

S1, S2 = "bank%1:14:00::", "bank%1:17:01::"  # bank.n.01 (institution), bank.n.02 (sloping land).


class ContextEmbedder:
  """Stand-in for tasks.embeddings.extract.Embedder: a word's vector in each layer is the sum of its sentence's
  table rows (a crude context), so "bank" differs next to "money" and next to "river"."""
  num_layers, hidden_size = 1, 2

  def __init__(self, table: dict):
    self.table, self.calls = table, []

  def iter_encode_words(self, sentences, *, layers="all", pooling="mean"):
    assert layers == "all"
    sentences = list(sentences)
    self.calls.append(len(sentences))
    for index in reversed(range(len(sentences))):  # Not in input order, as the real one yields length-sorted.
      rows = np.asarray([self.table[word] for word in sentences[index]], np.float32)  # [n, L + 1, H]
      yield index, np.repeat(rows.sum(axis=0, keepdims=True), len(rows), axis=0)

  def encode_words(self, sentences, *, layers="all", pooling="mean"):
    out = [None] * len(sentences)
    for index, vectors in self.iter_encode_words(sentences, layers=layers, pooling=pooling):
      out[index] = vectors
    return out


TABLE = {"bank": [[1, 1], [1, 1]], "money": [[1, 0], [4, 0]], "river": [[1, 0], [0, 4]], "the": [[0, 0], [0, 0]]}


def _sentence(words, keys):
  return {"words": words, "keys": keys, "lines": list(range(1, len(words) + 1)), "path": "toy"}


def test_sense_sums_count_every_sense_of_a_multisense_token():
  embedder = ContextEmbedder({"a": [[0, 0], [0, 2]], "b": [[0, 0], [2, 2]], "c": [[1, 0], [4, 0]]})
  sentences = [_sentence(["a"], [[S2]]), _sentence(["b"], [[S2]]), _sentence(["c"], [[S1, S2]])]
  sums = wsd.accumulate_sense_sums(embedder, sentences)
  assert sums.keys == [S1, S2] and sums.counts.tolist() == [1, 3]
  np.testing.assert_allclose(sums.sums[:, 1], [[4, 0], [6, 4]])  # Sums of small integers: exact in float32.
  np.testing.assert_allclose(sums.sums[:, 0], [[1, 0], [1, 0]])
  # Eq. 11.6 in layer 1: v_s1 = (4, 0), v_s2 = (2, 4/3), as unit vectors; layer 0 gives (1, 0) for both. float32
  # means and norms of 2-vectors: a few roundings of u = 6e-8 (rtol 1e-6).
  np.testing.assert_allclose(wsd.sense_table(sums, "1"), [[1, 0], np.array([2, 4 / 3]) / math.sqrt(52 / 9)],
                             rtol=1e-6)
  np.testing.assert_allclose(wsd.sense_table(sums, "0"), [[1, 0], [1, 0]])
  with pytest.raises(ValueError, match=re.escape("toy:1: expected a WordNet 3.0 sense key, got 'bank%1:17:01::'")):
    wsd.accumulate_sense_sums(embedder, sentences, senses={S1: None})


def test_one_nearest_neighbour_and_prior_on_a_hand_computed_case():
  sense_vectors = wsd.unit(np.array([[4, 0], [2, 4 / 3]], np.float32))  # v_s1, v_s2 as in the test above.
  counts = {S1: 1, S2: 3}
  queries = np.array([[3, 1], [1, -1], [5, 5]], np.float32)
  candidates = [(S1, S2), (S1, S2), ("bank%2:40:00::", "bank%2:40:01::")]
  # cos((3, 1), s1) = 3 / sqrt(10) = 0.9487 < cos((3, 1), s2) = (6 + 4/3) / (sqrt(10) sqrt(52/9)) = 0.9648.
  # cos((1, -1), s1) = 0.7071 > cos((1, -1), s2) = (2 - 4/3) / (sqrt(2) sqrt(52/9)) = 0.1961.
  # The third query's candidates have no vector: WordNet's sense 1 (MFS).
  chosen, covered = wsd.choose_senses(queries, candidates, [S1, S2], sense_vectors)
  assert chosen == [S2, S1, "bank%2:40:00::"] and covered.tolist() == [True, True, False]
  # With the prior: 0.7071 + lam log 2 vs 0.1961 + lam log 4 flips at lam = 0.511 / log 2 = 0.737.
  assert wsd.choose_senses(queries, candidates, [S1, S2], sense_vectors, counts, 0.7)[0][1] == S1
  assert wsd.choose_senses(queries, candidates, [S1, S2], sense_vectors, counts, 0.75)[0][1] == S2
  # An unseen candidate counts 0 but never competes without a vector; ties go to the lower sense number.
  assert wsd.choose_senses(np.array([[1, 0]]), [("x%1:00:00::", S1, S2)], [S1, S2],
                           np.array([[1, 0], [1, 0]], np.float32))[0] == [S1]


def _toy_wordnet() -> wordnet.WordNet:
  """a, b share synset 1; c's synset 2 has hypernym 3 (unseen), whose hypernyms 4 (d) and 5 (e) are seen; f's
  synset 6 has no hypernym, and lexicographer file 17 holds g and h (synset 7); z's file 20 has nothing seen."""
  keys = {"a%1:14:00::": "1", "b%1:14:00::": "1", "c%1:14:01::": "2", "d%1:14:02::": "4", "e%1:14:03::": "5",
          "f%1:17:00::": "6", "g%1:17:01::": "7", "h%1:17:02::": "7", "z%1:20:00::": "8", "y%1:14:04::": "3"}
  senses = {key: wordnet.Sense(f"0000000{synset}n", 1, 0) for key, synset in keys.items()}
  by_synset = {}
  for key, sense in senses.items():
    by_synset.setdefault(sense.synset, []).append(key)
  hypernyms = {"00000002n": ("00000003n",), "00000003n": ("00000005n", "00000004n")}
  return wordnet.WordNet(senses, hypernyms, {14: "noun.group", 17: "noun.object", 20: "noun.plant"},
                         {}, {synset: tuple(keys) for synset, keys in by_synset.items()})


def test_lmms_coverage_synset_then_hypernym_walk_then_lexicographer_file():
  net = _toy_wordnet()
  seen = ["a%1:14:00::", "d%1:14:02::", "e%1:14:03::", "g%1:17:01::", "h%1:17:02::"]
  plan = wsd.coverage_plan(net, seen, seen + ["b%1:14:00::", "c%1:14:01::", "f%1:17:00::", "z%1:20:00::"])
  assert plan == {"b%1:14:00::": ("synset", ("00000001n",)), "c%1:14:01::": ("hypernym", ("00000004n", "00000005n")),
                  "f%1:17:00::": ("lexname", (17,))}
  table = wsd.unit(np.array([[2, 0], [0, 3], [1, 1], [1, 0], [0, 1]], np.float32))
  keys, vectors = wsd.extend_table(table, seen, plan, net)
  assert keys == seen + ["b%1:14:00::", "c%1:14:01::", "f%1:17:00::"]
  expected_c = np.array([math.sqrt(0.5) / 2, 0.5 + math.sqrt(0.5) / 2])  # Mean of (0, 1) and (0.7071, 0.7071).
  # float32 means and norms of 2-vectors against float64: a few roundings of u = 6e-8 (rtol 1e-6); copies exact.
  np.testing.assert_allclose(vectors[5:], [[1, 0], expected_c / np.linalg.norm(expected_c),
                                           [math.sqrt(0.5), math.sqrt(0.5)]], rtol=1e-6)
  np.testing.assert_allclose(vectors[:5], table)


GOLD_KEYS = "a x%1:00:00::\nb x%1:00:01:: x%1:00:02::\nc x%1:00:03::\nd x%1:00:04::\n"
PRED_KEYS = "a x%1:00:00::\nb x%1:00:02::\nc x%1:00:09:: x%1:00:03::\n"


def test_scorer_equals_hand_computed_precision_recall_f1(tmp_path, capsys):
  # a right, b right (one of its two gold keys), c half right (one of two answers), d unanswered:
  # P = 2.5 / 3, R = 2.5 / 4, F1 = 2 * 2.5 / (3 + 4) = 5 / 7.
  (tmp_path / "gold.key").write_text(GOLD_KEYS)
  (tmp_path / "pred.key").write_text(PRED_KEYS)
  gold = {"a": ["x%1:00:00::"], "b": ["x%1:00:01::", "x%1:00:02::"], "c": ["x%1:00:03::"], "d": ["x%1:00:04::"]}
  pred = {"a": ["x%1:00:00::"], "b": ["x%1:00:02::"], "c": ["x%1:00:09::", "x%1:00:03::"]}
  result = wsd.score_keys(gold, pred)
  # Float64 ratios of counts both sides: rounding only.
  assert result["precision"] == pytest.approx(2.5 / 3) and result["recall"] == pytest.approx(2.5 / 4)
  assert result["f1"] == pytest.approx(5 / 7) and (result["answered"], result["instances"]) == (3, 4)
  wsd.main(["score", "--gold", str(tmp_path / "gold.key"), "--pred", str(tmp_path / "pred.key")])
  lines = capsys.readouterr().out.splitlines()
  assert lines[:3] == ["P=\t83.3%", "R=\t62.5%", "F1=\t71.4%"]
  assert json.loads(lines[-1])["f1"] == pytest.approx(5 / 7)  # Float64, JSON keeps every digit.
  with pytest.raises(ValueError, match="1 instance ids not in gold, the first 'e'"):
    wsd.score_keys(gold, pred | {"e": ["x%1:00:00::"]})
  (tmp_path / "bad.key").write_text(PRED_KEYS + "e x%1:00:00::\n")
  with pytest.raises(SystemExit, match=r"^error: .*bad.key: 1 instance ids not in .*gold.key"):
    errors.run(wsd.main, ["score", "--gold", str(tmp_path / "gold.key"), "--pred", str(tmp_path / "bad.key")])
  (tmp_path / "bad.key").write_text("a x%1:00\n")
  with pytest.raises(SystemExit, match=r"error: .*bad.key:1: expected sense keys for instance a \(malformed"):
    errors.run(wsd.main, ["score", "--gold", str(tmp_path / "gold.key"), "--pred", str(tmp_path / "bad.key")])


SEMCOR = """<s snum=1>
<wf cmd=done pos=NN lemma=money wnsn=1 lexsn=1:21:00::>money</wf>
<wf cmd=done pos=NN lemma=bank wnsn=1 lexsn=1:14:00::>bank</wf>
</s>
<s snum=2>
<wf cmd=done pos=NN lemma=river wnsn=1 lexsn=1:17:00::>river</wf>
<wf cmd=done pos=NN lemma=bank wnsn=2 lexsn=1:17:01::>bank</wf>
</s>
"""
INDEX_SENSE = f"""{S1} 08420278 1 24
{S2} 09213565 2 25
money%1:21:00:: 13384557 1 50
river%1:17:00:: 09411430 1 13
"""
CONTEXTS = {"senseval2": "money", "senseval3": "river", "semeval2007": "river", "semeval2013": "money",
            "semeval2015": "money"}


def _data_dir(tmp_path):
  (tmp_path / "semcor/semcor3.0/brown1/tagfiles").mkdir(parents=True)
  (tmp_path / "semcor/semcor3.0/brown1/tagfiles/br-a01").write_text(SEMCOR)
  net = tmp_path / "wordnet/wordnet-3.0"
  net.mkdir(parents=True)
  (net / "index.sense").write_text(INDEX_SENSE)
  (net / "data.noun").write_text("")
  (net / "data.verb").write_text("")
  (net / "lexnames").write_text("14\tnoun.group\t1\n17\tnoun.object\t1\n21\tnoun.possession\t1\n")
  for name, context in CONTEXTS.items():
    folder = tmp_path / "wsd_raganato2017/Evaluation_Datasets" / name
    folder.mkdir(parents=True)
    (folder / f"{name}.data.xml").write_text(
        f'<corpus><text id="d000"><sentence id="d000.s000"><wf lemma="the" pos="DET">the</wf><wf lemma="{context}" '
        f'pos="NOUN">{context}</wf><instance id="d000.s000.t000" lemma="bank" pos="NOUN">bank</instance>'
        "</sentence></text></corpus>")
    (folder / f"{name}.gold.key.txt").write_text(f"d000.s000.t000 {S1 if context == 'money' else S2}\n")
  return tmp_path


def test_evaluate_wsd_chooses_on_se07_and_caches_the_sense_sums(tmp_path):
  data = _data_dir(tmp_path)
  embedder = ContextEmbedder(TABLE)
  options = dict(cache_dir=tmp_path / "cache", cache_key="toy:init", poolings=["mean"], lambdas=[0.0, 5.0])
  result = wsd.evaluate_wsd(embedder, data, **options)
  assert embedder.calls == [2, 5]  # SemCor's 2 sentences, then the 5 test sentences.
  assert len(result["table"]) == 1 * 2 * 2 * 2  # poolings x layers (0, 1) x extensions x lambdas.
  # Layer 0 cannot tell the contexts apart (bank is (2, 1) next to money and next to river: equal cosines, so the
  # lower sense number, bank%1:14:00::, wins), layer 1 can ((5, 1) and (1, 5)); both senses are seen once, so the
  # prior changes nothing. SE07's instance is a river bank: the first row of layer 1 is chosen.
  assert [r["se07_f1"] for r in result["table"]] == [0.0] * 4 + [1.0] * 4
  assert [r["all_f1"] for r in result["table"]] == [0.6] * 4 + [1.0] * 4
  assert result["chosen"] == {"pooling": "mean", "layers": "1", "extension": "none", "lambda": 0.0}
  assert list(result["scores"]) == ["SE2", "SE3", "SE07", "SE13", "SE15", "ALL"]
  assert result["all_f1"] == 1.0 and result["scores"]["SE07"]["f1"] == 1.0 and result["pos"]["NOUN"]["f1"] == 1.0
  assert result["mfs"] == {"SE2": 1.0, "SE3": 0.0, "SE07": 0.0, "SE13": 1.0, "SE15": 1.0, "ALL": 0.6, "NOUN": 0.6}
  assert result["mfs_f1"] == 0.6 and result["coverage"] == 1.0
  assert result["predictions"]["semeval2007.d000.s000.t000"] == S2
  again = wsd.evaluate_wsd(embedder, data, **options)
  assert embedder.calls == [2, 5, 5] and again["table"] == result["table"]  # SemCor came from the cache.
  assert "|---|---|---|---|---|" in wsd.format_choices(result["table"])


def test_evaluate_wsd_rejects_an_unknown_gold_key(tmp_path):
  data = _data_dir(tmp_path)
  gold = data / "wsd_raganato2017/Evaluation_Datasets/semeval2013/semeval2013.gold.key.txt"
  gold.write_text("d000.s000.t000 bank%1:14:09::\n")
  with pytest.raises(ValueError,
                     match=re.escape("instance semeval2013.d000.s000.t000: 'bank%1:14:09::' is not a WordNet")):
    wsd.evaluate_wsd(ContextEmbedder(TABLE), data, poolings=["mean"])


@pytest.mark.parametrize("options, expected", [
    (dict(layers=["3"]), "layer spec '3': layer 3 does not exist in an encoder of 1 layers"),
    (dict(layers=["0,1"]), "layer spec '0,1' keeps several layers apart"),
    (dict(layers=["top"]), "bad layer spec 'top'"),
    (dict(poolings=["max"]), "pooling 'max' is not one of ['mean', 'first']"),
    (dict(extensions=["glosses"]), "extension 'glosses' is not one of ['none', 'lmms']"),
])
def test_evaluate_wsd_checks_its_choices_before_encoding(tmp_path, options, expected):
  embedder = ContextEmbedder(TABLE)
  with pytest.raises(ValueError, match=re.escape(expected)):
    wsd.evaluate_wsd(embedder, tmp_path, **options)
  assert embedder.calls == []


@pytest.mark.parametrize("flag", ["--out", "--cache-dir"])
def test_a_directory_flag_naming_a_file_is_refused_before_any_work(tmp_path, flag):
  """An output directory that exists as a file: one line naming it, the file untouched, nothing encoded."""
  taken = tmp_path / "taken"
  taken.write_text("keep me\n")
  with pytest.raises(SystemExit) as stop:
    errors.run(wsd.main, ["--init", "hf:never-loaded", flag, str(taken)])
  assert str(stop.value) == f"error: {taken}: {flag} must be a directory, found a file; give another {flag}"
  assert taken.read_text() == "keep me\n"

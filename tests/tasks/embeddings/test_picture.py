"""Sense pictures: PCA equals numpy's SVD projection, occurrences and labels line up, a PNG is written."""

import numpy as np
import pytest

from encoder import errors
from tasks.embeddings import picture
from tasks.readers.lines import ReaderError
from tests.conftest import require_data, require_package


class StandIn:
  """An embedder giving word w at position p a vector that depends on its neighbours (a toy context)."""
  num_layers, hidden_size = 2, 6

  def encode_words(self, sentences, *, layers):
    assert layers == "last"
    out = []
    for words in sentences:
      codes = np.array([[len(w), sum(map(ord, w)) % 7, w.count("a")] for w in words], np.float32)
      left, right = np.roll(codes, 1, axis=0), np.roll(codes, -1, axis=0)
      out.append(np.concatenate([codes, left + right], axis=1))
    return out


def test_pca_equals_numpy_svd_up_to_sign():
  x = np.random.default_rng(0).normal(size=(40, 7)) * [5, 3, 1, 1, 1, 0.5, 0.1] + 3
  points = picture.pca_2d(x)
  centred = x - x.mean(0)
  u, s, _ = np.linalg.svd(centred, full_matrices=False)
  reference = u[:, :2] * s[:2]
  # Float64 both sides (two SVDs of a 40 x 7 matrix with well separated singular values): ~1e-13.
  np.testing.assert_allclose(np.abs(points), np.abs(reference), atol=1e-10)
  np.testing.assert_allclose(points.var(0), np.square(s[:2]) / 40, rtol=1e-10)  # Axes by decreasing variance.


def test_find_occurrences_is_case_insensitive_and_labels_by_line():
  sentences = [["The", "die", "is", "cast"], ["nothing", "here"], ["Die", "Katze", "und", "die", "Maus"]]
  found = picture.find_occurrences(sentences, ["die"], ["English", "none", "German"])
  assert found.positions == [(0, 1), (1, 0), (1, 3)]  # Sentence indices among the kept sentences.
  assert found.labels == ["English", "German", "German"] and len(found.sentences) == 2


def test_context_and_annotations():
  words = "one two three four five target six seven eight nine ten".split()
  assert picture.context(words, 5, width=2) == "… four five [target] six seven …"
  assert picture.context(["a", "b"], 0) == "[a] b"
  points = np.array([[0, 0], [0.1, 0], [10, 10], [5, 5], [-8, 2]], float)
  chosen = picture.pick_annotations(points, ["x", "x", "y", "y", "x"], 3)
  assert len(set(chosen)) == 3 and chosen[0] in (0, 1)


def test_sense_picture_writes_a_png(tmp_path):
  require_package("matplotlib")
  sentences = [f"the {w} die rolled {v}".split() for w in ("red", "blue", "green") for v in ("far", "near")]
  sentences += [f"old men die {w}".split() for w in ("young", "slowly", "alone", "at home")]
  labels = ["cube"] * 6 + ["verb"] * 4
  found = picture.find_occurrences(sentences, ["die"], labels)
  out = tmp_path / "pics" / "die.png"
  report = picture.sense_picture(StandIn(), found, out, word="die", projection="pca", annotate=3)
  assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
  assert report["points"] == 10 and report["labels"] == {"cube": 6, "verb": 4} and len(report["annotated"]) == 3
  with pytest.raises(ValueError, match="no occurrence"):
    picture.sense_picture(StandIn(), picture.find_occurrences(sentences, ["dice"]), out, word="dice")


def test_label_file_must_align_with_the_input(tmp_path):
  text, labels = tmp_path / "text.txt", tmp_path / "labels.txt"
  text.write_text("the die\nto die\n")
  labels.write_text("cube\n")
  with pytest.raises(ReaderError, match=r"labels\.txt:2: expected a label for line 2 of .*text\.txt"):
    picture.read_text_and_labels(str(text), str(labels))
  labels.write_text("cube\nverb\nextra\n")
  with pytest.raises(ReaderError, match=r"labels\.txt:3: expected no more labels"):
    picture.read_text_and_labels(str(text), str(labels))
  labels.write_text("cube\nverb\n")
  assert picture.read_text_and_labels(str(text), str(labels)) == ([["the", "die"], ["to", "die"]],
                                                                          ["cube", "verb"])


def test_sense_labels_read_wordnet_glosses():
  wordnet = require_data("wordnet/wordnet-3.0")
  glosses = picture.load_glosses(wordnet)
  assert picture.sense_label("die%2:30:00::", glosses).startswith("die (v, 1): pass from physical life")
  assert picture.sense_label("die%1:06:00::", glosses) == "die (n, 1): a small cube with 1 to 6 spots on the six faces"
  assert picture.sense_label("nonsense%1:00:00::", glosses) == "nonsense%1:00:00::"


def test_command_draws_an_input_file_with_labels(tmp_path, monkeypatch, capsys):
  require_package("matplotlib")
  text, labels = tmp_path / "text.txt", tmp_path / "labels.txt"
  text.write_text("".join(f"the {c} die rolled\nold men die {c}\n" for c in ("red", "blue", "green", "grey")))
  labels.write_text("cube\nverb\n" * 4)
  monkeypatch.setattr(picture.Embedder, "from_init", staticmethod(lambda init: StandIn()))
  out = tmp_path / "die.png"
  errors.run(picture.main, ["--init", "hf:x", "--word", "die", "--input", str(text), "--labels", str(labels),
                            "--out", str(out), "--projection", "pca", "--annotate", "2"])
  assert out.read_bytes()[:4] == b"\x89PNG"
  assert '"labels": {"cube": 4, "verb": 4}' in capsys.readouterr().out
  with pytest.raises(SystemExit, match=r"^error: no occurrence of \['dice'\] in .*text\.txt$"):
    errors.run(picture.main, ["--init", "hf:x", "--word", "dice", "--input", str(text), "--out", str(out)])


def test_semcor_occurrences_label_by_sense(tmp_path):
  tagfiles = tmp_path / "brown1" / "tagfiles"
  tagfiles.mkdir(parents=True)
  (tagfiles / "br-x01").write_text("""<contextfile concordance=brown>
<context filename=br-x01 paras=yes>
<p pnum=1>
<s snum=1>
<wf cmd=done pos=NN lemma=die wnsn=1 lexsn=1:06:00::>die</wf>
<wf cmd=done pos=VB lemma=die wnsn=1 lexsn=2:30:00::>died</wf>
<wf cmd=done pos=VB lemma=die wnsn=1 lexsn=2:30:00::>Die</wf>
<punc>.</punc>
</s>
<s snum=2>
<wf cmd=done pos=NN lemma=dice wnsn=1 lexsn=1:06:00::>dice</wf>
</s>
</p>
</context>
</contextfile>
""")
  found = picture.semcor_occurrences(tmp_path, "die")
  assert found.positions == [(0, 0), (0, 1), (0, 2)] and len(found.sentences) == 1
  assert found.labels == ["die%1:06:00::", "die%2:30:00::", "die%2:30:00::"]
  only_die = picture.semcor_occurrences(tmp_path, "die", forms=["die"])
  assert only_die.positions == [(0, 0), (0, 2)]

"""α-sampling (spec, "Training Regimes"): the formula, mixture frequencies, and the sampled tokenizer text."""

import re

import numpy as np
import pytest
from scipy import stats

from objectives import sampling
from tests.conftest import require_data

UD = {"en": "ud_english_ewt/en_ewt-ud-train.conllu",
      "fr": "ud_multilingual/UD_French-Sequoia/fr_sequoia-ud-train.conllu",
      "tr": "ud_multilingual/UD_Turkish-IMST/tr_imst-ud-train.conllu",
      "vi": "ud_multilingual/UD_Vietnamese-VTB/vi_vtb-ud-train.conllu"}


def test_language_probs_formula():
  sizes = [900, 90, 10]
  p = np.array(sizes) / 1000
  expected = p ** 0.3 / (p ** 0.3).sum()
  # Float64 both sides (a power and a sum of 3 terms): rounding only, 1e-12 (1e-7, assert_allclose's default, below).
  np.testing.assert_allclose(sampling.language_probs(sizes, 0.3), expected, rtol=1e-12)
  np.testing.assert_allclose(sampling.language_probs(sizes, 1.0), p)
  np.testing.assert_allclose(sampling.language_probs(sizes, 0.0), [1 / 3] * 3)
  q = sampling.language_probs(sizes, 0.3)
  assert q[2] > p[2] and q[0] < p[0]  # Low-resource languages are upweighted.
  np.testing.assert_allclose(sampling.language_probs([5, 0, 5], 0.0), [0.5, 0, 0.5])
  for bad in ([], [0, 0], [-1, 3]):
    with pytest.raises(ValueError, match="language sizes"):
      sampling.language_probs(bad)
  with pytest.raises(ValueError, match="alpha"):
    sampling.language_probs([1, 2], -0.5)


def test_mixture_frequencies_match_q():
  sources = [list(range(5000)), list(range(400)), list(range(30))]
  mixture = sampling.AlphaMixture(sources, alpha=0.3, seed=4, length=20000)
  draws = [mixture.source_of(i) for i in range(len(mixture))]
  assert all(0 <= item < len(sources[c]) for c, item in draws)
  counts = np.bincount([c for c, _ in draws], minlength=3)
  q = sampling.language_probs([5000, 400, 30], 0.3)
  print(f"alpha-mixture: q {np.round(q, 4)}, measured {np.round(counts / 20000, 4)}")
  assert stats.chisquare(counts, q * 20000).pvalue > 1e-4
  p = np.array([5000, 400, 30]) / 5430
  assert stats.chisquare(counts, p * 20000).pvalue < 1e-6  # Counter-check: the raw proportions are rejected.
  assert mixture[7] == sources[draws[7][0]][draws[7][1]]
  assert sampling.AlphaMixture(sources, seed=4).source_of(123) == draws[123]  # Pure function of (seed, index).


def test_sampled_tokenizer_text_from_ud(tmp_path):
  corpora = {lang: sampling.conllu_sentences(require_data(path)) for lang, path in UD.items()}
  sizes = {lang: len(s) for lang, s in corpora.items()}
  assert sizes == {"en": 12544, "fr": 2231, "tr": 3435, "vi": 1400}
  out = tmp_path / "tokenizer_text.txt"
  counts = sampling.write_sampled_text(corpora, out, 8000, alpha=0.3, seed=1)
  lines = out.read_text(encoding="utf-8").splitlines()
  assert len(lines) == 8000 and sum(counts.values()) == 8000
  q = sampling.language_probs(list(sizes.values()), 0.3)
  measured = np.array([counts[lang] for lang in sizes]) / 8000
  print(f"UD alpha=0.3: sizes {sizes}, q {np.round(q, 4)}, measured {np.round(measured, 4)}")
  assert np.all(np.abs(measured - q) < 5 * np.sqrt(q * (1 - q) / 8000))
  vi = set(corpora["vi"])
  assert sum(line in vi for line in lines) >= counts["vi"]  # Lines really are sentences of that language.
  assert len(set(lines) & vi) == min(counts["vi"], len(vi))  # Without replacement while sentences last.


def test_conllu_errors(tmp_path):
  path = tmp_path / "x.conllu"
  path.write_text("1\tword\t_\n", encoding="utf-8")
  with pytest.raises(ValueError, match=re.escape("no '# text = ...' lines")):
    sampling.conllu_sentences(path)
  with pytest.raises(ValueError, match="corpus 'xx' has no sentences"):
    sampling.write_sampled_text({"xx": []}, tmp_path / "o.txt", 10)

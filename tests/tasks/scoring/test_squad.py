"""tasks.scoring.squad and `score squad` / `bootstrap --task squad` against a faithful restatement of the official
SQuAD v1.1 evaluation script (evaluate-v1.1.py) and of v2.0's F1 rules (evaluate-v2.0.py), to 1e-9: float64 on both
sides, per-question F1 from token counts (1e-12) averaged over up to 10,570 questions in percent (rounding ~1e-12,
while one question moves the score by >= 1e-4 points)."""

import collections
import json
import re
import string

import numpy as np
import pytest

from tasks.scoring import bootstrap, score, squad
from tests.conftest import require_data


# --- The official evaluate-v1.1.py, restated line for line (its evaluate() returns percents). ---
def official_normalize_answer(s):
  def remove_articles(text):
    return re.sub(r"\b(a|an|the)\b", " ", text)

  def white_space_fix(text):
    return " ".join(text.split())

  def remove_punc(text):
    exclude = set(string.punctuation)
    return "".join(ch for ch in text if ch not in exclude)

  def lower(text):
    return text.lower()
  return white_space_fix(remove_articles(remove_punc(lower(s))))


def official_f1_score(prediction, ground_truth):
  prediction_tokens = official_normalize_answer(prediction).split()
  ground_truth_tokens = official_normalize_answer(ground_truth).split()
  common = collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)
  num_same = sum(common.values())
  if num_same == 0:
    return 0
  precision = 1.0 * num_same / len(prediction_tokens)
  recall = 1.0 * num_same / len(ground_truth_tokens)
  return (2 * precision * recall) / (precision + recall)


def official_exact_match_score(prediction, ground_truth):
  return official_normalize_answer(prediction) == official_normalize_answer(ground_truth)


def official_metric_max_over_ground_truths(metric_fn, prediction, ground_truths):
  return max(metric_fn(prediction, ground_truth) for ground_truth in ground_truths)


def official_evaluate(dataset, predictions):
  f1 = exact_match = total = 0
  for article in dataset:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        total += 1
        if qa["id"] not in predictions:
          continue
        ground_truths = [x["text"] for x in qa["answers"]]
        prediction = predictions[qa["id"]]
        exact_match += official_metric_max_over_ground_truths(official_exact_match_score, prediction, ground_truths)
        f1 += official_metric_max_over_ground_truths(official_f1_score, prediction, ground_truths)
  return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


# --- evaluate-v2.0.py's per-question rules. ---
def official_v2_f1(a_gold, a_pred):
  gold_toks = official_normalize_answer(a_gold).split() if a_gold else []
  pred_toks = official_normalize_answer(a_pred).split() if a_pred else []
  common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
  num_same = sum(common.values())
  if len(gold_toks) == 0 or len(pred_toks) == 0:
    return int(gold_toks == pred_toks)
  if num_same == 0:
    return 0
  precision, recall = 1.0 * num_same / len(pred_toks), 1.0 * num_same / len(gold_toks)
  return (2 * precision * recall) / (precision + recall)


def official_v2_scores(answers, prediction):
  gold = [a for a in answers if official_normalize_answer(a)] or [""]
  return (max(int(official_normalize_answer(a) == official_normalize_answer(prediction)) for a in gold),
          max(official_v2_f1(a, prediction) for a in gold))


ADVERSARIAL = [  # (gold answers, prediction)
    (["the Eiffel Tower"], "Eiffel Tower."),
    (["A cat", "an apple"], "the apple!"),
    (["Denver Broncos", "Broncos", "The Denver Broncos"], "denver broncos "),
    (["1,000 people"], "1000 people"),
    (["café au lait"], "Café   au\tlait"),
    (["naïve"], "naive"),  # Accents are not normalized: no match.
    (["北京"], "北京。"),  # Non-ASCII punctuation is kept.
    (["a"], "the"),  # Both normalize to nothing.
    (["Theatre"], "the atre"),  # "The" inside a word is no article.
    (["New York City"], ""),
    (["New York City"], "York New"),
    (["one two two"], "two two two"),
    (["Saint-Denis"], "Saint Denis"),
    (["\u00a0Paris "], "paris"),
    (["the the the"], "an a"),
]


def _dataset(cases):
  qas = [{"id": f"q{i}", "question": "?", "answers": [{"text": g, "answer_start": 0} for g in golds]}
         for i, (golds, _) in enumerate(cases)]
  return [{"title": "t", "paragraphs": [{"context": "", "qas": qas}]}]


def test_normalization_and_scores_equal_the_official_script_on_adversarial_strings():
  for golds, prediction in ADVERSARIAL:
    for gold in golds:
      assert squad.normalize_answer(gold) == official_normalize_answer(gold)
      assert squad.token_f1(prediction, gold) == pytest.approx(official_f1_score(prediction, gold), abs=1e-12)
  predictions = {f"q{i}": p for i, (_, p) in enumerate(ADVERSARIAL) if i != 3}  # q3 unanswered: scores 0.
  ours = squad.scores([g for g, _ in ADVERSARIAL], [predictions.get(f"q{i}") for i in range(len(ADVERSARIAL))])
  official = official_evaluate(_dataset(ADVERSARIAL), predictions)
  assert abs(ours["exact_match"] * 100 - official["exact_match"]) < 1e-9
  assert abs(ours["f1"] * 100 - official["f1"]) < 1e-9
  assert 0 < ours["f1"] < 1


def test_v2_rules_equal_evaluate_v2():
  cases = ADVERSARIAL + [([], ""), ([], "something"), ([""], ""), (["the"], ""), (["Paris"], "")]
  ours = squad.question_scores([g for g, _ in cases], [p for _, p in cases], version2=True)
  official = np.array([official_v2_scores(g, p) for g, p in cases], np.float64)
  np.testing.assert_allclose(ours, official, atol=1e-12)


def test_real_dev_answers_score_as_the_official_script(tmp_path, capsys):
  """Predictions made of the dev set's own answers, cut and perturbed: `score squad` prints the official EM/F1."""
  path = require_data("squad_v1.1/dev-v1.1.json")
  dataset = json.loads(path.read_text(encoding="utf-8"))["data"]
  rng = np.random.default_rng(0)
  predictions = {}
  for article in dataset[:8]:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        text = qa["answers"][int(rng.integers(len(qa["answers"])))]["text"]
        choice = rng.integers(5)
        predictions[qa["id"]] = (text if choice == 0 else text.upper() + "." if choice == 1 else
                                 " ".join(text.split()[1:]) if choice == 2 else
                                 paragraph["context"][:40] if choice == 3 else "the " + text)
  pred = tmp_path / "predictions.json"
  pred.write_text(json.dumps(predictions), encoding="utf-8")
  score.score_files(["squad", "--gold", str(path), "--pred", str(pred)])
  ours = json.loads(capsys.readouterr().out.splitlines()[-1])
  official = official_evaluate(dataset, predictions)  # Questions of the other 40 articles: unanswered, 0.
  assert ours["questions"] == 10_570
  assert abs(ours["exact_match"] * 100 - official["exact_match"]) < 1e-9
  assert abs(ours["f1"] * 100 - official["f1"]) < 1e-9


def test_bootstrap_on_per_question_f1(tmp_path, capsys):
  golds = [g for g, _ in ADVERSARIAL]
  better = [g[0] for g in golds]
  worse = [p for _, p in ADVERSARIAL]
  result = bootstrap.squad_f1_bootstrap(golds, better, worse, samples=500)
  assert result.metric_a == pytest.approx(official_evaluate(_dataset(ADVERSARIAL), {
      f"q{i}": g for i, g in enumerate(better)})["f1"] / 100, abs=1e-12)
  assert result.delta > 0 and 0 <= result.p_value < 0.5
  gold = tmp_path / "gold.json"
  gold.write_text(json.dumps({"data": _dataset(ADVERSARIAL), "version": "1.1"}), encoding="utf-8")
  files = []
  for name, answers in (("a", better), ("b", worse)):
    files.append(tmp_path / f"{name}.json")
    files[-1].write_text(json.dumps({f"q{i}": a for i, a in enumerate(answers)}), encoding="utf-8")
  score.score_files(["bootstrap", "--task", "squad", "--gold", str(gold), "--pred-a", str(files[0]), "--pred-b",
                     str(files[1]), "--samples", "500"])
  printed = json.loads(capsys.readouterr().out.splitlines()[-1])
  assert printed["p_value"] == result.p_value and printed["a"] == result.metric_a


def test_a_prediction_for_an_unknown_question_is_one_line(tmp_path):
  gold = tmp_path / "gold.json"
  gold.write_text(json.dumps({"data": _dataset(ADVERSARIAL[:2])}), encoding="utf-8")
  pred = tmp_path / "pred.json"
  pred.write_text(json.dumps({"q9": "x"}), encoding="utf-8")
  with pytest.raises(SystemExit) as exit_info:
    score.main(["squad", "--gold", str(gold), "--pred", str(pred)])
  assert str(exit_info.value.code) == (f"error: {pred}:1: expected question ids of the gold file, found 'q9', which "
                                       "is not in it")

"""Extractive QA (tasks.question_answering, tasks.readers.squad): windows and their targets against HF's fast
tokenizer with overflowing tokens and HF run_qa's labelling restated, character-exact decoding (accents, CJK,
whitespace runs), the best answer over windows, SQuAD 2.0's null threshold against brute force, the reader."""

import json

import numpy as np
import pytest

from encoder import pretrained
from encoder.tokenizer import load_tokenizer
from tasks import question_answering as qa
from tasks.readers import ReaderError, read_squad
from tasks.scoring import squad
from tests.conftest import require_data, require_package

QUESTION = "Where is the café in Zürich  today, and why?"
CONTEXT = " ".join(f"Item {i}: a café  in Zürich\u00a0東京 serves naïve   résumé-writers." for i in range(20))


@pytest.fixture(scope="module")
def tokenizer():
  return load_tokenizer("all-MiniLM-L6-v2")


def _hf_windows(question, context, *, max_length, doc_stride, max_question_length):
  """HF's BertTokenizerFast with truncation="only_second" and overflowing tokens, overlap = budget - doc_stride, on the
  question cut after its max_question_length-th subword: (input ids, context char spans or (-1, -1)) per window."""
  transformers = require_package("transformers")
  hf = transformers.BertTokenizerFast.from_pretrained(str(pretrained.pretrained_path("all-MiniLM-L6-v2")))
  question_offsets = hf(question, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
  question = question[:question_offsets[:max_question_length][-1][1]]
  budget = max_length - min(len(question_offsets), max_question_length) - 3
  encoded = hf(question, context, truncation="only_second", max_length=max_length, stride=budget - doc_stride,
               return_overflowing_tokens=True, return_offsets_mapping=True)
  return [(ids, [tuple(o) if s == 1 else (qa.OUTSIDE, qa.OUTSIDE) for o, s in zip(offsets, encoded.sequence_ids(i))])
          for i, (ids, offsets) in enumerate(zip(encoded["input_ids"], encoded["offset_mapping"]))]


def _hf_run_qa_targets(spans, start_char, end_char):
  """HF run_qa's prepare_train_features, restated: the answer's token positions in a window, (0, 0) outside it."""
  context = [i for i, s in enumerate(spans) if s[0] != qa.OUTSIDE]
  first, last = context[0], context[-1]
  if not (spans[first][0] <= start_char and spans[last][1] >= end_char):
    return 0, 0
  while first < len(spans) and spans[first][0] != qa.OUTSIDE and spans[first][0] <= start_char:
    first += 1
  while spans[last][1] >= end_char:
    last -= 1
  return first - 1, last + 1


@pytest.mark.parametrize("max_length,doc_stride,max_question_length", [(48, 8, 6), (64, 20, 64), (40, 30, 4)])
def test_windows_and_targets_equal_hf_overflowing_tokens_and_run_qa(tokenizer, max_length, doc_stride,
                                                                    max_question_length):
  start = CONTEXT.index("Zürich", 300)
  answer = (start, start + len("Zürich\u00a0東京"))
  ours = qa.encode_windows(tokenizer, QUESTION, CONTEXT, answer, max_length=max_length, doc_stride=doc_stride,
                           max_question_length=max_question_length)
  theirs = _hf_windows(QUESTION, CONTEXT, max_length=max_length, doc_stride=doc_stride,
                       max_question_length=max_question_length)
  assert len(ours) == len(theirs) > 3
  inside = 0
  for example, (ids, spans) in zip(ours, theirs):
    assert example["input_ids"].tolist() == ids and len(ids) <= max_length
    assert [tuple(s) for s in example["char_spans"].tolist()] == spans
    assert example["type_ids"].tolist() == [0] * ids.index(tokenizer.sep_id, 1) + [0] + [1] * (
        len(ids) - ids.index(tokenizer.sep_id, 1) - 1)
    target = (int(example["start_position"]), int(example["end_position"]))
    assert target == _hf_run_qa_targets(spans, *answer)
    if target != (0, 0):
      inside += 1
      assert CONTEXT[spans[target[0]][0]:spans[target[1]][1]] == "Zürich\u00a0東京"
  assert inside >= 1


def test_an_answer_across_a_window_boundary_trains_on_cls_there(tokenizer):
  """The windows that hold only part of the answer (or none of it) point at [CLS]; those holding it all, at it."""
  context = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
  answer = (context.index("five"), context.index("nine") + 4)
  examples = qa.encode_windows(tokenizer, "which?", context, answer, max_length=10, doc_stride=2,
                               max_question_length=8)
  for example in examples:
    covered = [s for s in example["char_spans"].tolist() if s[0] != qa.OUTSIDE]
    whole = covered[0][0] <= answer[0] and covered[-1][1] >= answer[1]
    target = (int(example["start_position"]), int(example["end_position"]))
    assert (target != (0, 0)) == whole
  assert {int(e["start_position"]) > 0 for e in examples} == {True, False}
  no_answer = qa.encode_windows(tokenizer, "which?", context, None, max_length=10, doc_stride=2, max_question_length=8)
  assert all(int(e["start_position"]) == int(e["end_position"]) == 0 for e in no_answer)


def _peaked(example, start_char, end_char, value=5.0):
  """Logits [tokens, 2] with the start peak at the token starting at start_char, the end at the token ending at
  end_char (small noise elsewhere)."""
  spans = example["char_spans"]
  logits = np.random.default_rng(0).normal(0, 0.1, (len(spans), 2)).astype(np.float32)
  logits[np.flatnonzero(spans[:, 0] == start_char), 0] = value
  logits[np.flatnonzero(spans[:, 1] == end_char), 1] = value
  return logits


@pytest.mark.parametrize("answer", ["Zürich\u00a0東京", "naïve   résumé", "東", "résumé-writers", "café  in"])
def test_decoding_gives_the_exact_characters_of_the_context(tokenizer, answer):
  context = "Item: a café  in Zürich\u00a0東京 serves naïve   résumé-writers."
  start = context.index(answer)
  family = qa.QuestionAnswering({"max_length": 64})
  examples = family.encode(tokenizer, {"question": QUESTION, "context": context, "answers": []}, None)
  raw = [_peaked(examples[0], start, start + len(answer))]
  prediction = family.decode(raw, examples, None)
  assert qa.answer_text({"context": context}, prediction) == answer
  assert (prediction["start"], prediction["end"]) == (start, start + len(answer))


def test_the_best_answer_over_windows_and_the_admissible_pairs(tokenizer):
  family = qa.QuestionAnswering({"max_length": 40, "doc_stride": 10, "max_question_length": 8,
                                 "max_answer_length": 5})
  record = {"question": "which item?", "context": CONTEXT, "answers": []}
  examples = family.encode(tokenizer, record, None)
  assert len(examples) > 3
  target = CONTEXT.index("Item 7")
  raws = [np.zeros((len(e["input_ids"]), 2), np.float32) for e in examples]
  holding = [i for i, e in enumerate(examples) if target in e["char_spans"][:, 0]]
  raws[holding[-1]] = _peaked(examples[holding[-1]], target, target + 6, value=9.0)
  other = next(i for i in range(len(examples)) if i not in holding)
  raws[other] = _peaked(examples[other], int(examples[other]["char_spans"][12, 0]),
                        int(examples[other]["char_spans"][13, 1]), value=4.0)
  raws[other][0] = 50.0  # [CLS] and the question are never answers.
  raws[other][3] = 50.0
  assert qa.answer_text(record, family.decode(raws, examples, None)) == "Item 7"
  # An end before the start, or a span longer than max_answer_length, is never chosen.
  example = examples[holding[-1]]
  logits = np.full((len(example["input_ids"]), 2), -10.0, np.float32)
  context = np.flatnonzero(example["char_spans"][:, 0] != qa.OUTSIDE)
  logits[context[14], 0], logits[context[13], 1] = 9.0, 9.0  # Reversed.
  logits[context[0], 0], logits[context[12], 1] = 8.0, 8.0  # 13 subwords > 5.
  logits[context[4], 0], logits[context[5], 1] = 1.0, 1.0
  best = qa.window_candidates(logits, example["char_spans"], 20, 5)[0]
  assert (best[1], best[2]) == (int(example["char_spans"][context[4], 0]), int(example["char_spans"][context[5], 1]))


def test_null_threshold_is_the_best_by_brute_force():
  rng = np.random.default_rng(0)
  for trial in range(30):
    n = int(rng.integers(1, 12))
    margins = np.round(rng.normal(0, 2, n), 0 if trial % 2 else 3)  # Integer margins: ties.
    answered, null = rng.uniform(0, 1, n).round(1), rng.integers(0, 2, n).astype(float)
    chosen = qa.choose_null_threshold(margins, answered, null)
    total = lambda t: float(np.where(margins > t, null, answered).sum())  # noqa: B023  (called within the iteration)
    candidates = [margins.min() - 1.0] + sorted(margins)
    # Float64 sums of at most 11 one-decimal values: rounding only; a worse threshold is >= 0.1 off.
    assert total(chosen) == pytest.approx(max(total(t) for t in candidates), abs=1e-12)


def test_squad2_tuned_threshold_answers_unanswerable_questions_empty(tokenizer):
  """Two unanswerable questions with a strong [CLS], one answerable with a strong answer: the tuned threshold gets
  all three right (F1 1), and the predictions score as evaluate-v2.0 does."""
  family = qa.QuestionAnswering({"max_length": 64, "unanswerable": True})
  context = "The café in Zürich opened in 1901 and closed in 1950."
  records = [{"id": str(i), "question": "when?", "context": context, "is_impossible": not answers,
              "answers": answers} for i, answers in enumerate([[{"text": "1901", "start": context.index("1901")}],
                                                                [], []])]
  examples = [family.encode(tokenizer, r, None) for r in records]
  raws = []
  for windows, cls in zip(examples, (1.0, 8.0, 3.0)):
    logits = _peaked(windows[0], context.index("1901"), context.index("1901") + 4, value=4.0)
    logits[0] = cls
    raws.append([logits])
  threshold = family.tune(records, examples, raws)
  predictions = [family.decode(r, e, threshold) for r, e in zip(raws, examples)]
  assert [qa.answer_text(r, p) for r, p in zip(records, predictions)] == ["1901", "", ""]
  assert family.score(records, predictions) == {"exact_match": 1.0, "f1": 1.0}
  assert family.tune(records, examples, raws) is not None and qa.QuestionAnswering({"max_length": 64}).tune(
      records, examples, raws) is None


def test_reader_reads_v1_and_v2_and_holds_out_articles(tmp_path):
  path = require_data("squad_v1.1/train-44-articles.json")
  records = list(read_squad(path))
  assert len(records) == 11_877 and all(len(r["answers"]) == 1 for r in records)
  held_out = list(read_squad(path, articles="40:"))
  assert [r["title"] for r in held_out[:1]] == ["Southern_Europe"]
  assert len(list(read_squad(path, articles=":40"))) + len(held_out) == 11_877
  v2 = {"version": "v2.0", "data": [{"title": "T", "paragraphs": [{"context": "Paris is in France.", "qas": [
      {"id": "a", "question": "Where?", "answers": [{"text": "France", "answer_start": 12}], "is_impossible": False},
      {"id": "b", "question": "Who?", "answers": [], "plausible_answers": [], "is_impossible": True}]}]}]}
  file = tmp_path / "v2.json"
  file.write_text(json.dumps(v2), encoding="utf-8")
  read = list(read_squad(file))
  assert [r["is_impossible"] for r in read] == [False, True] and read[1]["answers"] == []
  assert squad.read_gold(file)[2] is True


def test_reader_names_the_line_of_a_bad_answer(tmp_path):
  file = tmp_path / "bad.json"
  file.write_text('{"data": [{"title": "T", "paragraphs": [{"context": "Paris is in France.", "qas": [\n'
                  '{"id": "q1", "question": "Where?", "answers": [{"text": "Spain", "answer_start": 12}]}]}]}]}\n',
                  encoding="utf-8")
  with pytest.raises(ReaderError, match=r"bad.json:2: expected answers\[0\] of question 'q1' to be the context's "
                                        r"text at answer_start 12"):
    list(read_squad(file))


def test_reader_refuses_a_repeated_id_and_unanswerable_questions_of_a_v1_run(tmp_path):
  """Predictions and the official metric are keyed by question id: a repeated one would silently drop answers; a
  v1.1 run (`answerable`) can neither predict nor score a v2.0 unanswerable question."""
  question = lambda qid, impossible=False: json.dumps({
      "id": qid, "question": "Where?", "is_impossible": impossible,
      "answers": [] if impossible else [{"text": "France", "answer_start": 12}]})
  file = tmp_path / "squad.json"
  file.write_text('{"data": [{"title": "T", "paragraphs": [{"context": "Paris is in France.", "qas": [\n'
                  f'{question("q1")},\n{question("q2", True)},\n{question("q1")}]}}]}}]}}\n', encoding="utf-8")
  with pytest.raises(ReaderError, match=r"squad.json:4: expected each question id once .* found 'q1' again, first "
                                        r"at line 2 \(data\[0\].paragraphs\[0\].qas\[2\]\)"):
    list(read_squad(file))
  with pytest.raises(ReaderError, match=r"squad.json:3: expected answerable questions \(a SQuAD v1.1 run\), found "
                                        r"'q2' unanswerable .*set config.task.unanswerable=True"):
    list(read_squad(file, answerable=True))


def test_the_squad_preset_stores_the_readers_records():
  """tfds preset "squad": train = the first 40 articles, validation = the last 4, test = the official dev set."""
  from tasks.tfds_builders import load_split  # pylint: disable=import-outside-toplevel
  train_file, dev_file = (require_data(f"squad_v1.1/{name}.json") for name in ("train-44-articles", "dev-v1.1"))
  for split, path, articles in (("train", train_file, ":40"), ("validation", train_file, "40:"),
                                ("test", dev_file, None)):
    source = load_split("squad", split)
    expected = list(read_squad(path, articles=articles))
    assert len(source) == len(expected)
    assert [source[i] for i in (0, len(source) // 2, len(source) - 1)] == [
        expected[i] for i in (0, len(expected) // 2, len(expected) - 1)]

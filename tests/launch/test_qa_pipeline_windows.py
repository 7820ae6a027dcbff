"""The question-answering pipeline an export carries (launch/hf_modeling/pipeline_encoderlab.py) windows a long
context itself, so the tokenizer's warning that a sequence longer than model_max_length (the run's max_length) "will
result in indexing errors" is wrong there and must not be printed (issue 71): no window is longer than max_length."""

import types

import pytest

from encoder.pretrained import minilm_path

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from launch.hf_modeling import pipeline_encoderlab  # noqa: E402  (it imports torch: after its importorskip)

WARNING = "sequence-length-is-longer-than-the-specified-maximum"  # The key transformers marks the warning with.
CONTEXT = " ".join(["The Normans were the people who in the 10th and 11th centuries gave their name to Normandy ."] * 6)


def test_a_context_longer_than_max_length_is_windowed_without_the_warning(capfd):
  # An export's tokenizer and QA head at runlocal size: model_max_length = max_length = 32.
  tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_path(), model_max_length=32)
  head = {"max_length": 32, "max_question_length": 12, "doc_stride": 8}
  pipe = types.SimpleNamespace(tokenizer=tokenizer, model=types.SimpleNamespace(
      config=types.SimpleNamespace(encoderlab_head=head)))
  question = {"question": "Who gave their name to Normandy?", "context": CONTEXT}
  inputs = pipeline_encoderlab.QuestionAnsweringPipeline.preprocess(pipe, question)
  assert inputs["input_ids"].shape[0] > 1 and inputs["input_ids"].shape[1] <= 32  # Several windows, none too long.
  assert WARNING not in tokenizer.deprecation_warnings
  assert "longer than the specified maximum" not in capfd.readouterr().err
  tokenizer(CONTEXT, add_special_tokens=False)  # What the pipeline did before: the warning's condition holds.
  assert tokenizer.deprecation_warnings.get(WARNING)

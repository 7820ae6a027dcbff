"""Packed fine-tuning (config.data.pack): a packed batch's per-example outputs equal the unpacked batch's.

Each family's head runs on a tiny random encoder twice over the same examples: one example a row (`collate`), and
packed several to a row as attention segments with positions restarting (`tasks.batching.pack`, unpacked for the
heads by `launch.model.unpacked`). Dropout is off. The two runs compute the same dot products and softmaxes over the
same real tokens; other segments' keys enter the softmax as exact zeros. Only the order of float32 sums can differ
(other shapes, other kernel blocking): each output errs by a few sum_bound(n) (tests/tolerances.py; n <= 64 terms a
dot product, 2 layers) of its terms' scale, ~1e-6 of the largest output. The bound, 1e-5 of the largest output of the
batch, leaves room for that, while an example reading another's tokens, a wrong [CLS] or a position that does not
restart moves outputs by their own size. Decoded predictions (labels, tags, spans, answers) must be identical.
"""

import functools

import jax
import ml_collections
import numpy as np
import pytest

from configs import checks, finetune
from encoder.config import EncoderConfig
from encoder.errors import ConfigError
from encoder.tokenizer import load_tokenizer
from launch.model import EncoderWithHeads
from tasks import batching, evaluation, finetune_data, registry

RELATIVE = 1e-5  # Of the largest |output| of the batch (module docstring).
WORDS = ("the cat sat on a mat near Berlin while Anna Smith of Acme Corp read Nations United quietly today and "
         "walked home").split()


@functools.lru_cache(maxsize=1)
def tokenizer():
  return load_tokenizer("all-MiniLM-L6-v2")


def family_of(preset: str, **overrides):
  """The preset's family at runlocal size (task.max_length 32) with `overrides`, labels fixed."""
  task = finetune.get_config(f"task={preset},runlocal").task.to_dict() | overrides
  labels = {"tagging": ["B-LOC", "B-ORG", "B-PER", "I-LOC", "I-ORG", "I-PER", "O"], "span_ner": ["LOC", "ORG", "PER"],
            "classification": ["A", "B", "C"]}.get(task["name"], [])
  labels = list(finetune.UPOS) if preset == "ud_pos" else labels
  mapping = finetune_data.task_mapping(ml_collections.ConfigDict(task), labels)
  return registry.family(mapping | ({"score_mean": 3.0} if task["name"] == "regression" else {}))


def records(family, count: int, rng: np.random.Generator) -> list[dict]:
  """`count` records of varied lengths, in the family's record format."""
  out = []
  for i in range(count):
    words = [str(w) for w in rng.choice(WORDS, size=int(rng.integers(1, 14)))]
    if family.name in ("classification", "regression"):
      out.append({"text_a": " ".join(words), "text_b": " ".join(words[::-1]) if i % 2 else None,
                  "label": "ABC"[i % 3], "score": float(i % 5)})
    elif family.name == "tagging":
      tags = [str(t) for t in rng.choice(["B-PER", "I-PER", "O", "B-LOC"], size=len(words))]
      tags = [t if not t.startswith("I-") or (k and tags[k - 1][2:] == "PER") else "O" for k, t in enumerate(tags)]
      out.append({"words": words, "tags": tags} if family.task.get("scheme") else
                 {"words": words, "tags": [str(t) for t in rng.choice(finetune.UPOS, size=len(words))]})
    elif family.name == "span_ner":
      out.append({"words": words, "spans": [{"label": "PER", "start": 0, "end": 1}]})
    else:
      context = " ".join(words + words)
      out.append({"id": str(i), "title": "", "question": " ".join(words[:3]), "context": context,
                  "answers": [{"text": words[0], "start": 0}]})
  return out


def split_of(family, count: int, seed: int) -> finetune_data.Split:
  """A split of `count` records (QA: several windows each), encoded."""
  return finetune_data.split_of("dev", family, tokenizer(), records(family, count, np.random.default_rng(seed)))


def decoded(family, split: finetune_data.Split, outputs: np.ndarray) -> list:
  """Each record's prediction from a batch's outputs, cut as `tasks.evaluation.raw_predictions` cuts them."""
  raw = [outputs[i] if not family.widths() else outputs[i, :len(example[next(iter(family.widths()))])]
         for i, example in enumerate(split.examples)]
  return evaluation.decode(family, split, raw)


def model_of(family):
  cfg = EncoderConfig(vocab_size=tokenizer().vocab_size, hidden_size=32, num_layers=2, num_heads=4,
                      intermediate_size=64, max_positions=64, hidden_dropout=0.0, attention_dropout=0.0)
  return EncoderWithHeads(cfg, (family.objective(),))


def both(family, examples, batch_size: int):
  """(outputs, loss metrics) of the unpacked and the packed batch of `examples`, same parameters."""
  length = family.task["max_length"]
  widths = family.widths()
  plain = batching.collate(examples, (length,), batch_size=batch_size, widths=widths, layout=family.layout())
  shapes = batching.pack_shapes([batching.lengths_of(examples)], length, 0.0, batch_size)
  packed = batching.pack(examples, length, shapes, batch_size=batch_size, widths=widths, layout=family.layout())
  assert len(shapes) == 1 and shapes[0].rows < len(examples)  # Several examples share a row.
  model = model_of(family)
  params = model.init(jax.random.key(0), plain)["params"]
  objective = family.objective()

  @jax.jit
  def run(batch):
    predictions = model.apply({"params": params}, batch)[family.name]
    return predictions, family.outputs(predictions, batch), objective.loss(predictions, batch)[1]
  results = [jax.tree.map(np.asarray, run(batch)) for batch in (plain, packed)]
  return plain, packed, results


def assert_close(ours, theirs, what: str):
  ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
  scale = max(np.abs(theirs).max(), 1e-30)
  assert np.abs(ours - theirs).max() <= RELATIVE * scale, (what, np.abs(ours - theirs).max() / scale)


# Every family; [CLS] read alone (the last layer at the rows' example starts), mean and pooled; tags with a CRF and
# word shapes, with word endings (ud_pos: per-token indices into the example), spans and QA windows.
CASES = [("sst2", {}), ("sst2", {"pooling": "mean"}), ("sst2", {"pooling": "pooled"}), ("sick_relatedness", {}),
         ("conll2003", {}), ("conll2003_crf", {}), ("ud_pos", {}), ("conll2003_spans", {}), ("squad", {})]


@pytest.mark.slow
@pytest.mark.parametrize("preset,overrides", CASES, ids=[f"{p}-{'-'.join(map(str, o.values()))}" for p, o in CASES])
def test_packed_outputs_equal_unpacked(preset, overrides):
  family = family_of(preset, **overrides)
  split = split_of(family, 12, seed=len(preset))
  examples = split.examples
  plain, _packed, ((p_plain, out_plain, m_plain), (p_packed, out_packed, m_packed)) = both(family, examples, 16)
  assert decoded(family, split, out_packed) == decoded(family, split, out_plain)
  real = plain["example_mask"] > 0
  for key in ("logits", "score", "word_logits", "start_logits", "end_logits"):
    if isinstance(p_plain, dict) and key in p_plain:
      a, b = np.asarray(p_plain[key])[real], np.asarray(p_packed[key])[real]
      if key in ("start_logits", "end_logits") or (key == "logits" and a.ndim == 3):  # Per subword: real tokens.
        a, b = a[plain["attention_segments"][real] > 0], b[plain["attention_segments"][real] > 0]
      if key == "word_logits":
        a, b = a[plain["word_labels"][real] >= 0], b[plain["word_labels"][real] >= 0]
      assert_close(b, a, key)
  out_plain, out_packed = out_plain[real], out_packed[real]
  if out_plain.ndim > 1 and out_plain.shape[1] == plain["input_ids"].shape[1]:  # Per subword: real tokens only.
    out_plain, out_packed = out_plain[plain["attention_segments"][real] > 0], out_packed[
        plain["attention_segments"][real] > 0]
  if out_plain.dtype.kind in "iub":
    np.testing.assert_array_equal(out_packed, out_plain)
  else:
    assert_close(out_packed, out_plain, "outputs")
  for name, (total, count) in m_plain.items():
    assert float(m_packed[name][1]) == float(count), name
    assert_close(m_packed[name][0], total, name)


def test_pack_lays_each_example_out_as_its_own_segment():
  family = family_of("conll2003")
  examples = split_of(family, 20, seed=1).examples
  length = family.task["max_length"]
  lengths = batching.lengths_of(examples)
  shapes = batching.pack_shapes([lengths[:10], lengths[10:]], length, 0.0, 12)
  batch = batching.pack(examples[:10], length, shapes, batch_size=12, widths=family.widths(),
                        layout=family.layout())
  assert batch["packed_input_ids"].shape[1] == length and batch["input_ids"].shape == (12, length)
  for i, example in enumerate(examples[:10]):
    row, start, n = batch["example_row"][i], batch["example_start"][i], len(example["input_ids"])
    np.testing.assert_array_equal(batch["packed_input_ids"][row, start:start + n], example["input_ids"])
    np.testing.assert_array_equal(batch["packed_positions"][row, start:start + n], np.arange(n))
    segment = batch["packed_segments"][row, start]
    assert segment > 0 and (batch["packed_segments"][row] == segment).sum() == n
    assert start in batch["packed_cls"][row]
  assert (batch["packed_segments"] > 0).sum() == lengths[:10].sum()  # Every real token once, nothing else.
  with pytest.raises(ValueError, match="packed shape"):
    batching.pack(examples, length, [batching.PackShape(1, 20)], widths=family.widths(), layout=family.layout())


def test_packed_schedule_has_one_shape_and_every_example_once_an_epoch():
  family = family_of("sst2")
  split = split_of(family, 40, seed=2)
  lengths = batching.lengths_of(split.examples)
  batches = finetune_data.epoch_batches(lengths, 8, seed=0, epoch=0, pack=True)
  assert sorted(i for b in batches for i in b) == list(range(40))
  assert batches != finetune_data.epoch_batches(lengths, 8, seed=0, epoch=1, pack=True)
  shapes = batching.pack_shapes([lengths[b] for b in batches], 32, 1e9, 8)  # A compilation outweighs any padding.
  data = finetune_data.TaskData(family.task, family, tokenizer(), split, split, None, (16, 32), family.widths(),
                                finetune_data.Schedule(8, 0, len(batches), len(batches)), shapes)
  schedule = finetune_data.batch_schedule(data)
  seen_shapes = {tuple((k, v.shape) for k, v in sorted(schedule(step).items())) for step in range(len(batches))}
  assert len(shapes) == 1 and len(seen_shapes) == 1
  seen = sorted(int(label) for step in range(len(batches)) for label, real in
                zip(schedule(step)["label"], schedule(step)["example_mask"]) if real)
  assert seen == sorted(int(e["label"]) for e in split.examples)
  fewest = min(len(batching.pack_rows(list(lengths[b]), 32)) for b in batches)
  two = data._replace(pack=(batching.PackShape(fewest, shapes[0].segments), shapes[0]))
  if fewest == shapes[0].rows:
    pytest.fail("every batch needs as many rows: choose records of more varied lengths")
  two_schedule = finetune_data.batch_schedule(two)
  in_order = [two_schedule(step)["packed_input_ids"].shape for step in range(len(batches))]
  ahead = finetune_data.first_batch_of_each_shape(two, start_step=0)
  assert [b["packed_input_ids"].shape for b in ahead] == sorted(set(in_order), key=in_order.index) and len(ahead) == 2


@pytest.mark.parametrize("field,value,message", [
    ("grad_accum_steps", 2, "expected config.grad_accum_steps=1"), ("task.rdrop", 1.0, "expected config.task.rdrop=0")])
def test_packing_refuses_what_it_cannot_split(field, value, message):
  config = finetune.get_config("task=sst2,runlocal")
  with config.unlocked():
    config.data.pack = True
    section, _, key = field.rpartition(".")
    (config[section] if section else config)[key] = value
  with pytest.raises(ConfigError, match=message):
    checks.check_config(config)


def test_pack_shapes_leave_the_rare_full_batch_its_own_shape():
  batches = [[10] * 8] * 20 + [[30] * 8]  # Rows of 32: 3 rows for most batches, 8 for the last.
  assert batching.pack_shapes(batches, 32, 0.0, 8) == (batching.PackShape(3, 3), batching.PackShape(8, 3))
  assert batching.pack_shapes(batches, 32, 1e9, 8) == (batching.PackShape(8, 3),)  # A compilation outweighs it.

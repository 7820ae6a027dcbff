"""objectives.data: pretraining's data loaded by `load(config)` from what the objectives declare of themselves. An
objective added from this file (a registry line) with a packing of its own (a layout function and a registry line)
and its own masking defaults gets them in configs/pretrain.py's config, through the config checks and into the rows
and masked batches, with no edit to configs/ or launch/."""

import numpy as np
import pytest

from configs import checks, pretrain
from objectives import data, pipeline, registry
from objectives.objective import Requirement

NAME, PACKING = "row_probe", "indexed_rows"
MASK_DEFAULTS = {"mask_prob": 0.5, "random_prob": 0.25}


def indexed_layout(corpus, max_length, rng):
  """RoBERTa's full sentences, each row carrying its index as the field "row_index"."""
  chunks, row_offsets, _ = pipeline.full_sentence_layout(corpus, max_length, rng)
  return chunks, row_offsets, {"row_index": np.arange(len(row_offsets) - 1, dtype=np.int32)}


def build(config=None):
  """MLM's head, needing the packing above and masking with its own defaults."""
  return registry.build("mlm", config)._replace(name=NAME, packing=Requirement(PACKING, "rows that know their index"),
                                                mask_defaults=MASK_DEFAULTS)


@pytest.fixture
def registered(monkeypatch):
  monkeypatch.setitem(pipeline.PACKINGS, PACKING, pipeline.Packing(indexed_layout))  # The packing's registry line.
  monkeypatch.setitem(registry.OBJECTIVES, NAME, build)  # The objective's.


def test_an_objective_sets_its_packing_and_masking_defaults(registered):
  config = pretrain.get_config(f"runlocal,objectives={NAME}")
  assert config.data.packing == PACKING
  assert (config.masking.mask_prob, config.masking.random_prob) == (0.5, 0.25)
  checks.check_config(config)  # config.data.packing's rule reads the registry when it checks.
  plain = pretrain.get_config("runlocal")
  assert (plain.data.packing, plain.masking.mask_prob, plain.masking.random_prob) == ("full_sentences", 0.8, 0.1)
  assert data.defaults(["electra", "nsp", "sbo"]) == {"masking.mask_prob": 0.85, "masking.random_prob": 0.0,
                                                      "data.packing": "nsp_pairs", "masking.mode": "span"}


def test_load_reads_the_packing_and_masks_with_the_objectives_defaults(registered, tmp_path):
  config = pretrain.get_config(f"runlocal,objectives={NAME}").unlock()
  config.data.train_files = config.data.eval_files  # The small held-out file as both splits: tokenized in a second.
  loaded = data.load(config, cache_dir=tmp_path)
  assert loaded.schedule == data.Schedule(config.batch_size, config.seed, config.num_train_steps)
  assert loaded.mask_options["mask_prob"] == 0.5 and loaded.mask_options["random_prob"] == 0.25
  assert loaded.train[3]["row_index"] == 3 and loaded.eval is not None and loaded.eval[1]["row_index"] == 1
  example = data.example_batch(loaded.train, loaded.mask_options)
  assert example["row_index"].shape == (1,) and "word_starts" not in example  # Host-only fields stay on the host.
  rows = data.train_rows(loaded.train, loaded.mask_options, seed=config.seed)
  again = data.train_rows(data.load(config, cache_dir=tmp_path).train, loaded.mask_options, seed=config.seed)
  for index in (0, 5, len(loaded.train) + 2):  # The rows of a step are a function of (config, step): past a pass too.
    for key, value in rows[index].items():
      np.testing.assert_array_equal(again[index][key], value, err_msg=key)

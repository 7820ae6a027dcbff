"""Every task family under every minimal-adjustment regime (issue 72): classification, regression, tagging with and
without a CRF, span NER and QA each build their tiny model with LoRA's branches, BitFit or adapters and take one
training step of the engine (launch/steps.py, jit); exactly the parameters the regime selects may change (the frozen
rest stays bit for bit), and the head and some encoder parameter do. Records and the tiny encoder are
tests/tasks/test_packing.py's (no data directory)."""

import functools

import flax.traverse_util
import jax
import numpy as np
import pytest

from configs import finetune
from encoder import runs
from launch import optimizer, steps
from launch.model import EncoderWithHeads, term_weights
from tasks import batching, regimes
from tests.tasks.test_packing import family_of, model_of, split_of

FAMILIES = ("sst2", "sick_relatedness", "conll2003", "conll2003_crf", "conll2003_spans", "squad")
BLOCKS = {"lora": {"lora": {"rank": 2, "alpha": 4.0, "dropout": 0.1, "targets": "query,value,intermediate,output",
                            "layers": "all"}},
          "adapters": {"adapters": {"size": 4, "placement": "both", "layers": "top:1"}}, "bitfit": {}}


@pytest.mark.slow  # 18 compilations of a tiny step, ~1 s each.
@pytest.mark.parametrize("regime", ["lora", "bitfit", "adapters"])
@pytest.mark.parametrize("preset", FAMILIES)
def test_one_step_of_every_family_changes_what_its_regime_trains_alone(preset, regime):
  family = family_of(preset)
  batch = batching.collate(split_of(family, 6, seed=1).examples, (family.task["max_length"],), batch_size=8,
                           widths=family.widths(), layout=family.layout())
  plain = model_of(family)
  cfg = plain.cfg.replace(hidden_dropout=0.1, **runs.regime_fields({"regime": regime, **BLOCKS[regime]},
                                                                     plain.cfg.num_layers))
  model = EncoderWithHeads(cfg, plain.objectives)
  abstract = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), batch, train=False))["params"]
  scales = regimes.update_scales(abstract, num_layers=cfg.num_layers, regime=regime)
  trains = jax.tree.map(lambda s: s > 0, scales)
  config = finetune.get_config(f"task={preset},runlocal")
  config.optimizer.warmup_fraction, config.optimizer.warmup_steps = 0.0, 0  # The first step updates.
  fns = steps.StepFns(model, plain.objectives, term_weights(plain.objectives, {family.name: 1.0}),
                      optimizer.make_optimizer(config.optimizer, 10, scales), trains)
  state = steps.init_state(fns, batch, seed=0)
  step = functools.partial(steps.train_step, fns, accum=1)
  after, acc = jax.jit(step)(state, batch, steps.zero_metrics(step, state, batch))
  assert int(acc["nonfinite_step"]) == steps.NO_STEP
  before, now = (flax.traverse_util.flatten_dict(jax.device_get(s.params)) for s in (state, after))
  selected = flax.traverse_util.flatten_dict(trains)
  changed = {path for path in before if not np.array_equal(before[path], now[path])}
  assert changed <= {path for path, t in selected.items() if t}  # Only what the regime selects.
  assert any(path[0] == family.name for path in changed)  # The head trains.
  encoder = {path for path in changed if path[0] == "encoder"}
  assert encoder and all({"lora": any(n.startswith("lora_") for n in path), "bitfit": path[-1] == "bias",
                          "adapters": any(n.startswith("adapter_") or "layer_norm" in n for n in path)}[regime]
                         for path in encoder)

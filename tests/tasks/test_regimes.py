"""Fine-tuning regimes: frozen parameters never move; top-k and layer-wise decay scale the right layers."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from encoder.errors import ConfigError
from tasks import regimes

PARAMS = {"encoder": {"embeddings": {"w": jnp.ones(2)}, "layer_0": {"w": jnp.ones(2)}, "layer_1": {"w": jnp.ones(2)},
                      "pooler": {"w": jnp.ones(2)}},
          "heads": {"classification": {"w": jnp.ones(3)}}}


def _flat(tree):
  return {jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_leaves_with_path(tree)}


def test_frozen_updates_only_the_head():
  scales = _flat(regimes.update_scales(PARAMS, num_layers=2, regime="frozen"))
  assert scales["['encoder']['embeddings']['w']"] == 0 and scales["['encoder']['layer_1']['w']"] == 0
  assert scales["['heads']['classification']['w']"] == 1 and scales["['encoder']['pooler']['w']"] == 1


def test_top_k_and_layer_decay():
  scales = _flat(regimes.update_scales(PARAMS, num_layers=2, regime="top_k", top_k=1, layer_decay=0.5))
  assert scales["['encoder']['layer_0']['w']"] == 0 and scales["['encoder']['embeddings']['w']"] == 0
  assert scales["['encoder']['layer_1']['w']"] == 0.5
  full = _flat(regimes.update_scales(PARAMS, num_layers=2, layer_decay=0.5))
  assert full["['encoder']['embeddings']['w']"] == 0.125 and full["['encoder']['layer_0']['w']"] == 0.25
  assert regimes.trainable_fraction(PARAMS, regimes.update_scales(PARAMS, num_layers=2, regime="frozen")) == 5 / 11


def test_frozen_parameters_stay_bitwise_equal_under_adamw():
  scales = regimes.update_scales(PARAMS, num_layers=2, regime="frozen")
  optimizer = optax.chain(optax.adamw(1e-2, weight_decay=0.1), regimes.scale_updates(scales))
  params, state = PARAMS, optimizer.init(PARAMS)
  grads = jax.tree.map(lambda p: jnp.full_like(p, 0.3), PARAMS)
  for _ in range(3):
    updates, state = optimizer.update(grads, state, params)
    params = optax.apply_updates(params, updates)
  np.testing.assert_array_equal(params["encoder"]["layer_1"]["w"], PARAMS["encoder"]["layer_1"]["w"])
  assert not np.allclose(params["heads"]["classification"]["w"], 1.0)  # Three updates moved it (a guard).


def test_bad_regime_names_the_choices():
  with pytest.raises(ConfigError, match=re.escape("config.regime='half': expected one of 'full', 'frozen', 'top_k'")):
    regimes.update_scales(PARAMS, num_layers=2, regime="half")
  with pytest.raises(ConfigError, match=re.escape("config.top_k=0")):
    regimes.update_scales(PARAMS, num_layers=2, regime="top_k", top_k=0)


@pytest.mark.parametrize("regime, top_k, layer_decay", [("full", 0, 0.8), ("top_k", 2, 1.0), ("frozen", 0, 0.9)])
def test_hf_reference_learning_rates_weight_decay_and_frozen_parameters_match_ours(regime, top_k, layer_decay):
  """benchmarks.finetune_reference's AdamW groups give every HF tensor the learning-rate factor (layer-wise decay),
  weight decay and freezing (no group, requires_grad off) that our update scales and decay mask give the same tensor
  of our tree."""
  import transformers  # pylint: disable=import-outside-toplevel

  from benchmarks import finetune_reference  # pylint: disable=import-outside-toplevel
  from encoder import config as encoder_config  # pylint: disable=import-outside-toplevel
  from encoder.hf import bert  # pylint: disable=import-outside-toplevel
  from launch import optimizer  # pylint: disable=import-outside-toplevel
  cfg = encoder_config.EncoderConfig(vocab_size=50, hidden_size=8, num_layers=3, num_heads=2, intermediate_size=16,
                                     max_positions=16)
  hf = transformers.BertForSequenceClassification(transformers.BertConfig(
      vocab_size=50, hidden_size=8, num_hidden_layers=3, num_attention_heads=2, intermediate_size=16,
      max_position_embeddings=16, num_labels=3))
  groups = finetune_reference.parameter_groups(hf, 1e-3, 0.01, layer_decay, regime, top_k)
  of_tensor = {id(p): (g["lr"] / 1e-3, g["weight_decay"] > 0) for g in groups for p in g["params"]}
  hf_names = dict(hf.named_parameters())
  ours = {}
  for t in bert.encoder_tensors(cfg):
    tree = ours
    for key in ("encoder",) + t.path[:-1]:
      tree = tree.setdefault(key, {})
    tree[t.path[-1]] = (t.hf_names, np.zeros(t.shape))
  ours["heads"] = {"classification": {"classifier": {"kernel": (("classifier.weight",), np.zeros((8, 3))),
                                                     "bias": (("classifier.bias",), np.zeros(3))}}}
  names = jax.tree.map(lambda leaf: leaf[0], ours, is_leaf=lambda x: isinstance(x, tuple))
  params = jax.tree.map(lambda leaf: leaf[1], ours, is_leaf=lambda x: isinstance(x, tuple))
  scales = regimes.update_scales(params, num_layers=3, regime=regime, top_k=top_k, layer_decay=layer_decay)
  decays = optimizer.decay_mask(params)
  checked = 0
  for hf_group, scale, decay in zip(jax.tree.leaves(names, is_leaf=lambda x: isinstance(x, tuple)),
                                    jax.tree.leaves(scales), jax.tree.leaves(decays)):
    for name in hf_group:
      parameter = hf_names[name if name.startswith("classifier") else "bert." + name]
      assert parameter.requires_grad == (scale > 0) == (id(parameter) in of_tensor), name
      if scale > 0:
        factor, decayed = of_tensor[id(parameter)]
        np.testing.assert_allclose(factor, scale, rtol=1e-12, err_msg=name)  # Float64 powers of the decay: ~1e-16.
        assert decayed == decay, name
      checked += 1
  assert checked == len(hf_names) and len(of_tensor) == sum(p.requires_grad for p in hf_names.values())
  assert 0 < len(of_tensor) < len(hf_names) if regime != "full" else len(of_tensor) == len(hf_names)

"""Fine-tuning regimes: frozen parameters never move; top-k and layer-wise decay scale the right layers."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

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
  assert not np.allclose(params["heads"]["classification"]["w"], 1.0)


def test_bad_regime_names_the_choices():
  with pytest.raises(ValueError, match="not one of"):
    regimes.update_scales(PARAMS, num_layers=2, regime="half")
  with pytest.raises(ValueError, match="top_k"):
    regimes.update_scales(PARAMS, num_layers=2, regime="top_k", top_k=0)

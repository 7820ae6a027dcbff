"""The FLOP count of MFU and equal-compute sweeps: encoder.flops' closed form matches the parameter trees (the
encoder's, ELECTRA's generator) and a hand count."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder import flops
from encoder.config import preset
from encoder.model import Encoder
from launch.model import EncoderWithHeads
from objectives import objective, registry


def layer_kernel_entries(params) -> int:
  """Kernel entries of the encoder's transformer layers."""
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  return sum(int(np.prod(leaf.shape)) for path, leaf in flat
             if str(path[0].key).startswith("layer_") and path[-1].key == "kernel")


@pytest.mark.parametrize("name", ["tiny", "minilm", "base"])
def test_closed_form_matches_the_parameter_tree(name):
  cfg = preset(name, vocab_size=1000)
  ids = jnp.zeros((1, 8), jnp.int32)
  params = jax.eval_shape(lambda: Encoder(cfg).init(jax.random.key(0), ids))["params"]
  h, i = cfg.hidden_size, cfg.intermediate_size
  assert layer_kernel_entries(params) == cfg.num_layers * (4 * h * h + 2 * h * i)


@pytest.mark.parametrize("name", ["tiny", "modernbert-base"])
def test_closed_form_counts_a_gated_feed_forward(name):
  """A gated FFN's kernels (input and gate [H, 2, I], output [I, H]) are 3 H I entries per layer, as flops counts."""
  cfg = preset(name, vocab_size=1000, gated_feed_forward=True)
  params = jax.eval_shape(lambda: Encoder(cfg).init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32)))["params"]
  h, i = cfg.hidden_size, cfg.intermediate_size
  assert layer_kernel_entries(params) == cfg.num_layers * (4 * h * h + 3 * h * i)
  attention = 12 * cfg.num_layers * h * 8**2
  assert flops.encoder_train_flops(cfg, 1, 8) == 6 * layer_kernel_entries(params) * 8 + attention


def test_minilm_step_flops_by_hand():
  cfg = preset("minilm", vocab_size=30522)  # 6 x 384, FFN 1536: 1,769,472 kernel entries per layer.
  tokens = 32 * 128
  by_hand = 6 * 6 * 1_769_472 * tokens + 12 * 6 * 384 * 128**2 * 32
  assert flops.encoder_train_flops(cfg, 32, 128) == by_hand
  # The last block at 21 rows: keys and values (2 x 384^2) at all 128 tokens, the rest at 21 rows.
  h, i, rows = 384, 1536, 21
  last = 2 * h * h * 128 + (2 * h * h + 2 * h * i + 2 * h * 128) * rows
  by_hand = 6 * 32 * (5 * (1_769_472 * 128 + 2 * h * 128**2) + last)
  assert flops.encoder_train_flops(cfg, 32, 128, last_rows=rows) == by_hand


def test_step_flops_adds_electras_generator_at_every_token():
  """ELECTRA's step counts its generator's layers (1/4 width: kernels from its parameter tree) at every token; MLM's
  step counts the encoder alone."""
  cfg = preset("tiny", vocab_size=1000)
  electra, mlm = registry.build("electra", {}), registry.build("mlm", {})
  batch = {"input_ids": jnp.zeros((1, 8), jnp.int32), "masked_positions": jnp.zeros((1, 2), jnp.int32),
           "masked_ids": jnp.zeros((1, 2), jnp.int32), "masked_weights": jnp.ones((1, 2)),
           "attention_segments": jnp.ones((1, 8), jnp.int32)}
  params = jax.eval_shape(lambda: EncoderWithHeads(cfg, (electra,)).init(jax.random.key(0), batch))["params"]
  generator = params["electra"]["generator"]["encoder"]
  hg = cfg.hidden_size // 4
  assert layer_kernel_entries(generator) == cfg.num_layers * (4 * hg * hg + 2 * hg * cfg.intermediate_size // 4)
  plain = flops.encoder_train_flops(cfg, 4, 8)
  assert objective.extra_encoders((mlm,), cfg) == ()
  assert flops.step_flops(cfg, 4, 8, extra=objective.extra_encoders((mlm,), cfg)) == plain
  assert flops.step_flops(cfg, 4, 8, extra=objective.extra_encoders((electra,), cfg)) == plain + 4 * (
      6 * layer_kernel_entries(generator) * 8 + 12 * cfg.num_layers * hg * 8**2)

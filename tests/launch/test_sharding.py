"""Parameter-path sharding rules: heads and MLP width on the model axis, FSDP over the data axis, else replicated."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

from encoder.config import preset
from encoder.model import Encoder
from launch import sharding


@pytest.fixture(scope="module")
def shapes():
  cfg = preset("tiny", vocab_size=50, hidden_size=16, num_heads=4, intermediate_size=32, max_positions=8)
  params = jax.eval_shape(lambda: Encoder(cfg).init(jax.random.PRNGKey(0), jnp.ones((1, 4), jnp.int32)))["params"]
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  return {sharding._path(path): leaf.shape for path, leaf in flat}  # pylint: disable=protected-access


def test_rules_shard_heads_and_mlp_width(shapes):
  spec = lambda path: sharding.partition_spec(path, shapes[path], 4)
  assert spec("layer_0/attention/qkv/kernel") == P(None, None, "model", None)  # [H, 3, A, D]
  assert shapes["layer_0/attention/qkv/kernel"][2] == 4
  assert spec("layer_0/attention/output/kernel") == P("model", None, None)  # [A, D, H]
  assert spec("layer_1/mlp/intermediate/kernel") == P(None, "model")
  assert spec("layer_1/mlp/output/kernel") == P("model", None)
  assert spec("embeddings/word_embeddings/embedding") == P()
  assert spec("layer_0/attention_layer_norm/scale") == P()
  # Adam moments carry the parameter path inside the optimizer state.
  assert sharding.partition_spec("opt_state/1/0/mu/encoder/layer_0/mlp/output/kernel", (32, 16), 4) == P("model", None)


def test_gated_feed_forward_shards_its_width_not_its_gate_axis():
  assert sharding.partition_spec("layer_0/mlp/intermediate/kernel", (16, 2, 32), 4) == P(None, None, "model")
  assert sharding.partition_spec("layer_0/mlp/intermediate/bias", (2, 32), 4) == P(None, "model")


def test_model_axis_must_divide(shapes):
  with pytest.raises(ValueError, match=r"qkv/kernel.*mesh_model=3"):
    sharding.partition_spec("layer_0/attention/qkv/kernel", shapes["layer_0/attention/qkv/kernel"], 3)
  assert sharding.partition_spec("layer_0/attention/qkv/kernel", (16, 3, 4, 4), 1) == P()


def test_fsdp_splits_the_largest_free_dimension_of_large_leaves():
  spec = sharding.partition_spec
  assert spec("encoder/embeddings/word_embeddings/embedding", (30522, 128), 1, 8) == P(None, "data")  # 30522 % 8.
  assert spec("encoder/embeddings/word_embeddings/embedding", (30528, 128), 1, 8) == P("data", None)
  # With a model axis the rule's dimension stays "model" and another one takes "data".
  assert spec("layer_0/mlp/intermediate/kernel", (256, 1024), 2, 4) == P("data", "model")
  assert spec("layer_0/attention/qkv/kernel", (256, 3, 4, 64), 2, 4) == P("data", None, "model", None)
  assert spec("opt_state/0/mu/encoder/layer_0/mlp/output/kernel", (1024, 256), 1, 4) == P("data", None)
  # Small leaves stay whole; a leaf no free dimension of which the data axis divides stays whole.
  assert spec("layer_0/mlp/intermediate/bias", (1024,), 1, 4) == P()
  assert spec("layer_0/mlp/output/kernel", (4099, 3), 1, 4) == P()
  assert spec("layer_0/mlp/output/kernel", (1024, 256), 1, 1) == P()



def test_padded_vocab_size_is_divisible_by_the_data_devices():
  assert sharding.padded_vocab_size(250_002, 8) == 250_880  # The xlmr-large of benchmarks.fsdp_large.
  assert sharding.padded_vocab_size(30_522, 6) == 30_720 and 30_720 % 6 == 0
  assert sharding.padded_vocab_size(3072, 6) == 3072

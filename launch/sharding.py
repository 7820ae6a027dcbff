"""Device mesh, named shardings from parameter-path rules, and host batches -> global arrays (jit or pmap).

The model itself knows nothing about devices. With parallelism="jit" (default) one program runs over a
("data", "model") mesh: batches split along "data"; the model axis shards attention heads (qkv kernel [H,3,A,D]
axis 2, output kernel [A,D,H] axis 0) and the MLP width (intermediate kernel axis 1, output kernel axis 0); all other
leaves (and optimizer moments of the same paths) follow the same rules. With fsdp (ZeRO-3 style) every leaf of at
least FSDP_MIN_SIZE entries is also split over the data axis, on its largest dimension that the rules left free and
the data axis divides: each device keeps 1/data of the parameters, gradients and optimizer moments, and XLA gathers a
weight where it is used and reduce-scatters its gradient. With parallelism="pmap" the state is replicated per device
([devices, ...]) and the step averages gradients with pmean.
"""

import math
import re
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

from encoder import errors

# (regex matched against the end of a leaf's path, spec). Optimizer moments reuse the parameter paths.
PARAM_RULES: tuple[tuple[str, P], ...] = (
    (r"attention/qkv/kernel$", P(None, None, "model", None)),  # [H, 3, A, D]: heads.
    (r"attention/qkv/bias$", P(None, "model", None)),  # [3, A, D].
    (r"attention/output/kernel$", P("model", None, None)),  # [A, D, H].
    (r"mlp/intermediate/kernel$", P(None, "model")),  # [H, I]: MLP width.
    (r"mlp/intermediate/bias$", P("model")),  # [I].
    (r"mlp/intermediate/kernel$", P(None, None, "model")),  # [H, 2, I]: a gated FFN's (input, gate), MLP width.
    (r"mlp/intermediate/bias$", P(None, "model")),  # [2, I].
    (r"mlp/output/kernel$", P("model", None)),  # [I, H].
)
FSDP_MIN_SIZE = 2**12  # Smaller leaves (biases, LayerNorm scales) stay whole: gathering them costs more than they hold.


def make_mesh(model_axis: int, devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A (data, model) mesh over `devices` (default: all devices of all processes), with Auto axis types (shardings
  are given, not typed)."""
  devices = jax.devices() if devices is None else list(devices)
  count = len(devices)
  if model_axis < 1 or count % model_axis:
    raise errors.ConfigError(f"config.mesh_model={model_axis} does not divide the {count} devices")
  return jax.make_mesh((count // model_axis, model_axis), ("data", "model"), axis_types=(AxisType.Auto,) * 2,
                       devices=devices)


def _path(key_path) -> str:
  return "/".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in key_path)


def partition_spec(path: str, shape: tuple[int, ...], model_size: int, fsdp_size: int = 1) -> P:
  """The spec of one leaf ('.../layer_0/attention/qkv/kernel'): its PARAM_RULES entry of its rank when the model axis
  is used, plus the data axis on its largest free dimension that `fsdp_size` divides (FSDP; leaves of FSDP_MIN_SIZE
  entries or more). A rule's dimension that the model axis does not divide is an error naming the leaf."""
  spec: list[str | None] = [None] * len(shape)  # A mesh axis name or None per dimension.
  for pattern, rule in PARAM_RULES if model_size > 1 else ():
    if re.search(pattern, path) and len(rule) == len(shape):
      axis = list(rule).index("model")
      if shape[axis] % model_size:
        raise errors.ConfigError(f"{path} has {shape[axis]} entries on axis {axis}, not divisible by "
                                 f"config.mesh_model={model_size}")
      spec = list(rule)
      break
  if fsdp_size > 1 and math.prod(shape) >= FSDP_MIN_SIZE:
    free = [i for i, (name, n) in enumerate(zip(spec, shape)) if name is None and n % fsdp_size == 0]
    if free:
      spec[max(free, key=lambda i: shape[i])] = "data"
  return P(*spec) if any(spec) else P()


def state_shardings(abstract_state: Any, mesh: Mesh, fsdp: bool = False) -> Any:
  """A NamedSharding per leaf of a (params or train-state) tree from PARAM_RULES (and FSDP over the data axis)."""
  fsdp_size = mesh.shape["data"] if fsdp else 1
  return jax.tree_util.tree_map_with_path(
      lambda key_path, leaf: NamedSharding(
          mesh, partition_spec(_path(key_path), leaf.shape, mesh.shape["model"], fsdp_size)), abstract_state)


def padded_vocab_size(vocab_size: int, data_devices: int) -> int:
  """The smallest multiple of lcm(1024, data_devices) from vocab_size: a vocabulary FSDP splits by row (the rows
  past the tokenizer's are never produced), so the tied MLM decoder never gathers the whole table."""
  multiple = math.lcm(1024, data_devices)
  return -(-vocab_size // multiple) * multiple


def bytes_per_device(tree: Any) -> int:
  """Bytes of `tree`'s arrays that one device holds (its shard of each leaf; pmap copies: one copy)."""
  return sum(leaf.addressable_shards[0].data.nbytes for leaf in jax.tree.leaves(tree))


def batch_spec(accum: int) -> P:
  """[batch, ...] split on data; with gradient accumulation [micro_steps, batch/micro_steps, ...]."""
  return P("data") if accum == 1 else P(None, "data")


def global_batch(local: dict[str, np.ndarray], mesh: Mesh, accum: int, parallelism: str) -> dict[str, jax.Array]:
  """This process's rows [n_local, ...] -> global arrays laid out for the jit or the pmap step."""
  if parallelism == "pmap":
    devices = jax.local_device_count()
    shaped = {k: v.reshape(devices, *((accum,) if accum > 1 else ()), -1, *v.shape[1:]) for k, v in local.items()}
    sharding = NamedSharding(mesh, P("data"))
    return {k: jax.make_array_from_process_local_data(sharding, v, (jax.device_count(), *v.shape[1:]))
            for k, v in shaped.items()}
  sharding = NamedSharding(mesh, batch_spec(accum))
  out = {}
  for key, value in local.items():
    rows = value.shape[0] * jax.process_count()
    if accum > 1:
      value = value.reshape(accum, -1, *value.shape[1:])
      shape = (accum, rows // accum, *value.shape[2:])
    else:
      shape = (rows, *value.shape[1:])
    out[key] = jax.make_array_from_process_local_data(sharding, value, shape)
  return out


def to_pmap(tree: Any, mesh: Mesh) -> Any:
  """Replicated tree -> [devices, ...] copies, one per device (the pmap layout)."""
  count = mesh.devices.size
  sharding = NamedSharding(mesh, P("data"))
  stack = jax.jit(lambda t: jax.tree.map(lambda x: jnp.broadcast_to(x, (count, *x.shape)), t),
                  out_shardings=sharding)
  return stack(tree)


def from_pmap(tree: Any, shardings: Any) -> Any:
  """[devices, ...] copies -> the first copy, placed with `shardings` (for checkpoints and evaluation)."""
  return jax.jit(lambda t: jax.tree.map(lambda x: x[0], t), out_shardings=shardings)(tree)

"""How one leaf of our parameter trees is made of HF tensors (`Tensor`: name, shape, fused QKV, [in, out] kernels vs
nn.Linear's [out, in]), the builders every layout is written with (embed, dense, norm, linear), and the conversions
both ways, bit for bit. `Found` holds a checkpoint's tensors while the encoder's and each head's layout take theirs."""

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from encoder.config import EncoderConfig
from encoder.hf.files import CONFIG_FILE, MissingTensorError, ShapeMismatchError, UnexpectedTensorError


class Tensor(NamedTuple):
  """One leaf of our tree and the HF tensor(s) it is made of."""
  path: tuple[str, ...]  # Where the leaf lives in our tree.
  shape: tuple[int, ...]  # Its shape there.
  hf_names: tuple[str, ...]  # HF tensors it is built from (three for the fused QKV).
  hf_shape: tuple[int, ...]  # Shape of each HF tensor.
  # How the two relate: copy; transpose (nn.Linear [out, in] vs kernel [in, out]); qkv_* (three HF tensors);
  # transpose_reshape (one [out, in] weight vs a kernel [*in, *out]); reshape (the same values in another shape).
  layout: str


def embed(path: tuple[str, ...], hf: str, n: int, width: int) -> list[Tensor]:
  """An nn.Embedding `hf` as our Embed table [n, width]."""
  return [Tensor(path + ("embedding",), (n, width), (hf + ".weight",), (n, width), "copy")]


def dense(path: tuple[str, ...], hf: str, n_in: int, n_out: int) -> list[Tensor]:
  """An nn.Linear `hf` ([out, in] weight, bias) as our Dense {kernel [in, out], bias}."""
  return [Tensor(path + ("kernel",), (n_in, n_out), (hf + ".weight",), (n_out, n_in), "transpose"),
          Tensor(path + ("bias",), (n_out,), (hf + ".bias",), (n_out,), "copy")]


def norm(path: tuple[str, ...], hf: str, width: int) -> list[Tensor]:
  """An nn.LayerNorm `hf` (weight, bias) as our LayerNorm {scale, bias}."""
  return [Tensor(path + ("scale",), (width,), (hf + ".weight",), (width,), "copy"),
          Tensor(path + ("bias",), (width,), (hf + ".bias",), (width,), "copy")]


def linear(path: tuple[str, ...], hf: str, in_shape: tuple[int, ...], out_shape: tuple[int, ...],
           bias: bool) -> list[Tensor]:
  """An nn.Linear [prod(out), prod(in)] (+ bias) as our kernel [*in, *out] (+ bias [*out])."""
  n_in, n_out = math.prod(in_shape), math.prod(out_shape)
  tensors = [Tensor(path + ("kernel",), in_shape + out_shape, (hf + ".weight",), (n_out, n_in), "transpose_reshape")]
  return tensors + ([Tensor(path + ("bias",), out_shape, (hf + ".bias",), (n_out,), "reshape")] if bias else [])


def to_ours(t: Tensor, arrays: list[np.ndarray]) -> np.ndarray:
  """The leaf `t` from its HF tensors."""
  if t.layout == "copy":
    return arrays[0]
  if t.layout == "transpose":
    return arrays[0].T
  if t.layout == "qkv_kernel":  # Three [out, in] -> [in, 3, heads, head_dim].
    return np.stack([w.T for w in arrays], axis=1).reshape(t.shape)
  if t.layout == "qkv_bias":
    return np.stack(arrays).reshape(t.shape)
  if t.layout == "reshape":
    return arrays[0].reshape(t.shape)
  return arrays[0].T.reshape(t.shape)  # transpose_reshape, e.g. [hidden, heads * head_dim] -> [heads, head_dim, H].


def to_hf(t: Tensor, leaf: np.ndarray) -> list[np.ndarray]:
  """The HF tensors of the leaf `t` (contiguous, as safetensors writes them)."""
  if t.layout == "copy":
    arrays = [leaf]
  elif t.layout == "transpose":
    arrays = [leaf.T]
  elif t.layout == "qkv_kernel":
    arrays = [leaf[:, j].reshape(t.hf_shape[1], -1).T for j in range(3)]
  elif t.layout == "qkv_bias":
    arrays = [leaf[j].reshape(-1) for j in range(3)]
  elif t.layout == "reshape":
    arrays = [leaf.reshape(t.hf_shape)]
  else:  # transpose_reshape
    arrays = [leaf.reshape(t.hf_shape[::-1]).T]
  return [np.ascontiguousarray(a) for a in arrays]


def get(tree: Mapping, path: tuple[str, ...], what: str) -> np.ndarray:
  """The leaf at `path` of `tree` (`what`: "params" or "heads", for the message)."""
  node = tree
  for i, key in enumerate(path):
    if not isinstance(node, Mapping) or key not in node:
      raise MissingTensorError(f"{what} has no entry {'/'.join(path[:i + 1])!r}; it must be the tree of "
                               "Encoder(cfg).init(...)['params'] (or the heads tree) for the same config")
    node = node[key]
  return np.asarray(node)


def put(tree: dict, path: tuple[str, ...], leaf: np.ndarray) -> None:
  """Set the leaf at `path`, creating the dicts above it."""
  for key in path[:-1]:
    tree = tree.setdefault(key, {})
  tree[path[-1]] = leaf


def state(tensors: list[Tensor], tree: Mapping, what: str, prefix: str = "") -> dict[str, np.ndarray]:
  """{prefix + HF name: array} of `tree`'s leaves `tensors`; a leaf of the wrong shape is refused."""
  out = {}
  for t in tensors:
    leaf = get(tree, t.path, what)
    if leaf.shape != t.shape:
      raise ShapeMismatchError(f"{what}/{'/'.join(t.path)} has shape {leaf.shape}, expected {t.shape} for the config")
    out.update({prefix + n: a for n, a in zip(t.hf_names, to_hf(t, leaf))})
  return out


def linear_to_hf(name: str, dense_tree: Mapping) -> dict[str, np.ndarray]:
  """A linen Dense tree {kernel [in, out], bias [out]} as the tensors of torch's nn.Linear `name` ([out, in] weight):
  how a task head's output layer (e.g. BertForSequenceClassification's `classifier`) is written."""
  return {f"{name}.weight": np.ascontiguousarray(np.asarray(dense_tree["kernel"]).T),
          f"{name}.bias": np.asarray(dense_tree["bias"])}


@dataclasses.dataclass
class Found:
  """A checkpoint's tensors not yet placed in a tree: the encoder's layout takes its own, each head's layout (an
  objective's, objectives.hf_heads) takes its own from what is left, and `refuse_rest` refuses the rest."""
  tensors: dict[str, np.ndarray]  # {canonical HF name: array}.
  origin: dict[str, str]  # {canonical HF name: "'original name' in file"}, for messages.
  source: str  # The weights file (or index) messages name.
  cfg: EncoderConfig  # The checkpoint's config (the dtype of what is taken, the fields messages cite).
  layout: str  # "bert", "electra" or "modernbert": whose names the tensors have (`encoder.hf.config.LAYOUTS`).
  taken: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # What `take` popped, as it was read.

  def holds(self, tensors: list[Tensor]) -> bool:
    """Whether any of `tensors` is here (the checkpoint has that head)."""
    return any(name in self.tensors for t in tensors for name in t.hf_names)

  def pop(self, name: str) -> np.ndarray | None:
    """Take one HF tensor as it is (None when absent)."""
    return self.tensors.pop(name, None)

  def default(self, name: str, array: np.ndarray) -> None:
    """Stand `array` in for `name` when the checkpoint lacks it (a bias its config switched off)."""
    if name not in self.tensors:
      self.tensors[name], self.origin[name] = array, f"{name!r} (absent: zeros)"

  def take(self, tensors: list[Tensor]) -> dict:
    """Pop `tensors` into our layout (nested dicts of numpy arrays in cfg.param_dtype)."""
    cfg = self.cfg
    missing = [name for t in tensors for name in t.hf_names if name not in self.tensors]
    if missing:
      more = f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""
      hint = ("; a checkpoint without a pooler (e.g. BertForMaskedLM) loads with init_missing_pooler=True"
              if any(name.startswith("pooler.") for name in missing) else "")
      raise MissingTensorError(f"{self.source}: missing tensor(s) {', '.join(missing[:5])}{more} needed for the "
                               f"config in {CONFIG_FILE} (num_hidden_layers={cfg.num_layers}){hint}")
    tree: dict[str, Any] = {}
    for t in tensors:
      for name in t.hf_names:
        if self.tensors[name].shape != t.hf_shape:
          raise ShapeMismatchError(f"tensor {self.origin[name]} has shape {tuple(self.tensors[name].shape)}, "
                                   f"expected {t.hf_shape} from {CONFIG_FILE} (hidden_size={cfg.hidden_size}, "
                                   f"intermediate_size={cfg.intermediate_size}, vocab_size={cfg.vocab_size})")
      self.taken |= {name: self.tensors.pop(name) for name in t.hf_names}
      leaf = to_ours(t, [self.taken[name] for name in t.hf_names])
      put(tree, t.path, leaf.astype(cfg.param_dtype))
    return tree

  def refuse_rest(self) -> None:
    """An UnexpectedTensorError naming (the first five of) the tensors no layout took."""
    if self.tensors:
      names = sorted(self.origin[name] for name in self.tensors)
      raise UnexpectedTensorError(f"{self.source}: unexpected tensor(s) {', '.join(names[:5])}"
                                  f"{f' (and {len(names) - 5} more)' if len(names) > 5 else ''}: not part of a BERT "
                                  "(ELECTRA, ModernBERT) encoder or its pretraining heads (task heads are not "
                                  "imported)")

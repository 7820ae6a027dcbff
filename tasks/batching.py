"""Dynamic padding into a few length buckets, so jit compiles a handful of shapes and padding stays small; or
packing (`pack`): a batch's examples share rows of one length as separate attention segments, one jit shape."""

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np


class Layout(NamedTuple):
  """How a family's examples are padded into a batch (`TaskFamily.layout`): which fields hold one value per token, and
  what each field pads with. A token field is [length] per example, or [rows, length] when an example is several rows
  of tokens (multiple choice: a row per choice), and pads on its last axis to the batch's length bucket; every other
  1-D field is a word or span list (`collate`'s widths)."""
  token_fields: tuple[str, ...]
  pad_values: Mapping[str, int]  # Fields not listed pad with 0, input_ids with the tokenizer's pad id.


# What `collate` pads by when no family says (`TaskFamily.layout`'s default): one row of tokens per example, fields
# that pad with 0 (a family with labels per token or per span says so: tagging.LAYOUT, span_ner.LAYOUT).
# `attention_segments` (1 = real token) is built by `collate` unless the examples hold it.
PLAIN = Layout(("input_ids", "type_ids", "case_ids", "last_positions"), {})

# One more bucket's compilation in padded token columns of a fine-tuning step, per backend (`data.compile_cost=-1`):
# MiniLM's gradient program at 32 rows. CPU: benchmarks.compile_cost on 2-core AMD EPYC VMs (287-500 columns, ~4-15 s
# per compilation against 8-50 ms per column, idle to loaded). CUDA: the H200's SICK run of 2026-11-26
# (docs/gpu-runs/2026-11-26-h200/4-finetune-sick.log: 89 s compiling about six programs, ~15 s each with GEMM
# autotuning, against <= 0.2 ms per padded column), an estimate until benchmarks.compile_cost runs there
# (docs/performance.md).
COMPILE_COSTS = {"cpu": 500.0, "cuda": 50_000.0}


def compile_cost_on(where: str) -> float:
  """`data.compile_cost` -1 on platform `where` (encoder.config.platform()): its COMPILE_COSTS figure; a backend not
  measured yet (TPU, ROCm) takes the largest one, an accelerator's, as compiling for one costs many steps there."""
  return COMPILE_COSTS.get(where, max(COMPILE_COSTS.values()))


def bucket_length(length: int, buckets: Sequence[int]) -> int:
  """The smallest bucket holding `length` (the largest bucket if none does: callers truncate first)."""
  for bucket in sorted(buckets):
    if length <= bucket:
      return bucket
  return max(buckets)


def collate(examples: Sequence[Mapping[str, np.ndarray]], buckets: Sequence[int], pad_id: int = 0,
            batch_size: int | None = None, widths: Mapping[str, Callable[[int], int]] | None = None,
            layout: Layout = PLAIN) -> dict[str, np.ndarray]:
  """Stack variable-length examples into [batch, bucket] arrays (scalars into [batch]).

  Token fields (`layout`) are padded on their last axis to the bucket of the longest `input_ids` ([batch, rows,
  bucket] when an example is several rows); other 1-D fields (word or span lists) to `widths[field](bucket)` (the
  task's most items at that bucket, so each bucket is one jit shape) or, for fields not in `widths`, a power-of-two
  width. Adds `attention_segments` (1 real, 0 pad; unless the examples hold it), `positions` and `example_mask`; pads
  the batch to `batch_size` rows with empty examples so every step has one shape.
  """
  widths = widths or {}
  rows = batch_size or len(examples)
  length = bucket_length(max(lengths_of(examples)), buckets)
  batch: dict[str, np.ndarray] = {}
  for key in examples[0]:
    values = [np.asarray(e[key]) for e in examples]
    fill = pad_id if key == "input_ids" else layout.pad_values.get(key, 0)
    if values[0].ndim == 0:
      out = np.zeros((rows,), values[0].dtype)
      out[:len(values)] = values
    elif key in layout.token_fields:  # Rows of several-row examples pad to the batch's most (rows of `fill`).
      lead = tuple(np.max([v.shape[:-1] for v in values], axis=0).tolist())
      out = np.full((rows, *lead, length), fill, values[0].dtype)
      for row, value in enumerate(values):
        at = tuple(slice(0, n) for n in value.shape[:-1]) + (slice(0, min(value.shape[-1], length)),)
        out[row][at] = value[..., :length]
    else:
      longest = max(len(v) for v in values)
      width = max(widths[key](length), longest) if key in widths else 1 << max(0, longest - 1).bit_length()
      out = np.full((rows, width) + values[0].shape[1:], fill, values[0].dtype)
      for row, value in enumerate(values):
        out[row, :len(value)] = value[:width]
    batch[key] = out
  shape = batch["input_ids"].shape
  if "attention_segments" not in batch:
    lengths = np.zeros(rows, np.int32)
    lengths[:len(examples)] = np.minimum(lengths_of(examples), length)
    batch["attention_segments"] = (np.arange(length)[None] < lengths[:, None]).astype(np.int32)
  batch["positions"] = np.broadcast_to(np.arange(length, dtype=np.int32), shape).copy()
  batch["example_mask"] = (np.arange(rows) < len(examples)).astype(np.float32)
  return batch


def lengths_of(examples: Sequence[Mapping[str, np.ndarray]]) -> np.ndarray:
  """Token lengths of encoded examples (what the length buckets sort by): an example of several rows, its longest
  row's (each is padded to its longest row)."""
  return np.asarray([np.shape(e["input_ids"])[-1] for e in examples])


def length_bucketed_batches(lengths: Sequence[int] | np.ndarray, batch_size: int, *, seed: int, epoch: int,
                            shuffle: bool = True, pool: int = 50) -> list[list[int]]:
  """Example indices grouped into batches of similar length: a pure function of (lengths, seed, epoch).

  Shuffle, sort by length inside pools of `pool` batches (so batches stay random but padding small), cut into
  batches, then shuffle the batch order. Without `shuffle` (evaluation): sorted by length, order kept stable.
  """
  lengths = np.asarray(lengths)
  if not shuffle:
    order = np.argsort(lengths, kind="stable")
    return [order[i:i + batch_size].tolist() for i in range(0, len(order), batch_size)]
  rng = np.random.default_rng([seed, epoch])
  order = rng.permutation(len(lengths))
  chunk = batch_size * pool
  batches = []
  for start in range(0, len(order), chunk):
    part = order[start:start + chunk]
    part = part[np.argsort(lengths[part], kind="stable")]
    batches += [part[i:i + batch_size].tolist() for i in range(0, len(part), batch_size)]
  return [batches[i] for i in rng.permutation(len(batches))]


def prune_buckets(batch_lengths: Sequence[int], buckets: Sequence[int], compile_cost: float) -> tuple[int, ...]:
  """The subset of `buckets` (the largest always kept) that minimises padded length summed over the batches plus
  `compile_cost` per bucket kept: a bucket that few batches use costs a compilation worth more than the padding it
  saves. `compile_cost` is one jit compilation's time over a step's time per padded token column (0: keep all)."""
  buckets = sorted(buckets)
  if compile_cost <= 0:
    return tuple(buckets)
  counts = np.bincount([buckets.index(bucket_length(n, buckets)) for n in batch_lengths], minlength=len(buckets))
  # best[j]: (cost, kept) covering every batch up to bucket j with bucket j kept (batches padded up to a kept one).
  best: list[tuple[float, tuple[int, ...]]] = []
  for j, bucket in enumerate(buckets):
    options: list[tuple[float, tuple[int, ...]]] = [(compile_cost + bucket * counts[:j + 1].sum(), (bucket,))]
    for i in range(j):
      cost, kept = best[i]
      options.append((cost + compile_cost + bucket * counts[i + 1:j + 1].sum(), kept + (bucket,)))
    best.append(min(options, key=lambda option: (option[0], len(option[1]))))
  return best[-1][1]


def pack_rows(lengths: Sequence[int], capacity: int) -> list[list[int]]:
  """Item indices grouped into rows of at most `capacity` tokens, best fit decreasing (each item, longest first,
  goes to the open row it fills most tightly); capacity 0: one item per row."""
  if capacity <= 0:
    return [[i] for i in range(len(lengths))]
  rows: list[list[int]] = []
  by_space: list[list[int]] = [[] for _ in range(capacity + 1)]  # Open rows by their free space.
  for item in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
    size = lengths[item]
    space = next((s for s in range(size, capacity + 1) if by_space[s]), None)
    if space is None:
      row, space = len(rows), capacity
      rows.append([])
    else:
      row = by_space[space].pop()
    rows[row].append(item)
    if space > size:
      by_space[space - size].append(row)
  return rows


class PackShape(NamedTuple):
  """A shape of packed batches: rows of the examples' token length, and at most `segments` examples a row."""
  rows: int
  segments: int


def pack_shapes(batches: Sequence[Sequence[int] | np.ndarray], length: int, compile_cost: float, batch_size: int
                ) -> tuple[PackShape, ...]:
  """One or two PackShapes (fewest rows first) that hold every batch (its examples' token lengths) packed into rows
  of `length`: the rows the fullest batch needs, and below it the row count that minimises the rows computed over
  the batches plus `compile_cost` per shape (`prune_buckets`' unit: padded token columns of `batch_size` rows), so
  the few batches that need more rows than most do not set every step's shape."""
  layouts = [pack_rows(list(lengths), length) for lengths in batches]
  needs = np.asarray([len(rows) for rows in layouts])
  segments = max(len(row) for rows in layouts for row in rows)
  most = int(needs.max())
  columns = lambda rows: rows * length / batch_size  # A row's tokens in token columns of a bucketed batch.
  cost = lambda r: columns(np.where(needs <= r, r, most).sum()) + compile_cost * (1 if r == most else 2)
  best = min(range(int(needs.min()), most + 1), key=lambda r: (cost(r), -r))
  return tuple(PackShape(rows, segments) for rows in sorted({best, most}))


def pack(examples: Sequence[Mapping[str, np.ndarray]], length: int, shapes: Sequence[PackShape], pad_id: int = 0,
         batch_size: int | None = None, widths: Mapping[str, Callable[[int], int]] | None = None,
         layout: Layout = PLAIN) -> dict[str, np.ndarray]:
  """The examples as `collate` pads them to `length` (what the heads read, per example), plus the encoder's input packed
  (best fit decreasing) into the rows of the first of `shapes` that holds them: packed_input_ids, packed_type_ids,
  packed_positions (restarting at 0 in each example), packed_segments (1..k in a row, 0 pad) [rows, length], packed_cls
  [rows, segments] (each row's example starts, 0-padded: the positions sentence heads read) and example_row,
  example_start [batch] (where each example's tokens begin). `launch.model.EncoderWithHeads` runs the encoder on the
  rows and hands every head its examples' states, as an unpacked batch would give them."""
  batch = collate(examples, (length,), pad_id, batch_size, widths, layout)
  rows = batch_size or len(examples)
  placed = pack_rows([len(e["input_ids"]) for e in examples], length)
  shape = next((s for s in shapes if len(placed) <= s.rows and max(map(len, placed)) <= s.segments), None)
  if shape is None:
    raise ValueError(f"{len(examples)} examples need {len(placed)} rows of {length} with up to "
                     f"{max(map(len, placed))} examples each; the packed shapes hold {list(shapes)}")
  ids = np.full((shape.rows, length), pad_id, np.int32)
  types, positions, segments = (np.zeros((shape.rows, length), np.int32) for _ in range(3))
  cls = np.zeros((shape.rows, shape.segments), np.int32)
  example_row, example_start = np.zeros(rows, np.int32), np.zeros(rows, np.int32)
  for row, items in enumerate(placed):
    at = 0
    for slot, item in enumerate(sorted(items)):
      n = len(examples[item]["input_ids"])
      ids[row, at:at + n] = examples[item]["input_ids"]
      types[row, at:at + n] = examples[item]["type_ids"]
      positions[row, at:at + n] = np.arange(n)
      segments[row, at:at + n] = slot + 1
      cls[row, slot], example_row[item], example_start[item] = at, row, at
      at += n
  return batch | {"packed_input_ids": ids, "packed_type_ids": types, "packed_positions": positions,
                  "packed_segments": segments, "packed_cls": cls, "example_row": example_row,
                  "example_start": example_start}

"""Contextual word and subword vectors from any encoder checkpoint, at corpus scale (spec, "Contextual Embeddings").

Each sentence (a list of words, or a raw text split by the tokenizer's pre-tokenizer) becomes `[CLS] subwords
[SEP]`; a word's vector pools its subwords' vectors (first subword or mean) in the chosen layer mix. Sentences are
tokenized a chunk at a time in one native call and packed, longest first, into rows of max_length tokens (several
short sentences share a row as separate attention segments, each with its own positions: the encoder's
`attention_segments` keep them from seeing each other, so a vector is the one the sentence gets alone). Rows sorted
by length are cut into batches of `batch_size` rows padded to the next of a few `buckets` lengths, so jit compiles
one shape per bucket, and nearly every computed token is a real one. The layer mix and the pooling of each word's
subwords happen on the device (`_pool`: each word's subwords gathered and added in order), so only the word vectors
come back, not every position's states; the next batch is dispatched before the previous one is fetched (jax dispatch
is asynchronous), so the host's batching and copying overlap the device.

Sentences longer than `max_length` subwords are never truncated: they are cut into overlapping windows of
max_length - 2 subwords (`stride` apart), each encoded as its own `[CLS] window [SEP]`, and each subword takes its
vector from the window where it is most central (as far as possible from both window edges). Such a sentence's
subword vectors come back one row each and are pooled on the host (`pool_words`) once all its windows are in.
"""

import collections
import dataclasses
import functools
import itertools
from collections.abc import Iterable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from encoder import errors, hf, init_from
from encoder.config import DTYPES, EncoderConfig
from encoder.model import Encoder
from encoder.tokenizer import Encoding, Tokenizer
from tasks import batching
from tasks.batching import pack_rows  # Best fit decreasing, shared with packed fine-tuning.
from tasks.embeddings.layers import LayerSpec, parse_layers, select_from_states

TRANSFER_DTYPES = {"float32": np.float32, "float16": np.float16}  # Device-to-host wire formats.
POOLINGS = ("mean", "first", "subword")  # "subword": no pooling, one row per subword.


def plan_windows(length: int, size: int, stride: int) -> list[tuple[int, int, int, int]]:
  """(start, end, own_start, own_end) of the windows covering `length` subwords, `size` long, `stride` apart (the
  last one flush with the end); [own_start, own_end) are the subwords whose most central window it is."""
  if length <= size:
    return [(0, length, 0, length)]
  starts = np.asarray(list(range(0, length - size, stride)) + [length - size])
  position = np.arange(length)
  # Centrality of each position in each window: its distance to the nearer edge (-1 outside the window).
  centrality = np.minimum(position[None] - starts[:, None], starts[:, None] + size - 1 - position[None])
  owner = np.argmax(np.where(centrality >= 0, centrality, -1), axis=0)  # Ties: the earlier window.
  bounds = np.searchsorted(owner, np.arange(len(starts) + 1))  # owner is nondecreasing (nearest window centre).
  return [(int(s), int(s) + size, int(bounds[i]), int(bounds[i + 1])) for i, s in enumerate(starts)
          if bounds[i + 1] > bounds[i]]


def word_starts(word_ids: Sequence[int | None], num_words: int, where: str) -> np.ndarray:
  """Index of each word's first subword from a pre-tokenized encoding's word ids (specials excluded)."""
  ids = np.asarray(word_ids, np.int64)
  starts = np.flatnonzero(np.diff(ids, prepend=-1))
  if len(starts) != num_words or (num_words and (ids[starts] != np.arange(num_words)).any()):
    raise ValueError(f"{where}: the tokenizer's word ids {list(word_ids)[:20]} do not cover its {num_words} words "
                     "in order, one contiguous run of subwords each")
  return starts


def pool_words(subwords: np.ndarray, starts: np.ndarray, pooling: str) -> np.ndarray:
  """Subword vectors [n_subwords, ...] -> word vectors [n_words, ...] (first subword, or mean of its subwords);
  `starts` is each word's first subword. pooling "subword" returns the subwords themselves.

  The mean adds the k-th subword of every word that has one, k = 1, 2, ... (most words have one or two): a few
  vectorized gathers, several times faster than np.add.reduceat over [n, layers, H]. Float32 in and out.
  """
  if pooling == "subword":
    return np.array(subwords, np.float32)
  out = np.asarray(subwords[starts], np.float32)  # A copy (gather).
  if pooling == "first" or len(starts) == 0:
    return out
  counts = np.diff(np.append(starts, len(subwords)))
  for k in range(1, int(counts.max())):
    words = np.flatnonzero(counts > k)
    out[words] += subwords[starts[words] + k]
  several = np.flatnonzero(counts > 1)
  out[several] /= counts[several].reshape((-1,) + (1,) * (subwords.ndim - 1))
  return out


def _forward(cfg: EncoderConfig, params, input_ids, positions, attention_segments, *, spec: LayerSpec):
  """The selected layer mix at every position: [batch, length, ...] in float32 (computed on the device)."""
  out = Encoder(cfg).apply({"params": params}, input_ids, positions=positions, attention_segments=attention_segments)
  # flax types apply's result as output | (output, state): without `mutable` it is the EncoderOutput.
  states = [h.astype(jnp.float32) for h in out.hidden_states]  # type: ignore[union-attr]  # flax apply's union
  return select_from_states(states, spec)


def _pool(states, first, counts, *, out_dtype):
  """[batch, length, ...] float32 states -> [len(first), ...] in out_dtype: output row r is the mean of the counts[r]
  consecutive tokens from flat position first[r] (a word's subwords). The k-th token of every row is gathered and
  added for k = 0, 1, ... up to the batch's longest word, then the sum divided once: `pool_words`'s order of
  operations, deterministic on every backend (a scatter-add is not on GPUs)."""
  flat = states.reshape((-1,) + states.shape[2:])
  expand = lambda v: v.reshape((-1,) + (1,) * (flat.ndim - 1))
  take = lambda k: jnp.take(flat, first + k, axis=0, mode="clip")  # Past the end only where masked out.
  sums = jax.lax.fori_loop(1, jnp.max(counts), lambda k, acc: acc + jnp.where(expand(counts > k), take(k), 0), take(0))
  return (sums / expand(counts).astype(jnp.float32)).astype(out_dtype)


def output_rows_size(count: int, tokens: int, steps: int = 8) -> int:
  """The padded number of output rows of a batch with `count` of them and `tokens` token positions: the next of
  `steps` even fractions of the positions (each a jit shape of the small pooling program; fewer rows to copy)."""
  granule = -(-tokens // steps)
  return max(granule, -(-count // granule) * granule)


@dataclasses.dataclass
class _Piece:
  """One encoder row: a sentence, or one window of a long sentence."""
  sentence: int  # Index into the input.
  ids: list[int]  # The window's subword ids (no specials).
  start: int  # First subword of the window in the sentence.
  own: tuple[int, int]  # The sentence's subwords this window supplies.
  total: int  # The sentence's subword count (len(ids) when it fits in one window).


@dataclasses.dataclass
class _Sentence:
  """A long sentence being assembled from its windows."""
  starts: np.ndarray  # Each word's first subword.
  subwords: np.ndarray  # [n_subwords, ...]
  missing: int  # Subwords not yet filled.


def _chunks(items: Iterable, size: int) -> Iterator[list]:
  iterator = iter(items)
  while chunk := list(itertools.islice(iterator, size)):
    yield chunk


class Embedder:
  """Contextual vectors of words (or subwords) from an encoder, batched by length with fixed jit shapes."""

  def __init__(self, cfg: EncoderConfig, params, tokenizer: Tokenizer, *, max_length: int = 128,
               batch_size: int = 64, buckets: Sequence[int] = (16, 32, 64, 128), dtype: str = "float32",
               stride: int | None = None, transfer_dtype: str = "float32", chunk_size: int = 4096, pack: bool = True):
    """params: the encoder's parameter tree. max_length counts [CLS] and [SEP]; longer sentences go in windows of
    max_length - 2 subwords, `stride` apart (default half a window). dtype: compute dtype (encoder.config.DTYPES).
    transfer_dtype: how the vectors travel from the device ("float16" halves the traffic, where it is the bottleneck
    on an accelerator, at float16's rounding); they are returned as float32 either way.
    chunk_size: sentences are tokenized and sorted by length this many at a time (the same chunks give the same
    batches, hence bit-identical vectors). pack: several short sentences share a row of max_length (as separate
    attention segments, which never see each other), else one sentence per row."""
    if dtype not in DTYPES:
      raise errors.UserError(f"dtype {dtype!r} is not one of {sorted(DTYPES)}")
    if transfer_dtype not in TRANSFER_DTYPES:
      raise errors.UserError(f"transfer_dtype {transfer_dtype!r} is not one of {sorted(TRANSFER_DTYPES)}")
    if not 3 <= max_length <= cfg.max_positions:
      raise errors.UserError(f"max_length {max_length} must be between 3 and the model's {cfg.max_positions} "
                                   "positions")
    window = max_length - 2
    stride = window // 2 if stride is None else stride
    if not 1 <= stride <= window:
      raise errors.UserError(f"stride {stride} must be between 1 and the window size {window} (max_length - 2)")
    if batch_size < 1 or chunk_size < 1:
      raise errors.UserError(f"batch_size {batch_size} and chunk_size {chunk_size} must be positive")
    self.cfg = cfg.replace(dtype=DTYPES[dtype])
    self.params = jax.device_put(params)
    self.tokenizer = tokenizer
    self.max_length, self.batch_size, self.stride, self.chunk_size = max_length, batch_size, stride, chunk_size
    self.buckets = tuple(sorted({b for b in buckets if b < max_length} | {max_length}))
    self.dtype, self.transfer_dtype, self.pack = dtype, transfer_dtype, pack
    self._forward = jax.jit(functools.partial(_forward, self.cfg), static_argnames=("spec",))
    self._pool = jax.jit(_pool, static_argnames=("out_dtype",))

  @classmethod
  def from_init(cls, init: str, **options) -> "Embedder":
    """An Embedder on a checkpoint: "hf:all-MiniLM-L6-v2", "hf:/path/to/hf/dir" or "run:/path/to/workdir"."""
    cfg, tokenizer, params = init_from.load(init, hf.without_heads)  # A pretraining checkpoint's heads are unused.
    return cls(cfg, params["encoder"], tokenizer, **options)

  @property
  def num_layers(self) -> int:
    return self.cfg.num_layers

  @property
  def hidden_size(self) -> int:
    return self.cfg.hidden_size

  def feature_shape(self, layers: "str | LayerSpec") -> tuple[int, ...]:
    """The shape of one word's vector for this layer spec: (hidden,) or (k, hidden); a layer the model lacks raises
    ValueError."""
    spec = parse_layers(layers)
    spec.indices(self.num_layers)
    width = spec.width(self.num_layers)
    return (self.hidden_size,) if width is None else (width, self.hidden_size)

  def encode_words(self, sentences: Sequence[Sequence[str]], *, layers: "str | LayerSpec" = "all",
                   pooling: str = "mean") -> list[np.ndarray]:
    """One array [n_words, ...] per sentence, in input order (`...` = feature_shape(layers))."""
    out = dict(self.iter_encode_words(sentences, layers=layers, pooling=pooling))  # index -> vectors.
    return [out[index] for index in range(len(sentences))]

  def encode_texts(self, texts: Sequence[str], *, layers: "str | LayerSpec" = "all",
                   pooling: str = "mean") -> list[tuple[list[str], np.ndarray]]:
    """(words, vectors [n_words, ...]) per raw text, words split as the tokenizer's pre-tokenizer splits them."""
    words = self.split_words(texts)
    return list(zip(words, self.encode_words(words, layers=layers, pooling=pooling)))

  def split_words(self, texts: Sequence[str]) -> list[list[str]]:
    """Each text's words as the tokenizer sees them (WordPiece: its normalizer + pre-tokenizer, the words taken
    from the original text; SentencePiece: whitespace-separated)."""
    hf = getattr(self.tokenizer.backend, "hf", None)
    if hf is None:
      return [text.split() for text in texts]
    out = []
    for text, encoding in zip(texts, hf.encode_batch(list(texts), add_special_tokens=False)):
      spans: dict[int, list[int]] = {}
      for word, (begin, end) in zip(encoding.word_ids, encoding.offsets):
        span = spans.setdefault(word, [begin, end])
        span[0], span[1] = min(span[0], begin), max(span[1], end)
      out.append([text[begin:end] for begin, end in spans.values()])
    return out

  def iter_encode_words(self, sentences: Iterable[Sequence[str]], *, layers: "str | LayerSpec" = "all",
                        pooling: str = "mean") -> Iterator[tuple[int, np.ndarray]]:
    """Yields (sentence index, vectors [n_words, ...]) in processing (length-sorted) order, a chunk of sentences at
    a time, so a corpus larger than memory streams through. pooling: "mean", "first" or "subword" (no pooling:
    one row per subword, specials excluded)."""
    spec = parse_layers(layers)
    if pooling not in POOLINGS:
      raise errors.UserError(f"pooling {pooling!r} is not one of {POOLINGS}")
    # (device result, each piece's first row, rows) dispatched, not yet fetched.
    pending: collections.deque[tuple[jax.Array, list[int], list[list[_Piece]]]] = collections.deque()
    starts: dict[int, np.ndarray] = {}  # Each queued sentence's word starts.
    assembling: dict[int, _Sentence] = {}
    empty = np.zeros((0,) + self.feature_shape(spec), np.float32)  # Also checks the layers exist.
    for chunk in _chunks(enumerate(sentences), self.chunk_size):
      pieces = []
      for index, encoding, num_words in self._tokenize(chunk):
        if not encoding.input_ids:
          yield index, empty.copy()
          continue
        starts[index] = word_starts(encoding.word_ids, num_words, f"sentence {index}")
        total = len(encoding.input_ids)
        pieces += [_Piece(index, encoding.input_ids[start:end], start, (own_start, own_end), total)
                   for start, end, own_start, own_end in plan_windows(total, self.max_length - 2, self.stride)]
      rows = pack_rows([len(piece.ids) + 2 for piece in pieces], self.max_length if self.pack else 0)
      rows.sort(key=lambda row: sum(len(pieces[i].ids) + 2 for i in row))  # Similar lengths batch together.
      for first in range(0, len(rows), self.batch_size):
        batch = [[pieces[i] for i in row] for row in rows[first:first + self.batch_size]]
        pending.append((*self._dispatch(batch, spec, starts, pooling), batch))
        if len(pending) > 1:  # The next batch is queued on the device before this one is fetched.
          yield from self._collect(*pending.popleft(), starts, assembling, pooling)
    while pending:
      yield from self._collect(*pending.popleft(), starts, assembling, pooling)

  def _tokenize(self, chunk: list) -> Iterator[tuple[int, Encoding, int]]:
    """(index, encoding without specials, number of words) of each (index, words) of a chunk, in one native call."""
    word_lists = []
    for index, words in chunk:
      if isinstance(words, str):
        raise errors.UserError(f"sentence {index}: expected a list of words, got a str; use encode_texts for raw text")
      word_lists.append(list(words))
    encodings = self.tokenizer.encode_batch(word_lists, add_special_tokens=False)
    for (index, _), words, encoding in zip(chunk, word_lists, encodings):
      yield index, encoding, len(words)

  def _dispatch(self, rows: list[list[_Piece]], spec: LayerSpec, starts: dict,
                pooling: str) -> tuple[jax.Array, list[int]]:
    """Queues one [batch_size, bucket] batch on the device (each row `[CLS] piece [SEP]`, several packed as separate
    attention segments with their own positions) and the pooling of its output rows: each word of a sentence that
    fits in one window (with pooling "subword": each subword), each subword a window of a longer sentence supplies.
    Returns the (not yet computed) output rows and where each piece's rows begin."""
    length = batching.bucket_length(max(sum(len(p.ids) + 2 for p in row) for row in rows), self.buckets)
    input_ids = np.full((self.batch_size, length), self.tokenizer.pad_id, np.int32)
    positions, segments = np.zeros_like(input_ids), np.zeros_like(input_ids)
    # Each output row's first flat token and token count; each piece's first row.
    first_tokens: list[int] = []
    counts: list[int] = []
    firsts: list[int] = []
    for r, row in enumerate(rows):
      offset = 0
      for segment, piece in enumerate(row, 1):
        size = len(piece.ids) + 2
        input_ids[r, offset:offset + size] = [self.tokenizer.cls_id, *piece.ids, self.tokenizer.sep_id]
        positions[r, offset:offset + size] = np.arange(size)
        segments[r, offset:offset + size] = segment
        firsts.append(len(first_tokens))
        token = r * length + offset + 1  # The piece's first subword, after [CLS].
        if piece.total == len(piece.ids) and pooling != "subword":  # Its words, pooled here.
          word_starts_ = starts[piece.sentence]
          first_tokens.extend(token + word_starts_)
          counts.extend(np.diff(np.append(word_starts_, piece.total)) if pooling == "mean" else [1] * len(word_starts_))
        else:  # Its own subwords, one row each.
          begin, end = piece.own
          first_tokens.extend(token + np.arange(begin, end) - piece.start)
          counts.extend([1] * (end - begin))
        offset += size
    rows_size = output_rows_size(len(counts), input_ids.size)
    first, sizes = np.zeros(rows_size, np.int32), np.ones(rows_size, np.int32)  # Padding rows: token 0 alone.
    first[:len(counts)], sizes[:len(counts)] = first_tokens, counts
    states = self._forward(self.params, input_ids, positions, segments, spec=spec)
    return self._pool(states, first, sizes, out_dtype=TRANSFER_DTYPES[self.transfer_dtype]), firsts

  def _collect(self, result, firsts: list[int], rows: list[list[_Piece]], starts: dict, assembling: dict,
               pooling: str):
    """Fetches a batch's output rows and yields the sentences it completes (views of one float32 array)."""
    host = np.array(result, np.float32)  # [output rows, ...]: waits for the device.
    pieces = [piece for row in rows for piece in row]
    for piece, first in zip(pieces, firsts):
      begin, end = piece.own
      if piece.total == len(piece.ids):
        words = len(starts.pop(piece.sentence)) if pooling != "subword" else piece.total
        yield piece.sentence, host[first:first + words]
        continue
      vectors = host[first:first + end - begin]
      sentence = assembling.get(piece.sentence)
      if sentence is None:
        sentence = assembling[piece.sentence] = _Sentence(
            starts.pop(piece.sentence), np.empty((piece.total,) + host.shape[1:], host.dtype), piece.total)
      sentence.subwords[begin:end] = vectors
      sentence.missing -= end - begin
      if not sentence.missing:
        del assembling[piece.sentence]
        yield piece.sentence, pool_words(sentence.subwords, sentence.starts, pooling)

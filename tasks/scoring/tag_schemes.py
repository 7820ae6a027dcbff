"""Tag schemes for span labelling (spec, "BIO Tagging"): IO, IOB1, IOB2 (BIO), IOE (IOE2), BIOES.

Spans are `(type, start, end)` with `end` exclusive. Two chunkers read a tag sequence:
`conlleval` (lenient, scheme-agnostic; equal to seqeval's default `get_entities`, so an `I-X` after
`O` or after another type opens a chunk) and `strict` (only well-formed chunks of the given scheme;
equal to seqeval's `mode="strict"`). Conversions go tags -> spans -> tags and are lossless among
IOB1, IOB2, IOE and BIOES; IO cannot mark a boundary between adjacent same-type spans (lossy).
"""

from collections.abc import Iterable, Sequence

import numpy as np

from encoder import errors

Span = tuple[str, int, int]  # (entity type, start, end exclusive)

OUTSIDE = "O"
_ALIASES = {"IO": "IO", "IOB1": "IOB1", "IOB2": "IOB2", "BIO": "IOB2", "IOE": "IOE", "IOE2": "IOE",
            "BIOES": "BIOES", "IOBES": "BIOES"}
_PREFIXES = {"IO": "IO", "IOB1": "IOB", "IOB2": "IOB", "IOE": "IOE", "BIOES": "IOBES"}
_ENTITY_PREFIXES = {"IO": "I", "IOB1": "BI", "IOB2": "BI", "IOE": "IE", "BIOES": "BIES"}
SCHEMES = ("IO", "IOB1", "IOB2", "IOE", "BIOES")
SCHEME_NAMES = tuple(_ALIASES)  # Accepted spellings, aliases included.

# Strict chunking patterns (prev prefixes, current prefixes, type condition), one table per scheme, as
# seqeval.scheme defines them (IO, which seqeval lacks, is ours); "same"/"diff" compare the two types.
_A = "IOBES"  # Any prefix.
_STRICT = {
    "IO": dict(start={("O", "I", "any"), ("I", "I", "diff")},
               inside={("I", "I", "same")},
               end={("I", "O", "any"), ("I", "I", "diff")}),
    "IOB1": dict(start={("O", "I", "any"), ("I", "I", "diff"), ("B", "I", "any"), ("I", "B", "same"),
                        ("B", "B", "same")},
                 inside={("B", "I", "same"), ("I", "I", "same")},
                 end={("I", "I", "diff"), ("I", "O", "any"), ("I", "B", "any"), ("B", "O", "any"),
                      ("B", "I", "diff"), ("B", "B", "same")}),
    "IOB2": dict(start={(_A, "B", "any")},
                 inside={("B", "I", "same"), ("I", "I", "same")},
                 end={("I", "O", "any"), ("I", "I", "diff"), ("I", "B", "any"), ("B", "O", "any"),
                      ("B", "I", "diff"), ("B", "B", "any")}),
    "IOE": dict(start={("O", "I", "any"), ("O", "E", "any"), ("E", "I", "any"), ("E", "E", "any"),
                       ("I", "I", "diff"), ("I", "E", "diff")},
                inside={("I", "E", "same"), ("I", "I", "same")},
                end={("E", _A, "any")}),
    "BIOES": dict(start={(_A, "B", "any"), (_A, "S", "any")},
                  inside={("B", "I", "same"), ("B", "E", "same"), ("I", "I", "same"), ("I", "E", "same")},
                  end={("S", _A, "any"), ("E", _A, "any")}),
}


def canonical_scheme(scheme: str) -> str:
  """'BIO' -> 'IOB2', 'IOBES' -> 'BIOES', 'IOE2' -> 'IOE'; an error naming the choices otherwise."""
  name = _ALIASES.get(scheme.upper())
  if name is None:
    raise errors.UserError(f"unknown tag scheme {scheme!r}: use one of {', '.join(SCHEMES)} (or BIO, IOBES, IOE2)")
  return name


def split_tag(tag: str) -> tuple[str, str]:
  """'B-PER' -> ('B', 'PER'); 'O' -> ('O', ''). The prefix is the first character (as conlleval)."""
  if not tag:
    raise errors.UserError("empty tag: every token needs a tag such as 'O' or 'B-PER'")
  return tag[0], tag[1:].strip("-")


def tag_vocab(entity_types: Iterable[str], scheme: str) -> list[str]:
  """All tags of `scheme` for the entity types: 'O' first, then per type (in the given order) B, I, E, S."""
  prefixes = _ENTITY_PREFIXES[canonical_scheme(scheme)]
  return [OUTSIDE] + [f"{p}-{t}" for t in entity_types for p in prefixes]


def entity_types(tags: Iterable[str]) -> list[str]:
  """Sorted entity types named by a collection of tags ('O' excluded)."""
  return sorted({split_tag(t)[1] for t in tags if t != OUTSIDE})


def is_scheme_tag(tag: str, scheme: str) -> bool:
  """Whether `tag` is 'O' or PREFIX-TYPE with a prefix that `scheme` uses."""
  if tag == OUTSIDE:
    return True
  return len(tag) > 2 and tag[1] == "-" and tag[0] in _ENTITY_PREFIXES[canonical_scheme(scheme)]


def check_tags(tags: Sequence[str], scheme: str) -> None:
  """Raises ValueError naming the first tag (and position) that is not a tag of `scheme`."""
  for i, tag in enumerate(tags):
    if not is_scheme_tag(tag, scheme):
      raise errors.UserError(f"tag {tag!r} at position {i} is not a {canonical_scheme(scheme)} tag: expected 'O' or "
                             f"one of {', '.join(p + '-TYPE' for p in _ENTITY_PREFIXES[canonical_scheme(scheme)])}")


def conlleval_spans(tags: Sequence[str]) -> list[Span]:
  """Chunks of one sentence as conlleval.pl / seqeval's default `get_entities`: any tags, ill-formed ones lenient.

  Each sentence starts afresh (seqeval's flattened corpus can carry a stale chunk start into the next
  sentence when that sentence opens with typeless tags such as 'X' or '.'; that is not reproduced).
  """
  spans, prev_prefix, prev_type, begin = [], "O", "", 0
  for i, tag in enumerate(list(tags) + [OUTSIDE]):
    if not tag:
      raise errors.UserError(f"empty tag at position {i}: every token needs a tag such as 'O' or 'B-PER'")
    prefix, kind = tag[0], tag[1:].split("-", maxsplit=1)[-1] or "_"  # seqeval's type parsing, kept exactly.
    if _chunk_ends(prev_prefix, prefix, prev_type, kind):
      spans.append((prev_type, begin, i))
    if _chunk_starts(prev_prefix, prefix, prev_type, kind):
      begin = i
    prev_prefix, prev_type = prefix, kind
  return spans


def _chunk_ends(prev: str, cur: str, prev_type: str, cur_type: str) -> bool:
  return (prev in "ES" or (prev in "BI" and cur in "BSO")
          or (prev not in "O." and prev_type != cur_type))


def _chunk_starts(prev: str, cur: str, prev_type: str, cur_type: str) -> bool:
  return (cur in "BS" or (prev in "ESO" and cur in "EI")
          or (cur not in "O." and prev_type != cur_type))


def strict_spans(tags: Sequence[str], scheme: str) -> list[Span]:
  """Only the chunks that are well formed in `scheme` (seqeval's mode='strict' algorithm, kept exactly)."""
  scheme = canonical_scheme(scheme)
  patterns = _STRICT[scheme]
  tokens = []
  for i, tag in enumerate(tags):
    prefix, kind = split_tag(tag)
    if prefix not in _PREFIXES[scheme]:
      raise errors.UserError(f"tag {tag!r} at position {i} is not a {scheme} tag (allowed prefixes: "
                             f"{', '.join(_PREFIXES[scheme])})")
    tokens.append((prefix, kind or "_"))
  tokens.append(("O", "_"))

  def matches(kind: str, prev: tuple[str, str], cur: tuple[str, str]) -> bool:
    return any(prev[0] in p and cur[0] in c and (cond == "any" or (cond == "same") == (prev[1] == cur[1]))
               for p, c, cond in patterns[kind])

  spans, prev, i = [], ("O", "_"), 0
  while i < len(tokens):
    if matches("start", prev, tokens[i]):
      end, inner = i + 1, tokens[i]
      while matches("inside", inner, tokens[end]):  # The final "O" is never inside: the loop stops.
        inner, end = tokens[end], end + 1
      if matches("end", tokens[end - 1], tokens[end]):
        spans.append((tokens[i][1], i, end))
      i = end
    else:
      i += 1
    prev = tokens[i - 1]
  return spans


def spans_from_tags(tags: Sequence[str], scheme: str, mode: str = "conlleval") -> list[Span]:
  """Entity spans of a tag sequence: mode 'conlleval' (lenient) or 'strict' (well-formed chunks only)."""
  if mode == "conlleval":
    check_tags(tags, scheme)
    return conlleval_spans(tags)
  if mode == "strict":
    return strict_spans(tags, scheme)
  raise errors.UserError(f"unknown chunking mode {mode!r}: use 'conlleval' or 'strict'")


def tags_from_spans(spans: Sequence[Span], length: int, scheme: str, allow_lossy: bool = False) -> list[str]:
  """Encodes non-overlapping spans as `length` tags; IO merging adjacent same-type spans is an error unless allowed."""
  scheme = canonical_scheme(scheme)
  tags = [OUTSIDE] * length
  prev_end, prev_type = -1, None
  for kind, start, end in sorted(spans, key=lambda s: s[1]):
    if start < max(prev_end, 0) or not 0 <= start < end <= length:
      raise errors.UserError(f"span {(kind, start, end)} overlaps another or lies outside 0..{length}")
    touching = start == prev_end and kind == prev_type
    if scheme == "IO" and touching and not allow_lossy:
      raise errors.UserError(f"spans ending and starting at {start} are both {kind!r}: IO cannot separate them "
                             "(pass allow_lossy=True to merge them)")
    n = end - start
    if scheme == "IO":
      body = ["I"] * n
    elif scheme == "IOB1":
      body = ["B" if touching else "I"] + ["I"] * (n - 1)
    elif scheme == "IOB2":
      body = ["B"] + ["I"] * (n - 1)
    elif scheme == "IOE":
      body = ["I"] * (n - 1) + ["E"]
    else:
      body = ["S"] if n == 1 else ["B"] + ["I"] * (n - 2) + ["E"]
    tags[start:end] = [f"{p}-{kind}" for p in body]
    prev_end, prev_type = end, kind
  return tags


def convert(tags: Sequence[str], source: str, target: str, allow_lossy: bool = False) -> list[str]:
  """Re-tags a sequence from `source` to `target` scheme via conlleval chunking (lossless unless target is IO)."""
  return tags_from_spans(spans_from_tags(tags, source), len(tags), target, allow_lossy)


def recode(tags: Sequence[str], source: str | None, target: str | None) -> list[str]:
  """A record's tags in the trained scheme: converted from the data's `source` scheme when both are given and differ
  (e.g. IOB1 -> BIOES), else as they are."""
  if source and target and canonical_scheme(source) != canonical_scheme(target):
    return convert(tags, source, target)
  return list(tags)


def allowed_transitions(tags: Sequence[str], scheme: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Which tag bigrams a well-formed `scheme` sequence can contain, for constrained (CRF/Viterbi) decoding.

  Returns (transitions [K, K] with [i, j] = tags[i] -> tags[j] allowed, start [K], end [K]) as bool arrays.
  """
  scheme = canonical_scheme(scheme)
  check_tags(tags, scheme)
  parts = [split_tag(t) for t in tags]
  k = len(tags)
  trans = np.array([[_may_follow(parts[i], parts[j], scheme) for j in range(k)] for i in range(k)], bool)
  start = np.array([_may_follow(("O", ""), p, scheme) for p in parts], bool)
  end = np.array([_may_follow(p, ("O", ""), scheme) for p in parts], bool)
  return trans, start, end


def _may_follow(prev: tuple[str, str], cur: tuple[str, str], scheme: str) -> bool:
  """Whether tag `cur` may follow `prev` in a well-formed sequence; sentence start/end behave like 'O'."""
  (p, pt), (c, ct) = prev, cur
  continues = c in "IE" and p in "BI" and pt == ct  # Inside or end of the current entity.
  if scheme == "IO":
    return True
  if scheme == "IOB2":
    return c != "I" or (p in "BI" and pt == ct)
  if scheme == "IOB1":
    return c != "B" or (p in "BI" and pt == ct)
  if scheme == "IOE":
    return continues if p == "I" else c in "OIE"
  return continues if p in "BI" else c in "OBS"  # BIOES: an open B/I must continue; else O, B or S.

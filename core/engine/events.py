"""What one engine step tells its callers: plain records keyed by ids, no caller objects.

The engine knows a sequence's logical candidates only by the opaque, hashable ids its caller gave
them (the search layer uses ``(problem key, node id)`` pairs); it never holds a caller's object,
so nothing in the engine points back into a search tree. A step returns:

- :class:`Forked`: candidates that drew a different token than the others on their sequence
  moved to a new sequence (copy-on-write of the KV);
- :class:`Stopped`: a sequence reached the end of a step (delimiter, EOS, a length limit) and is
  paused with its KV, waiting to be resumed or freed;
- the tokens sampled per sequence, and the prefill-only sequences that completed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable

from .sequence import StopReason

CandidateId = Hashable


@dataclass(frozen=True)
class Forked:
    """``candidates`` left sequence ``parent`` for the new sequence ``child`` (they drew another token)."""

    parent: int
    child: int
    candidates: tuple[CandidateId, ...]


@dataclass(frozen=True)
class Stopped:
    """Sequence ``seq`` ended a step for ``candidates`` and is paused with its KV.

    ``num_tokens`` is the sequence's length (prompt and every generated token) at the stop.
    """

    seq: int
    candidates: tuple[CandidateId, ...]
    reason: StopReason
    num_tokens: int

"""The attention plan of one packed forward and the backend interface that runs it (see
:mod:`core.engine.backends`). Kept apart from the package's factory so that each backend imports
the plan without importing the factory that imports the backends.

Imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PrefillRow:
    """One multi-token chunk of the packed batch.

    q_start/q_len: packed rows ``[q_start, q_start + q_len)``, at positions
    ``ctx_before .. ctx_before + q_len - 1`` of their sequence.
    ctx_before: tokens of the sequence already in the KV cache before this chunk.
    table: the sequence's block ids covering positions ``0 .. ctx_before + q_len - 1``.
    """

    q_start: int
    q_len: int
    ctx_before: int
    table: list[int]


@dataclass
class AttentionPlan:
    """What attention must compute in one packed forward (host lists; built by the model runner).

    num_tokens: rows of the packed batch.
    block_size: tokens per KV block.
    decode_rows: packed row of each decode (single-token) row; decode_tables: its block ids covering
        its context; decode_lengths: its context length in tokens, the new token included.
    prefill: the multi-token chunks.
    """

    num_tokens: int
    block_size: int
    decode_rows: list[int] = field(default_factory=list)
    decode_tables: list[list[int]] = field(default_factory=list)
    decode_lengths: list[int] = field(default_factory=list)
    prefill: list[PrefillRow] = field(default_factory=list)

    @property
    def is_decode_only(self) -> bool:
        """True when every row decodes (the steps CUDA graphs replay)."""
        return not self.prefill and len(self.decode_rows) == self.num_tokens


class AttentionBackend:
    """Turns an :class:`AttentionPlan` into per-step metadata whose ``attend`` runs each layer.

    The metadata object has ``kv`` (:class:`core.engine.kv_cache.KVCache`), ``slot_mapping``
    (LongTensor ``[T]``, flat KV slot of every packed token) and
    ``attend(layer_idx, query, key, value, window, scaling) -> [T, heads, head_dim]``.
    """

    name = "base"

    def prepare(self, plan: AttentionPlan, slot_mapping):
        """The step's metadata for ``plan``; ``slot_mapping``: LongTensor ``[T]`` on the KV device."""
        raise NotImplementedError

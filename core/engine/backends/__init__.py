"""Attention backends: the engine builds one :class:`AttentionPlan` per forward and a backend runs it.

The plan says, in plain host lists, which rows of the packed batch decode (one query at the end of
its context) and which are prefill chunks (how many cached tokens precede them), with the block
tables that cover each. A backend turns the plan into its own metadata once per step
(:meth:`AttentionBackend.prepare`); the attention hook (:func:`core.engine.attention.paged_attention`)
writes every layer's new keys/values into the pages and calls that metadata's ``attend``.

One file per backend:

* ``torch`` (:mod:`.torch_backend`): SDPA over gathered blocks, decode rows grouped by shared blocks;
  the reference, and the CPU path.
* ``flashinfer`` (:mod:`.flashinfer_backend`): FlashInfer's paged decode/prefill kernels, cascade
  attention over shared prefixes, CUDA graphs for decode; CUDA only, imported only when chosen.
  :mod:`.flashinfer_reference` computes what those kernels are specified to compute, in torch, so
  the backend's whole path runs and is tested on a CPU.

This module imports no torch, so the choice (:func:`core.settings.resolve_attention_backend`) can
be checked before torch loads.
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


def create_backend(name: str, kv, model_config, *, kernels=None, **options) -> AttentionBackend:
    """The backend ``name`` (``torch`` or ``flashinfer``; resolve ``auto`` first) over ``kv``.

    ``kernels``: for ``flashinfer``, the module providing the wrappers (default: ``flashinfer``
    itself; :mod:`.flashinfer_reference` runs the same path in torch).

    Raises:
        ValueError: an unknown name.
    """
    heads = model_config.num_attention_heads
    q_per_kv = heads // kv.layout.num_kv_heads
    if name == "torch":
        from .torch_backend import TorchBackend

        return TorchBackend(kv, q_per_kv)
    if name in ("flashinfer", "flashinfer-reference"):
        from .flashinfer_backend import FlashInferBackend

        if kernels is None and name == "flashinfer-reference":
            from . import flashinfer_reference as kernels
        return FlashInferBackend(kv, heads, kernels=kernels, **options)
    raise ValueError(f"unknown attention backend '{name}'")

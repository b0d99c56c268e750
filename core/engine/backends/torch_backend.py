"""The torch attention backend: SDPA over gathered KV blocks (CPU and any device; the reference).

Per layer and step (the new keys/values are already in the pages, see
:func:`core.engine.attention.paged_attention`):

1. single-token (decode) rows attend by groups (:mod:`core.engine.decode_groups`): a group's rows
   share most of their KV blocks, so the union of their blocks is gathered once and attended in
   one go, a mask keeping each row to its own blocks; groups of similar shape are padded into one
   batched SDPA call; the query heads of one KV head are folded into the query-length axis, so
   GQA needs no K/V repetition;
2. each multi-token (prefill chunk) row range attends with a causal mask offset by the tokens
   already in the cache (plain causal SDPA over the chunk itself when nothing is cached).

Sliding-window layers (Mistral, Qwen2's ``sliding_attention`` layers, ...) get their window from
`transformers` as the ``sliding_window`` keyword of each call: a query at position ``p`` attends
the positions ``p - window + 1 .. p``, as `transformers`' own masks do. Decode rows and prefill
spans then read only the blocks that hold a position inside the window (their decode plan and
span masks are built once per forward and window, on the first layer that asks). A window at
least as long as every context in the batch is plain causal attention and takes that path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

from ..decode_groups import DecodePlan, build_decode_groups
from ..kv_cache import KVCache
from .plan import AttentionBackend, AttentionPlan


@dataclass
class PrefillSpan:
    """One multi-token row range of the packed batch.

    q_start/q_len: rows ``[q_start, q_start + q_len)`` of the packed batch.
    ctx_before: tokens of this sequence already in the cache before these rows.
    blocks: LongTensor ``[n_blocks]`` of the sequence's block table covering the whole context
    (None when ``ctx_before == 0``: the span then attends only to itself).
    device: where the attention runs; masks built for the span go there (a span without cached
    context has no ``blocks`` to take the device from).
    """

    q_start: int
    q_len: int
    ctx_before: int
    blocks: torch.Tensor | None
    device: torch.device | str = "cpu"
    mask: torch.Tensor | None = None  # bool [q_len, ctx_before + q_len], True = attend
    _windowed: dict = field(default_factory=dict, repr=False)

    def for_window(self, window: int, block_size: int) -> tuple[torch.Tensor | None, int, torch.Tensor]:
        """Blocks, first key position and mask of this span under a sliding window of ``window`` tokens.

        Returns:
            ``(blocks, key_start, mask)``: ``blocks`` LongTensor of the blocks holding a position
            some query of the span sees (None when nothing was cached: the keys are the span's own),
            ``key_start`` the absolute position of the first key read, ``mask`` bool
            ``[q_len, keys]`` (True = attend): query ``i`` at position ``p = ctx_before + i`` sees
            keys ``p - window < k <= p``.
        """
        if window not in self._windowed:
            c, n = self.ctx_before, self.q_len
            if self.blocks is None:
                first_block, key_start = 0, 0
                blocks = None
            else:
                first_block = max(0, c - window + 1) // block_size
                key_start = first_block * block_size
                blocks = self.blocks[first_block:]
            keys = torch.arange(key_start, c + n, device=self.device)
            queries = torch.arange(c, c + n, device=self.device).unsqueeze(1)
            mask = (keys.unsqueeze(0) <= queries) & (keys.unsqueeze(0) > queries - window)
            self._windowed[window] = (blocks, key_start, mask)
        return self._windowed[window]


@dataclass
class DecodeInputs:
    """The decode rows of a packed batch, for building their plan per attention window.

    packed_rows: packed-batch row of each decode query; tables: each row's block ids covering its
    context; lengths: each row's context length (the new token included); q_per_kv: query heads
    per KV head.
    """

    packed_rows: list[int]
    tables: list[list[int]]
    lengths: list[int]
    block_size: int
    q_per_kv: int
    device: torch.device | str


@dataclass
class AttentionMetadata:
    """Everything the attention function needs for one packed forward.

    slot_mapping: LongTensor ``[T]``, flat KV slot (block * block_size + offset) of every packed token.
    decode: the single-token (decode) rows, grouped by shared KV blocks, for full attention (None
        when there are none; built from ``decode_inputs`` on first use when not given).
    prefill: the multi-token spans.
    k_gather/v_gather: ``[decode.blocks.numel(), block_size, kv_heads, head_dim]`` views of
        buffers reused across steps (fresh large allocations every layer would page-fault and cost
        as much as the gather itself); when not given, ``gather(n_blocks)`` provides them.
    decode_inputs/gather: the decode rows and the gather-buffer source, for plans built on demand
        (per sliding window, or the full plan when ``decode`` is not given).
    """

    kv: KVCache
    slot_mapping: torch.Tensor
    num_tokens: int
    decode: DecodePlan | None = None
    prefill: list[PrefillSpan] = field(default_factory=list)
    k_gather: torch.Tensor | None = None
    v_gather: torch.Tensor | None = None
    decode_inputs: DecodeInputs | None = None
    gather: Callable[[int], tuple[torch.Tensor, torch.Tensor]] | None = None
    _windowed: dict = field(default_factory=dict, repr=False)

    @property
    def has_decode(self) -> bool:
        """True when the batch has decode (single-token) rows."""
        return self.decode is not None or self.decode_inputs is not None

    def decode_for(self, window: int | None) -> tuple[DecodePlan, torch.Tensor, torch.Tensor]:
        """The decode plan for attention over the last ``window`` positions (None: all) and its gather buffers.

        A window covering every decode row's whole context gives the full-attention plan. Rows of a
        windowed plan read only blocks that hold a position inside their window.
        """
        inputs = self.decode_inputs
        if window is not None and inputs is not None and window >= max(inputs.lengths):
            window = None
        if window is None and self.decode is not None:
            plan = self.decode
            if self.k_gather is not None:
                return plan, self.k_gather, self.v_gather
        else:
            if window not in self._windowed:
                self._windowed[window] = build_decode_groups(
                    inputs.packed_rows, inputs.tables, inputs.lengths, inputs.block_size, inputs.q_per_kv,
                    inputs.device, window=window)
            plan = self._windowed[window]
            if window is None:
                self.decode = plan
        k_gather, v_gather = self.gather(plan.blocks.numel())
        return plan, k_gather, v_gather

    def attend(self, layer_idx: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               window: int | None, scaling: float | None) -> torch.Tensor:
        """Attention of one layer for the whole packed batch (its new K/V already in the pages).

        Args:
            layer_idx: the layer (selects its K/V pages).
            query: ``[1, heads, T, head_dim]``; key/value: ``[1, kv_heads, T, head_dim]`` (RoPE applied).
            window: sliding window in tokens (None: the whole context).
            scaling: softmax scale (None: ``head_dim ** -0.5``, SDPA's default).

        Returns:
            ``[T, heads, head_dim]`` in the query's dtype.
        """
        k_pages, v_pages = self.kv.layer(layer_idx)
        _, kv_heads, T, head_dim = key.shape
        heads = query.shape[1]
        bs = self.kv.block_size

        q = query[0]  # [H, T, D]
        out = query.new_empty(T, heads, head_dim)
        gqa = heads != kv_heads

        if self.has_decode:
            plan, k_gather, v_gather = self.decode_for(window)
            out.index_copy_(0, plan.rows, _grouped_decode(q, k_pages, v_pages, plan, k_gather, v_gather, scaling))

        for span in self.prefill:
            s, n = span.q_start, span.q_len
            qs = q[:, s:s + n].unsqueeze(0)  # [1, H, n, D]
            windowed = window is not None and window < span.ctx_before + n
            if span.blocks is None and not windowed:
                ks = key[:, :, s:s + n]
                vs = value[:, :, s:s + n]
                os_ = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scaling, enable_gqa=gqa)
            elif span.blocks is None:
                _, _, mask = span.for_window(window, bs)
                os_ = F.scaled_dot_product_attention(qs, key[:, :, s:s + n], value[:, :, s:s + n], attn_mask=mask,
                                                     scale=scaling, enable_gqa=gqa)
            else:
                blocks, key_start, mask = span.for_window(window, bs) if windowed else (span.blocks, 0, span.mask)
                ctx = span.ctx_before + n - key_start
                nb = blocks.numel()
                ks = k_pages.index_select(0, blocks).view(1, nb * bs, kv_heads, head_dim)[:, :ctx].transpose(1, 2)
                vs = v_pages.index_select(0, blocks).view(1, nb * bs, kv_heads, head_dim)[:, :ctx].transpose(1, 2)
                os_ = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, scale=scaling, enable_gqa=gqa)
            out[s:s + n] = os_[0].transpose(0, 1)

        return out


def _grouped_decode(q: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor, plan: DecodePlan,
                    k_gather: torch.Tensor, v_gather: torch.Tensor, scaling: float | None) -> torch.Tensor:
    """Decode attention for the grouped rows of ``plan``: one SDPA call per bucket.

    Args:
        q: ``[heads, T, head_dim]`` queries of the whole packed batch.
        k_pages/v_pages: ``[num_blocks, block_size, kv_heads, head_dim]`` pages of this layer (the
            step's new keys/values already written).
        k_gather/v_gather: ``[plan.blocks.numel(), block_size, kv_heads, head_dim]`` buffers.

    Returns:
        ``[Bd, heads, head_dim]``, rows in ``plan.rows`` order.
    """
    heads, _, head_dim = q.shape
    kv_heads = k_pages.shape[2]
    per_kv = heads // kv_heads
    bs = k_pages.shape[1]
    torch.index_select(k_pages, 0, plan.blocks, out=k_gather)
    torch.index_select(v_pages, 0, plan.blocks, out=v_gather)
    outs = []
    for b in plan.buckets:
        n, rows = b.num_groups, b.rows_per_group
        # [n, kv_heads, rows * per_kv, D]: query head h uses KV head h // per_kv
        qb = (q.index_select(1, b.query_rows).view(kv_heads, per_kv, n, rows, head_dim)
              .permute(2, 0, 3, 1, 4).reshape(n, kv_heads, rows * per_kv, head_dim))
        width = b.blocks_per_group * bs
        span = slice(b.block_start, b.block_start + n * b.blocks_per_group)
        kb = k_gather[span].view(n, width, kv_heads, head_dim).transpose(1, 2)
        vb = v_gather[span].view(n, width, kv_heads, head_dim).transpose(1, 2)
        ob = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=b.mask, scale=scaling)
        ob = ob.view(n, kv_heads, rows, per_kv, head_dim).permute(0, 2, 1, 3, 4).reshape(n * rows, heads, head_dim)
        outs.append(ob.index_select(0, b.keep))
    return outs[0] if len(outs) == 1 else torch.cat(outs)


def offset_causal_mask(ctx_before: int, q_len: int, device) -> torch.Tensor:
    """Bool ``[q_len, ctx_before + q_len]``: query i (absolute position ctx_before + i) sees keys <= it."""
    cols = torch.arange(ctx_before + q_len, device=device)
    rows = torch.arange(q_len, device=device) + ctx_before
    return cols.unsqueeze(0) <= rows.unsqueeze(1)


class TorchBackend(AttentionBackend):
    """Builds :class:`AttentionMetadata` from a plan; owns the decode gather buffers.

    Args:
        kv: the engine's KV pages.
        q_per_kv: query heads per KV head.
    """

    name = "torch"

    def __init__(self, kv: KVCache, q_per_kv: int):
        self.kv = kv
        self.device = kv.data.device
        self.block_size = kv.block_size
        self.q_per_kv = q_per_kv
        self._gather_k = torch.empty(0, dtype=kv.data.dtype, device=self.device)
        self._gather_v = torch.empty(0, dtype=kv.data.dtype, device=self.device)

    def _gather_buffers(self, n_blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Views of persistent buffers for ``n_blocks`` gathered pages (grown by half when too small)."""
        layout = self.kv.layout
        page = self.block_size * layout.num_kv_heads * layout.head_dim
        if self._gather_k.numel() < n_blocks * page:
            size = int(n_blocks * 1.5) * page
            self._gather_k = torch.empty(size, dtype=self.kv.data.dtype, device=self.device)
            self._gather_v = torch.empty(size, dtype=self.kv.data.dtype, device=self.device)
        shape = (n_blocks, self.block_size, layout.num_kv_heads, layout.head_dim)
        return self._gather_k[: n_blocks * page].view(shape), self._gather_v[: n_blocks * page].view(shape)

    def prepare(self, plan: AttentionPlan, slot_mapping: torch.Tensor) -> AttentionMetadata:
        """The step's :class:`AttentionMetadata`: prefill spans with their offset causal masks; decode
        plans are built on first use, once per attention window the model's layers ask for."""
        dev = self.device
        spans: list[PrefillSpan] = []
        for row in plan.prefill:
            if row.ctx_before == 0:
                spans.append(PrefillSpan(row.q_start, row.q_len, 0, None, dev))
            else:
                spans.append(PrefillSpan(row.q_start, row.q_len, row.ctx_before,
                                         torch.tensor(row.table, dtype=torch.long, device=dev), dev,
                                         offset_causal_mask(row.ctx_before, row.q_len, dev)))
        meta = AttentionMetadata(kv=self.kv, slot_mapping=slot_mapping, num_tokens=plan.num_tokens, prefill=spans)
        if plan.decode_rows:
            meta.decode_inputs = DecodeInputs(plan.decode_rows, plan.decode_tables, plan.decode_lengths,
                                              plan.block_size, self.q_per_kv, dev)
            meta.gather = self._gather_buffers
        return meta

"""Paged attention for packed batches: the torch backend (CPU and any device; the reference).

The function :func:`paged_attention` is registered with `transformers`' ``AttentionInterface`` under
the name :data:`ATTN_IMPL`, and models are loaded (or switched) to that implementation. No mask
function is registered under that name, so `transformers` builds no T x T mask and passes
``attention_mask=None``; the engine passes its own :class:`AttentionMetadata` as the keyword
argument ``specscale_meta``, which `transformers` forwards unchanged to every attention call.

Per layer and step:

1. the new keys/values (RoPE already applied) are written into the KV pages at ``slot_mapping``;
2. single-token (decode) rows attend by groups (:mod:`core.engine.decode_groups`): a group's rows
   share most of their KV blocks, so the union of their blocks is gathered once and attended in
   one go, a mask keeping each row to its own blocks; groups of similar shape are padded into one
   batched SDPA call; the query heads of one KV head are folded into the query-length axis, so
   GQA needs no K/V repetition;
3. each multi-token (prefill chunk) row range attends with a causal mask offset by the tokens
   already in the cache (plain causal SDPA over the chunk itself when nothing is cached).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

from .decode_groups import DecodePlan
from .kv_cache import KVCache

ATTN_IMPL = "specscale_paged"
META_KWARG = "specscale_meta"


@dataclass
class PrefillSpan:
    """One multi-token row range of the packed batch.

    q_start/q_len: rows ``[q_start, q_start + q_len)`` of the packed batch.
    ctx_before: tokens of this sequence already in the cache before these rows.
    blocks: LongTensor ``[n_blocks]`` of the sequence's block table covering the whole context
    (None when ``ctx_before == 0``: the span then attends only to itself).
    """

    q_start: int
    q_len: int
    ctx_before: int
    blocks: torch.Tensor | None
    mask: torch.Tensor | None = None  # bool [q_len, ctx_before + q_len], True = attend


@dataclass
class AttentionMetadata:
    """Everything the attention function needs for one packed forward.

    slot_mapping: LongTensor ``[T]``, flat KV slot (block * block_size + offset) of every packed token.
    decode: the single-token (decode) rows, grouped by shared KV blocks (None when there are none).
    prefill: the multi-token spans.
    k_gather/v_gather: ``[decode.blocks.numel(), block_size, kv_heads, head_dim]`` views of
        buffers reused across steps (fresh large allocations every layer would page-fault and cost
        as much as the gather itself).
    """

    kv: KVCache
    slot_mapping: torch.Tensor
    num_tokens: int
    decode: DecodePlan | None = None
    prefill: list[PrefillSpan] = field(default_factory=list)
    k_gather: torch.Tensor | None = None
    v_gather: torch.Tensor | None = None


def paged_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Attention over the paged KV cache for a packed batch.

    Args:
        module: the `transformers` attention module (gives ``layer_idx``).
        query: ``[1, heads, T, head_dim]``; key/value: ``[1, kv_heads, T, head_dim]`` (RoPE applied).
        attention_mask: ignored (None: no mask function is registered for this implementation).
        scaling: softmax scale; dropout must be 0 (inference only).
        kwargs: must hold ``specscale_meta``: :class:`AttentionMetadata`. ``sliding_window`` must be
            None (models with a sliding window are refused at load time).

    Returns:
        ``([1, T, heads, head_dim], None)``.

    Raises:
        ValueError: called without engine metadata (the model was run outside the engine).
    """
    meta: AttentionMetadata | None = kwargs.get(META_KWARG)
    if meta is None:
        raise ValueError(f"attention '{ATTN_IMPL}' needs the engine's metadata (keyword '{META_KWARG}')")
    k_pages, v_pages = meta.kv.layer(module.layer_idx)
    _, kv_heads, T, head_dim = key.shape
    heads = query.shape[1]
    bs = meta.kv.block_size

    k_new = key[0].transpose(0, 1)  # [T, kv_heads, D]
    v_new = value[0].transpose(0, 1)
    k_pages.view(-1, kv_heads, head_dim).index_copy_(0, meta.slot_mapping, k_new)
    v_pages.view(-1, kv_heads, head_dim).index_copy_(0, meta.slot_mapping, v_new)

    q = query[0]  # [H, T, D]
    out = query.new_empty(T, heads, head_dim)
    gqa = heads != kv_heads

    if meta.decode is not None:
        out.index_copy_(0, meta.decode.rows, _grouped_decode(q, k_pages, v_pages, meta, scaling))

    for span in meta.prefill:
        s, n = span.q_start, span.q_len
        qs = q[:, s:s + n].unsqueeze(0)  # [1, H, n, D]
        if span.blocks is None:
            ks = key[:, :, s:s + n]
            vs = value[:, :, s:s + n]
            os_ = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scaling, enable_gqa=gqa)
        else:
            ctx = span.ctx_before + n
            nb = span.blocks.numel()
            ks = k_pages.index_select(0, span.blocks).view(1, nb * bs, kv_heads, head_dim)[:, :ctx].transpose(1, 2)
            vs = v_pages.index_select(0, span.blocks).view(1, nb * bs, kv_heads, head_dim)[:, :ctx].transpose(1, 2)
            os_ = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=span.mask, scale=scaling, enable_gqa=gqa)
        out[s:s + n] = os_[0].transpose(0, 1)

    return out.unsqueeze(0), None


def _grouped_decode(q: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor, meta: AttentionMetadata,
                    scaling: float | None) -> torch.Tensor:
    """Decode attention for the grouped rows of ``meta.decode``: one SDPA call per bucket.

    Args:
        q: ``[heads, T, head_dim]`` queries of the whole packed batch.
        k_pages/v_pages: ``[num_blocks, block_size, kv_heads, head_dim]`` pages of this layer (the
            step's new keys/values already written).

    Returns:
        ``[Bd, heads, head_dim]``, rows in ``meta.decode.rows`` order.
    """
    plan = meta.decode
    heads, _, head_dim = q.shape
    kv_heads = k_pages.shape[2]
    per_kv = heads // kv_heads
    bs = k_pages.shape[1]
    torch.index_select(k_pages, 0, plan.blocks, out=meta.k_gather)
    torch.index_select(v_pages, 0, plan.blocks, out=meta.v_gather)
    outs = []
    for b in plan.buckets:
        n, rows = b.num_groups, b.rows_per_group
        # [n, kv_heads, rows * per_kv, D]: query head h uses KV head h // per_kv
        qb = (q.index_select(1, b.query_rows).view(kv_heads, per_kv, n, rows, head_dim)
              .permute(2, 0, 3, 1, 4).reshape(n, kv_heads, rows * per_kv, head_dim))
        width = b.blocks_per_group * bs
        span = slice(b.block_start, b.block_start + n * b.blocks_per_group)
        kb = meta.k_gather[span].view(n, width, kv_heads, head_dim).transpose(1, 2)
        vb = meta.v_gather[span].view(n, width, kv_heads, head_dim).transpose(1, 2)
        ob = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=b.mask, scale=scaling)
        ob = ob.view(n, kv_heads, rows, per_kv, head_dim).permute(0, 2, 1, 3, 4).reshape(n * rows, heads, head_dim)
        outs.append(ob.index_select(0, b.keep))
    return outs[0] if len(outs) == 1 else torch.cat(outs)


def offset_causal_mask(ctx_before: int, q_len: int, device) -> torch.Tensor:
    """Bool ``[q_len, ctx_before + q_len]``: query i (absolute position ctx_before + i) sees keys <= it."""
    cols = torch.arange(ctx_before + q_len, device=device)
    rows = torch.arange(q_len, device=device) + ctx_before
    return cols.unsqueeze(0) <= rows.unsqueeze(1)


_registered = False


def register_attention() -> str:
    """Register :func:`paged_attention` with `transformers` (idempotent); returns its name."""
    global _registered
    if not _registered:
        AttentionInterface.register(ATTN_IMPL, paged_attention)
        _registered = True
    return ATTN_IMPL

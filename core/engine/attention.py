"""Paged attention for packed batches: the hook `transformers` calls, in front of every backend.

The function :func:`paged_attention` is registered with `transformers`' ``AttentionInterface`` under
the name :data:`ATTN_IMPL`, and models are loaded (or switched) to that implementation. No mask
function is registered under that name, so `transformers` builds no T x T mask and passes
``attention_mask=None``; the engine passes the metadata its attention backend prepared for the
step (:mod:`core.engine.backends`) as the keyword argument ``specscale_meta``, which
`transformers` forwards unchanged to every attention call.

Per layer and step the hook writes the new keys/values (RoPE already applied) into the KV pages at
``slot_mapping`` (one indexing op, the same for every backend, and capturable in a CUDA graph),
then the backend's metadata computes attention for every row of the packed batch:
:mod:`core.engine.backends.torch_backend` (SDPA over gathered blocks; the reference and the CPU
path) or :mod:`core.engine.backends.flashinfer_backend` (FlashInfer kernels on CUDA).

Sliding-window layers get their window from `transformers` as the ``sliding_window`` keyword of
each call (a query at position ``p`` attends ``p - window + 1 .. p``). Other changes to attention
(soft-capping, sinks) are refused at load time (:func:`core.models.loader.check_attention`) and
again here, should a model reach the engine another way.
"""

from __future__ import annotations

from transformers import AttentionInterface

# the torch backend's metadata, importable from here as before the backends were split out
from .backends.torch_backend import (  # noqa: F401
    AttentionMetadata, DecodeInputs, PrefillSpan, offset_causal_mask,
)

ATTN_IMPL = "specscale_paged"
META_KWARG = "specscale_meta"
__all__ = ["ATTN_IMPL", "META_KWARG", "paged_attention", "register_attention", "AttentionMetadata", "DecodeInputs",
           "PrefillSpan", "offset_causal_mask"]


def _refuse_unsupported(kwargs: dict) -> None:
    """Attention features the paged backends do not implement must never be silently ignored."""
    if kwargs.get("softcap") is not None:
        raise ValueError(f"attention '{ATTN_IMPL}' does not implement attention logit soft-capping")
    if kwargs.get("s_aux") is not None:
        raise ValueError(f"attention '{ATTN_IMPL}' does not implement attention sinks")


def paged_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Attention over the paged KV cache for a packed batch.

    Args:
        module: the `transformers` attention module (gives ``layer_idx``).
        query: ``[1, heads, T, head_dim]``; key/value: ``[1, kv_heads, T, head_dim]`` (RoPE applied).
        attention_mask: ignored (None: no mask function is registered for this implementation).
        scaling: softmax scale; dropout must be 0 (inference only).
        kwargs: must hold ``specscale_meta``: the step's backend metadata (``kv``, ``slot_mapping``,
            ``attend``); ``sliding_window`` (int or None) restricts every query to the last that
            many positions.

    Returns:
        ``([1, T, heads, head_dim], None)``.

    Raises:
        ValueError: called without engine metadata (the model was run outside the engine), or with
            attention logit soft-capping (``softcap``) or attention sinks (``s_aux``).
    """
    meta = kwargs.get(META_KWARG)
    if meta is None:
        raise ValueError(f"attention '{ATTN_IMPL}' needs the engine's metadata (keyword '{META_KWARG}')")
    _refuse_unsupported(kwargs)
    k_pages, v_pages = meta.kv.layer(module.layer_idx)
    _, kv_heads, _, head_dim = key.shape
    k_new = key[0].transpose(0, 1)  # [T, kv_heads, D]
    v_new = value[0].transpose(0, 1)
    k_pages.view(-1, kv_heads, head_dim).index_copy_(0, meta.slot_mapping, k_new)
    v_pages.view(-1, kv_heads, head_dim).index_copy_(0, meta.slot_mapping, v_new)
    out = meta.attend(module.layer_idx, query, key, value, kwargs.get("sliding_window"), scaling)
    return out.unsqueeze(0), None


_registered = False


def register_attention() -> str:
    """Register :func:`paged_attention` with `transformers` (idempotent); returns its name."""
    global _registered
    if not _registered:
        AttentionInterface.register(ATTN_IMPL, paged_attention)
        _registered = True
    return ATTN_IMPL

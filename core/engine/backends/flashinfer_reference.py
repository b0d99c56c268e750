"""What FlashInfer's attention wrappers are specified to compute, in plain torch (any device).

A stand-in for the ``flashinfer`` module with the same constructor, ``plan()`` and ``run()``
arguments that :mod:`.flashinfer_backend` uses, written from FlashInfer's documentation, not its
code. Given to the backend as its ``kernels``, it runs the backend's whole path (metadata, plans,
per-layer runs, cascade merges, CUDA-graph buffers) on a CPU, so the engine's exact-token tests
cover that path without a GPU; on a GPU the real kernels are checked against the torch backend by
the ``cuda`` tests. It is slow (a Python loop over requests) and only for tests and dry runs.

Rules, each from FlashInfer's docs:

* paged KV in CSR form (tutorial "KV-Cache Layout in FlashInfer", "Page Table Layout"): request
  ``i`` reads pages ``indices[indptr[i]:indptr[i + 1]]``; its KV length is
  ``page_size * (num_pages - 1) + last_page_len[i]`` with ``1 <= last_page_len[i] <= page_size``;
  NHD pages are ``[num_pages, page_size, num_kv_heads, head_dim]``;
* ragged queries (section "Ragged Tensor"): request ``i`` owns query rows
  ``qo_indptr[i]:qo_indptr[i + 1]``; a decode request has one query row;
* grouped-query attention (``plan()`` notes): ``num_qo_heads`` is a multiple of ``num_kv_heads``
  and query head ``h`` reads KV head ``h // (num_qo_heads // num_kv_heads)``;
* ``sm_scale`` defaults to ``1 / sqrt(head_dim)`` (``plan()`` parameters);
* causal masks are aligned to the bottom right: query ``j`` of a request with ``qo_len`` queries
  and ``kv_len`` keys sees keys ``0 .. kv_len - qo_len + j``;
* ``window_left`` (``plan()`` parameters): the left, inclusive window: a query at key index ``p``
  sees keys ``p - window_left .. p``; ``-1`` for no window;
* attention states and their merge (tutorial "Attention States and Recursive Attention"): a
  request's state over key set ``I`` is ``(v(I), s(I))`` with ``s(I) = log sum_{i in I} exp(s_i)``
  (``s_i`` the scaled score) and ``v(I)`` the softmax-weighted values; two states merge as
  ``v = (v(I) e^{s(I)} + v(J) e^{s(J)}) / (e^{s(I)} + e^{s(J)})``, ``s = log(e^{s(I)} + e^{s(J)})``.
  This reference reports ``s`` in natural log, as the tutorial defines it; the CUDA kernels may use
  another base internally, which is why the backend only ever merges states of one implementation;
* multi-level cascade (``MultiLevelCascadeAttentionWrapper`` and section "Multi-level Cascade
  Inference Data Layout"): every level is a batch prefill over the same queries with its own
  ``qo_indptr`` and paged KV, only the last level causal; the levels' states are merged;
* CUDA-graph mode (constructor ``use_cuda_graph`` and its buffers): ``plan()`` copies the metadata
  into the caller's fixed buffers, whose batch size cannot change, and ``run()`` reads them there.
"""

from __future__ import annotations

import math

import torch

# The backend sizes its float workspace from this (FlashInfer recommends 128 MB); the reference
# needs none, so tests allocate next to nothing.
WORKSPACE_BYTES = 16


def _host_list(t) -> list[int]:
    return [int(x) for x in (t.tolist() if torch.is_tensor(t) else t)]


def _check_paged(indptr: list[int], last_page_len: list[int], page_size: int) -> None:
    if len(indptr) != len(last_page_len) + 1 or indptr[0] != 0:
        raise ValueError(f"indptr must have batch_size + 1 entries from 0, got {len(indptr)} for "
                         f"{len(last_page_len)} requests")
    for i, n in enumerate(last_page_len):
        if indptr[i + 1] - indptr[i] < 1:
            raise ValueError(f"request {i} has no page")
        if not 1 <= n <= page_size:
            raise ValueError(f"last_page_len[{i}] = {n} is outside [1, {page_size}]")


def attend_paged(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, qo_indptr: list[int],
                 indptr: list[int], indices: list[int], last_page_len: list[int], causal: bool,
                 window_left: int = -1, sm_scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of ragged queries over paged KV, with its log-sum-exp (the rules above).

    Args:
        q: ``[qo_indptr[-1], num_qo_heads, head_dim]``.
        k_cache/v_cache: ``[num_pages, page_size, num_kv_heads, head_dim]`` (NHD).
        qo_indptr/indptr/indices/last_page_len: the request layout (int lists).
        causal: bottom-right aligned causal mask.
        window_left: left window (keys ``p - window_left .. p`` for a query at key index ``p``); -1 none.
        sm_scale: softmax scale (None: ``1 / sqrt(head_dim)``).

    Returns:
        ``(out, lse)``: ``out`` ``[nnz, num_qo_heads, head_dim]`` in ``q``'s dtype, ``lse``
        float32 ``[nnz, num_qo_heads]`` (natural log; ``-inf`` for a query that sees no key).

    Raises:
        ValueError: malformed layout, or heads that do not divide.
    """
    page_size, kv_heads, head_dim = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    heads = q.shape[1]
    if heads % kv_heads:
        raise ValueError(f"num_qo_heads {heads} is not a multiple of num_kv_heads {kv_heads}")
    _check_paged(indptr, last_page_len, page_size)
    if len(qo_indptr) != len(indptr) or qo_indptr[0] != 0 or qo_indptr[-1] != q.shape[0]:
        raise ValueError("qo_indptr must have batch_size + 1 entries from 0 to the number of query rows")
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(head_dim)
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    out = torch.zeros(q.shape, dtype=work, device=q.device)
    lse = torch.full(q.shape[:2], -math.inf, dtype=work, device=q.device)
    group = heads // kv_heads
    for i in range(len(last_page_len)):
        q0, q1 = qo_indptr[i], qo_indptr[i + 1]
        n = q1 - q0
        if n == 0:
            continue
        pages = torch.tensor(indices[indptr[i]:indptr[i + 1]], dtype=torch.long, device=q.device)
        kv_len = page_size * (pages.numel() - 1) + last_page_len[i]
        keys = k_cache.index_select(0, pages).reshape(-1, kv_heads, head_dim)[:kv_len].to(work)
        values = v_cache.index_select(0, pages).reshape(-1, kv_heads, head_dim)[:kv_len].to(work)
        keys = keys.repeat_interleave(group, dim=1)  # [kv_len, heads, D]: head h reads KV head h // group
        values = values.repeat_interleave(group, dim=1)
        scores = torch.einsum("nhd,khd->hnk", q[q0:q1].to(work), keys) * scale  # [heads, n, kv_len]
        key_pos = torch.arange(kv_len, device=q.device)
        query_pos = kv_len - n + torch.arange(n, device=q.device)  # bottom-right alignment
        visible = torch.ones(n, kv_len, dtype=torch.bool, device=q.device)
        if causal:
            visible &= key_pos[None, :] <= query_pos[:, None]
        if window_left >= 0:
            visible &= key_pos[None, :] >= query_pos[:, None] - window_left
        scores = scores.masked_fill(~visible, -math.inf)
        row_lse = torch.logsumexp(scores, dim=-1)  # [heads, n]
        weights = torch.exp(scores - row_lse[..., None]).nan_to_num(0.0)
        out[q0:q1] = torch.einsum("hnk,khd->nhd", weights, values)
        lse[q0:q1] = row_lse.transpose(0, 1)
    return out.to(q.dtype), lse.to(torch.float32)


def merge_state(v_a: torch.Tensor, s_a: torch.Tensor, v_b: torch.Tensor, s_b: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge two attention states (``v [n, heads, D]``, ``s`` float32 ``[n, heads]``) by log-sum-exp.

    Returns the state of the union of both key sets: ``(v, s)`` with ``v`` in ``v_a``'s dtype.
    """
    s_a, s_b = s_a.float(), s_b.float()
    m = torch.maximum(s_a, s_b)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # both empty: weights 0, not NaN
    w_a, w_b = torch.exp(s_a - m), torch.exp(s_b - m)
    total = w_a + w_b
    v = (v_a.float() * w_a[..., None] + v_b.float() * w_b[..., None]) / total.clamp_min(1e-30)[..., None]
    return v.to(v_a.dtype), m + torch.log(total)


def merge_state_in_place(v: torch.Tensor, s: torch.Tensor, v_other: torch.Tensor, s_other: torch.Tensor,
                         mask: torch.Tensor | None = None) -> None:
    """:func:`merge_state` written into ``(v, s)`` (rows where ``mask`` is False are left as they are)."""
    mv, ms = merge_state(v, s, v_other, s_other)
    if mask is not None:
        mv = torch.where(mask[:, None, None], mv, v)
        ms = torch.where(mask[:, None], ms, s)
    v.copy_(mv)
    s.copy_(ms)


class _PagedWrapper:
    """Shared plan/run state of the decode and prefill stand-ins."""

    def __init__(self, float_workspace_buffer, kv_layout: str = "NHD", use_cuda_graph: bool = False,
                 indptr_buf=None, indices_buf=None, last_page_len_buf=None, qo_indptr_buf=None):
        if kv_layout != "NHD":
            raise ValueError(f"this reference implements the NHD layout only, not {kv_layout}")
        self._use_cuda_graph = use_cuda_graph
        if use_cuda_graph:
            if not all(torch.is_tensor(b) for b in (indptr_buf, indices_buf, last_page_len_buf)):
                raise ValueError("CUDA-graph mode needs the indptr, indices and last_page_len buffers")
            if len(indptr_buf) != len(last_page_len_buf) + 1:
                raise ValueError("the indptr buffer must hold batch_size + 1 entries")
        self._bufs = (indptr_buf, indices_buf, last_page_len_buf, qo_indptr_buf)
        self._planned = None

    @property
    def is_cuda_graph_enabled(self) -> bool:
        return self._use_cuda_graph

    def _store(self, qo_indptr, indptr, indices, last_page_len, page_size, causal, window_left, sm_scale):
        qo, ip, ix, lp = (_host_list(a) for a in (qo_indptr, indptr, indices, last_page_len))
        _check_paged(ip, lp, page_size)
        if self._use_cuda_graph:
            indptr_buf, indices_buf, last_buf, qo_buf = self._bufs
            if len(lp) != len(last_buf):
                raise ValueError(f"the batch size is fixed at {len(last_buf)} in CUDA-graph mode, got {len(lp)}")
            if len(ix) > len(indices_buf):
                raise ValueError("indices exceed the allocated buffer")
            for buf, values in ((indptr_buf, ip), (last_buf, lp), (indices_buf[:len(ix)], ix), (qo_buf, qo)):
                if buf is not None:
                    buf.copy_(torch.tensor(values, dtype=buf.dtype, device=buf.device))
        self._planned = dict(qo=qo, indptr=ip, indices=ix, last=lp, causal=causal, window_left=window_left,
                             sm_scale=sm_scale)

    def _layout(self):
        if self._planned is None:
            raise RuntimeError("run() before plan()")
        p = self._planned
        if not self._use_cuda_graph:
            return p["qo"], p["indptr"], p["indices"], p["last"]
        # graph mode: what the fixed buffers hold now (a replay reads them, not the plan's lists)
        indptr_buf, indices_buf, last_buf, qo_buf = self._bufs
        ip = _host_list(indptr_buf)
        qo = _host_list(qo_buf) if qo_buf is not None else p["qo"]
        return qo, ip, _host_list(indices_buf[:ip[-1]]), _host_list(last_buf)

    def run(self, q: torch.Tensor, paged_kv_cache, *, return_lse: bool = False, **_ignored):
        k_cache, v_cache = paged_kv_cache
        qo, ip, ix, lp = self._layout()
        p = self._planned
        out, lse = attend_paged(q, k_cache, v_cache, qo, ip, ix, lp, p["causal"], p["window_left"], p["sm_scale"])
        return (out, lse) if return_lse else out


class BatchDecodeWithPagedKVCacheWrapper(_PagedWrapper):
    """Decode: one query per request over its paged KV (FlashInfer's wrapper of the same name)."""

    def __init__(self, float_workspace_buffer, kv_layout: str = "NHD", use_cuda_graph: bool = False,
                 use_tensor_cores: bool = False, paged_kv_indptr_buffer=None, paged_kv_indices_buffer=None,
                 paged_kv_last_page_len_buffer=None, **_ignored):
        super().__init__(float_workspace_buffer, kv_layout, use_cuda_graph, paged_kv_indptr_buffer,
                         paged_kv_indices_buffer, paged_kv_last_page_len_buffer)
        self.use_tensor_cores = use_tensor_cores

    def plan(self, indptr, indices, last_page_len, num_qo_heads: int, num_kv_heads: int, head_dim: int,
             page_size: int, *, window_left: int = -1, sm_scale: float | None = None, **_ignored) -> None:
        if num_qo_heads % num_kv_heads:
            raise ValueError(f"num_qo_heads {num_qo_heads} is not a multiple of num_kv_heads {num_kv_heads}")
        batch = len(_host_list(last_page_len))
        self._store(list(range(batch + 1)), indptr, indices, last_page_len, page_size, False, window_left, sm_scale)


class BatchPrefillWithPagedKVCacheWrapper(_PagedWrapper):
    """Prefill/append: ragged queries (``qo_indptr``) over paged KV (FlashInfer's wrapper of that name)."""

    def __init__(self, float_workspace_buffer, kv_layout: str = "NHD", use_cuda_graph: bool = False,
                 qo_indptr_buf=None, paged_kv_indptr_buf=None, paged_kv_indices_buf=None,
                 paged_kv_last_page_len_buf=None, **_ignored):
        super().__init__(float_workspace_buffer, kv_layout, use_cuda_graph, paged_kv_indptr_buf,
                         paged_kv_indices_buf, paged_kv_last_page_len_buf, qo_indptr_buf)

    def plan(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads: int,
             num_kv_heads: int, head_dim_qk: int, page_size: int, *, causal: bool = False, window_left: int = -1,
             sm_scale: float | None = None, **_ignored) -> None:
        if num_qo_heads % num_kv_heads:
            raise ValueError(f"num_qo_heads {num_qo_heads} is not a multiple of num_kv_heads {num_kv_heads}")
        self._store(qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, page_size, causal,
                    window_left, sm_scale)


class MultiLevelCascadeAttentionWrapper:
    """Cascade over ``num_levels`` levels of one paged pool, merged by log-sum-exp (FlashInfer's wrapper)."""

    def __init__(self, num_levels: int, float_workspace_buffer, kv_layout: str = "NHD", **_ignored):
        self._levels = [BatchPrefillWithPagedKVCacheWrapper(float_workspace_buffer, kv_layout)
                        for _ in range(num_levels)]

    def plan(self, qo_indptr_arr, paged_kv_indptr_arr, paged_kv_indices_arr, paged_kv_last_page_len,
             num_qo_heads: int, num_kv_heads: int, head_dim: int, page_size: int, causal: bool = False,
             sm_scale: float | None = None, window_left: int = -1, **_ignored) -> None:
        arrays = (qo_indptr_arr, paged_kv_indptr_arr, paged_kv_indices_arr, paged_kv_last_page_len)
        if any(len(a) != len(self._levels) for a in arrays):
            raise ValueError(f"every array list must have one entry per level ({len(self._levels)})")
        last = len(self._levels) - 1
        for i, (wrapper, qo, ip, ix, lp) in enumerate(zip(self._levels, *arrays)):
            wrapper.plan(qo, ip, ix, lp, num_qo_heads, num_kv_heads, head_dim, page_size,
                         causal=causal if i == last else False, sm_scale=sm_scale, window_left=window_left)

    def run(self, q: torch.Tensor, paged_kv_cache) -> torch.Tensor:
        out, lse = self._levels[-1].run(q, paged_kv_cache, return_lse=True)
        for wrapper in self._levels[:-1]:
            o, s = wrapper.run(q, paged_kv_cache, return_lse=True)
            merge_state_in_place(out, lse, o, s)
        return out

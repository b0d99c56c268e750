"""The FlashInfer attention backend: paged decode/prefill kernels and cascade over shared prefixes.

Imported only when the backend is chosen (``--attention-backend flashinfer``, or ``auto`` on CUDA
with the package installed: ``pip install 'specscale[cuda]'``); nothing else in the project
imports ``flashinfer``. The KV pages are already FlashInfer's NHD paged layout (per layer, K and V
``[num_blocks, block_size, kv_heads, head_dim]``), so the kernels read the engine's pages as they
are and copy-on-write stays one indexing op.

Per step, once (:meth:`FlashInferMetadata.planned`, on the first layer that asks for an attention
window): the metadata is built from the block tables on the host (:mod:`core.engine.flashinfer_meta`)
and each wrapper's ``plan()`` copies it to the device; every layer's ``run()`` reuses it:

* decode rows that share leading pages with others of their group (a problem's candidates: its
  prompt and common steps) run the two-level cascade (``MultiLevelCascadeAttentionWrapper``): the
  shared pages are attended once per group, each row's own pages once per row, and the two states
  are merged by log-sum-exp, the GPU form of :mod:`core.engine.decode_groups`; groups are chosen by
  the same cost rule;
* the other decode rows run ``BatchDecodeWithPagedKVCacheWrapper`` (tensor cores when a KV head
  serves 4 or more query heads, FlashInfer's advice for grouped-query attention);
* prefill chunks, with or without cached context, and the PRM's prefill-only flushes run
  ``BatchPrefillWithPagedKVCacheWrapper`` with ``qo_indptr``, causal.

Sliding-window layers plan their own wrappers (``window_left = window - 1``) without cascade.
Decode-only steps can replay CUDA graphs (:mod:`core.engine.cuda_graphs`) through
:meth:`FlashInferBackend.graph_wrapper`. Argument names and semantics: FlashInfer's documentation
of these wrappers' constructors, ``plan()`` and ``run()``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

import torch

from ..flashinfer_meta import PagedKV, decode_kv, pad_decode_kv, prefill_kv, split_decode
from ..kv_cache import KVCache
from .plan import AttentionBackend, AttentionPlan

# FlashInfer recommends a 128 MB float workspace (split-k partial results); all wrappers of a
# backend share it, since their runs follow one another on one stream.
WORKSPACE_BYTES = 128 << 20
# a KV head serving this many query heads or more decodes on tensor cores (FlashInfer: faster for
# large GQA groups)
TENSOR_CORE_GQA_GROUP = 4


@dataclass
class _Wrappers:
    decode: object
    prefill: object
    cascade: object


@dataclass
class _Part:
    """One kernel call per layer: the packed rows it covers (in its query order) and its wrapper."""

    rows: torch.Tensor  # LongTensor [n] on the device
    wrapper: object
    identity: bool = False  # covers every packed row in order: no gather or scatter needed


@dataclass
class _Planned:
    parts: list[_Part] = field(default_factory=list)


class FlashInferBackend(AttentionBackend):
    """FlashInfer wrappers over the engine's KV pages, planned once per step.

    Args:
        kv: the engine's KV pages (NHD per layer).
        num_qo_heads: query heads of the model.
        kernels: the module providing the wrappers (default ``flashinfer``;
            :mod:`.flashinfer_reference` runs the same path in torch).
        use_cascade: cascade attention for decode rows sharing leading pages.

    Raises:
        ImportError: ``flashinfer`` is not installed (and no ``kernels`` were given).
    """

    name = "flashinfer"

    def __init__(self, kv: KVCache, num_qo_heads: int, *, kernels=None, use_cascade: bool = True):
        self.fi = kernels if kernels is not None else importlib.import_module("flashinfer")
        self.kv = kv
        self.device = kv.data.device
        self.page_size = kv.block_size
        self.num_qo_heads = num_qo_heads
        self.num_kv_heads = kv.layout.num_kv_heads
        self.head_dim = kv.layout.head_dim
        self.use_cascade = use_cascade
        self.use_tensor_cores = num_qo_heads // self.num_kv_heads >= TENSOR_CORE_GQA_GROUP
        size = getattr(self.fi, "WORKSPACE_BYTES", WORKSPACE_BYTES)
        self.workspace = torch.zeros(size, dtype=torch.uint8, device=self.device)
        self._wrappers: dict[tuple, _Wrappers] = {}
        self._graph_wrappers: dict[tuple, object] = {}
        # (window, scaling) pairs the model's layers asked for: CUDA-graph replays plan them all
        # before the graph runs, since no plan() may happen inside a graph
        self.keys_seen: set[tuple] = set()

    # ------------------------------------------------------------------ host arrays
    def _host_flat(self, arrays: tuple[list[int], ...]) -> torch.Tensor:
        """One int32 host buffer holding ``arrays`` end to end (pinned on CUDA)."""
        flat = [x for a in arrays for x in a]
        pin = self.device.type == "cuda"
        return (torch.tensor(flat, dtype=torch.int32, device="cpu", pin_memory=pin) if flat
                else torch.zeros(0, dtype=torch.int32, device="cpu"))

    def host_int32(self, *arrays: list[int]) -> list[torch.Tensor]:
        """int32 host tensors of ``arrays`` (one pinned buffer on CUDA), as FlashInfer's ``plan()``
        takes them: it reads lengths on the host and copies the arrays to the device without a
        device-to-host synchronisation (device-resident indptr arrays would need one)."""
        return list(torch.split(self._host_flat(arrays), [len(a) for a in arrays]))

    def device_int32(self, *arrays: list[int]) -> list[torch.Tensor]:
        """int32 tensors of ``arrays`` on the device, moved in one non-blocking copy of one pinned
        host buffer (a copy from pageable memory would make the host wait)."""
        device = self._host_flat(arrays).to(self.device, non_blocking=True)
        return list(torch.split(device, [len(a) for a in arrays]))

    def rows_tensor(self, rows: list[int]) -> torch.Tensor:
        """Packed-row indices on the device (through pinned memory on CUDA: no host-device wait)."""
        pin = self.device.type == "cuda"
        return torch.tensor(rows, dtype=torch.long, device="cpu", pin_memory=pin).to(self.device, non_blocking=True)

    # ------------------------------------------------------------------ wrappers
    def wrappers(self, key: tuple) -> _Wrappers:
        """The eager wrappers of one (window, scaling), created on first use and planned every step."""
        if key not in self._wrappers:
            fi, ws = self.fi, self.workspace
            self._wrappers[key] = _Wrappers(
                decode=fi.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=self.use_tensor_cores),
                prefill=fi.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD"),
                cascade=fi.MultiLevelCascadeAttentionWrapper(2, ws, "NHD"),
            )
        return self._wrappers[key]

    def plan_kwargs(self, window: int | None, scaling: float | None, dtype: torch.dtype) -> dict:
        """Keyword arguments every ``plan()`` gets: window, softmax scale, data types."""
        return dict(window_left=-1 if window is None else window - 1, sm_scale=scaling, q_data_type=dtype,
                    kv_data_type=self.kv.data.dtype)

    def plan_decode(self, wrapper, kv: PagedKV, window: int | None, scaling: float | None, dtype: torch.dtype,
                    indices: torch.Tensor | None = None) -> None:
        """Plan a decode wrapper for the requests of ``kv`` (one query each; FlashInfer's
        ``BatchDecodeWithPagedKVCacheWrapper.plan``: int32 ``indptr [B + 1]``, ``indices [indptr[-1]]``,
        ``last_page_len [B]``, heads, head size, page size; window, scale and dtypes by keyword).

        ``indices``: ``kv.indices`` already on the device (CUDA-graph wrappers; None: sent from the host).
        """
        if indices is None:
            indptr, indices, last = self.host_int32(kv.indptr, kv.indices, kv.last_page_len)
        else:
            indptr, last = self.host_int32(kv.indptr, kv.last_page_len)
        wrapper.plan(indptr, indices, last, self.num_qo_heads, self.num_kv_heads, self.head_dim, self.page_size,
                     **self.plan_kwargs(window, scaling, dtype))

    def cascade_pays(self, plan: AttentionPlan) -> bool:
        """True when some group of this plan's decode rows runs the cascade (full-attention layers)."""
        if not self.use_cascade or len(plan.decode_rows) < 2:
            return False
        if self.keys_seen and all(window is not None for window, _ in self.keys_seen):
            return False  # every layer is windowed: the cascade never runs
        split = split_decode(plan.decode_tables, plan.decode_lengths, plan.block_size, None, True)
        return split.cascade is not None

    def graph_wrapper(self, batch_size: int, key: tuple, max_pages: int):
        """The CUDA-graph decode wrapper of one batch size and (window, scaling): fixed metadata buffers
        of ``batch_size`` requests and up to ``max_pages`` pages, which ``plan()`` fills and a replay
        reads (FlashInfer's ``use_cuda_graph`` mode)."""
        gkey = (batch_size, key)
        if gkey not in self._graph_wrappers:
            dev = self.device
            self._graph_wrappers[gkey] = self.fi.BatchDecodeWithPagedKVCacheWrapper(
                self.workspace, "NHD", use_cuda_graph=True, use_tensor_cores=self.use_tensor_cores,
                paged_kv_indptr_buffer=torch.zeros(batch_size + 1, dtype=torch.int32, device=dev),
                paged_kv_indices_buffer=torch.zeros(max_pages, dtype=torch.int32, device=dev),
                paged_kv_last_page_len_buffer=torch.ones(batch_size, dtype=torch.int32, device=dev))
        return self._graph_wrappers[gkey]

    def plan_graph(self, plan: AttentionPlan, batch_size: int, max_pages: int, dtype: torch.dtype) -> dict:
        """Plan every seen (window, scaling) graph wrapper for ``plan``'s decode rows padded to
        ``batch_size`` (padding rows read the KV cache's scratch page). Returns key -> wrapper.

        A CUDA-graph wrapper's ``plan()`` copies the page indices into its fixed buffer, blocking the
        host when they come from host memory (FlashInfer copies non-blocking only from the device);
        so the indices of every window go to the device first, in one non-blocking copy per step.
        ``indptr`` and ``last_page_len`` stay on the host: ``plan()`` reads them there.
        """
        keys = sorted(self.keys_seen, key=repr)
        kvs = [pad_decode_kv(decode_kv(plan.decode_tables, plan.decode_lengths, plan.block_size, window),
                             batch_size, self.kv.scratch_block) for window, _ in keys]
        indices = self.device_int32(*[kv.indices for kv in kvs])
        out = {}
        for key, kv, ix in zip(keys, kvs, indices):
            window, scaling = key
            wrapper = self.graph_wrapper(batch_size, key, max_pages)
            self.plan_decode(wrapper, kv, window, scaling, dtype, indices=ix)
            out[key] = wrapper
        return out

    def prepare(self, plan: AttentionPlan, slot_mapping: torch.Tensor) -> FlashInferMetadata:
        """The step's metadata; wrappers are planned on the first layer that asks for each window."""
        return FlashInferMetadata(self, plan, slot_mapping)


class FlashInferMetadata:
    """One step's attention through FlashInfer wrappers (eager; see :class:`GraphDecodeMetadata`)."""

    def __init__(self, backend: FlashInferBackend, plan: AttentionPlan, slot_mapping: torch.Tensor):
        self.backend = backend
        self.kv = backend.kv
        self.slot_mapping = slot_mapping
        self.plan = plan
        self._planned: dict[tuple, _Planned] = {}

    def planned(self, window: int | None, scaling: float | None, dtype: torch.dtype) -> _Planned:
        """Plan the wrappers of one (window, scaling) for this step (once) and return the calls to make.

        Raises:
            ValueError: a block table does not cover its row's context (see :mod:`core.engine.flashinfer_meta`).
        """
        key = (window, scaling)
        if key in self._planned:
            return self._planned[key]
        be, plan = self.backend, self.plan
        be.keys_seen.add(key)
        w = be.wrappers(key)
        kw = be.plan_kwargs(window, scaling, dtype)
        heads = (be.num_qo_heads, be.num_kv_heads, be.head_dim, be.page_size)
        done = _Planned()
        if plan.decode_rows:
            split = split_decode(plan.decode_tables, plan.decode_lengths, plan.block_size, window, be.use_cascade)
            if split.plain:
                be.plan_decode(w.decode, split.plain_kv, window, scaling, dtype)
                done.parts.append(self._part([plan.decode_rows[i] for i in split.plain], w.decode))
            if split.cascade is not None:
                c = split.cascade
                qo0, qo1, ip0, ip1, ix0, ix1, lp0, lp1 = be.host_int32(
                    c.qo_indptr[0], c.qo_indptr[1], c.kv[0].indptr, c.kv[1].indptr, c.kv[0].indices,
                    c.kv[1].indices, c.kv[0].last_page_len, c.kv[1].last_page_len)
                w.cascade.plan([qo0, qo1], [ip0, ip1], [ix0, ix1], [lp0, lp1], *heads, causal=True,
                               sm_scale=scaling, q_data_type=dtype, kv_data_type=be.kv.data.dtype)
                done.parts.append(self._part([plan.decode_rows[i] for i in c.rows], w.cascade))
        if plan.prefill:
            meta = prefill_kv([r.q_len for r in plan.prefill], [r.ctx_before for r in plan.prefill],
                              [r.table for r in plan.prefill], plan.block_size, window)
            qo, ip, ix, lp = be.host_int32(meta.qo_indptr, meta.kv.indptr, meta.kv.indices, meta.kv.last_page_len)
            w.prefill.plan(qo, ip, ix, lp, *heads, causal=True, **kw)
            rows = [r.q_start + j for r in plan.prefill for j in range(r.q_len)]
            done.parts.append(self._part(rows, w.prefill))
        self._planned[key] = done
        return done

    def _part(self, rows: list[int], wrapper) -> _Part:
        identity = rows == list(range(self.plan.num_tokens))
        return _Part(self.backend.rows_tensor(rows), wrapper, identity)

    def attend(self, layer_idx: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               window: int | None, scaling: float | None) -> torch.Tensor:
        """Attention of one layer for the whole packed batch (its new K/V already in the pages).

        Args:
            query: ``[1, heads, T, head_dim]``; key/value: ``[1, kv_heads, T, head_dim]`` (unused: the
                kernels read the new tokens' K/V from the pages, where the hook wrote them).
            window: sliding window in tokens (None: whole context); scaling: softmax scale.

        Returns:
            ``[T, heads, head_dim]`` in the query's dtype.
        """
        planned = self.planned(window, scaling, query.dtype)
        pages = self.kv.layer(layer_idx)
        q = query[0].transpose(0, 1)  # [T, heads, D]: FlashInfer's ragged NHD queries
        if len(planned.parts) == 1 and planned.parts[0].identity:
            return planned.parts[0].wrapper.run(q.contiguous(), pages)
        out = q.new_empty(q.shape)
        for part in planned.parts:
            out.index_copy_(0, part.rows, part.wrapper.run(q.index_select(0, part.rows), pages))
        return out


class GraphDecodeMetadata:
    """Attention of a decode-only step inside a CUDA graph: every (padded) row, in order, through the
    graph decode wrapper of its (window, scaling), planned before capture and before every replay."""

    def __init__(self, kv: KVCache, slot_mapping: torch.Tensor, wrappers: dict):
        self.kv = kv
        self.slot_mapping = slot_mapping
        self.wrappers = wrappers  # (window, scaling) -> planned graph wrapper; the caller keeps it current

    def attend(self, layer_idx: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               window: int | None, scaling: float | None) -> torch.Tensor:
        """``[B, heads, head_dim]`` for the graph's ``B`` rows.

        Raises:
            KeyError: a (window, scaling) no eager step planned (graphs are only used after one).
        """
        wrapper = self.wrappers[(window, scaling)]
        return wrapper.run(query[0].transpose(0, 1).contiguous(), self.kv.layer(layer_idx))

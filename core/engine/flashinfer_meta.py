"""FlashInfer attention metadata built from the engine's block tables: pure functions on the host.

The FlashInfer backend (:mod:`core.engine.backends.flashinfer_backend`) calls these once per step;
their plain int lists become int32 host tensors that each FlashInfer wrapper's ``plan()`` copies to
the device once per step, and every layer's ``run()`` reuses them. Nothing here touches torch
tensors, so every rule is tested on exact values (``tests/test_flashinfer_meta.py``).

The formats are FlashInfer's (docs: "KV-Cache Layout in FlashInfer", sections "Page Table Layout",
"Ragged Tensor" and "Multi-level Cascade Inference Data Layout"):

* paged KV in CSR form: request ``i`` reads pages ``indices[indptr[i]:indptr[i + 1]]``; its KV
  length is ``page_size * (num_pages - 1) + last_page_len[i]``, with
  ``1 <= last_page_len[i] <= page_size``; ``indptr`` has ``num_requests + 1`` entries, from 0;
* queries of a batch prefill are ragged: request ``i`` owns query rows
  ``qo_indptr[i]:qo_indptr[i + 1]``;
* multi-level cascade: every level has its own ``qo_indptr`` (a level-0 entry covers the queries of
  a whole group) and its own paged KV over one shared page pool; the levels' attention states are
  merged by log-sum-exp (docs: "Attention States and Recursive Attention").

Causal masking in FlashInfer's batch prefill is aligned to the bottom right: query ``j`` of a
request with ``qo_len`` queries and ``kv_len`` keys sees keys ``0 .. kv_len - qo_len + j``. A
prefill chunk's keys are therefore its cached context followed by its own tokens (written into the
pages before attention runs), and ``kv_len = ctx_before + q_len``. A sliding window of ``w``
tokens is FlashInfer's ``window_left = w - 1`` (the left bound is inclusive); pages wholly before
every query's window are left out of the metadata, which keeps each query's position relative to
the end of its keys, so the window and the causal mask still select the same keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .decode_groups import GATHER_TO_ATTEND_COST, group_decode_rows


@dataclass
class PagedKV:
    """Paged KV of a batch of requests in FlashInfer's CSR form (plain int lists).

    indptr: ``[num_requests + 1]``, page offsets into ``indices``, from 0.
    indices: ``[indptr[-1]]``, page (block) ids, request by request, in position order.
    last_page_len: ``[num_requests]``, tokens in each request's last page (1 .. page_size).
    """

    indptr: list[int] = field(default_factory=lambda: [0])
    indices: list[int] = field(default_factory=list)
    last_page_len: list[int] = field(default_factory=list)

    @property
    def num_requests(self) -> int:
        return len(self.last_page_len)

    def kv_lens(self, page_size: int) -> list[int]:
        """Each request's KV length in tokens, by FlashInfer's rule."""
        return [page_size * (self.indptr[i + 1] - self.indptr[i] - 1) + self.last_page_len[i]
                for i in range(self.num_requests)]

    def append(self, pages: list[int], kv_len: int, page_size: int) -> None:
        """Add one request reading ``kv_len`` tokens from ``pages`` (only the pages it needs).

        Raises:
            ValueError: ``kv_len < 1`` or ``pages`` too short for it.
        """
        needed = -(-kv_len // page_size)
        if kv_len < 1 or needed > len(pages):
            raise ValueError(f"{len(pages)} pages of {page_size} tokens cannot hold a KV length of {kv_len}")
        self.indices.extend(pages[:needed])
        self.indptr.append(self.indptr[-1] + needed)
        self.last_page_len.append(kv_len - (needed - 1) * page_size)


def first_visible_page(first_query_pos: int, window: int | None, page_size: int) -> int:
    """Index (in the request's block table) of the first page a sliding window lets a query see.

    A query at position ``p`` under a window of ``w`` tokens sees positions ``p - w + 1 .. p``
    (transformers' sliding-window masks; FlashInfer's ``window_left = w - 1``). The earliest query of
    a request is at ``first_query_pos``; pages wholly before its window are read by no query.
    ``window`` None: every page (0).

    Raises:
        ValueError: ``window < 1``.
    """
    if window is None:
        return 0
    if window < 1:
        raise ValueError(f"sliding window must be >= 1 token, got {window}")
    return max(0, first_query_pos - window + 1) // page_size


def decode_kv(tables: list[list[int]], lengths: list[int], page_size: int, window: int | None = None) -> PagedKV:
    """Paged KV for decode rows (one query each, at the last of its ``length`` positions).

    Args:
        tables: each row's block ids covering its context (the block of its newest token included).
        lengths: each row's context length in tokens, the new token included (its K/V is already
            written into its page when attention runs).
        page_size: tokens per block.
        window: sliding window in tokens (None: whole context); pages before it are left out.

    Raises:
        ValueError: a table does not cover its length, a length < 1, or ``window < 1``.
    """
    out = PagedKV()
    for table, length in zip(tables, lengths, strict=True):
        first = first_visible_page(length - 1, window, page_size)
        out.append(table[first:], length - first * page_size, page_size)
    return out


@dataclass
class PrefillMeta:
    """Batch-prefill metadata: ragged queries (``qo_indptr``) over paged KV, causal."""

    qo_indptr: list[int]
    kv: PagedKV


def prefill_kv(q_lens: list[int], ctx_before: list[int], tables: list[list[int]], page_size: int,
               window: int | None = None) -> PrefillMeta:
    """Metadata of prefill chunks, each reading its cached context and its own tokens.

    Chunk ``i`` has ``q_lens[i]`` query rows (packed in the order given) at positions
    ``ctx_before[i] .. ctx_before[i] + q_lens[i] - 1``; its keys are positions
    ``0 .. ctx_before[i] + q_lens[i] - 1`` (with a window, from the first page its earliest query
    sees). A chunk without cached context (``ctx_before`` 0) is a plain causal prefill.

    Raises:
        ValueError: a chunk with no query row, a negative ``ctx_before``, a table too short for its
            context, or ``window < 1``.
    """
    qo_indptr = [0]
    kv = PagedKV()
    for n, c, table in zip(q_lens, ctx_before, tables, strict=True):
        if n < 1 or c < 0:
            raise ValueError(f"a prefill chunk needs >= 1 query row and >= 0 cached tokens, got {n} and {c}")
        first = first_visible_page(c, window, page_size)
        kv.append(table[first:], c + n - first * page_size, page_size)
        qo_indptr.append(qo_indptr[-1] + n)
    return PrefillMeta(qo_indptr, kv)


@dataclass
class CascadeMeta:
    """Two-level cascade over decode rows that share leading pages.

    rows: the decode rows (indices into the caller's row list) in query order: group by group, so
        each group's queries are contiguous, as level 0's ``qo_indptr`` requires.
    groups: the groups, each a list of rows in that order.
    qo_indptr: per level, ``[num_requests + 1]``: level 0 one request per group (its rows' queries),
        level 1 one request per row.
    kv: per level, the paged KV: level 0 each group's shared pages (all full: a row's last page is
        never shared), level 1 each row's own pages after them.
    """

    rows: list[int]
    groups: list[list[int]]
    qo_indptr: list[list[int]]
    kv: list[PagedKV]


def shared_prefix_pages(tables: list[list[int]], lengths: list[int], page_size: int) -> int:
    """Leading pages every table shares, at most every row's page count less one.

    The cap keeps at least one page per row for the row's own level, so no level ever has an empty
    request (FlashInfer's ``last_page_len`` must be >= 1), and makes every shared page full.
    """
    limit = min(-(-length // page_size) for length in lengths) - 1
    n = 0
    while n < limit and all(t[n] == tables[0][n] for t in tables):
        n += 1
    return n


def cascade_kv(tables: list[list[int]], lengths: list[int], page_size: int, groups: list[list[int]]) -> CascadeMeta:
    """Two-level cascade metadata for ``groups`` of decode rows.

    Level 0 attends each group's shared pages (:func:`shared_prefix_pages`) once for all its rows'
    queries (non-causal: every shared position precedes every query); level 1 attends each row's
    own pages (causal, which for one query at the end of its keys masks nothing). Merging the two
    attention states by log-sum-exp gives each row's attention over its whole context.

    Raises:
        ValueError: a group with fewer than two rows or without a shared page, or a table that does
            not cover its length.
    """
    rows: list[int] = []
    top_qo, own_qo = [0], [0]
    top, own = PagedKV(), PagedKV()
    for members in groups:
        sub_t = [tables[r] for r in members]
        sub_l = [lengths[r] for r in members]
        shared = shared_prefix_pages(sub_t, sub_l, page_size) if len(members) > 1 else 0
        if shared == 0:
            raise ValueError(f"cascade group {members} has {len(members)} row(s) sharing no full page")
        top.append(sub_t[0][:shared], shared * page_size, page_size)
        top_qo.append(top_qo[-1] + len(members))
        for r in members:
            rows.append(r)
            own.append(tables[r][shared:], lengths[r] - shared * page_size, page_size)
            own_qo.append(own_qo[-1] + 1)
    return CascadeMeta(rows, [list(g) for g in groups], [top_qo, own_qo], [top, own])


@dataclass
class DecodeSplit:
    """Decode rows split between plain paged decode and the two-level cascade.

    plain: rows (indices into the caller's row list) attended by plain decode, in order.
    plain_kv: their paged KV.
    cascade: the cascade over the other rows, or None when no group pays.
    """

    plain: list[int]
    plain_kv: PagedKV
    cascade: CascadeMeta | None


def split_decode(tables: list[list[int]], lengths: list[int], page_size: int, window: int | None = None,
                 use_cascade: bool = True, gather_cost: float = GATHER_TO_ATTEND_COST) -> DecodeSplit:
    """Choose, per group of decode rows, cascade or plain decode, and build both metadata.

    Rows are grouped by :func:`core.engine.decode_groups.group_decode_rows`, the cost rule the torch
    backend uses (a row joins a group when the leading blocks it shares save more than the group's
    widened attention costs), so rows of one problem group together and problems sharing only a
    system prompt's few blocks stay apart. A group of two or more rows that share at least one full
    page goes to the cascade; every other row, and every row of a windowed layer (a window is
    relative to each row's own end, which the shared level does not see), to plain decode.

    Raises:
        ValueError: a table does not cover its length, or ``window < 1``.
    """
    groups: list[list[int]] = []
    plain: list[int] = []
    if use_cascade and window is None and len(tables) > 1:
        for members in group_decode_rows(tables, gather_cost):
            sub_t = [tables[r] for r in members]
            sub_l = [lengths[r] for r in members]
            if len(members) > 1 and shared_prefix_pages(sub_t, sub_l, page_size) > 0:
                groups.append(members)
            else:
                plain.extend(members)
        plain.sort()
    else:
        plain = list(range(len(tables)))
    plain_kv = decode_kv([tables[r] for r in plain], [lengths[r] for r in plain], page_size, window)
    cascade = cascade_kv(tables, lengths, page_size, groups) if groups else None
    return DecodeSplit(plain, plain_kv, cascade)


def pad_decode_kv(kv: PagedKV, batch_size: int, scratch_page: int) -> PagedKV:
    """``kv`` padded to ``batch_size`` requests for a CUDA graph captured at that batch size.

    Each padding request reads one token of ``scratch_page``, a page no sequence owns (padding rows
    write their K/V there too), so its attention is finite and harmless and its output is dropped.

    Raises:
        ValueError: ``kv`` has more requests than ``batch_size``.
    """
    pad = batch_size - kv.num_requests
    if pad < 0:
        raise ValueError(f"{kv.num_requests} decode rows do not fit a graph of batch size {batch_size}")
    end = kv.indptr[-1]
    return PagedKV(kv.indptr + [end + i + 1 for i in range(pad)], kv.indices + [scratch_page] * pad,
                   kv.last_page_len + [1] * pad)

"""Grouping of decode rows that share KV blocks, so each shared block is read once per step.

Beam-search candidates of one problem share most of their context (the prompt and the steps of
their common ancestors); the prefix cache and forks make those positions the *same* physical KV
blocks. Decode attention that gathers every row's context separately, padded to the longest row,
copies each shared block once per row and attends over padding. Grouping rows by shared blocks
(the idea behind shared-prefix attention: Hydragen, Juravsky et al. 2024; FlashInfer's cascade
inference, Ye et al. 2024) lets a group gather the *union* of its rows' blocks once and run one
attention call in which every row sees only its own blocks, through a mask. The result is exact:
one softmax per row over exactly the keys it would see alone.

:func:`group_decode_rows` decides the groups; :func:`bucket_groups` packs groups of similar shape
into one padded, batched attention call (so many small groups, e.g. unrelated requests, do not
each pay a call); :func:`build_decode_groups` turns both into the tensors
:func:`core.engine.attention.paged_attention` consumes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Costs in units of one query row attending over one KV block (~37 kFLOP for 9 heads x 64 dims x
# 16 tokens). Gathering one block copies ~24 KB of K/V: about 8 units on a CPU. One more attention
# call per layer costs a few hundred microseconds of Python and dispatch per step: about 200.
GATHER_TO_ATTEND_COST = 8
CALL_COST = 200


def _common_prefix(a: list[int], b: list[int]) -> int:
    n, limit = 0, min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


def group_decode_rows(tables: list[list[int]], gather_cost: float = GATHER_TO_ATTEND_COST) -> list[list[int]]:
    """Partition decode rows into groups that share leading KV blocks.

    Rows are sorted by block table, so rows sharing a prefix of blocks are adjacent and a row's
    common prefix with its predecessor is its longest with any earlier row. Walking that order, a
    row joins the current group when the blocks it shares save more gathering than the group's
    widened attention costs: with ``s`` rows and a union of ``U`` blocks so far, a row sharing
    ``p`` blocks and bringing ``d`` new ones joins iff ``gather_cost * p >= s * d + U - p``
    (gathering ``p`` blocks is saved; the ``s`` rows now also scan the ``d`` new blocks and the new
    row scans the group's other ``U - p``). Rows of one problem therefore group together, while
    problems that share only a system prompt's few blocks stay apart.

    Args:
        tables: per decode row, its block ids covering its context (positions ``0 .. len - 1``).
        gather_cost: gathering one block relative to one row attending over one block.

    Returns:
        Groups of row indices (into ``tables``); every row is in exactly one group; rows within a
        group are in block-table order.
    """
    order = sorted(range(len(tables)), key=tables.__getitem__)
    groups: list[list[int]] = []
    union = 0
    for pos, row in enumerate(order):
        blocks = len(tables[row])
        if groups:
            shared = _common_prefix(tables[order[pos - 1]], tables[row])
            new = blocks - shared
            if shared and gather_cost * shared >= len(groups[-1]) * new + union - shared:
                groups[-1].append(row)
                union += new
                continue
        groups.append([row])
        union = blocks
    return groups


def bucket_groups(shapes: list[tuple[int, int]], gather_cost: float = GATHER_TO_ATTEND_COST,
                  call_cost: float = CALL_COST) -> list[list[int]]:
    """Pack groups into buckets, one batched attention call each.

    A bucket pads its groups to its most rows and its widest block union, so its cost is
    ``call_cost + n * max_blocks * (gather_cost + max_rows)``. Groups are taken widest first and
    one joins the current bucket when that costs no more than a bucket of its own.

    Args:
        shapes: ``(rows, blocks)`` of each group.

    Returns:
        Buckets of group indices (into ``shapes``), every group in exactly one.
    """
    def cost(n: int, rows: int, blocks: int) -> float:
        return call_cost + n * blocks * (gather_cost + rows)

    order = sorted(range(len(shapes)), key=lambda i: (-shapes[i][1], -shapes[i][0]))
    buckets: list[list[int]] = []
    rows = blocks = 0
    for i in order:
        r, b = shapes[i]
        if buckets:
            n = len(buckets[-1])
            joined = cost(n + 1, max(rows, r), max(blocks, b))
            if joined <= cost(n, rows, blocks) + cost(1, r, b):
                buckets[-1].append(i)
                rows = max(rows, r)
                blocks = max(blocks, b)
                continue
        buckets.append([i])
        rows, blocks = r, b
    return buckets


@dataclass
class DecodeBucket:
    """One batched attention call over ``num_groups`` groups padded to a common shape.

    query_rows: LongTensor ``[num_groups * rows_per_group]``, packed-batch row of each query slot
        (a padding slot repeats a real row; its output is dropped).
    block_start/blocks_per_group: the bucket's gathered blocks are
        ``[block_start, block_start + num_groups * blocks_per_group)`` of :attr:`DecodePlan.blocks`,
        group by group (padded with a block of the group, masked out).
    mask: BoolTensor ``[num_groups, 1, rows_per_group * q_per_kv, blocks_per_group * block_size]``;
        True where a query (slot r, query head j of a KV head, at index ``r * q_per_kv + j``) may
        attend the key slot.
    keep: LongTensor ``[rows]``, the real query slots, in :attr:`DecodePlan.rows` order.
    """

    query_rows: torch.Tensor
    num_groups: int
    rows_per_group: int
    block_start: int
    blocks_per_group: int
    mask: torch.Tensor
    keep: torch.Tensor


@dataclass
class DecodePlan:
    """Decode rows regrouped for shared-block attention.

    rows: LongTensor ``[Bd]``, packed-batch row of each decode query, in output order (bucket by
        bucket, each bucket's kept slots in order).
    blocks: LongTensor ``[sum over buckets of num_groups * blocks_per_group]``: block ids to gather.
    buckets: the attention calls.
    """

    rows: torch.Tensor
    blocks: torch.Tensor
    buckets: list[DecodeBucket]


def _group_union(members: list[int], tables: list[list[int]]) -> tuple[list[int], dict[int, int]]:
    index: dict[int, int] = {}
    union: list[int] = []
    for row in members:
        for block in tables[row]:
            if block not in index:
                index[block] = len(union)
                union.append(block)
    return union, index


def build_decode_groups(packed_rows: list[int], tables: list[list[int]], lengths: list[int], block_size: int,
                        q_per_kv: int, device, call_cost: float = CALL_COST, window: int | None = None) -> DecodePlan:
    """Group decode rows (:func:`group_decode_rows`), bucket the groups (:func:`bucket_groups`) and
    build each bucket's query slots, block list and mask.

    Args:
        packed_rows: packed-batch row of each decode query.
        tables: each row's block ids covering its context (the block of its newest token included).
        lengths: each row's context length in tokens (the new token included).
        block_size: tokens per KV block.
        q_per_kv: query heads per KV head (GQA folds them into the query-length axis).
        device: where the tensors go.
        call_cost: see :func:`bucket_groups` (0: one call per group).
        window: sliding window in tokens: a row sees only its last ``window`` positions, and blocks
            wholly before them are neither gathered nor attended. None: the whole context.

    Raises:
        ValueError: a table does not cover its row's length, or ``window`` < 1.
    """
    for row, (table, length) in enumerate(zip(tables, lengths)):
        if length > len(table) * block_size or length < 1:
            raise ValueError(f"decode row {row}: {len(table)} blocks cannot hold {length} tokens")
    if window is not None and window < 1:
        raise ValueError(f"sliding window must be >= 1 token, got {window}")
    # first visible position and first block read of each row
    starts = [0 if window is None else max(0, length - window) for length in lengths]
    first = [start // block_size for start in starts]
    tables = [table[f:] for table, f in zip(tables, first)]
    groups = group_decode_rows(tables)
    unions = [_group_union(members, tables) for members in groups]
    out_rows: list[int] = []
    flat_blocks: list[int] = []
    buckets: list[DecodeBucket] = []
    for bucket in bucket_groups([(len(g), len(u)) for g, (u, _) in zip(groups, unions)], call_cost=call_cost):
        rows_per_group = max(len(groups[i]) for i in bucket)
        blocks_per_group = max(len(unions[i][0]) for i in bucket)
        width = blocks_per_group * block_size
        # built on the host (element-wise fill), moved to the device once below
        mask = torch.zeros(len(bucket) * rows_per_group, width, dtype=torch.bool, device="cpu")
        query_rows: list[int] = []
        keep: list[int] = []
        key_slots: list[int] = []
        key_rows: list[int] = []
        block_start = len(flat_blocks)
        for n, gi in enumerate(bucket):
            members = groups[gi]
            union, index = unions[gi]
            flat_blocks.extend(union + [union[0]] * (blocks_per_group - len(union)))
            for r, row in enumerate(members):
                slot = n * rows_per_group + r
                keep.append(slot)
                out_rows.append(packed_rows[row])
                # positions [start, length) of the row, in blocks first[row], first[row] + 1, ...
                length, start, base = lengths[row], starts[row], first[row] * block_size
                for t, block in enumerate(tables[row]):
                    j = index[block] * block_size
                    lo = max(0, start - base - t * block_size)
                    hi = min(block_size, length - base - t * block_size)
                    key_rows.extend([slot] * (hi - lo))
                    key_slots.extend(range(j + lo, j + hi))
            query_rows.extend(packed_rows[row] for row in members)
            # padding slots repeat the group's first row and see one real key, so no row is all -inf
            pad = rows_per_group - len(members)
            query_rows.extend([packed_rows[members[0]]] * pad)
            key_rows.extend(range(n * rows_per_group + len(members), (n + 1) * rows_per_group))
            key_slots.extend([0] * pad)
        mask[torch.tensor(key_rows, device="cpu"), torch.tensor(key_slots, device="cpu")] = True
        mask = (mask.view(len(bucket), rows_per_group, 1, width)
                .expand(len(bucket), rows_per_group, q_per_kv, width)
                .reshape(len(bucket), 1, rows_per_group * q_per_kv, width))
        buckets.append(DecodeBucket(torch.tensor(query_rows, device=device), len(bucket), rows_per_group, block_start,
                                    blocks_per_group, mask.to(device), torch.tensor(keep, device=device)))
    return DecodePlan(torch.tensor(out_rows, device=device), torch.tensor(flat_blocks, device=device), buckets)

"""Grouping of decode rows that share KV blocks, so each shared block is read once per step.

Beam-search candidates of one problem share most of their context (the prompt and the steps of
their common ancestors); the prefix cache and forks make those positions the *same* physical KV
blocks. Decode attention that gathers every row's context separately, padded to the longest row,
copies each shared block once per row and attends over padding. Grouping rows by shared blocks
(the idea behind shared-prefix attention: Hydragen, Juravsky et al. 2024; FlashInfer's cascade
inference, Ye et al. 2024) lets a group gather the *union* of its rows' blocks once and run one
attention call in which every row sees only its own blocks, through a mask. The result is exact:
one softmax per row over exactly the keys it would see alone.

:func:`group_decode_rows` decides the groups; :func:`build_decode_groups` turns them into the
tensors :func:`core.engine.attention.paged_attention` consumes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Cost of gathering one KV block relative to attending one query row over one block (~24 KB of
# K/V copied vs ~37 kFLOP for a 9-head, 64-dim, 16-token block on a CPU). It sets how much
# shared context a row must bring to be worth joining a group: see group_decode_rows.
GATHER_TO_ATTEND_COST = 8


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


@dataclass
class DecodeGroup:
    """One group's slice of the decode metadata.

    row_start/num_rows: the group's rows are ``[row_start, row_start + num_rows)`` of the
        grouped order (:attr:`DecodePlan.rows`).
    block_start/num_blocks: its gathered blocks are ``[block_start, block_start + num_blocks)``
        of :attr:`DecodePlan.blocks`.
    mask: BoolTensor ``[1, 1, num_rows * q_per_kv, num_blocks * block_size]``; True where the
        query (row r, head j of a KV head, at index ``r * q_per_kv + j``) may attend the key slot.
    """

    row_start: int
    num_rows: int
    block_start: int
    num_blocks: int
    mask: torch.Tensor


@dataclass
class DecodePlan:
    """Decode rows regrouped for shared-block attention.

    rows: LongTensor ``[Bd]``, packed-batch row of each decode query, group by group.
    blocks: LongTensor ``[sum of num_blocks]``, each group's union of block ids, group by group.
    groups: the groups, in the same order.
    """

    rows: torch.Tensor
    blocks: torch.Tensor
    groups: list[DecodeGroup]


def build_decode_groups(packed_rows: list[int], tables: list[list[int]], lengths: list[int], block_size: int,
                        q_per_kv: int, device) -> DecodePlan:
    """Group decode rows (:func:`group_decode_rows`) and build each group's block union and mask.

    Args:
        packed_rows: packed-batch row of each decode query.
        tables: each row's block ids covering its context (the block of its newest token included).
        lengths: each row's context length in tokens (the new token included).
        block_size: tokens per KV block.
        q_per_kv: query heads per KV head (GQA folds them into the query-length axis).
        device: where the tensors go.

    Raises:
        ValueError: a table does not cover its row's length.
    """
    flat_rows: list[int] = []
    flat_blocks: list[int] = []
    groups: list[DecodeGroup] = []
    for members in group_decode_rows(tables):
        index: dict[int, int] = {}
        union: list[int] = []
        key_rows: list[int] = []
        key_slots: list[int] = []
        for r, row in enumerate(members):
            table, length = tables[row], lengths[row]
            if length > len(table) * block_size or length < 1:
                raise ValueError(f"decode row {row}: {len(table)} blocks cannot hold {length} tokens")
            for t, block in enumerate(table):
                j = index.get(block)
                if j is None:
                    j = index[block] = len(union)
                    union.append(block)
                visible = min(block_size, length - t * block_size)
                key_rows.extend([r] * visible)
                key_slots.extend(range(j * block_size, j * block_size + visible))
        width = len(union) * block_size
        mask = torch.zeros(len(members), width, dtype=torch.bool)
        mask[torch.tensor(key_rows), torch.tensor(key_slots)] = True
        mask = mask[:, None, :].expand(len(members), q_per_kv, width).reshape(1, 1, len(members) * q_per_kv, width)
        groups.append(DecodeGroup(len(flat_rows), len(members), len(flat_blocks), len(union), mask.to(device)))
        flat_rows.extend(packed_rows[row] for row in members)
        flat_blocks.extend(union)
    return DecodePlan(torch.tensor(flat_rows, device=device), torch.tensor(flat_blocks, device=device), groups)

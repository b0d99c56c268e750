"""Shared-block decode attention: the grouping rule and exactness against per-row attention."""

from types import SimpleNamespace

import pytest
import torch

from core.engine.attention import AttentionMetadata, paged_attention
from core.engine.decode_groups import bucket_groups, build_decode_groups, group_decode_rows
from core.engine.kv_cache import KVCache, KVLayout

BS = 4


def test_rows_of_one_problem_group_and_problems_sharing_a_system_prompt_stay_apart():
    system = [1]  # one block of system prompt shared by both problems (prefix cache)
    a = system + [10, 11, 12, 13]  # problem A's prompt
    b = system + [20, 21, 22, 23]
    tables = [
        b + [30],          # 0: B, candidate 1
        a + [40, 41],      # 1: A, candidate 1
        a + [42],          # 2: A, candidate 2
        b + [31, 32],      # 3: B, candidate 2
        a + [40, 43],      # 4: A, shares candidate 1's first step block
        [99, 98],          # 5: shares nothing
    ]
    assert group_decode_rows(tables) == [[1, 4, 2], [0, 3], [5]]


def test_a_row_sharing_too_little_starts_its_own_group():
    prompt = [1, 2, 3, 4, 5, 6, 7, 8]
    long_tail = list(range(100, 180))
    # sharing 8 blocks saves 8 gathers but the first row would scan 80 more: 8*8 < 1*80 + 9 - 8
    assert group_decode_rows([prompt + [50], prompt + long_tail]) == [[0], [1]]
    assert group_decode_rows([prompt + [50], prompt + [60]]) == [[0, 1]]


def reference_attention(q, k_pages, v_pages, table, length, scale):
    """Plain softmax attention of one query row ``[H, D]`` over its own context (float64)."""
    kv_heads = k_pages.shape[2]
    keys = k_pages[table].reshape(-1, kv_heads, k_pages.shape[-1])[:length].double()
    values = v_pages[table].reshape(-1, kv_heads, v_pages.shape[-1])[:length].double()
    per_kv = q.shape[0] // kv_heads
    keys = keys.repeat_interleave(per_kv, dim=1)  # [L, H, D]
    values = values.repeat_interleave(per_kv, dim=1)
    weights = torch.einsum("hd,lhd->hl", q.double(), keys).mul(scale).softmax(-1)
    return torch.einsum("hl,lhd->hd", weights, values)


@pytest.mark.parametrize("call_cost", [0, 1e9], ids=["call-per-group", "one-padded-call"])
@pytest.mark.parametrize("heads,kv_heads", [(6, 2), (4, 4)])
def test_grouped_decode_equals_per_row_attention(heads, kv_heads, call_cost):
    torch.manual_seed(0)
    head_dim, num_blocks = 8, 40
    cache = KVCache(KVLayout(1, kv_heads, head_dim, torch.float32), num_blocks, BS)
    cache.data.normal_()
    prompt = [3, 4, 5]
    # rows: siblings over a shared prompt (one also shares a partly filled block), an unrelated
    # row, and a row whose context ends exactly at a block boundary
    tables = [prompt + [6, 7], prompt + [6, 8], prompt + [9], [20, 21], prompt + [6, 7, 10], [30, 31, 32]]
    lengths = [19, 18, 13, 6, 21, 12]
    packed_rows = [0, 2, 3, 5, 6, 7]  # rows 1 and 4 of the packed batch are other (prefill) tokens
    T = 8
    query = torch.randn(1, heads, T, head_dim)
    key = torch.randn(1, kv_heads, T, head_dim)
    value = torch.randn(1, kv_heads, T, head_dim)
    # each decode row's new token goes to the last slot of its context
    slots = torch.arange(T) + (num_blocks - 2) * BS  # placeholders for the non-decode rows
    for row, table, length in zip(packed_rows, tables, lengths):
        slots[row] = table[(length - 1) // BS] * BS + (length - 1) % BS
    groups = group_decode_rows(tables)
    assert groups == [[0, 4, 1, 2], [3], [5]]  # the four rows over the prompt share; two stand alone
    plan = build_decode_groups(packed_rows, tables, lengths, BS, heads // kv_heads, "cpu", call_cost=call_cost)
    assert len(plan.buckets) == (len(groups) if call_cost == 0 else 1)
    n = plan.blocks.numel()
    meta = AttentionMetadata(kv=cache, slot_mapping=slots, num_tokens=T, decode=plan,
                             k_gather=torch.empty(n, BS, kv_heads, head_dim),
                             v_gather=torch.empty(n, BS, kv_heads, head_dim))
    scale = head_dim ** -0.5
    out, _ = paged_attention(SimpleNamespace(layer_idx=0), query, key, value, None, scaling=scale,
                             specscale_meta=meta)
    k_pages, v_pages = cache.layer(0)
    for row, table, length in zip(packed_rows, tables, lengths):
        expected = reference_attention(query[0, :, row], k_pages, v_pages, table, length, scale)
        torch.testing.assert_close(out[0, row].double(), expected, atol=1e-5, rtol=1e-5)


def test_groups_of_one_shape_share_one_call_and_odd_shapes_get_their_own():
    assert bucket_groups([(1, 13)] * 64) == [list(range(64))]
    # a 12-row group over 40 blocks does not pad 30 one-row groups of 3 blocks to its shape
    shapes = [(1, 3)] * 30 + [(12, 40)]
    assert bucket_groups(shapes) == [[30], list(range(30))]
    # widest first; a group joins while padding costs less than a call of its own
    assert bucket_groups([(8, 20), (8, 30), (2, 5)], call_cost=200) == [[1, 0], [2]]


def test_a_table_too_short_for_its_length_is_refused():
    with pytest.raises(ValueError, match="2 blocks cannot hold 9 tokens"):
        build_decode_groups([0], [[1, 2]], [9], BS, 1, "cpu")

"""The FlashInfer backend's path on a CPU: attention computed from FlashInfer-format metadata by the
torch reference of the kernels (core/engine/backends/flashinfer_reference.py) equals the torch
backend on random batches, and the two-level cascade merged by log-sum-exp equals plain attention."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from core.engine.attention import paged_attention
from core.engine.backends import AttentionPlan, PrefillRow
from core.engine.backends import flashinfer_reference as ref
from core.engine.backends.flashinfer_backend import FlashInferBackend
from core.engine.backends.torch_backend import TorchBackend
from core.engine.kv_cache import KVCache, KVLayout

BS = 4
HEAD_DIM = 8
NUM_BLOCKS = 64

# decode rows: four candidates over a shared 3-page prompt (one also sharing a step page, one
# ending exactly on a page boundary), a row sharing nothing, a row of one page; prefill chunks: a
# prompt without cached context, a chunk after 5 cached tokens, the last chunk of a chunked prompt
DECODE = [([3, 4, 5, 6, 7], 19), ([3, 4, 5, 6, 8], 20), ([3, 4, 5, 9], 13), ([20, 21], 6), ([3, 4, 5, 6, 10], 18),
          ([30], 2)]
PREFILL = [(6, 0, [40, 41]), (3, 5, [42, 43]), (2, 8, [44, 45, 46])]
# packed order: 'd' a decode row, ('p', i) prefill chunk i
ORDER = ["d", ("p", 0), "d", ("p", 1), "d", "d", ("p", 2), "d", "d"]


def build_plan() -> tuple[AttentionPlan, torch.Tensor]:
    plan = AttentionPlan(num_tokens=0, block_size=BS)
    slots: list[int] = []
    decode = iter(DECODE)
    row = 0
    for item in ORDER:
        if item == "d":
            table, length = next(decode)
            plan.decode_rows.append(row)
            plan.decode_tables.append(table)
            plan.decode_lengths.append(length)
            slots.append(table[(length - 1) // BS] * BS + (length - 1) % BS)
            row += 1
        else:
            n, c, table = PREFILL[item[1]]
            plan.prefill.append(PrefillRow(row, n, c, table))
            slots.extend(table[p // BS] * BS + p % BS for p in range(c, c + n))
            row += n
    plan.num_tokens = row
    return plan, torch.tensor(slots)


def run_backend(backend_cls, heads: int, kv_heads: int, window: int | None, seed: int):
    """Attention of one layer through ``backend_cls`` on a fresh random cache; returns (out, metadata)."""
    torch.manual_seed(seed)
    cache = KVCache(KVLayout(1, kv_heads, HEAD_DIM, torch.float32), NUM_BLOCKS, BS)
    cache.data.normal_()
    plan, slots = build_plan()
    T = plan.num_tokens
    q = torch.randn(1, heads, T, HEAD_DIM)
    k = torch.randn(1, kv_heads, T, HEAD_DIM)
    v = torch.randn(1, kv_heads, T, HEAD_DIM)
    if backend_cls is TorchBackend:
        backend = TorchBackend(cache, heads // kv_heads)
    else:
        backend = FlashInferBackend(cache, heads, kernels=ref)
    meta = backend.prepare(plan, slots)
    out, _ = paged_attention(SimpleNamespace(layer_idx=0), q, k, v, None, scaling=HEAD_DIM ** -0.5,
                             sliding_window=window, specscale_meta=meta)
    return out[0], meta


@pytest.mark.parametrize("window", [None, 5, 100], ids=["full", "window-5", "window-covers-all"])
@pytest.mark.parametrize("heads,kv_heads", [(8, 2), (6, 2), (4, 4)], ids=["gqa-4", "gqa-3", "mha"])
def test_reference_kernels_on_flashinfer_metadata_equal_the_torch_backend(heads, kv_heads, window):
    expected, _ = run_backend(TorchBackend, heads, kv_heads, window, seed=heads + kv_heads)
    got, meta = run_backend(FlashInferBackend, heads, kv_heads, window, seed=heads + kv_heads)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    # the batch took every path: plain decode, the cascade (full attention only), prefill
    wrappers = meta.backend.wrappers((window, HEAD_DIM ** -0.5))
    used = {type(p.wrapper).__name__ for p in meta.planned(window, HEAD_DIM ** -0.5, torch.float32).parts}
    cascade = "MultiLevelCascadeAttentionWrapper"
    assert used == ({"BatchDecodeWithPagedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper"}
                    | ({cascade} if window is None else set()))
    assert wrappers.cascade is not None


def plain_attention(q, keys, values, scale):
    """Softmax attention of queries ``[n, H, D]`` over ``keys``/``values`` ``[L, H, D]`` (float64)."""
    w = torch.einsum("nhd,lhd->hnl", q.double(), keys.double()).mul(scale).softmax(-1)
    return torch.einsum("hnl,lhd->nhd", w, values.double())


def test_two_level_cascade_merged_by_log_sum_exp_equals_plain_attention():
    torch.manual_seed(3)
    heads, kv_heads = 8, 2
    k_cache = torch.randn(20, BS, kv_heads, HEAD_DIM)
    v_cache = torch.randn(20, BS, kv_heads, HEAD_DIM)
    # two groups: rows 0-2 share pages 1, 2; rows 3-4 share page 5; every row has its own tail
    shared = [[1, 2], [5]]
    own = [([7, 8], 5), ([9], 3), ([10], 4), ([11], 1), ([12, 13], 8)]
    members = [[0, 1, 2], [3, 4]]
    q = torch.randn(5, heads, HEAD_DIM)
    cascade = ref.MultiLevelCascadeAttentionWrapper(2, None)
    cascade.plan([[0, 3, 5], [0, 1, 2, 3, 4, 5]],
                 [[0, 2, 3], [0, 2, 3, 4, 5, 7]],
                 [[1, 2, 5], [7, 8, 9, 10, 11, 12, 13]],
                 [[BS, BS], [n - (len(p) - 1) * BS for p, n in own]],
                 heads, kv_heads, HEAD_DIM, BS, causal=True)
    out = cascade.run(q, (k_cache, v_cache))
    scale = 1 / math.sqrt(HEAD_DIM)
    for g, rows in enumerate(members):
        for r in rows:
            pages, n = own[r]
            keys = torch.cat([k_cache[shared[g]].reshape(-1, kv_heads, HEAD_DIM),
                              k_cache[pages].reshape(-1, kv_heads, HEAD_DIM)[:n]]).repeat_interleave(4, dim=1)
            values = torch.cat([v_cache[shared[g]].reshape(-1, kv_heads, HEAD_DIM),
                                v_cache[pages].reshape(-1, kv_heads, HEAD_DIM)[:n]]).repeat_interleave(4, dim=1)
            expected = plain_attention(q[r:r + 1], keys, values, scale)[0]
            torch.testing.assert_close(out[r].double(), expected, atol=1e-5, rtol=1e-5)


def test_merge_state_is_the_log_sum_exp_merge():
    torch.manual_seed(4)
    q = torch.randn(3, 2, HEAD_DIM)
    keys, values = torch.randn(10, 2, HEAD_DIM), torch.randn(10, 2, HEAD_DIM)
    scale = 0.3
    states = []
    for part in (slice(0, 4), slice(4, 10)):
        s = torch.einsum("nhd,lhd->nhl", q, keys[part]) * scale
        lse = torch.logsumexp(s, -1)
        states.append((torch.einsum("nhl,lhd->nhd", s.softmax(-1), values[part]), lse))
    (v1, s1), (v2, s2) = states
    v, s = ref.merge_state(v1, s1, v2, s2)
    # out = (e^{l1} o1 + e^{l2} o2) / (e^{l1} + e^{l2})
    w1, w2 = s1.exp()[..., None], s2.exp()[..., None]
    torch.testing.assert_close(v, (w1 * v1 + w2 * v2) / (w1 + w2), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(v.double(), plain_attention(q, keys, values, scale), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(s, torch.logsumexp(torch.einsum("nhd,lhd->nhl", q, keys) * scale, -1))
    # merging with an empty state (-inf) keeps the other
    v0, s0 = ref.merge_state(v1, s1, torch.zeros_like(v1), torch.full_like(s1, -math.inf))
    torch.testing.assert_close(v0, v1) and torch.testing.assert_close(s0, s1)


def test_reference_kernels_refuse_malformed_metadata():
    k = torch.zeros(4, BS, 1, HEAD_DIM)
    q = torch.zeros(1, 1, HEAD_DIM)
    with pytest.raises(ValueError, match=r"last_page_len\[0\] = 5 is outside \[1, 4\]"):
        ref.attend_paged(q, k, k, [0, 1], [0, 1], [0], [5], causal=False)
    with pytest.raises(ValueError, match="request 0 has no page"):
        ref.attend_paged(q, k, k, [0, 1], [0, 0], [], [1], causal=False)
    graph = ref.BatchDecodeWithPagedKVCacheWrapper(
        None, use_cuda_graph=True, paged_kv_indptr_buffer=torch.zeros(3, dtype=torch.int32),
        paged_kv_indices_buffer=torch.zeros(8, dtype=torch.int32),
        paged_kv_last_page_len_buffer=torch.zeros(2, dtype=torch.int32))
    with pytest.raises(ValueError, match="batch size is fixed at 2"):
        graph.plan([0, 1], [0], [1], 1, 1, HEAD_DIM, BS)

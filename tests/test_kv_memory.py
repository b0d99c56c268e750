"""KV pools sized by the work (issue 15, item 6): pools that grow on demand, memory that becomes
resident only where blocks are written, the auto sizing, and peak resident memory."""

from __future__ import annotations

import sys

import pytest
import torch

from core.engine.block_pool import BlockPool, OutOfBlocks, chain_block_hash
from core.engine.kv_cache import KVCache, KVLayout, lazy_zeros
from core.memory import peak_rss_bytes, physical_memory_bytes


def _cache(pool: BlockPool, blocks: list[int], tag: int) -> None:
    """Register ``blocks`` as full prefix-cached blocks, then drop their references (cached-free)."""
    for i, b in enumerate(blocks):
        tokens = (tag, i)
        pool.register_full_block(b, chain_block_hash(None, tokens), (None, tokens))
    pool.free(blocks)


def test_fixed_pool_is_unchanged():
    pool = BlockPool(4, 16)
    assert pool.num_free == 4 and not pool.growable
    assert pool.allocate(4) == [0, 1, 2, 3]
    with pytest.raises(OutOfBlocks):
        pool.allocate(1)


def test_growing_pool_adds_blocks_only_for_blocks_in_use():
    pool = BlockPool(0, 16, max_blocks=10)
    assert pool.num_blocks == 0 and pool.num_free == 10 and pool.num_used == 0
    a = pool.allocate(3)
    assert a == [0, 1, 2] and pool.num_blocks == 3 and pool.num_used == 3
    pool.free(a)  # unhashed: back to the free list, most recently freed first
    assert pool.allocate(2) == [0, 1] and pool.num_blocks == 3
    assert pool.allocate(3) == [2, 3, 4] and pool.num_blocks == 5  # the freed block before new ids
    assert pool.peak_used == 5 and pool.num_free == 5


def test_growing_pool_evicts_cached_blocks_before_growing():
    pool = BlockPool(0, 16, max_blocks=10)
    _cache(pool, pool.allocate(4), tag=1)
    assert pool.num_blocks == 4 and pool.num_used == 0 and pool.num_free == 10
    # oldest cached first (a prefix is released tail first), no growth
    assert pool.allocate(3) == [3, 2, 1]
    assert pool.num_blocks == 4 and pool.evictions == 3
    assert pool.allocate(3) == [4, 5, 0]  # two new blocks, then the one cached block left
    assert pool.num_blocks == 6 and pool.evictions == 4


def test_cache_share_keeps_prefix_cached_blocks_and_grows_instead():
    pool = BlockPool(0, 16, max_blocks=8, cache_share=0.5)
    _cache(pool, pool.allocate(4), tag=1)
    # 4 cached of 4 blocks: 2 may go (above half of the pool), the pool grows for the rest
    assert pool.allocate(3) == [4, 3, 2] and pool.num_blocks == 5 and pool.evictions == 2
    assert pool.count_cached([(chain_block_hash(None, (1, i)), (None, (1, i))) for i in (0, 1)]) == 2
    # 2 cached of 5 blocks is within the share: the pool grows
    assert pool.allocate(3) == [5, 6, 7] and pool.num_blocks == 8
    # at the cap the cache gives way whatever its share
    assert pool.allocate(2) == [1, 0] and pool.evictions == 4
    with pytest.raises(OutOfBlocks):
        pool.allocate(1)


def test_pool_arguments_are_checked():
    with pytest.raises(ValueError):
        BlockPool(0, 16)  # a fixed pool needs blocks
    with pytest.raises(ValueError):
        BlockPool(5, 16, max_blocks=4)
    with pytest.raises(ValueError):
        BlockPool(0, 16, max_blocks=4, cache_share=1.0)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_lazy_cache_is_resident_only_where_written():
    layout = KVLayout(num_layers=8, num_kv_heads=2, head_dim=64, dtype=torch.float32)
    block_bytes = layout.bytes_per_token * 16  # 64 KiB
    before = _rss()
    cache = KVCache(layout, 8192, 16, lazy=True)  # 512 MiB reserved
    assert cache.lazy and cache.nbytes == 8192 * block_bytes
    assert _rss() - before < 16 << 20
    k, v = cache.layer(3)
    assert float(k[100].abs().sum()) == 0.0  # reads see zeros
    cache.data[:, :, :64] = 1.0  # write 64 blocks in every layer
    grown = _rss() - before
    assert 64 * block_bytes <= grown < 64 * block_bytes + (16 << 20)
    cache.copy_blocks([0], [65])
    assert torch.equal(cache.data[:, :, 65], cache.data[:, :, 0])
    eager = KVCache(layout, 16, 16)
    assert not eager.lazy and eager.data.abs().sum() == 0


def test_lazy_zeros_shape_and_dtype():
    t, buffer = lazy_zeros((3, 5, 7), torch.bfloat16)
    assert t.shape == (3, 5, 7) and t.dtype == torch.bfloat16 and buffer is not None
    assert t.abs().sum() == 0
    t[1, 2, 3] = 2.5
    assert float(t.sum()) == 2.5


def test_memory_figures():
    assert peak_rss_bytes() > 50 << 20  # torch is imported
    assert physical_memory_bytes() > 256 << 20


# ---------------------------------------------------------------------- engines with growing pools
def test_growing_engine_generates_like_transformers_and_grows_to_its_use(tiny_model):
    from conftest import greedy, hf_greedy, make_engine, random_prompts

    prompts = random_prompts([9, 17, 30], seed=31)
    k = 12
    engine = make_engine(tiny_model, num_blocks=4096, kv_grow=True)
    assert engine.pool.num_blocks == 0 and engine.pool.max_blocks == 4096 and engine.cache.lazy
    seqs = engine.generate(prompts, *greedy(k))
    for p, s in zip(prompts, seqs):
        assert s.token_ids[len(p):] == hf_greedy(tiny_model, p, k)
    # blocks of 4 tokens hold the KV of all but each sequence's last token: 20, 28 and 41 tokens
    # need 5 + 7 + 11 blocks, and the pool grew to just that
    assert engine.pool.num_blocks == engine.pool.peak_used == 23
    assert engine.metrics()["kv_blocks_max"] == 4096


def test_auto_pools_grow_on_cpu_and_take_free_memory_on_cuda(monkeypatch, tiny_llama, tiny_qwen2):
    from core import solver
    from core.models.loader import LoadedModel
    from core.settings import ModelSettings

    gen = solver.auto_kv_pool("generator", "cpu")
    prm = solver.auto_kv_pool("prm", "cpu")
    budget = physical_memory_bytes() * solver.CPU_KV_MEMORY_SHARE
    assert gen.grow and prm.grow
    assert gen.nbytes == int(budget * 0.75) and prm.nbytes == int(budget * 0.25)
    assert gen.cache_share == 0.0 and prm.cache_share == solver.PRM_CACHE_SHARE
    cuda = solver.auto_kv_pool("generator", "cuda", gpu_free_bytes=10 << 30)
    assert not cuda.grow and cuda.nbytes == int((10 << 30) * solver.GPU_MEMORY_UTILIZATION)
    with pytest.raises(ValueError):
        solver.auto_kv_pool("judge", "cpu")

    # on CUDA the free memory is shared so that both pools hold as many tokens
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (12 << 30, 80 << 30))
    settings = ModelSettings(device="cuda:0")
    g, p = solver._gpu_pools(settings, LoadedModel(tiny_llama, None, "g"), LoadedModel(tiny_qwen2, None, "p"))
    assert g.nbytes == p.nbytes == int((6 << 30) * solver.GPU_MEMORY_UTILIZATION) and not g.grow
    # a pool given a size keeps it; the other takes what is left
    settings = ModelSettings(device="cuda:0", gen_kv_bytes=4 << 30)
    g, p = solver._gpu_pools(settings, LoadedModel(tiny_llama, None, "g"), LoadedModel(tiny_qwen2, None, "p"))
    assert g == 4 << 30 and p.nbytes == int((8 << 30) * solver.GPU_MEMORY_UTILIZATION)


def test_build_engine_sizes(tiny_llama):
    from core.engine.kv_cache import KVLayout
    from core.models.loader import LoadedModel
    from core.settings import ModelSettings
    from core.solver import KVPoolSize, build_engine

    loaded = LoadedModel(tiny_llama, None, "tiny")
    per_block = KVLayout.from_config(tiny_llama.config, torch.float32).bytes_per_token * 16
    settings = ModelSettings(max_model_len=None)  # capped at the model's 256 positions
    fixed = build_engine(loaded, settings, 100 * per_block)
    assert fixed.pool.num_blocks == fixed.pool.max_blocks == 100 and not fixed.cache.lazy
    assert fixed.max_model_len == 256
    auto = build_engine(loaded, settings, None)
    assert auto.pool.num_blocks == 0 and auto.pool.max_blocks > 100 and auto.cache.lazy
    # a growing pool's cap always holds one sequence of max_model_len tokens
    tiny_cap = build_engine(loaded, settings, KVPoolSize(per_block, grow=True, cache_share=0.5))
    assert tiny_cap.pool.max_blocks == 256 // 16 + 1 and tiny_cap.pool.cache_share == 0.5
    with pytest.raises(ValueError, match="cannot hold one sequence"):
        build_engine(loaded, settings, per_block)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_growing_engine_memory_follows_the_blocks_used(tiny_llama):
    from conftest import greedy, make_engine, random_prompts

    before = _rss()
    # a 2 GiB cap, a few hundred KiB used
    engine = make_engine(tiny_llama, num_blocks=(2 << 30) // 2048, kv_grow=True, max_model_len=256)  # 2 KiB blocks
    assert engine.cache.nbytes >= 2 << 30
    engine.generate(random_prompts([40, 50], seed=32), *greedy(20))
    assert _rss() - before < 64 << 20


# ---------------------------------------------------------------------- logits rows read per step
def test_read_rows_per_step_are_bounded_and_logits_unchanged(tiny_llama):
    """Prefill-only reads (a PRM flush) are spread over steps of at most max_num_read_rows rows,
    so the ``[rows, vocab]`` logits of one step stay small; the rows equal a plain forward's."""
    from conftest import hf_logits, make_engine, random_prompts, run_to_end

    a, b = random_prompts([30, 21], seed=33)
    engine = make_engine(tiny_llama, max_num_read_rows=5)
    pa = engine.add(a, prefill_only=True, read_positions=list(range(8, 20)))
    pb = engine.add(b, prefill_only=True, read_positions=[0, 1, 2, 20])
    outs = run_to_end(engine)
    assert max(o.num_logit_rows for o in outs) == 5
    assert sum(o.num_logit_rows for o in outs) == 16
    # each row read owns its memory: the step's [rows, vocab] logits are not kept alive by it
    row = pa.read_logits[0]
    assert row.untyped_storage().nbytes() == row.numel() * row.element_size()
    torch.testing.assert_close(torch.stack(pa.read_logits), hf_logits(tiny_llama, a)[8:20], atol=1e-4, rtol=0)
    torch.testing.assert_close(torch.stack(pb.read_logits), hf_logits(tiny_llama, b)[[0, 1, 2, 20]], atol=1e-4,
                               rtol=0)
    # without the bound the same reads take one step
    engine = make_engine(tiny_llama, max_num_read_rows=None)
    engine.add(a, prefill_only=True, read_positions=list(range(8, 20)))
    engine.add(b, prefill_only=True, read_positions=[0, 1, 2, 20])
    assert max(o.num_logit_rows for o in run_to_end(engine)) == 16

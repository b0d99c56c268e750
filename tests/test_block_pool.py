"""BlockPool: allocation, reference counts, the prefix cache and its LRU eviction."""

from __future__ import annotations

import pytest

from core.engine.block_pool import BlockPool, OutOfBlocks, chain_block_hash


def key(parent: int | None, tokens) -> tuple[int, tuple]:
    """(chained hash, content) of one block, as the KV manager looks blocks up."""
    return chain_block_hash(parent, tokens), (parent, tuple(tokens))


def register(pool: BlockPool, block: int, k: tuple[int, tuple]) -> None:
    pool.register_full_block(block, k[0], k[1])


def state(pool: BlockPool):
    return (list(pool.ref_count), list(pool.block_hash), list(pool._free), list(pool._cached_free),
            dict(pool._hash_to_block), pool.num_free)


def test_allocate_hands_out_distinct_low_ids_with_ref_one():
    pool = BlockPool(6, 4)
    a = pool.allocate(2)
    b = pool.allocate(3)
    assert a == [0, 1] and b == [2, 3, 4]
    assert all(pool.ref_count[x] == 1 for x in a + b)
    assert pool.num_used == 5 and pool.num_free == 1
    assert pool.allocate(0) == []


def test_refcount_incref_free():
    pool = BlockPool(4, 4)
    a = pool.allocate(2)
    pool.incref(a)
    assert [pool.ref_count[x] for x in a] == [2, 2]
    pool.free(a)
    assert [pool.ref_count[x] for x in a] == [1, 1] and pool.num_used == 2
    pool.free(a)
    assert pool.num_used == 0 and pool.num_free == 4
    with pytest.raises(RuntimeError):
        pool.free([a[0]])
    # freed unhashed blocks are reusable
    assert sorted(pool.allocate(4)) == [0, 1, 2, 3]


def test_out_of_blocks_leaves_state_unchanged():
    pool = BlockPool(5, 4)
    a = pool.allocate(3)
    k = key(None, [1, 1, 1, 1])
    register(pool, a[0], k)
    pool.free([a[0]])  # now cached, evictable
    before = state(pool)
    with pytest.raises(OutOfBlocks):
        pool.allocate(4)  # 2 free + 1 cached = 3 available
    assert state(pool) == before
    # the cached block was not evicted by the failed call
    assert pool.lookup([k]) == [a[0]]


def test_invalid_sizes():
    with pytest.raises(ValueError):
        BlockPool(0, 4)
    with pytest.raises(ValueError):
        BlockPool(4, 0)


def test_cached_block_reused_by_lookup():
    pool = BlockPool(4, 4)
    k1 = key(None, [1, 2, 3, 4])
    k2 = key(k1[0], [5, 6, 7, 8])
    blocks = pool.allocate(3)
    register(pool, blocks[0], k1)
    register(pool, blocks[1], k2)
    pool.free(blocks)
    assert pool.num_used == 0 and pool.num_free == 4
    assert len(pool._cached_free) == 2

    hit = pool.lookup([k1, k2, key(k2[0], [9, 9, 9, 9])])
    assert hit == blocks[:2]
    assert [pool.ref_count[b] for b in hit] == [1, 1]
    assert pool.hits == 2 and pool.queries == 3
    assert pool.num_used == 2 and not pool._cached_free

    # a lookup stops at the first miss, even if later hashes are cached
    pool.free(hit)
    assert pool.lookup([key(None, [0, 0, 0, 0]), k2]) == []


def test_in_use_block_shared_by_lookup():
    pool = BlockPool(4, 4)
    k = key(None, [1, 2, 3, 4])
    (b,) = pool.allocate(1)
    register(pool, b, k)
    assert pool.lookup([k]) == [b]
    assert pool.ref_count[b] == 2
    pool.free([b])
    pool.free([b])
    assert pool.ref_count[b] == 0 and pool.lookup([k]) == [b]


def test_duplicate_content_keeps_first_mapping():
    pool = BlockPool(4, 4)
    k = key(None, [1, 2, 3, 4])
    a, b = pool.allocate(2)
    register(pool, a, k)
    register(pool, b, k)  # same content computed twice: first mapping wins
    assert pool.block_hash[b] is None
    pool.free([b])
    assert b in pool._free  # unhashed: plain free
    pool.free([a])
    assert pool.lookup([k]) == [a]


def test_eviction_is_lru_and_forgets_hash():
    pool = BlockPool(3, 4)
    hs = [key(None, [i] * 4) for i in range(3)]
    blocks = pool.allocate(3)
    for b, k in zip(blocks, hs):
        register(pool, b, k)
    pool.free([blocks[1]])  # freed first -> oldest
    pool.free([blocks[0]])
    pool.free([blocks[2]])
    assert pool.num_free == 3 and not pool._free

    (x,) = pool.allocate(1)
    assert x == blocks[1]  # least recently freed is evicted
    assert pool.block_hash[x] is None
    assert pool.lookup([hs[1]]) == []  # its hash is gone
    assert pool.lookup([hs[0]]) == [blocks[0]]  # the others are still cached

    # a lookup takes a block out of the LRU; freeing it again makes it most recent
    pool.free([blocks[0]])
    (y,) = pool.allocate(1)
    assert y == blocks[2]


def test_free_releases_tail_first():
    """Freeing a block table releases the tail first, so eviction takes the tail before the head."""
    pool = BlockPool(3, 4)
    h0 = key(None, [1] * 4)
    h1 = key(h0[0], [2] * 4)
    blocks = pool.allocate(2)
    register(pool, blocks[0], h0)
    register(pool, blocks[1], h1)
    pool.free(blocks)
    pool.allocate(1)  # takes the free block 2
    (evicted,) = pool.allocate(1)
    assert evicted == blocks[1]
    assert pool.lookup([h0, h1]) == [blocks[0]]


def test_prefix_caching_disabled():
    pool = BlockPool(2, 4, enable_prefix_caching=False)
    k = key(None, [1, 2, 3, 4])
    (b,) = pool.allocate(1)
    register(pool, b, k)
    assert pool.block_hash[b] is None
    pool.free([b])
    assert pool.lookup([k]) == [] and pool.hits == 0
    assert pool.num_free == 2 and not pool._cached_free


def test_reset_prefix_cache():
    pool = BlockPool(2, 4)
    k = key(None, [1, 2, 3, 4])
    (b,) = pool.allocate(1)
    register(pool, b, k)
    pool.free([b])
    pool.reset_prefix_cache()
    assert pool.lookup([k]) == [] and pool.block_hash[b] is None and pool.num_free == 2


def test_chain_block_hash():
    t = [1, 2, 3, 4]
    assert chain_block_hash(None, t) == chain_block_hash(None, list(t)) == chain_block_hash(None, tuple(t))
    parent_a = chain_block_hash(None, [9, 9, 9, 9])
    parent_b = chain_block_hash(None, [8, 8, 8, 8])
    assert chain_block_hash(parent_a, t) != chain_block_hash(parent_b, t)
    assert chain_block_hash(parent_a, t) != chain_block_hash(None, t)
    assert chain_block_hash(None, t) != chain_block_hash(None, [1, 2, 4, 3])
    # a chain of equal blocks gives a different hash at every depth
    h, seen = None, set()
    for _ in range(5):
        h = chain_block_hash(h, t)
        seen.add(h)
    assert len(seen) == 5

    # stable across processes and Python versions: a fixed value, not the builtin hash
    assert chain_block_hash(None, [1, 2, 3, 4]) == 78400612675248042949629215794929603409


def test_colliding_hashes_never_share_a_block(monkeypatch):
    """Two different blocks forced to the same hash: the second is not served the first's KV."""
    import core.engine.block_pool as block_pool

    monkeypatch.setattr(block_pool, "chain_block_hash", lambda parent, tokens: 42)
    pool = BlockPool(4, 4)
    a = key(None, [1, 2, 3, 4])
    b = (42, (None, (5, 6, 7, 8)))  # same hash, other tokens
    (blk,) = pool.allocate(1)
    pool.register_full_block(blk, 42, a[1])
    assert pool.lookup([(42, a[1])]) == [blk]
    pool.free([blk])
    assert pool.count_cached([b]) == 0 and pool.lookup([b]) == []
    # same tokens after another parent: not the same content either
    assert pool.lookup([(42, (7, (1, 2, 3, 4)))]) == []


def test_kv_manager_refuses_a_colliding_prefix(monkeypatch, tiny_llama):
    """End to end through the engine's KV manager: with every block hash equal, a prompt of other
    tokens gets no cached block and computes its own KV."""
    import core.engine.kv_manager as kv_manager
    from conftest import make_engine

    monkeypatch.setattr(kv_manager, "chain_block_hash", lambda parent, tokens: 7)
    engine = make_engine(tiny_llama, block_size=4)
    first = engine.add(list(range(1, 13)))
    while engine.has_work():
        engine.step()
    engine.free(first)
    second = engine.add(list(range(20, 32)))
    assert engine.kv.cached_prefix_tokens(second.token_ids) == 0
    engine.scheduler.schedule()
    assert second.num_cached_prompt == 0
    same = engine.add(list(range(1, 13)) + [40])
    assert engine.kv.cached_prefix_tokens(same.token_ids) == 4  # only the first block: later ones all hash 7

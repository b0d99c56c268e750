"""BlockPool: allocation, reference counts, the prefix cache and its LRU eviction."""

from __future__ import annotations

import pytest

from core.engine.block_pool import BlockPool, OutOfBlocks, chain_block_hash


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
    pool.register_full_block(a[0], 111)
    pool.free([a[0]])  # now cached, evictable
    before = state(pool)
    with pytest.raises(OutOfBlocks):
        pool.allocate(4)  # 2 free + 1 cached = 3 available
    assert state(pool) == before
    # the cached block was not evicted by the failed call
    assert pool.lookup([111]) == [a[0]]


def test_invalid_sizes():
    with pytest.raises(ValueError):
        BlockPool(0, 4)
    with pytest.raises(ValueError):
        BlockPool(4, 0)


def test_cached_block_reused_by_lookup():
    pool = BlockPool(4, 4)
    h1 = chain_block_hash(None, [1, 2, 3, 4])
    h2 = chain_block_hash(h1, [5, 6, 7, 8])
    blocks = pool.allocate(3)
    pool.register_full_block(blocks[0], h1)
    pool.register_full_block(blocks[1], h2)
    pool.free(blocks)
    assert pool.num_used == 0 and pool.num_free == 4
    assert len(pool._cached_free) == 2

    hit = pool.lookup([h1, h2, chain_block_hash(h2, [9, 9, 9, 9])])
    assert hit == blocks[:2]
    assert [pool.ref_count[b] for b in hit] == [1, 1]
    assert pool.hits == 2 and pool.queries == 3
    assert pool.num_used == 2 and not pool._cached_free

    # a lookup stops at the first miss, even if later hashes are cached
    pool.free(hit)
    assert pool.lookup([chain_block_hash(None, [0, 0, 0, 0]), h2]) == []


def test_in_use_block_shared_by_lookup():
    pool = BlockPool(4, 4)
    h = chain_block_hash(None, [1, 2, 3, 4])
    (b,) = pool.allocate(1)
    pool.register_full_block(b, h)
    assert pool.lookup([h]) == [b]
    assert pool.ref_count[b] == 2
    pool.free([b])
    pool.free([b])
    assert pool.ref_count[b] == 0 and pool.lookup([h]) == [b]


def test_duplicate_content_keeps_first_mapping():
    pool = BlockPool(4, 4)
    h = chain_block_hash(None, [1, 2, 3, 4])
    a, b = pool.allocate(2)
    pool.register_full_block(a, h)
    pool.register_full_block(b, h)  # same content computed twice: first mapping wins
    assert pool.block_hash[b] is None
    pool.free([b])
    assert b in pool._free  # unhashed: plain free
    pool.free([a])
    assert pool.lookup([h]) == [a]


def test_eviction_is_lru_and_forgets_hash():
    pool = BlockPool(3, 4)
    hs = [chain_block_hash(None, [i] * 4) for i in range(3)]
    blocks = pool.allocate(3)
    for b, h in zip(blocks, hs):
        pool.register_full_block(b, h)
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
    h0 = chain_block_hash(None, [1] * 4)
    h1 = chain_block_hash(h0, [2] * 4)
    blocks = pool.allocate(2)
    pool.register_full_block(blocks[0], h0)
    pool.register_full_block(blocks[1], h1)
    pool.free(blocks)
    pool.allocate(1)  # takes the free block 2
    (evicted,) = pool.allocate(1)
    assert evicted == blocks[1]
    assert pool.lookup([h0, h1]) == [blocks[0]]


def test_prefix_caching_disabled():
    pool = BlockPool(2, 4, enable_prefix_caching=False)
    h = chain_block_hash(None, [1, 2, 3, 4])
    (b,) = pool.allocate(1)
    pool.register_full_block(b, h)
    assert pool.block_hash[b] is None
    pool.free([b])
    assert pool.lookup([h]) == [] and pool.hits == 0
    assert pool.num_free == 2 and not pool._cached_free


def test_reset_prefix_cache():
    pool = BlockPool(2, 4)
    h = chain_block_hash(None, [1, 2, 3, 4])
    (b,) = pool.allocate(1)
    pool.register_full_block(b, h)
    pool.free([b])
    pool.reset_prefix_cache()
    assert pool.lookup([h]) == [] and pool.block_hash[b] is None and pool.num_free == 2


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

"""KV block bookkeeping: free list, reference counts and the prefix cache.

The pool only manages block *ids*; the tensors live in :class:`core.engine.kv_cache.KVCache`.
A block is in exactly one of three states:

* in use: ``ref_count > 0`` (one count per sequence whose block table holds it);
* cached: ``ref_count == 0`` but its content hash is registered, so a later sequence with the same
  prefix can take it back without recomputing it; cached blocks are evicted oldest-freed first
  when the free list runs dry;
* free: no references, no hash.

Prefix caching follows vLLM's automatic prefix caching: a *full* block is identified by the hash of
its token ids chained to the hash of the block before it, so equal hashes mean equal whole prefixes.
A hit is only taken when the cached block's stored content (parent hash and token ids) equals the
content looked up, so two prefixes whose hashes collide never share KV.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from typing import Iterable, Sequence

import xxhash


def chain_block_hash(parent_hash: int | None, token_ids: Sequence[int]) -> int:
    """Content hash of one full block chained to the hash of the block before it (None for the first).

    128-bit xxh3 over the parent's hash and the token ids as little-endian int64: stable across
    processes, Python versions and machines (unlike the builtin ``hash``), and wide enough that a
    collision is not a practical concern; :meth:`BlockPool.lookup` still compares the stored
    content on every hit, so even a collision cannot share a wrong block.
    """
    parent = (parent_hash or 0).to_bytes(16, "little")
    return xxhash.xxh3_128_intdigest(parent + array("q", token_ids).tobytes())


BlockContent = tuple  # (parent hash or None, token ids as a tuple): what a registered block holds


class OutOfBlocks(Exception):
    """Raised by :meth:`BlockPool.allocate` when neither free nor evictable blocks remain."""


class BlockPool:
    """Reference-counted pool of KV blocks of ``block_size`` tokens each, optionally growing on demand.

    A fixed pool (``max_blocks`` None) holds ``num_blocks`` blocks from the start. A growing pool
    starts with ``num_blocks`` (may be 0) and adds blocks when an allocation cannot be served, up to
    ``max_blocks``; the engine backs it with memory that becomes resident only when a block is first
    written (:class:`core.engine.kv_cache.KVCache` with ``lazy=True``), so the pool's size, and the
    memory it costs, follow the work instead of a guess made before it. Free blocks are handed out
    most recently freed first and low ids first, so the blocks in use stay within the lowest ids.

    Unreferenced prefix-cached blocks compete with growth: when no free block is left, a growing
    pool evicts cached blocks (oldest freed first) while more than ``cache_share`` of its blocks
    are cached, and grows otherwise. ``cache_share`` 0 grows only for blocks in use (the prefix
    cache keeps whatever room is left); 0.5 lets the cache hold up to as many blocks as are in use.

    Args:
        num_blocks: blocks in the pool from the start.
        block_size: tokens per block.
        enable_prefix_caching: register full blocks under their chained hash and reuse them.
        max_blocks: most blocks a growing pool may reach; None: fixed at ``num_blocks``.
        cache_share: see above (growing pools only), in [0, 1).

    Raises:
        ValueError: sizes below 1 (``num_blocks`` may be 0 for a growing pool), ``max_blocks <
            num_blocks``, or ``cache_share`` outside [0, 1).
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True,
                 max_blocks: int | None = None, cache_share: float = 0.0):
        if num_blocks < (0 if max_blocks else 1) or block_size < 1 or (max_blocks is not None and max_blocks < 1):
            raise ValueError(f"num_blocks and block_size must be >= 1, got {num_blocks}, {block_size}")
        if max_blocks is not None and max_blocks < num_blocks:
            raise ValueError(f"max_blocks {max_blocks} is below num_blocks {num_blocks}")
        if not 0.0 <= cache_share < 1.0:
            raise ValueError(f"cache_share must be in [0, 1), got {cache_share}")
        self.num_blocks = num_blocks
        self.max_blocks = max_blocks if max_blocks is not None else num_blocks
        self.cache_share = cache_share
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.ref_count = [0] * self.max_blocks
        self.block_hash: list[int | None] = [None] * self.max_blocks
        self.block_content: list[BlockContent | None] = [None] * self.max_blocks
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))  # pop() hands out low ids first
        self._cached_free: OrderedDict[int, None] = OrderedDict()  # ref 0 but hashed; LRU order
        self._hash_to_block: dict[int, int] = {}
        self.hits = 0  # blocks served from the prefix cache (for metrics)
        self.queries = 0  # blocks looked up
        self.peak_used = 0  # most blocks referenced at once (for metrics)
        self.evictions = 0  # cached blocks reused for other content (for metrics)

    # ------------------------------------------------------------------ counts
    @property
    def growable(self) -> bool:
        """True when the pool may still add blocks."""
        return self.num_blocks < self.max_blocks

    @property
    def num_free(self) -> int:
        """Blocks that an allocation can take now: free, evictable cached, and those the pool may still add."""
        return len(self._free) + len(self._cached_free) + self.max_blocks - self.num_blocks

    @property
    def num_used(self) -> int:
        """Blocks referenced by at least one sequence."""
        return self.num_blocks - len(self._free) - len(self._cached_free)

    # ------------------------------------------------------------------ allocation
    def grow(self, n: int) -> int:
        """Add up to ``n`` blocks (never past ``max_blocks``); returns how many were added.

        The new ids go to the bottom of the free stack: blocks freed earlier (their memory already
        resident) are handed out before any new one.
        """
        n = max(0, min(n, self.max_blocks - self.num_blocks))
        if n:
            start = self.num_blocks
            self._free[:0] = range(start + n - 1, start - 1, -1)
            self.num_blocks += n
        return n

    def allocate(self, n: int) -> list[int]:
        """Take ``n`` blocks with ref count 1, growing the pool or evicting least recently freed cached
        blocks when no free block is left (see the class docstring for which).

        Raises:
            OutOfBlocks: fewer than ``n`` blocks are free, evictable or still to be added (nothing
                is taken then).
        """
        if n > self.num_free:
            raise OutOfBlocks(f"need {n} KV blocks, {self.num_free} free")
        short = n - len(self._free)
        if short > 0 and self.growable:
            # evict only what the cache holds beyond its share of the pool; grow for the rest
            evictable = max(0, len(self._cached_free) - int(self.cache_share * self.num_blocks))
            self.grow(short - min(short, evictable))
        out = []
        for _ in range(n):
            if self._free:
                b = self._free.pop()
            else:
                b, _ = self._cached_free.popitem(last=False)
                self._forget_hash(b)
                self.evictions += 1
            self.ref_count[b] = 1
            out.append(b)
        self.peak_used = max(self.peak_used, self.num_used)
        return out

    def incref(self, blocks: Iterable[int]) -> None:
        """Add one reference to each block (used by fork and prefix-cache hits)."""
        for b in blocks:
            if self.ref_count[b] == 0:
                self._cached_free.pop(b, None)
            self.ref_count[b] += 1
        self.peak_used = max(self.peak_used, self.num_used)

    def free(self, blocks: Iterable[int]) -> None:
        """Drop one reference from each block; unreferenced hashed blocks stay cached.

        Blocks are released last-to-first so that, on eviction, the tail of a prefix goes before
        its head (the head is the part most likely to be shared).
        """
        for b in reversed(list(blocks)):
            rc = self.ref_count[b] - 1
            if rc < 0:
                raise RuntimeError(f"KV block {b} freed more often than referenced")
            self.ref_count[b] = rc
            if rc == 0:
                if self.block_hash[b] is not None and self.enable_prefix_caching:
                    self._cached_free[b] = None
                else:
                    self.block_hash[b] = None
                    self._free.append(b)

    # ------------------------------------------------------------------ prefix cache
    def register_full_block(self, block: int, h: int, content: BlockContent) -> None:
        """Record that ``block`` now holds the full block with chained hash ``h`` and ``content``
        (``(parent hash, token ids)``).

        If another block already holds that hash, the existing mapping wins and ``block`` simply
        stays unhashed (it is freed normally when its owner lets go).
        """
        if not self.enable_prefix_caching or self.block_hash[block] is not None:
            return
        if h in self._hash_to_block:
            return
        self.block_hash[block] = h
        self.block_content[block] = content
        self._hash_to_block[h] = block

    def _match(self, h: int, content: BlockContent) -> int | None:
        """The cached block for hash ``h`` if it holds exactly ``content``, else None."""
        b = self._hash_to_block.get(h)
        if b is None or self.block_content[b] != content:
            return None
        return b

    def count_cached(self, keys: Sequence[tuple[int, BlockContent]]) -> int:
        """How many of ``keys`` (``(hash, content)`` per block), from the start, name cached blocks
        holding that content (no references taken)."""
        if not self.enable_prefix_caching:
            return 0
        n = 0
        for h, content in keys:
            if self._match(h, content) is None:
                break
            n += 1
        return n

    def lookup(self, keys: Sequence[tuple[int, BlockContent]]) -> list[int]:
        """Longest run of cached blocks matching ``keys`` (``(hash, content)`` per block) from the
        start; takes a reference on each. A block whose hash matches but whose content differs (a
        collision) ends the run."""
        if not self.enable_prefix_caching:
            return []
        hit = []
        self.queries += len(keys)
        for h, content in keys:
            b = self._match(h, content)
            if b is None:
                break
            hit.append(b)
        self.incref(hit)
        self.hits += len(hit)
        return hit

    def _forget_hash(self, b: int) -> None:
        h = self.block_hash[b]
        if h is not None and self._hash_to_block.get(h) == b:
            del self._hash_to_block[h]
        self.block_hash[b] = None
        self.block_content[b] = None

    def reset_prefix_cache(self) -> None:
        """Drop every cached (unreferenced) block back to the free list."""
        for b in list(self._cached_free):
            self._forget_hash(b)
            self._free.append(b)
        self._cached_free.clear()

"""Per-sequence KV block operations: prefix-cache admission, growth, fork (copy-on-write), release."""

from __future__ import annotations

from .block_pool import BlockPool, OutOfBlocks, chain_block_hash
from .kv_cache import KVCache
from .sequence import Sequence


class KVManager:
    """Owns the block pool and the KV pages of one engine.

    Invariant: every full block in a sequence's table below ``num_computed`` is immutable (it may
    be shared through fork or the prefix cache); only the sequence's last, partial block is ever
    written, and it is never shared (fork copies it).
    """

    def __init__(self, pool: BlockPool, cache: KVCache):
        self.pool = pool
        self.cache = cache
        self.block_size = pool.block_size

    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        """Blocks ``seq`` must add to hold ``num_new_tokens`` more computed tokens."""
        total = seq.num_computed + num_new_tokens
        need = -(-total // self.block_size)
        return max(0, need - len(seq.block_table))

    def admit_from_prefix_cache(self, seq: Sequence) -> int:
        """Attach cached blocks matching the start of ``seq`` (which holds no blocks yet).

        At least the last token is always left to compute, so the sequence still gets its logits
        (a prompt served wholly from the cache recomputes its last block instead of 0 tokens);
        likewise every read position of a prefill-only sequence is computed, not served.

        Returns:
            tokens served from the cache (a multiple of the block size).
        """
        assert not seq.block_table and seq.num_computed == 0
        bs = self.block_size
        first_needed = len(seq.token_ids) - 1
        unread = seq.read_positions[len(seq.read_logits):]  # all of them unless re-admitted after preemption
        if unread:
            first_needed = min(first_needed, unread[0])
        keys = self._block_keys(seq.token_ids, first_needed // bs)
        hit = self.pool.lookup(keys)
        seq.block_table = list(hit)
        seq.block_hashes = [h for h, _ in keys[:len(hit)]]
        seq.num_computed = len(hit) * bs
        seq.num_cached_prompt = seq.num_computed
        return seq.num_computed

    def cached_prefix_tokens(self, token_ids: list[int]) -> int:
        """Tokens at the start of ``token_ids`` the prefix cache holds now (whole blocks; no side effects)."""
        return self.pool.count_cached(self._block_keys(token_ids, len(token_ids) // self.block_size)) * self.block_size

    def _block_keys(self, token_ids: list[int], n_full: int) -> list[tuple[int, tuple]]:
        """``(chained hash, (parent hash, token ids))`` of the first ``n_full`` full blocks of ``token_ids``."""
        bs = self.block_size
        keys, h = [], None
        for i in range(n_full):
            tokens = tuple(token_ids[i * bs:(i + 1) * bs])
            parent, h = h, chain_block_hash(h, tokens)
            keys.append((h, (parent, tokens)))
        return keys

    def grow(self, seq: Sequence, num_new_tokens: int) -> None:
        """Allocate the blocks ``seq`` needs for ``num_new_tokens`` more tokens.

        Raises:
            OutOfBlocks: not enough free blocks (nothing is allocated then).
        """
        n = self.blocks_needed(seq, num_new_tokens)
        if n:
            seq.block_table.extend(self.pool.allocate(n))

    def mark_computed(self, seq: Sequence, num_new_tokens: int) -> None:
        """Advance ``num_computed`` and register blocks that became full in the prefix cache."""
        seq.num_computed += num_new_tokens
        bs = self.block_size
        full = seq.num_computed // bs
        h = seq.block_hashes[-1] if seq.block_hashes else None
        for i in range(len(seq.block_hashes), full):
            tokens = tuple(seq.token_ids[i * bs:(i + 1) * bs])
            parent, h = h, chain_block_hash(h, tokens)
            seq.block_hashes.append(h)
            self.pool.register_full_block(seq.block_table[i], h, (parent, tokens))

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """Give ``child`` the parent's computed KV: full blocks shared, the partial block copied.

        Raises:
            OutOfBlocks: no block for the copy of the partial last block.
        """
        bs = self.block_size
        n_full = parent.num_computed // bs
        shared = parent.block_table[:n_full]
        partial = parent.num_computed % bs
        copy = []
        if partial:
            copy = self.pool.allocate(1)
            self.cache.copy_blocks([parent.block_table[n_full]], copy)
        self.pool.incref(shared)
        child.block_table = shared + copy
        child.block_hashes = list(parent.block_hashes[:n_full])
        child.num_computed = parent.num_computed

    def release(self, seq: Sequence) -> None:
        """Drop the sequence's blocks (full ones stay in the prefix cache) and reset its KV state."""
        self.pool.free(seq.block_table)
        seq.block_table = []
        seq.block_hashes = []
        seq.num_computed = 0


__all__ = ["KVManager", "OutOfBlocks"]

"""Tensor storage of the paged KV cache.

One tensor holds every layer's keys and values, shaped
``[num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim]``: a block id indexes the same
page in every layer, so copying a block for copy-on-write is one indexing op over all layers.
"""

from __future__ import annotations

import math
import mmap
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class KVLayout:
    """Shape of one model's KV cache entries (from its config)."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype

    @property
    def bytes_per_token(self) -> int:
        """Bytes of K and V for one token across all layers."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype.itemsize

    @classmethod
    def from_config(cls, config, dtype: torch.dtype) -> "KVLayout":
        """Read layers, KV heads and head size from a `transformers` config."""
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        return cls(config.num_hidden_layers, kv_heads, head_dim, dtype)


def lazy_zeros(shape: tuple[int, ...], dtype: torch.dtype) -> tuple[torch.Tensor, object | None]:
    """A zero-filled CPU tensor whose memory becomes resident only where it is written.

    Backed by a private anonymous memory map: the kernel hands out zero pages on first touch, so
    reserving room for many KV blocks costs address space, not memory, until blocks are used.
    Falls back to ``torch.zeros`` (all resident) where anonymous maps are not available.

    Returns:
        ``(tensor, buffer)``: keep ``buffer`` (the map, or None) alive as long as the tensor.
    """
    numel = math.prod(shape)
    nbytes = numel * dtype.itemsize
    try:
        buffer = mmap.mmap(-1, max(nbytes, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                           prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except (AttributeError, OSError, TypeError, ValueError):  # no anonymous maps (Windows), or refused
        return torch.zeros(shape, dtype=dtype, device="cpu"), None
    return torch.frombuffer(buffer, dtype=dtype, count=numel).view(shape), buffer


class KVCache:
    """K/V pages for ``num_blocks`` blocks of ``block_size`` tokens.

    Args:
        layout: the model's KV shape.
        num_blocks: pages to allocate.
        block_size: tokens per page.
        device: where the cache lives.
        lazy: on CPU, reserve the pages without making them resident (:func:`lazy_zeros`): a block
            costs memory from its first write on. For pools that grow on demand.
        scratch_blocks: extra pages after the pool's ``num_blocks`` that no sequence ever owns
            (:attr:`scratch_block` is the first): CUDA-graph padding rows write and read there.

    Memory: ``num_blocks * block_size * layout.bytes_per_token`` bytes. Eager pools are allocated
    and zeroed here, so the pages are touched once rather than page-faulting inside the first
    forwards; lazy pools become resident block by block (the lowest block ids first, as the block
    pool hands them out), at most as much as the blocks ever used.
    """

    def __init__(self, layout: KVLayout, num_blocks: int, block_size: int, device: torch.device | str = "cpu",
                 lazy: bool = False, scratch_blocks: int = 0):
        self.layout = layout
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.scratch_block = num_blocks if scratch_blocks > 0 else None
        pages = num_blocks + max(0, scratch_blocks)
        shape = (layout.num_layers, 2, pages, block_size, layout.num_kv_heads, layout.head_dim)
        self._buffer = None
        if lazy and torch.device(device).type == "cpu":
            self.data, self._buffer = lazy_zeros(shape, layout.dtype)
        else:
            self.data = torch.zeros(shape, dtype=layout.dtype, device=device)
        self.lazy = self._buffer is not None

    def layer(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V pages of one layer, each ``[num_blocks, block_size, kv_heads, head_dim]``."""
        return self.data[layer_idx, 0], self.data[layer_idx, 1]

    def copy_blocks(self, src: list[int], dst: list[int]) -> None:
        """Copy pages ``src[i] -> dst[i]`` in every layer (copy-on-write of a partial block)."""
        if not src:
            return
        device = self.data.device
        s = torch.tensor(src, dtype=torch.long, device=device)
        d = torch.tensor(dst, dtype=torch.long, device=device)
        self.data[:, :, d] = self.data[:, :, s]

    @property
    def nbytes(self) -> int:
        """Size of the cache tensor in bytes."""
        return self.data.numel() * self.data.element_size()

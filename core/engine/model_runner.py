"""Runs one packed forward of a `transformers` causal LM over the paged KV cache."""

from __future__ import annotations

import torch

from .attention import META_KWARG, AttentionMetadata, DecodeInputs, PrefillSpan, offset_causal_mask, register_attention
from .kv_cache import KVCache
from .sequence import Sequence


class ModelRunner:
    """Builds packed inputs and attention metadata for a scheduled batch and calls the model.

    The model must already use the engine's attention implementation (see
    :func:`core.engine.attention.register_attention`); this class switches it if needed.

    Args:
        model: a `transformers` ``*ForCausalLM`` (or a model whose forward accepts
            ``input_ids, position_ids, use_cache, logits_to_keep`` and returns ``.logits``).
        kv: the engine's KV pages.
    """

    def __init__(self, model, kv: KVCache):
        name = register_attention()
        if getattr(model.config, "_attn_implementation", None) != name:
            model.set_attn_implementation(name)
        self.model = model
        self.kv = kv
        self.device = kv.data.device
        self.block_size = kv.block_size
        self.q_per_kv = model.config.num_attention_heads // kv.layout.num_kv_heads
        self._gather_k = torch.empty(0, dtype=kv.data.dtype, device=self.device)
        self._gather_v = torch.empty(0, dtype=kv.data.dtype, device=self.device)

    def _gather_buffers(self, n_blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Views of persistent buffers for ``n_blocks`` gathered pages (grown by half when too small)."""
        layout = self.kv.layout
        page = self.block_size * layout.num_kv_heads * layout.head_dim
        if self._gather_k.numel() < n_blocks * page:
            size = int(n_blocks * 1.5) * page
            self._gather_k = torch.empty(size, dtype=self.kv.data.dtype, device=self.device)
            self._gather_v = torch.empty(size, dtype=self.kv.data.dtype, device=self.device)
        shape = (n_blocks, self.block_size, layout.num_kv_heads, layout.head_dim)
        return self._gather_k[: n_blocks * page].view(shape), self._gather_v[: n_blocks * page].view(shape)

    def build_metadata(self, batch: list[tuple[Sequence, int]]):
        """Packed ``input_ids [T]``, ``position_ids [T]`` (int64) and :class:`AttentionMetadata`."""
        bs = self.block_size
        ids: list[int] = []
        positions: list[int] = []
        slots: list[torch.Tensor] = []
        decode_rows: list[int] = []
        decode_tables: list[list[int]] = []
        decode_lens: list[int] = []
        spans: list[PrefillSpan] = []
        for seq, n in batch:
            start = len(ids)
            c = seq.num_computed
            ids.extend(seq.token_ids[c:c + n])
            positions.extend(range(c, c + n))
            table = seq.block_table
            if n == 1:
                slots.append(torch.tensor([table[c // bs] * bs + c % bs]))
                decode_rows.append(start)
                decode_tables.append(table[: c // bs + 1])
                decode_lens.append(c + 1)
                continue
            pos = torch.arange(c, c + n)
            t = torch.tensor(table[: -(-(c + n) // bs)])
            slots.append(t[pos // bs] * bs + pos % bs)
            if c == 0:
                spans.append(PrefillSpan(start, n, 0, None))
            else:
                spans.append(PrefillSpan(start, n, c, t.to(self.device), offset_causal_mask(c, n, self.device)))
        dev = self.device
        meta = AttentionMetadata(kv=self.kv, slot_mapping=torch.cat(slots).to(dev), num_tokens=len(ids), prefill=spans)
        if decode_rows:
            # plans are built on first use, once per attention window the model's layers ask for
            meta.decode_inputs = DecodeInputs(decode_rows, decode_tables, decode_lens, bs, self.q_per_kv, dev)
            meta.gather = self._gather_buffers
        input_ids = torch.tensor(ids, device=dev)
        position_ids = torch.tensor(positions, device=dev)
        return input_ids, position_ids, meta

    @torch.inference_mode()
    def forward(self, batch: list[tuple[Sequence, int]], logit_rows: list[int]) -> torch.Tensor:
        """One packed forward; writes the batch's K/V into the cache.

        Args:
            batch: ``(sequence, num_tokens)`` pairs; tokens ``[num_computed, num_computed + n)`` of
                each sequence are computed.
            logit_rows: packed row indices whose logits are wanted (LM head runs only on these).

        Returns:
            float logits ``[len(logit_rows), vocab]`` (empty when no rows are asked for).
        """
        input_ids, position_ids, meta = self.build_metadata(batch)
        keep = torch.tensor(logit_rows if logit_rows else [0], dtype=torch.long, device=self.device)
        out = self.model(
            input_ids=input_ids[None], position_ids=position_ids[None], use_cache=False,
            logits_to_keep=keep, **{META_KWARG: meta},
        )
        logits = out.logits[0]
        return logits if logit_rows else logits[:0]

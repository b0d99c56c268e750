"""Runs one packed forward of a `transformers` causal LM over the paged KV cache.

Per step the runner builds the :class:`~core.engine.backends.AttentionPlan` (host lists: which rows
decode, which prefill with how much cached context, their block tables), moves the step's integer
inputs to the device in one copy, lets the attention backend prepare its metadata, and calls the
model, or replays a CUDA graph for a decode-only step (:mod:`core.engine.cuda_graphs`).
"""

from __future__ import annotations

import torch

from core.settings import resolve_attention_backend

from .attention import META_KWARG, register_attention
from .backends import AttentionPlan, PrefillRow, create_backend
from .kv_cache import KVCache
from .sequence import Sequence


def graphs_wanted(backend: str, device, enforce_eager: bool, dtype: torch.dtype | None = None) -> bool:
    """True when decode steps replay CUDA graphs: the flashinfer backend on CUDA, not ``enforce_eager``.

    ``backend`` may be ``auto`` (resolved for ``device`` and ``dtype``). The torch backend's decode
    plan changes shape with every batch (groups, buckets, masks), so it runs eagerly; FlashInfer's
    decode wrapper keeps its metadata in fixed buffers a graph can read.
    """
    if enforce_eager or torch.device(device).type != "cuda":
        return False
    if backend == "auto":
        backend = resolve_attention_backend("auto", str(device), None if dtype is None else _dtype_name(dtype))
    return backend == "flashinfer"


def synchronize(device) -> None:
    """Wait for the work queued on ``device`` (a CUDA device; nothing to wait for on a CPU), so a
    host clock read after it times the work itself (seconds of a step, not of its launch)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class ModelRunner:
    """Builds packed inputs and the attention plan for a scheduled batch and calls the model.

    The model must already use the engine's attention implementation (see
    :func:`core.engine.attention.register_attention`); this class switches it if needed.

    Args:
        model: a `transformers` ``*ForCausalLM`` (or a model whose forward accepts
            ``input_ids, position_ids, use_cache, logits_to_keep`` and returns ``.logits``).
        kv: the engine's KV pages.
        backend: ``auto``, ``torch`` or ``flashinfer`` (see :func:`core.settings.resolve_attention_backend`);
            ``flashinfer-reference`` runs the FlashInfer backend with the torch stand-ins of its
            kernels (:mod:`core.engine.backends.flashinfer_reference`; tests, any device).
        enforce_eager: no CUDA graphs.
        max_num_seqs: the largest decode batch a graph is captured for.
        max_model_len: the longest context (sizes the graphs' page buffers; None: the whole pool).
        kernels: the FlashInfer kernels module (tests inject stand-ins).
        graph_capture: how a graph is captured (tests inject a stand-in; default CUDA graphs).

    Raises:
        ValueError: the backend cannot run here (flashinfer on CPU, float32, or not installed).
    """

    def __init__(self, model, kv: KVCache, backend: str = "torch", *, enforce_eager: bool = False,
                 max_num_seqs: int = 256, max_model_len: int | None = None, kernels=None, graph_capture=None):
        name = register_attention()
        if getattr(model.config, "_attn_implementation", None) != name:
            model.set_attn_implementation(name)
        self.model = model
        self.kv = kv
        self.device = kv.data.device
        self.block_size = kv.block_size
        self.q_per_kv = model.config.num_attention_heads // kv.layout.num_kv_heads
        if backend != "flashinfer-reference":
            backend = resolve_attention_backend(backend, str(self.device), _dtype_name(kv.data.dtype),
                                                flashinfer_installed=True if kernels is not None else None)
        self.backend_name = backend
        self.backend = create_backend(backend, kv, model.config, kernels=kernels)
        self.graphs = None
        use_graphs = graph_capture is not None or graphs_wanted(backend, self.device, enforce_eager)
        if backend != "torch" and use_graphs and kv.scratch_block is not None:
            from .cuda_graphs import DecodeGraphs

            pages = kv.num_blocks if max_model_len is None else -(-max_model_len // kv.block_size) + 1
            self.graphs = DecodeGraphs(self, max_num_seqs, pages, capture=graph_capture)

    def build_plan(self, batch: list[tuple[Sequence, int]]) -> tuple[list[int], list[int], list[int], AttentionPlan]:
        """Packed token ids, positions and KV slots (host lists) and the step's attention plan."""
        bs = self.block_size
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        plan = AttentionPlan(num_tokens=0, block_size=bs)
        for seq, n in batch:
            start = len(ids)
            c = seq.num_computed
            ids.extend(seq.token_ids[c:c + n])
            positions.extend(range(c, c + n))
            table = seq.block_table
            if n == 1:
                slots.append(table[c // bs] * bs + c % bs)
                plan.decode_rows.append(start)
                plan.decode_tables.append(table[: c // bs + 1])
                plan.decode_lengths.append(c + 1)
                continue
            covered = table[: -(-(c + n) // bs)]
            slots.extend(covered[p // bs] * bs + p % bs for p in range(c, c + n))
            plan.prefill.append(PrefillRow(start, n, c, covered))
        plan.num_tokens = len(ids)
        return ids, positions, slots, plan

    def to_device(self, *arrays: list[int]) -> list[torch.Tensor]:
        """int64 tensors of ``arrays`` on the runner's device, moved in one host-to-device copy.

        On CUDA the lists are packed into one pinned host tensor and copied without blocking the
        host (the caching host allocator keeps the pinned memory until the copy is done), so the
        step's inputs cost one transfer and no synchronisation.
        """
        if self.device.type == "cpu":
            return [torch.tensor(a, dtype=torch.long, device=self.device) for a in arrays]
        flat = [x for a in arrays for x in a]
        host = torch.tensor(flat, dtype=torch.long, device="cpu", pin_memory=True)
        dev = host.to(self.device, non_blocking=True)
        return list(torch.split(dev, [len(a) for a in arrays]))

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
        ids, positions, slots, plan = self.build_plan(batch)
        if self.graphs is not None and self.graphs.can_run(plan):
            return self.graphs.run(ids, positions, slots, plan, logit_rows)
        input_ids, position_ids, slot_mapping, keep = self.to_device(ids, positions, slots, logit_rows or [0])
        meta = self.backend.prepare(plan, slot_mapping)
        out = self.model(
            input_ids=input_ids[None], position_ids=position_ids[None], use_cache=False,
            logits_to_keep=keep, **{META_KWARG: meta},
        )
        logits = out.logits[0]
        return logits if logit_rows else logits[:0]

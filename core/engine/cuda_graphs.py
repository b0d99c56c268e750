"""CUDA graphs for decode steps at batch-size buckets, as serving engines capture them.

A decode step launches a few kernels per layer for a small amount of work each; at small batches
the host's launch overhead (and `transformers`' Python) dominates the GPU time. A decode-only step
with ``n`` rows therefore replays a graph captured for the smallest bucket ``B >= n``
(:func:`graph_batch_sizes`: 1, 2, 4, 8, ... up to ``max_num_seqs``), its ``B - n`` padding rows
reading and writing only the KV cache's scratch page (a page no sequence owns). The graph of a
bucket is captured the first time a step needs it (warm-up run, then capture), with static input
buffers the runner fills before every replay, in one host-to-device copy.

A graph replays the FlashInfer backend's decode wrapper in CUDA-graph mode, whose metadata lives
in fixed buffers that ``plan()`` refills before each replay (FlashInfer's ``use_cuda_graph``), from
one host-to-device copy of the page indices per step. Steps
that mix in prefill chunks, exceed the largest bucket, or run the cascade (a group of rows sharing
pages: the saved KV reads are worth more than the launches) run eagerly, as does everything with
``--enforce-eager`` and with the torch backend (whose decode plan changes shape every step).
"""

from __future__ import annotations

from typing import Callable

import torch

from .attention import META_KWARG
from .backends import AttentionPlan
from .backends.flashinfer_backend import GraphDecodeMetadata


def graph_batch_sizes(max_num_seqs: int) -> list[int]:
    """Buckets 1, 2, 4, 8, ... below ``max_num_seqs``, then ``max_num_seqs`` itself.

    Raises:
        ValueError: ``max_num_seqs < 1``.
    """
    if max_num_seqs < 1:
        raise ValueError(f"max_num_seqs must be >= 1, got {max_num_seqs}")
    sizes, b = [], 1
    while b < max_num_seqs:
        sizes.append(b)
        b *= 2
    return sizes + [max_num_seqs]


def bucket_for(n: int, sizes: list[int]) -> int | None:
    """The smallest bucket holding ``n`` rows, or None when ``n`` exceeds the largest."""
    for b in sizes:
        if b >= n:
            return b
    return None


def cuda_capture(fn: Callable[[], torch.Tensor], pool=None) -> tuple[Callable[[], None], torch.Tensor]:
    """Capture ``fn`` (reading only static buffers) as a CUDA graph; returns ``(replay, output)``.

    ``fn`` runs once on a side stream first, so lazy initialisation (cuBLAS workspaces, kernel
    loading) happens outside the capture, as PyTorch's CUDA-graph notes require. ``output`` is the
    static tensor each replay rewrites; the capture itself computes nothing, so replay once to use it.
    ``pool``: a memory pool handle (``torch.cuda.graph_pool_handle()``) shared with other graphs.
    """
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        output = fn()
    return graph.replay, output


class DecodeGraphs:
    """Captures and replays decode steps for one :class:`~core.engine.model_runner.ModelRunner`.

    Args:
        runner: the model runner (its model, KV cache and FlashInfer backend).
        max_num_seqs: the largest bucket.
        max_pages_per_seq: most pages one row reads (sizes each graph's indices buffer).
        capture: ``(fn, pool) -> (replay, output)``; default :func:`cuda_capture` (tests pass a
            stand-in that replays by calling ``fn`` again and copying into ``output``).
        pool: the memory pool every bucket's graph is captured into (default: a new CUDA graph pool
            with the default capture, none with a stand-in).

    Memory: one pool for all buckets, as serving engines share it: only one graph replays at a
    time and its output is copied out before the next, so a bucket's intermediates may reuse another's
    and the pool holds about the largest bucket's activations. Private pools (one per bucket) would
    add up to every bucket's, outside the share of device memory the KV sizing leaves free.
    """

    def __init__(self, runner, max_num_seqs: int, max_pages_per_seq: int, capture=None, pool=None):
        self.runner = runner
        self.backend = runner.backend
        self.kv = runner.kv
        self.sizes = graph_batch_sizes(max_num_seqs)
        self.max_pages_per_seq = max_pages_per_seq
        self.capture = capture or cuda_capture
        self.pool = pool if pool is not None or capture is not None else torch.cuda.graph_pool_handle()
        top = self.sizes[-1]
        # rows 0, 1, 2: token ids, positions, KV slots of the step (padding rows after the real ones)
        self.static = torch.zeros(3, top, dtype=torch.long, device=runner.device)
        self.keep = torch.arange(top, dtype=torch.long, device=runner.device)
        self.graphs: dict[int, tuple[Callable[[], None], torch.Tensor, dict]] = {}
        self.scratch_slot = self.kv.scratch_block * self.kv.block_size
        self.replays = 0

    def can_run(self, plan: AttentionPlan) -> bool:
        """True for a decode-only step that fits a bucket and runs no cascade, once an eager step has
        shown which attention windows the model's layers ask for."""
        return (plan.is_decode_only and bucket_for(plan.num_tokens, self.sizes) is not None
                and bool(self.backend.keys_seen) and not self.backend.cascade_pays(plan))

    def run(self, ids: list[int], positions: list[int], slots: list[int], plan: AttentionPlan,
            logit_rows: list[int]) -> torch.Tensor:
        """Replay (capturing first if needed) the bucket's graph for this step.

        Returns:
            logits ``[len(logit_rows), vocab]``, as the eager forward returns them.
        """
        n = plan.num_tokens
        size = bucket_for(n, self.sizes)
        pad = size - n
        host = torch.tensor([ids + [0] * pad, positions + [0] * pad, slots + [self.scratch_slot] * pad],
                            dtype=torch.long, device="cpu", pin_memory=self.runner.device.type == "cuda")
        self.static[:, :size].copy_(host, non_blocking=True)
        dtype = self.kv.data.dtype
        wrappers = self.backend.plan_graph(plan, size, size * self.max_pages_per_seq, dtype)
        if size not in self.graphs:
            meta = GraphDecodeMetadata(self.kv, self.static[2, :size], wrappers)
            model, static, keep = self.runner.model, self.static, self.keep[:size]

            def forward() -> torch.Tensor:
                out = model(input_ids=static[0, :size][None], position_ids=static[1, :size][None], use_cache=False,
                            logits_to_keep=keep, **{META_KWARG: meta})
                return out.logits[0]

            replay, output = self.capture(forward, self.pool)
            self.graphs[size] = (replay, output, wrappers)
        replay, output, _ = self.graphs[size]
        replay()
        self.replays += 1
        if logit_rows == list(range(n)):
            return output[:n].clone()
        if not logit_rows:
            return output[:0].clone()
        index = torch.tensor(logit_rows, dtype=torch.long, device="cpu", pin_memory=output.is_cuda).to(
            output.device, non_blocking=True)
        return output.index_select(0, index)

"""PRM verification throughput against batch size, and the LV threshold it suggests.

Lazy verification (SpecScale paper section 4.3) holds verification tasks back until the queue has
``lv_threshold`` input tokens, so that the PRM runs batches big enough to be near its peak
throughput. The right threshold depends on PRM, scorer and device: this module measures input
tokens/s of one verifier flush for a range of batch sizes and picks the smallest batch that gets
within a given fraction (default 95%) of the best measured throughput.

Batches are real verification tasks: step t of a reference solution scored after steps 1..t-1
(:mod:`core.verify.reference`). Every input token must be computed for the figure to mean
anything, so the verifier under measurement must run with prefix caching disabled (checked).
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import asdict, dataclass, field

from .base import ScoreRequest
from .reference import path_prefixes, solution_steps
from .verifier import Verifier


@dataclass
class ProfilePoint:
    """Throughput of one batch size.

    target_tokens: the batch size asked for (input tokens). tokens/tasks: the batch actually built.
    seconds: median flush time over the repeats. tokens_per_s: median of the repeats' tokens/s.
    computed_tokens: tokens the engine computed per flush (equals ``tokens`` without prefix reuse).
    runs_s: each repeat's seconds.
    """

    target_tokens: int
    tokens: int
    tasks: int
    seconds: float
    tokens_per_s: float
    computed_tokens: int
    runs_s: list[float] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def batch_sizes(min_tokens: int, max_tokens: int) -> list[int]:
    """``min_tokens`` doubled until it passes ``max_tokens`` (128..8192 gives 128, 256, ..., 8192).

    Raises:
        ValueError: ``min_tokens < 1`` or ``min_tokens > max_tokens``.
    """
    if min_tokens < 1 or min_tokens > max_tokens:
        raise ValueError(f"need 1 <= min batch tokens <= max batch tokens, got {min_tokens} and {max_tokens}")
    sizes = [min_tokens]
    while sizes[-1] * 2 <= max_tokens:
        sizes.append(sizes[-1] * 2)
    return sizes


def verification_requests(verifier: Verifier, problems, system_prompt: str, delimiter: str,
                          seed: int = 0) -> list[ScoreRequest]:
    """Every (problem, step) verification request of the reference solutions, shuffled by ``seed``.

    Requests longer than the PRM engine's ``max_model_len`` are left out. Shuffling mixes problems
    and depths, as an LV queue does.
    """
    scorer = verifier.scorer
    limit = verifier.engine.max_model_len
    out = []
    for p in problems:
        steps = [s + delimiter for s in solution_steps(p.extra.get("solution") or "")]
        prefixes = path_prefixes(scorer, p.problem, system_prompt, steps)
        for parent, prefix in zip(prefixes, prefixes[1:]):
            req = scorer.request(parent, prefix)
            if len(req.token_ids) <= limit:
                out.append(req)
    random.Random(seed).shuffle(out)
    return out


def fill_batch(requests: list[ScoreRequest], target_tokens: int) -> list[ScoreRequest]:
    """The leading requests whose input tokens come closest to ``target_tokens`` (at least one).

    Requests are taken in order while the total is below the target; the last one is dropped when
    that lands nearer the target.

    Raises:
        ValueError: all requests together hold fewer than ``target_tokens`` tokens.
    """
    batch, total = [], 0
    for req in requests:
        if total >= target_tokens:
            break
        batch.append(req)
        total += len(req.token_ids)
    if total < target_tokens:
        raise ValueError(f"the problems give only {total} tokens of verification requests, fewer than a "
                         f"batch of {target_tokens}; pass more problems (--problems) or a smaller --max-tokens")
    last = len(batch[-1].token_ids)
    if len(batch) > 1 and target_tokens - (total - last) < total - target_tokens:
        batch.pop()
    return batch


def time_flush(verifier: Verifier, batch: list[ScoreRequest]) -> tuple[float, int]:
    """Seconds of one flush of ``batch`` (scores included) and the tokens the engine computed."""
    for req in batch:
        verifier.submit(None, req)
    before = verifier.engine.total_tokens
    t0 = time.perf_counter()
    verifier.flush("profile")
    return time.perf_counter() - t0, verifier.engine.total_tokens - before


def profile_throughput(verifier: Verifier, requests: list[ScoreRequest], sizes: list[int], repeats: int = 3,
                       warmup: int = 1, on_point=None) -> list[ProfilePoint]:
    """Measure median input tokens/s of one flush for each batch size in ``sizes``.

    First ``warmup`` untimed flushes of one batch as big as one engine step allows (the largest
    size, capped at ``max_num_batched_tokens``): the first forwards at full step size pay one-off
    allocation costs. Then each size runs ``repeats`` timed flushes of the same batch.
    ``on_point(point)`` is called after each size.

    Raises:
        ValueError: the verifier's engine reuses cached prefixes (the work would be hidden),
            ``repeats < 1``, or too few requests for the largest size (see :func:`fill_batch`).
    """
    if verifier.engine.config.enable_prefix_caching:
        raise ValueError("profile the verifier with prefix caching disabled: cached prefixes hide the work")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    batches = [fill_batch(requests, size) for size in sizes]  # fail before any measuring
    warm = fill_batch(requests, min(max(sizes), verifier.engine.config.max_num_batched_tokens))
    for _ in range(warmup):
        time_flush(verifier, warm)
    points = []
    for size, batch in zip(sizes, batches):
        tokens = sum(len(r.token_ids) for r in batch)
        runs = [time_flush(verifier, batch) for _ in range(repeats)]
        seconds = [s for s, _ in runs]
        point = ProfilePoint(size, tokens, len(batch), round(statistics.median(seconds), 4),
                             round(statistics.median(tokens / s for s in seconds), 1),
                             runs[-1][1], [round(s, 4) for s in seconds])
        points.append(point)
        if on_point is not None:
            on_point(point)
    return points


def recommend_threshold(points: list[ProfilePoint], fraction: float = 0.95) -> int:
    """The smallest batch size (``target_tokens``) whose throughput is >= ``fraction`` x the best.

    Raises:
        ValueError: no points, or ``fraction`` outside (0, 1].
    """
    if not points:
        raise ValueError("no measurements")
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    best = max(p.tokens_per_s for p in points)
    return min(p.target_tokens for p in points if p.tokens_per_s >= fraction * best)

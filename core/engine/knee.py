"""Decode step time against batch rows, and the knee past which rows stop being cheap.

Speculative work pays off only in rows a step would otherwise leave idle: below the knee an extra
decode row costs little (a step's time is mostly its fixed part: reading the weights once,
launching kernels), past it every row costs about as much as the rows already there. This module
measures the generator engine's decode step time at doubling row counts, on the device, dtype and
kernels the run uses, and finds the knee of tokens/s against rows; the search uses it as the
speculation budget (:class:`core.engine.scheduler.SchedulerConfig`).

The rule: the knee is the first measured row count ``r`` at which doubling the rows to ``2r``
raises decode throughput (rows per second of step time) by less than ``min_gain`` (default 25%).
For a step time ``t(r) = a + b r`` (fixed part ``a``, per-row part ``b``) doubling gains
``2 (a + b r) / (a + 2 b r) - 1``, which falls below 25% once ``b r`` is about twice ``a``; on a
GPU, where ``t`` stays flat until the batch fills the device, the knee is where it stops being flat.
Measured figures are cached per model, device, dtype, backend and thread count
(``$SPECSCALE_KNEE_CACHE``, default ``$SPECSCALE_CACHE/knee``), since the profile takes seconds on a
CPU and the answer does not change between runs on one machine.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import xxhash

DEFAULT_MIN_GAIN = 0.25
DEFAULT_CONTEXT = 256
DEFAULT_REPEATS = 3
KNEE_DIR = "knee"
CACHE_VERSION = 1


@dataclass
class RowPoint:
    """Decode step time at one row count.

    rows: sequences decoding one token each per step. context_tokens: tokens cached per sequence
    (the shared prompt) before the timed steps. seconds: median step time over ``runs_s``.
    rows_per_s: ``rows / seconds`` (decode tokens/s).
    """

    rows: int
    context_tokens: int
    seconds: float
    rows_per_s: float
    runs_s: list[float] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class KneeProfile:
    """The measured curve and its knee.

    points: one :class:`RowPoint` per row count, ascending. knee: the speculation budget in rows
    (see the module docstring); the largest measured row count when throughput never stopped
    gaining. min_gain: the throughput gain per doubling below which rows stop being cheap.
    key: what the figures were measured on (model, device, dtype, backend, threads).
    seconds: wall time of the measurement. cached: read from the cache instead of measured.
    """

    points: list[RowPoint]
    knee: int
    min_gain: float
    key: dict
    seconds: float = 0.0
    cached: bool = False

    def to_dict(self) -> dict:
        return {"points": [p.to_dict() for p in self.points], "knee": self.knee, "min_gain": self.min_gain,
                "key": self.key, "seconds": round(self.seconds, 3), "cached": self.cached}


def row_counts(max_rows: int) -> list[int]:
    """1, 2, 4, ... up to ``max_rows`` (which is included even when it is no power of two).

    Raises:
        ValueError: ``max_rows < 1``.
    """
    if max_rows < 1:
        raise ValueError(f"max rows must be >= 1, got {max_rows}")
    counts = [1]
    while counts[-1] * 2 <= max_rows:
        counts.append(counts[-1] * 2)
    if counts[-1] != max_rows:
        counts.append(max_rows)
    return counts


def find_knee(points: list[RowPoint], min_gain: float = DEFAULT_MIN_GAIN) -> int:
    """The first row count whose next measured count gains less than ``min_gain`` in rows/s,
    scaled to a doubling (so a last, shorter step of the grid is judged fairly).

    Args:
        points: measured points, ascending rows, at least one.
        min_gain: throughput gain per doubling of the rows that still counts as cheap (0.25: 25%).

    Raises:
        ValueError: no points, or ``min_gain`` outside (0, 1).
    """
    if not points:
        raise ValueError("no measured points")
    if not 0 < min_gain < 1:
        raise ValueError(f"min_gain must be in (0, 1), got {min_gain}")
    for lo, hi in zip(points, points[1:]):
        ratio = hi.rows_per_s / lo.rows_per_s
        doublings = math.log2(hi.rows / lo.rows)
        if ratio ** (1 / doublings) - 1 < min_gain:
            return lo.rows
    return points[-1].rows


def profile_key(engine) -> dict:
    """What decides an engine's decode step time: model (its config's content), device, dtype,
    attention backend, CUDA graphs, torch threads. Two engines with equal keys share one profile."""
    import torch

    model = engine.model
    param = next(model.parameters())
    config = model.config.to_json_string(use_diff=False) if hasattr(model.config, "to_json_string") else str(
        model.config)
    return {
        "model": getattr(model.config, "_name_or_path", "") or type(model).__name__,
        "config_hash": xxhash.xxh3_64_hexdigest(config.encode()),
        "device": str(param.device),
        "device_name": torch.cuda.get_device_name(param.device) if param.device.type == "cuda" else "cpu",
        "dtype": str(param.dtype).removeprefix("torch."),
        "attention_backend": engine.runner.backend_name,
        "cuda_graphs": engine.runner.graphs is not None,
        "threads": torch.get_num_threads(),
    }


def measure_rows(engine_factory, counts: list[int], context: int = DEFAULT_CONTEXT,
                 repeats: int = DEFAULT_REPEATS, seed: int = 0, on_point=None,
                 stop_gain: float | None = None) -> list[RowPoint]:
    """Decode step time at each row count on a fresh engine.

    For each count ``r``: ``r`` sequences share one random prompt of ``context`` tokens (its KV is
    computed once and shared through the prefix cache, as beam candidates share theirs), are
    prefilled, take one untimed decode step (a new batch shape pays one-off set-up), then
    ``repeats`` decode steps are timed one by one; the median counts. Every timed step is checked to
    be pure decode of all ``r`` rows.

    Args:
        engine_factory: ``(max_rows, max_model_len) -> GenerationEngine``, a new engine over the model.
        counts: row counts, ascending. context: prompt tokens per sequence. repeats: timed steps.
        on_point: called with each :class:`RowPoint` as it is measured.
        stop_gain: stop once the points measured so far show a knee at this ``min_gain`` (the
            larger counts, the slowest to measure, cannot move it); None measures every count.

    Raises:
        RuntimeError: a timed step was not a pure decode step of every row (an engine too small).
    """
    from .model_runner import synchronize
    from .sequence import SamplingParams, StopCriteria

    engine = engine_factory(counts[-1], context + repeats + 8)
    vocab = engine.model.config.vocab_size
    rng = random.Random(seed)
    prompt = [rng.randrange(min(100, vocab - 1), vocab) for _ in range(context)]
    stop = StopCriteria(step_delimiter=None, max_tokens=repeats + 4, max_step_tokens=repeats + 4, ignore_eos=True)
    device = next(engine.model.parameters()).device
    points = []
    for rows in counts:
        # one sequence computes the prompt's KV; the others then find it in the prefix cache
        seqs = [engine.add(prompt, sampling=SamplingParams(temperature=0), stop=stop)]
        _prefill(engine, seqs)
        seqs += [engine.add(prompt, sampling=SamplingParams(temperature=0), stop=stop) for _ in range(rows - 1)]
        _prefill(engine, seqs)
        engine.step()  # untimed: the first step at a new shape
        runs = []
        for _ in range(repeats):
            synchronize(device)
            t0 = time.perf_counter()
            out = engine.step()
            synchronize(device)
            runs.append(time.perf_counter() - t0)
            if out.num_decode_tokens != rows or out.num_prefill_tokens:
                raise RuntimeError(f"profile step at {rows} rows ran {out.num_decode_tokens} decode and "
                                   f"{out.num_prefill_tokens} prefill tokens; the engine is too small")
        for s in seqs:
            engine.free(s)
        median = statistics.median(runs)
        point = RowPoint(rows, context, round(median, 6), round(rows / median, 3), [round(r, 6) for r in runs])
        points.append(point)
        if on_point is not None:
            on_point(point)
        if stop_gain is not None and find_knee(points, stop_gain) < point.rows:
            break
    return points


def _prefill(engine, seqs) -> None:
    while engine.num_waiting or any(s.num_computed < len(s.token_ids) - 1 for s in seqs):
        engine.step()


def knee_cache_dir() -> Path:
    """The folder of cached profiles: ``$SPECSCALE_KNEE_CACHE``, else ``$SPECSCALE_CACHE/knee``
    (default ``~/.cache/specscale/knee``)."""
    from core.models.cache import cache_root

    own = os.environ.get("SPECSCALE_KNEE_CACHE")
    return Path(own) if own else cache_root() / KNEE_DIR


def cache_path(key: dict, context: int) -> Path:
    """Where the profile of ``key`` at this context is cached (whatever rows it measured)."""
    name = xxhash.xxh3_64_hexdigest(json.dumps({**key, "context": context, "version": CACHE_VERSION},
                                               sort_keys=True).encode())
    return knee_cache_dir() / f"{name}.json"


def read_cached(path: Path, min_gain: float, max_rows: int) -> KneeProfile | None:
    """The cached profile at ``path`` with its knee found again at ``min_gain`` over the counts up to
    ``max_rows``; None when absent, unreadable (a damaged file is measured again, never trusted) or
    too short to show a knee there (a profile that stopped at its own knee, read at another gain, or
    one measured over fewer rows)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        points = [RowPoint(**p) for p in data["points"] if p["rows"] <= max_rows]
        knee = find_knee(points, min_gain)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if knee == points[-1].rows and knee < max_rows:
        return None
    return KneeProfile(points, knee, min_gain, data["key"], data.get("seconds", 0.0), cached=True)


def write_cached(path: Path, profile: KneeProfile) -> None:
    """Store ``profile`` atomically (a half-written file is never read); a read-only cache is skipped."""
    from core.io.durable import write_atomically

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, (json.dumps(profile.to_dict(), indent=1) + "\n").encode())
    except OSError:
        pass


def engine_knee(engine, max_rows: int | None = None, context: int = DEFAULT_CONTEXT,
                min_gain: float = DEFAULT_MIN_GAIN, repeats: int = DEFAULT_REPEATS, use_cache: bool = True,
                on_point=None, whole_curve: bool = False) -> KneeProfile:
    """The knee of ``engine``'s model on its device: read from the cache, or measured on a second,
    small engine over the same model (the run's engine, its counters and its prefix cache are not
    touched) and cached.

    Args:
        engine: the run's generator engine. max_rows: the largest row count measured (default the
            engine's ``max_num_seqs``; a knee can never exceed it). context: prompt tokens per row
            (at most what the engine's ``max_model_len`` leaves after the timed steps).
        min_gain / repeats: see :func:`find_knee` and :func:`measure_rows`.
        use_cache: read and write the cache (:func:`knee_cache_dir`).
        whole_curve: measure every row count (``profile-knee``); otherwise the profile stops at the
            knee, and a cached profile is used when it has one.
    """
    from dataclasses import replace

    from .engine import EngineConfig, GenerationEngine

    max_rows = max_rows or engine.config.max_num_seqs
    # a short-context model is profiled at the context it can hold (prompt, timed steps, margin)
    context = max(1, min(context, engine.max_model_len - repeats - 8))
    key = profile_key(engine)
    path = cache_path(key, context)
    if use_cache and not whole_curve:
        cached = read_cached(path, min_gain, max_rows)
        if cached is not None:
            return cached

    def factory(rows: int, max_len: int) -> GenerationEngine:
        block = engine.config.block_size
        blocks = rows * (-(-(max_len - context) // block) + 1) + -(-max_len // block) + 2
        cfg = replace(engine.config, num_blocks=blocks, kv_grow=False, kv_cache_share=0.0, max_num_seqs=rows,
                      max_num_batched_tokens=max(engine.config.max_num_batched_tokens, context + rows * block),
                      max_model_len=max_len, enable_prefix_caching=True, max_num_read_rows=None)
        return GenerationEngine(engine.model, cfg, engine.tokenizer)

    if not whole_curve:
        logging.getLogger("specscale.notes").info(
            "measuring the generator's decode step time against batch rows for the speculation budget "
            "(once per model and device)...")
    t0 = time.perf_counter()
    points = measure_rows(factory, row_counts(max_rows), context, repeats, on_point=on_point,
                          stop_gain=None if whole_curve else min_gain)
    profile = KneeProfile(points, find_knee(points, min_gain), min_gain, key, time.perf_counter() - t0)
    if use_cache:
        write_cached(path, profile)
    return profile

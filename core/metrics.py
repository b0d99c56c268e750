"""The numbers a `solve` run reports: one snapshot dict read from the run's counters.

:func:`snapshot` only reads (driver :class:`~core.search.driver.RunStats`, the generator engine, the
verifier and the per-problem result counts), so the live dashboard may call it as often as it likes
without changing the run; :func:`final_summary` keeps the cumulative part for ``OUT/summary.json``.
:class:`TokenRate` is the one piece with state: output tokens/s over a sliding time window.
"""

from __future__ import annotations

import heapq
import math
import statistics
import time
from collections import deque

from core.search.config import PICK_FIELDS

# EP's two rules (SpecScale paper section 4.1): rank below k scored candidates, or k perfect scores
EP_RULES = ("ep", "perfect-score")

# snapshot fields that describe the moment, not the run: left out of the final summary
LIVE_ONLY = ("eta_s", "problems_in_flight", "tokens_per_s_now", "running_sequences", "waiting_sequences",
             "logical_candidates", "kv_blocks_used", "prm_kv_blocks_used", "queue_tasks", "queue_tokens")


class TokenRate:
    """Output tokens/s over the last ``window_s`` seconds (default 8) from ``(time, total tokens)`` samples.

    Keeps the newest sample that is at least ``window_s`` old as the window's left edge, so the rate
    covers the whole window even when samples are sparse.
    """

    def __init__(self, window_s: float = 8.0):
        if window_s <= 0:
            raise ValueError(f"window must be > 0 seconds, got {window_s}")
        self.window_s = window_s
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, t: float, total_tokens: int) -> float | None:
        """Record the running total at time ``t`` (seconds, monotonic); returns the window's rate.

        Returns None until two samples at different times exist.
        """
        self._samples.append((t, total_tokens))
        while len(self._samples) > 2 and self._samples[1][0] <= t - self.window_s:
            self._samples.popleft()
        return self.rate()

    def rate(self) -> float | None:
        """Tokens/s between the oldest kept and the newest sample, or None without a time span."""
        if len(self._samples) < 2:
            return None
        (t0, n0), (t1, n1) = self._samples[0], self._samples[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else None

    def rate_at(self, now: float) -> float | None:
        """The window's rate at time ``now``, taking the running total as unchanged since the last
        sample (so the rate falls while no token is produced, e.g. during a long PRM flush).

        Safe to call from another thread than :meth:`add`'s. None without a sample before ``now``.
        """
        samples = list(self._samples)  # one C-level copy: atomic under the GIL
        if not samples or now <= samples[0][0]:
            return self.rate()
        n_last = samples[-1][1]
        left = samples[0]
        for sample in samples:
            if sample[0] <= now - self.window_s:
                left = sample
        return (n_last - left[1]) / (now - left[0])


ETA_MIN_ANSWERS = 3
ETA_MAX_RELATIVE_ERROR = 0.2  # of the mean answer time (its standard error over the mean)


def estimate_eta(remaining: int, problem_times: list[float], in_flight_ages: list[float],
                 slots: int) -> float | None:
    """Seconds until the last problem is answered; None while no estimate would hold.

    The problems answered first are the short ones (they finish first), so the mean of their times
    says a problem takes 2-4x less than it does. The mean counted instead is the search time spent on
    every problem, answered or still in flight, per problem answered: the estimate of a mean time
    that counts unfinished problems too (exact for exponentially distributed times). The work left
    is then laid out on the ``slots`` problems searched at once: a problem in flight needs what the
    mean leaves after its age (at least a quarter of the mean), a waiting one the whole mean, each
    taking the first free slot; the estimate is when the last one ends. On simulated runs
    (``tools/eta-simulation``: problem times log-normal, sigma 0.5; 6 to 300 problems, 2 to 32 at
    once) its median is 0.9-1.3x the time actually left, where the answered problems' mean with the
    ones in flight counted as partly done gave 0.25-0.65x.

    There is no estimate while it would be guesswork: before :data:`ETA_MIN_ANSWERS` answers; while
    the answered problems' mean time is known to worse than :data:`ETA_MAX_RELATIVE_ERROR` (standard
    error over the mean); while fewer problems have been answered than half of those in flight
    (their time spent outweighs what is known); and once every remaining problem is in flight (the
    ones still running are the long ones, and how long is not known).

    Args:
        remaining: problems of the input without a record yet (in flight included).
        problem_times: admission-to-answer seconds of each problem this process answered (error
            records take no search time and are not included).
        in_flight_ages: seconds each problem in flight has been searched.
        slots: problems searched at once at most (``--max-concurrent``, times the replicas).

    Returns:
        The estimate in seconds; 0.0 when nothing remains; None as said above.
    """
    if remaining <= 0:
        return 0.0
    answered = len(problem_times)
    if (answered < ETA_MIN_ANSWERS or remaining <= len(in_flight_ages) or 2 * answered < len(in_flight_ages)
            or _relative_error(problem_times) > ETA_MAX_RELATIVE_ERROR):
        return None
    # > 0: the relative-error check needs a positive mean of the answer times
    mean_s = (sum(problem_times) + sum(in_flight_ages)) / answered
    ends = sorted(max(mean_s - age, mean_s / 4) for age in in_flight_ages)
    ends += [0.0] * max(0, max(slots, 1) - len(ends))
    heapq.heapify(ends)
    for _ in range(remaining - len(in_flight_ages)):
        heapq.heappush(ends, heapq.heappop(ends) + mean_s)
    return max(ends)


def _relative_error(values: list[float]) -> float:
    """Standard error of the mean of ``values`` over the mean (inf when undefined)."""
    mean = statistics.fmean(values) if values else 0.0
    if len(values) < 2 or mean <= 0:
        return math.inf
    return statistics.stdev(values) / mean / math.sqrt(len(values))


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def accuracy_at_n(counts: dict) -> dict[str, dict[str, float | None]]:
    """Accuracy of ``pred`` and of every selection rule over the first n completions of each record.

    From the ``graded@<n>``, ``correct@<n>`` and ``correct_<rule>@<n>`` counts of
    :func:`core.search.records.count_record`: ``{"1": {"accuracy": ..., "accuracy_best": ...,
    "accuracy_weighted": ..., "accuracy_majority": ...}, "2": ..., ...}``, n ascending; empty when
    no graded record has subsets.
    """
    sizes = sorted((int(k.split("@", 1)[1]) for k in counts if k.startswith("graded@")))
    out = {}
    for n in sizes:
        graded = counts[f"graded@{n}"]
        out[str(n)] = {"accuracy": _ratio(counts.get(f"correct@{n}", 0), graded),
                       **{f"accuracy_{rule}": _ratio(counts.get(f"correct_{rule}@{n}", 0), graded)
                          for rule in PICK_FIELDS}}
    return out


def run_progress(counts: dict, total: int | None, wall_s: float, eta_s: float | None, generated_tokens: int,
                 tokens_per_s_now: float | None, problems_in_flight: int) -> dict:
    """The answer counts, accuracies, clock and token rates of a run (the first keys of :func:`snapshot`).

    ``counts`` as in :func:`snapshot`; an ``accuracy_<rule>`` key comes for every ``correct_<rule>``
    count of a selection rule in ``PICK_FIELDS``, and ``accuracy_at_n`` from the ``graded@<n>``
    counts (see :func:`accuracy_at_n`). Times in seconds, rates in tokens per second;
    ``problems_in_flight``: problems being searched now.
    """
    return {
        "problems_total": total,
        "problems_answered": counts["done"],
        "errors": counts["errors"],
        "graded": counts["graded"],
        "correct": counts["correct"],
        "accuracy": _ratio(counts["correct"], counts["graded"]),
        # the accuracy every selection rule would have had (solve grades all three picks)
        **{f"accuracy_{rule}": _ratio(counts[f"correct_{rule}"], counts["graded"])
           for rule in PICK_FIELDS if f"correct_{rule}" in counts},
        "accuracy_at_n": accuracy_at_n(counts),
        "wall_s": wall_s,
        "eta_s": eta_s,
        "problems_in_flight": problems_in_flight,
        "generated_tokens": generated_tokens,
        "tokens_per_s": _ratio(generated_tokens, wall_s),
        "tokens_per_s_now": tokens_per_s_now,
    }


def snapshot(stats, engine, verifier, counts: dict, total: int | None = None,
             tokens_per_s_now: float | None = None, now: float | None = None) -> dict:
    """All dashboard figures of a run at this moment, as a flat JSON-ready dict.

    Args:
        stats: the driver's :class:`~core.search.driver.RunStats`.
        engine: the generator :class:`~core.engine.engine.GenerationEngine`.
        verifier: the :class:`~core.verify.verifier.Verifier` (its engine is the PRM's).
        counts: per-problem results of the whole run so far (records an earlier run wrote and a
            resumed run kept included): ``done`` (answer records), ``errors`` (error records),
            ``graded`` (answers with a gold answer) and ``correct``.
        total: problems in the whole input, None when unknown (stdin).
        tokens_per_s_now: the recent rate (see :class:`TokenRate`), None when not measured.
        now: ``time.perf_counter()`` value to measure the wall time at (default: now).

    Returns:
        Keys (times in seconds, sizes in tokens or KV blocks; None where undefined): problems_total,
        problems_answered, errors, graded, correct, accuracy (of ``pred``), accuracy_best,
        accuracy_weighted and accuracy_majority (of each selection rule, when ``counts`` has
        ``correct_<rule>``), accuracy_at_n (the same over each record's first n completions, see
        :func:`accuracy_at_n`), wall_s, eta_s, generated_tokens,
        tokens_per_s, tokens_per_s_now, engine_steps, preemptions and prm_preemptions (sequences
        preempted for lack of KV blocks in the generator and the PRM engine), running_sequences,
        waiting_sequences, logical_candidates (candidates carried by running sequences: more than
        the sequences under CD), kv_blocks_used/_total/_peak and prm_kv_blocks_used/_total/_peak,
        queue_tasks, queue_tokens, prm_calls, flushes_by_trigger, prm_tasks, prm_prefills,
        prm_input_tokens, prm_computed_tokens (after the prefix cache), prm_mean_batch_tasks,
        prm_mean_batch_tokens (input tokens per PRM call), prm_mean_batch_computed_tokens,
        prm_queued_s (summed over tasks), pruned_ep (candidates pruned by EP's two rules),
        pruned_by_rule and cancelled_by_rule (see :class:`~core.search.beam_search.PruneCounts`),
        cd_saved_tokens, speculation_budget (tokens per generator step speculative work may fill up to,
        None: no budget), speculation_budget_source (``measured``, ``cached``, ``set`` or ``off``),
        speculation_bound_steps (generator steps in which the budget held speculative work back),
        generation_s, verification_s, peak_rss_bytes (the most resident memory
        this process has held, see :func:`core.memory.peak_rss_bytes`) and grading_timeouts
        (math-verify calls stopped at their time limit, see :func:`core.grading.equivalence.grading_stats`).
    """
    from core.grading.equivalence import grading_stats
    from core.memory import peak_rss_bytes

    now = now if now is not None else time.perf_counter()
    wall = now - stats.started
    finished = counts["done"] + counts["errors"]
    eta = None
    if total is not None:
        eta = estimate_eta(max(0, total - finished), stats.problem_times,
                           [now - t0 for t0 in stats.in_flight.values()], stats.max_in_flight)
    pool, prm_pool = engine.pool, verifier.engine.pool
    vs = verifier.stats
    pruned = dict(sorted(stats.prunes.pruned.items()))
    return {
        **run_progress(counts, total, wall, eta, stats.generated_tokens, tokens_per_s_now, len(stats.in_flight)),
        "engine_steps": stats.engine_steps,
        "preemptions": engine.num_preemptions,
        "prm_preemptions": verifier.engine.num_preemptions,
        "running_sequences": engine.num_running,
        "waiting_sequences": engine.num_waiting,
        "logical_candidates": engine.num_running_candidates,
        "kv_blocks_used": pool.num_used,
        "kv_blocks_total": pool.num_blocks,
        "kv_blocks_peak": pool.peak_used,
        "prm_kv_blocks_used": prm_pool.num_used,
        "prm_kv_blocks_total": prm_pool.num_blocks,
        "prm_kv_blocks_peak": prm_pool.peak_used,
        "queue_tasks": len(verifier.queue),
        "queue_tokens": verifier.queued_tokens,
        "prm_calls": vs.flushes,
        "flushes_by_trigger": dict(sorted(vs.by_trigger.items())),
        "prm_tasks": vs.tasks,
        "prm_prefills": vs.prefills,
        "prm_input_tokens": vs.input_tokens,
        "prm_computed_tokens": vs.computed_tokens,
        "prm_mean_batch_tasks": _ratio(vs.tasks, vs.flushes),
        "prm_mean_batch_tokens": _ratio(vs.input_tokens, vs.flushes),
        "prm_mean_batch_computed_tokens": _ratio(vs.computed_tokens, vs.flushes),
        "prm_queued_s": vs.queued_seconds,
        "pruned_ep": sum(pruned.get(rule, 0) for rule in EP_RULES),
        "pruned_by_rule": pruned,
        "cancelled_by_rule": dict(sorted(stats.prunes.cancelled.items())),
        "cd_saved_tokens": stats.cd_saved_tokens,
        "speculation_budget": stats.speculation_budget,
        "speculation_budget_source": stats.speculation_budget_source,
        "speculation_bound_steps": engine.scheduler.num_budget_bound_steps,
        "generation_s": stats.generation_seconds,
        "verification_s": vs.seconds,
        "peak_rss_bytes": peak_rss_bytes(),
        "grading_timeouts": grading_stats()["timeouts"],
    }


def final_summary(snap: dict, config: dict, ndigits: int = 4) -> dict:
    """``OUT/summary.json`` content: the cumulative fields of ``snap`` plus ``config``.

    Floats are rounded to ``ndigits`` decimals; the moment-only fields (:data:`LIVE_ONLY`) are left out,
    also from the rows of a scaled-out run's ``replicas`` table.
    """
    out = {k: _rounded(v, ndigits) for k, v in snap.items() if k not in LIVE_ONLY}
    if "replicas" in snap:  # a scaled-out run's per-replica table (core.distributed.figures)
        out["replicas"] = [{k: (round(v, ndigits) if isinstance(v, float) else v) for k, v in row.items()
                            if k not in LIVE_ONLY and k != "in_flight"} for row in snap["replicas"]]
    out["config"] = config
    return out


def _rounded(value, ndigits: int):
    """``value`` with its floats rounded to ``ndigits``, inside dicts too (``accuracy_at_n``)."""
    if isinstance(value, float):
        return round(value, ndigits)
    if isinstance(value, dict):
        return {k: _rounded(v, ndigits) for k, v in value.items()}
    return value

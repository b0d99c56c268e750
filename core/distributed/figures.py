"""A scaled-out run's figures: the replicas' snapshots added up, plus one row per replica.

Each replica sends its own :func:`core.metrics.snapshot` (its engines, its counters). The run's
totals have the same keys, so the dashboard and ``summary.json`` read them as they read a
one-process run: counters and sizes are summed over replicas (a lost replica's last figures
included: its work was done), rates and means are recomputed from the sums, memory peaks are the
largest of any process, and the answer counts, wall time and ETA come from the driver, which
alone sees every record.
"""

from __future__ import annotations

from core.metrics import estimate_eta, run_progress

# recomputed from the sums (a sum of ratios means nothing)
_RATIOS = {"prm_mean_batch_tasks": ("prm_tasks", "prm_calls"), "prm_mean_batch_tokens": ("prm_input_tokens", "prm_calls"),
           "prm_mean_batch_computed_tokens": ("prm_computed_tokens", "prm_calls")}
# the largest over the processes (a peak of one process, not a total)
_MAXIMA = ("peak_rss_bytes", "speculation_budget")
# owned by the driver: the whole run's records and clock
_DRIVER_FIELDS = ("problems_total", "problems_answered", "errors", "graded", "correct", "accuracy", "wall_s", "eta_s",
                  "tokens_per_s", "tokens_per_s_now")
# one replica's row on the dashboard and in summary.json (besides who and where it is)
ROW_FIELDS = ("problems_answered", "errors", "generated_tokens", "tokens_per_s", "wall_s", "generation_s",
              "verification_s", "prm_calls", "engine_steps", "preemptions", "kv_blocks_used", "kv_blocks_total",
              "kv_blocks_peak", "prm_kv_blocks_used", "prm_kv_blocks_total", "prm_kv_blocks_peak", "peak_rss_bytes")


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def replica_row(info: dict, snap: dict | None, in_flight: int) -> dict:
    """One replica's figures: ``replica`` (index), ``pid``, ``node``, ``device``, ``threads``,
    ``status`` (``starting``, ``running``, ``lost``), ``in_flight`` (problems handed to it and not
    yet returned) and :data:`ROW_FIELDS` from its latest snapshot (None before the first)."""
    row = {k: info.get(k) for k in ("replica", "pid", "node", "device", "threads", "status")}
    row["in_flight"] = in_flight
    for key in ROW_FIELDS:
        row[key] = snap.get(key) if snap else None
    return row


def merge_snapshots(snaps: list[dict], rows: list[dict], counts: dict, total: int | None, wall_s: float,
                    tokens_per_s_now: float | None, problem_times: list[float], in_flight_ages: list[float],
                    slots: int, driver_peak_rss: int | None) -> dict:
    """The run's snapshot from its replicas' (same keys as :func:`core.metrics.snapshot`, plus ``replicas``).

    Args:
        snaps: the latest snapshot of every replica that sent one (lost ones included).
        rows: :func:`replica_row` of every replica, in replica order (the ``replicas`` field).
        counts: the whole run's record counts (see :func:`core.metrics.snapshot`).
        total: problems in the input (None: unknown). wall_s: seconds since the search began.
        tokens_per_s_now: the driver's recent rate of the summed generated tokens (None: not measured).
        problem_times, in_flight_ages, slots: for the ETA (see :func:`core.metrics.estimate_eta`).
        driver_peak_rss: the driver process's own peak resident memory in bytes.
    """
    merged: dict = {}
    for snap in snaps:
        for key, value in snap.items():
            if key in _DRIVER_FIELDS or key.startswith("accuracy") or key in _RATIOS:
                continue
            if key in _MAXIMA:
                if value is not None:
                    merged[key] = max(merged.get(key) or 0, value)
                else:
                    merged.setdefault(key, None)  # none in any replica (a run without a budget)
            elif isinstance(value, dict):
                into = merged.setdefault(key, {})
                for k, v in value.items():
                    into[k] = into.get(k, 0) + v
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                merged[key] = merged.get(key, 0) + value
            elif key not in merged:
                merged[key] = value
    for key, value in list(merged.items()):
        if isinstance(value, dict):
            merged[key] = dict(sorted(value.items()))
    for key, (num, den) in _RATIOS.items():
        merged[key] = _ratio(merged.get(num, 0), merged.get(den, 0))
    peaks = [p for p in (merged.get("peak_rss_bytes"), driver_peak_rss) if p is not None]
    merged["peak_rss_bytes"] = max(peaks) if peaks else None
    generated = merged.get("generated_tokens", 0)
    finished = counts["done"] + counts["errors"]
    eta = None
    if total is not None:
        eta = estimate_eta(max(0, total - finished), problem_times, in_flight_ages, slots)
    out = run_progress(counts, total, wall_s, eta, generated, tokens_per_s_now, len(in_flight_ages))
    out.update({k: v for k, v in merged.items() if k not in out})
    out["replicas"] = rows
    return out

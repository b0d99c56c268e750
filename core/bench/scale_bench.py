"""`specscale bench scale`: the same problems searched by 1, 2, ... workers, in one run.

For each worker count K the problems are solved as `solve --workers K` would (records graded
where they were searched): K = 1 in this process with torch's own thread count (every core), K > 1
on K replicas (:class:`~core.distributed.pool.ReplicaPool`), each with its share of the cores or one
GPU. A run's clock starts when the first problem is handed out and stops at the last record, so
model loading and replica start-up are reported apart (``load_s``) and not counted.

Figures per K: problems/s and output tokens/s (every sampled token), their ratio to K = 1, and
whether the records equal K = 1's (apart from ``time_s`` and order). On one machine of C cores,
K replicas share the same cores as the one in-process worker, so the ratio measures the cost of
scaling out (the goal: >= 0.9); on K GPUs it measures the speed-up (the goal: >= 0.9 K).
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from typing import Callable, Sequence

from core.cpu_load import torch_threads
from core.io.problems import Problem


# record fields that carry fp32 scores (rounded to 6 decimals): a score computed in a batch of
# another shape can differ in its last digit (docs/design.md, "Scale-out")
SCORE_FIELDS = ("step_scores", "path_score", "vote_weight")


def _without_timing(records: list[dict]) -> list[dict]:
    return sorted(({k: v for k, v in r.items() if k != "time_s"} for r in records), key=lambda r: str(r["id"]))


def record_differences(got: list[dict], want: list[dict]) -> dict[str, int]:
    """How many values of each record field differ between two runs' records (``time_s`` aside).

    Keys are field names, ``completions.<field>`` for the fields of the N completions, and ``id``
    when the two runs did not answer the same problems. Empty when the records are equal.
    """
    got, want = _without_timing(got), _without_timing(want)
    if [r["id"] for r in got] != [r["id"] for r in want]:
        return {"id": len({r["id"] for r in got} ^ {r["id"] for r in want}) or 1}
    diffs: dict[str, int] = {}
    for a, b in zip(got, want):
        for key in a.keys() | b.keys():
            if key == "completions" and isinstance(a.get(key), list) and isinstance(b.get(key), list):
                if len(a[key]) != len(b[key]):
                    diffs[key] = diffs.get(key, 0) + 1
                    continue
                for ca, cb in zip(a[key], b[key]):
                    for sub in ca.keys() | cb.keys():
                        if ca.get(sub) != cb.get(sub):
                            diffs[f"{key}.{sub}"] = diffs.get(f"{key}.{sub}", 0) + 1
            elif a.get(key) != b.get(key):
                diffs[key] = diffs.get(key, 0) + 1
    return dict(sorted(diffs.items()))


def run_in_process(models: tuple, settings, search_cfg, policy: str, problems: Sequence[Problem],
                   max_concurrent: int) -> dict:
    """One in-process run over ``problems`` on fresh engines of the loaded ``models`` (generator, PRM).

    Returns:
        ``wall_s`` (seconds from the first admission to the last record), ``generated_tokens`` and
        ``records`` (graded answer and error records, as `solve` writes them).
    """
    from core.distributed.replica import start_grading
    from core.search.driver import SearchDriver
    from core.search.records import answer_record, error_record
    from core.solver import build_runtime

    rt = build_runtime(settings, generator=models[0], prm=models[1])
    start_grading()  # as a replica does before its clock starts
    records: list[dict] = []
    driver = SearchDriver(rt.engine, rt.generator.tokenizer, rt.generator.eos_token_ids, rt.verifier, rt.scorer,
                          search_cfg, policy=policy, max_concurrent=max_concurrent,
                          on_result=lambda p, r, s: records.append(answer_record(p, r, s)),
                          on_error=lambda err: records.append(error_record(err)))
    t0 = time.perf_counter()
    stats = driver.run(problems)
    return {"wall_s": time.perf_counter() - t0, "generated_tokens": stats.generated_tokens, "records": records}


def run_replicas(session, settings, search_cfg, policy: str, problems: Sequence[Problem], workers: int,
                 max_concurrent: int) -> dict:
    """One run over ``problems`` on ``workers`` fresh replicas of ``session`` (stopped afterwards).

    Returns:
        ``load_s`` (replica start-up and model loading), ``wall_s``, ``generated_tokens``,
        ``records``, and ``threads`` (torch CPU threads per replica; None on GPUs).

    Raises:
        ValueError: a model cannot be loaded, or too few GPUs (see :meth:`ReplicaPool.start`).
        ReplicasLost, ReplicaFailed: see :meth:`ReplicaPool.run`.
    """
    from core.distributed.pool import ReplicaPool

    pool = ReplicaPool(session, settings, search_cfg, policy, workers, max_concurrent, traces=False)
    records: list[dict] = []
    try:
        t0 = time.perf_counter()
        infos = pool.start()
        load_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        pool.run(problems, lambda record, trace: records.append(record), records.append)
        wall = time.perf_counter() - t0
        generated = pool.generated_tokens
    finally:
        pool.close()
    return {"load_s": load_s, "wall_s": wall, "generated_tokens": generated, "records": records,
            "threads": infos[0].get("threads")}


def run_scale_benchmark(settings, search_cfg, policy: str, problems: Sequence[Problem], worker_counts: Sequence[int],
                        max_concurrent: int, ray_address: str | None = None, repeats: int = 1,
                        on_run: Callable[[dict], None] | None = None) -> dict:
    """Search ``problems`` with each worker count in ``worker_counts``, ``repeats`` rounds of all.

    Rounds run every count once each, so a slow spell of a shared machine hits all of them alike;
    a count's figures are those of its median run by wall time.

    Args:
        settings: :class:`core.settings.ModelSettings`. search_cfg: :class:`core.search.config.SearchConfig`.
        policy: policy name. problems: valid problems, the same for every run.
        worker_counts: e.g. ``[1, 2]``; 1 runs in this process, more on Ray replicas.
        max_concurrent: problems searched at once by each worker.
        ray_address: join this Ray cluster instead of starting a local one (counts > 1).
        repeats: rounds. on_run: called with each run's row as it ends.

    Returns:
        ``runs``: one row per count: ``workers``, ``threads_per_worker``, ``load_s``, ``wall_s``,
        ``problems``, ``problems_per_s``, ``generated_tokens``, ``tokens_per_s``, ``walls`` (every
        round's), ``vs_one_worker`` (tokens/s over the 1-worker run's; None without one),
        ``same_records_as_one_worker``, ``same_answers_as_one_worker`` (equal but for the fp32
        scores, :data:`SCORE_FIELDS`) and ``differences_from_one_worker`` (see
        :func:`record_differences`; all three None without a 1-worker run); ``cpus`` of this machine.

    Raises:
        ValueError: a model cannot be loaded, too few GPUs for a count, or a worker count < 1.
    """
    from core.distributed.pool import RaySession, local_cpus

    if any(k < 1 for k in worker_counts):
        raise ValueError("worker counts must be >= 1")
    results: dict[int, list[dict]] = {k: [] for k in worker_counts}
    loads: dict[int, float] = {}
    models = None
    with ExitStack() as stack:
        session = None
        for _ in range(repeats):
            for k in worker_counts:
                if k == 1:
                    if models is None:
                        from core.solver import load_models

                        t0 = time.perf_counter()
                        models = load_models(settings)
                        loads[1] = time.perf_counter() - t0
                    run = run_in_process(models, settings, search_cfg, policy, problems, max_concurrent)
                    run["threads"] = torch_threads()
                else:
                    if session is None:
                        session = stack.enter_context(RaySession(ray_address, settings.device))
                    run = run_replicas(session, settings, search_cfg, policy, problems, k, max_concurrent)
                    loads[k] = run["load_s"]
                results[k].append(run)
                if on_run is not None:
                    on_run(_row(k, run, loads.get(k), len(problems)))
    rows = []
    base = None
    for k in worker_counts:
        runs = sorted(results[k], key=lambda r: r["wall_s"])
        median = runs[(len(runs) - 1) // 2]
        row = _row(k, median, loads.get(k), len(problems))
        row["walls"] = [round(r["wall_s"], 3) for r in results[k]]
        row["_records"] = median["records"]
        rows.append(row)
        if k == 1:
            base = row
    for row in rows:
        row["vs_one_worker"] = round(row["tokens_per_s"] / base["tokens_per_s"], 3) if base else None
        row["problems_per_s_vs_one_worker"] = (round(row["problems_per_s"] / base["problems_per_s"], 3)
                                               if base else None)
        diffs = record_differences(row["_records"], base["_records"]) if base else None
        row["same_records_as_one_worker"] = (not diffs) if base else None
        row["same_answers_as_one_worker"] = (not any(k.split(".")[-1] not in SCORE_FIELDS for k in diffs)
                                             if base else None)
        row["differences_from_one_worker"] = diffs
    for row in rows:
        del row["_records"]
    return {"cpus": local_cpus(), "runs": rows}


def _row(workers: int, run: dict, load_s: float | None, num_problems: int) -> dict:
    wall = run["wall_s"]
    return {"workers": workers, "threads_per_worker": run.get("threads"),
            "load_s": round(load_s, 3) if load_s is not None else None, "wall_s": round(wall, 3),
            "problems": num_problems, "problems_per_s": round(num_problems / wall, 4),
            "generated_tokens": run["generated_tokens"], "tokens_per_s": round(run["generated_tokens"] / wall, 2),
            "errors": sum(1 for r in run["records"] if "error" in r)}

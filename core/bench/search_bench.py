"""Runs search policies side by side on one loaded runtime and measures them (paper §5.2-§5.4).

Two kinds of run per policy:

* throughput: every problem issued at once (``max_concurrent`` admitted at a time), as in §5.2;
* latency: problems arrive as a Poisson process at a given rate (problems/s), as in §5.3; each
  problem's latency runs from its arrival (not its admission) to its answer.

Token counts used below:

* ``output_tokens``: every token the generator sampled for the run, speculative and discarded ones
  included (logical tokens: with CD one physical row can stand for several candidates);
* ``answer_tokens``: tokens of the N completions returned per problem. All policies search the same
  tree (candidate seeds come from tree paths), so this is the same useful work for every policy
  and ``answer_tokens / wall`` ("goodput") compares policies by wall time alone.
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import time
from typing import Any, Sequence

from core.search.config import PICK_FIELDS as PICKS

# policy spec name -> (policy, SearchConfig overrides)
POLICY_SPECS: dict[str, tuple[str, dict]] = {
    "non-spec": ("non-spec", {}),
    "naive-spec": ("naive-spec", {}),
    "fasttts": ("fasttts", {}),
    "specscale:ep": ("specscale", {"early_pruning": True, "dedup": False, "lazy_verification": False}),
    "specscale:cd": ("specscale", {"early_pruning": False, "dedup": True, "lazy_verification": False}),
    "specscale:ep+cd": ("specscale", {"early_pruning": True, "dedup": True, "lazy_verification": False}),
    "specscale:lv": ("specscale", {"early_pruning": False, "dedup": False, "lazy_verification": True}),
    "specscale:ep+cd+lv": ("specscale", {"early_pruning": True, "dedup": True, "lazy_verification": True}),
}
BASELINE = "non-spec"


def policy_spec(name: str) -> tuple[str, dict]:
    """``(policy, SearchConfig overrides)`` of a policy spec name: one of :data:`POLICY_SPECS`,
    optionally with ``@BUDGET`` for a speculative policy's speculation budget (``@off``, ``@auto``,
    ``@64``; without it the run's ``--speculation-budget``), e.g. ``specscale:ep+cd+lv@off``.

    Raises:
        ValueError: an unknown name, a budget on a policy without one, or a malformed budget.
    """
    from core.search.config import parse_speculation_budget
    from core.search.policy import BUDGETED

    base, at, budget = name.partition("@")
    if base not in POLICY_SPECS:
        raise ValueError(f"unknown policy {name}; choose from {', '.join(POLICY_SPECS)} (speculative ones may "
                         f"end in @off, @auto or @ROWS)")
    policy, overrides = POLICY_SPECS[base]
    if not at:
        return policy, overrides
    if policy not in BUDGETED:
        raise ValueError(f"{name}: only {' and '.join(BUDGETED)} have a speculation budget")
    try:
        return policy, {**overrides, "speculation_budget": parse_speculation_budget(budget)}
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def parse_policies(text: str) -> list[str]:
    """Policy spec names (:func:`policy_spec`) from a comma-separated list, in order, without repeats.

    Raises:
        ValueError: an unknown or malformed name (the message lists the known ones).
    """
    names = list(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    if not names:
        raise ValueError(f"unknown policy (none given); choose from {', '.join(POLICY_SPECS)}")
    for name in names:
        policy_spec(name)
    return names


def poisson_arrivals(n: int, rate: float, seed: int = 0) -> list[float]:
    """Arrival times (seconds from the start) of ``n`` problems in a Poisson process of ``rate``/s.

    The first problem arrives at 0; gaps are exponential with mean ``1/rate``.

    Raises:
        ValueError: ``rate`` is not positive.
    """
    if rate <= 0:
        raise ValueError(f"request rate must be > 0 problems/s, got {rate}")
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(n):
        if i:
            t += rng.expovariate(rate)
        out.append(t)
    return out


class _Sampler:
    """Time-weighted mean of the logical candidates the generator engine holds between iterations."""

    def __init__(self, engine):
        self.engine = engine
        self.last = time.perf_counter()
        self.weighted = 0.0
        self.total = 0.0

    def __call__(self, _stats) -> None:
        now = time.perf_counter()
        live = self.engine.num_live_candidates
        self.weighted += live * (now - self.last)
        self.total += now - self.last
        self.last = now

    @property
    def mean(self) -> float:
        return self.weighted / self.total if self.total else 0.0


def step_wait_seconds(nodes) -> list[float]:
    """Per expanded candidate: seconds from the end of its step to the start of its first child's step.

    Args:
        nodes: a tree's nodes (:class:`core.search.tree.Node`); the root and childless nodes are skipped.
    """
    out = []
    for n in nodes:
        if n.parent is None or not n.children or n.t_finish is None:
            continue
        out.append(max(0.0, min(c.t_start for c in n.children) - n.t_finish))
    return out


def run_policy(models: tuple, settings, problems: Sequence, search_cfg, policy: str, max_concurrent: int,
               arrivals: Sequence[float] | None = None, subsets: Sequence[int] = ()) -> dict[str, Any]:
    """Run one policy over ``problems`` on fresh engines (empty KV pools and prefix caches).

    Args:
        models: ``(generator, prm)`` :class:`core.models.loader.LoadedModel` pair, loaded once per benchmark.
        settings: :class:`core.solver.ModelSettings` sizing the engines.
        problems: :class:`core.io.problems.Problem` list.
        arrivals: per-problem arrival times in seconds (a latency run), or None (all at once).
        subsets: sizes k at which the picks over each problem's first k completions are graded
            too (:meth:`core.search.beam_search.BeamSearch.subset`), e.g. the smaller N of a best-of-N sweep.

    Returns:
        Counters and timings (seconds, tokens, tokens/s); see the module docstring for token kinds.
        With ``subsets``, ``at_n``: per k, ``accuracy`` (of ``pred``), ``accuracy_<rule>`` and
        ``answer_tokens`` (the generated tokens of the first k completions' paths, summed over problems).
    """
    from core.grading.equivalence import answers_equivalent
    from core.search.driver import SearchDriver
    from core.solver import build_runtime

    rt = build_runtime(settings, generator=models[0], prm=models[1])
    arrival_of = {p.id: a for p, a in zip(problems, arrivals)} if arrivals is not None else {}
    per_problem: list[dict] = []
    speculative = 0
    waits: list[float] = []
    sampler = _Sampler(rt.engine)
    t0 = 0.0  # set once the driver is built: an "auto" speculation budget is measured (or read) first

    def on_result(problem, result, search):
        nonlocal speculative
        now = time.perf_counter() - t0
        answer_tokens = sum(c["num_tokens"] for c in result["completions"])
        graded = problem.answer is not None
        verdicts: dict = {}

        def correct(pick) -> bool:
            if pick not in verdicts:
                verdicts[pick] = graded and answers_equivalent(pick, problem.answer, problem.problem)
            return bool(verdicts[pick])

        latency = now - arrival_of.get(problem.id, 0.0)
        at_n = {}
        for k in subsets:
            entry = result["at_n"].get(str(k)) or search.subset(k)
            at_n[k] = {"correct": correct(entry["pred"]), "num_tokens": entry["num_tokens"],
                       **{f"correct_{rule}": correct(entry[field]) for rule, field in PICKS.items()}}
        per_problem.append({"id": problem.id, "latency_s": latency, "answer_tokens": answer_tokens,
                            "generated_tokens": result["num_generated_tokens"], "correct": correct(result["pred"]),
                            **{f"correct_{rule}": correct(result[field]) for rule, field in PICKS.items()},
                            "graded": graded, "at_n": at_n})
        speculative += sum(n.speculative for n in search.tree.nodes[1:])
        waits.extend(step_wait_seconds(search.tree.nodes))

    driver = SearchDriver(rt.engine, rt.generator.tokenizer, rt.generator.eos_token_ids, rt.verifier, rt.scorer,
                          search_cfg, policy=policy, max_concurrent=max_concurrent, on_result=on_result,
                          on_iteration=sampler)
    t0 = time.perf_counter()
    stats = driver.run(problems, arrivals=arrivals)
    wall = time.perf_counter() - t0
    v = rt.verifier.stats
    peak_kv, kv_total = rt.engine.pool.peak_used, rt.engine.pool.num_blocks
    logit_rows, engine_steps = rt.engine.total_logit_rows, rt.engine.total_steps
    preemptions = rt.engine.num_preemptions
    budget, bound_steps = stats.speculation_budget, rt.engine.scheduler.num_budget_bound_steps
    mean_candidates = sampler.mean
    # engines and trees hold no reference cycles: dropping them frees the run's KV pools at once
    del driver, rt, sampler
    answer_tokens = sum(p["answer_tokens"] for p in per_problem)
    graded = [p for p in per_problem if p["graded"]]
    generation = stats.generation_seconds
    verification = v.seconds
    normalized = [p["latency_s"] / max(1, p["answer_tokens"]) for p in per_problem]
    return {
        "problems": len(per_problem),
        "wall_s": round(wall, 3),
        "output_tokens": stats.generated_tokens,
        "answer_tokens": answer_tokens,
        "throughput": round(stats.generated_tokens / wall, 3),
        "goodput": round(answer_tokens / wall, 3),
        "time_breakdown_s": {"generation": round(generation, 3), "verification": round(verification, 3),
                             "other": round(max(0.0, wall - generation - verification), 3)},
        "mean_concurrent_candidates": round(mean_candidates, 2),
        "prm_calls": v.flushes,
        "prm_calls_by_trigger": dict(v.by_trigger),
        "prm_tasks": v.tasks,
        "mean_prm_batch_tokens": round(v.input_tokens / v.flushes, 1) if v.flushes else 0.0,
        "mean_prm_batch_computed_tokens": round(v.computed_tokens / v.flushes, 1) if v.flushes else 0.0,
        "mean_step_wait_s": round(statistics.fmean(waits), 4) if waits else 0.0,
        "peak_kv_blocks": peak_kv,
        "kv_blocks_total": kv_total,
        "logit_rows": logit_rows,
        "engine_steps": engine_steps,
        "preemptions": preemptions,
        "accuracy": round(sum(p["correct"] for p in graded) / len(graded), 4) if graded else None,
        **{f"accuracy_{rule}": round(sum(p[f"correct_{rule}"] for p in graded) / len(graded), 4) if graded else None
           for rule in PICKS},
        "at_n": {str(k): {**_accuracies(graded, k), "answer_tokens": sum(p["at_n"][k]["num_tokens"] for p in per_problem)}
                 for k in subsets},
        "mean_latency_s": round(statistics.fmean(p["latency_s"] for p in per_problem), 3) if per_problem else 0.0,
        "normalized_latency_s_per_token": round(statistics.fmean(normalized), 5) if normalized else 0.0,
        # the driver counts candidates as each rule ends them (RunStats.prunes)
        "pruned": sum(stats.prunes.pruned.values()),
        "cancelled": sum(stats.prunes.cancelled.values()),
        "speculative": speculative,
        "speculation_budget": budget,
        "speculation_bound_steps": bound_steps,
    }


def _accuracies(graded: list[dict], k: int) -> dict[str, float | None]:
    """``accuracy`` and ``accuracy_<rule>`` of the picks over the first ``k`` completions."""
    def share(key: str) -> float | None:
        return round(sum(p["at_n"][k][key] for p in graded) / len(graded), 4) if graded else None

    return {"accuracy": share("correct"), **{f"accuracy_{rule}": share(f"correct_{rule}") for rule in PICKS}}


def run_benchmark(models: tuple, settings, problems: Sequence, search_cfg, policies: Sequence[str], max_concurrent: int,
                  request_rates: Sequence[float] = (), seed: int = 0, on_run=None, repeats: int = 1) -> dict[str, Any]:
    """Every policy on the same problems: ``repeats`` throughput runs each, then one latency run per
    request rate.

    Throughput runs go in rounds (every policy once per round), so a slow spell of a shared machine
    hits all policies of a round rather than one policy's runs. A policy's figures are those of its
    median-wall-time run; its ratios to non-spec are the median over rounds of the same-round ratio.

    Args:
        on_run: optional callback ``(policy, rate_or_None, result)`` after each run (progress).
        repeats: throughput runs per policy (>= 1).

    Returns:
        ``{"policies": {name: {...median throughput run..., "wall_s_runs", "throughput_runs",
        "goodput_runs", "ratio_vs_nonspec" (+ "_runs"), "goodput_ratio_vs_nonspec" (+ "_runs"),
        "accuracy_delta_vs_nonspec", "latency": {rate: {...}}}}}``; ratios only when non-spec ran.

    Raises:
        ValueError: ``repeats`` < 1.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    configs = {}
    for name in policies:
        policy, overrides = policy_spec(name)
        configs[name] = (policy, dataclasses.replace(search_cfg, **overrides))
    runs: dict[str, list[dict]] = {name: [] for name in policies}
    for _ in range(repeats):
        for name, (policy, cfg) in configs.items():
            res = run_policy(models, settings, problems, cfg, policy, max_concurrent)
            runs[name].append(res)
            if on_run:
                on_run(name, None, res)
    out: dict[str, Any] = {"policies": {}}
    for name, (policy, cfg) in configs.items():
        ordered = sorted(runs[name], key=lambda r: r["wall_s"])
        res = dict(ordered[(len(ordered) - 1) // 2])
        for key in ("wall_s", "throughput", "goodput"):
            res[f"{key}_runs"] = [r[key] for r in runs[name]]
        res["latency"] = {}
        for rate in request_rates:
            arrivals = poisson_arrivals(len(problems), rate, seed)
            lat = run_policy(models, settings, problems, cfg, policy, max_concurrent, arrivals=arrivals)
            res["latency"][str(rate)] = {k: lat[k] for k in ("wall_s", "mean_latency_s",
                                                             "normalized_latency_s_per_token", "throughput",
                                                             "goodput", "answer_tokens")}
            if on_run:
                on_run(name, rate, lat)
        out["policies"][name] = res
    add_ratios(out["policies"])
    return out


def add_ratios(results: dict[str, dict]) -> None:
    """Add throughput/goodput ratios and the accuracy difference against ``non-spec`` (in place).

    Each ratio is the median of the same-round ratios of ``throughput_runs``/``goodput_runs``
    (one per round), and ``ratio_vs_nonspec_runs``/``goodput_ratio_vs_nonspec_runs`` list them.
    """
    _same_round_ratios(results, (("throughput_runs", "ratio_vs_nonspec"), ("goodput_runs", "goodput_ratio_vs_nonspec")))
    base = results.get(BASELINE)
    if not base:
        return
    for res in results.values():
        if res.get("accuracy") is not None and base.get("accuracy") is not None:
            res["accuracy_delta_vs_nonspec"] = round(res["accuracy"] - base["accuracy"], 4)


def _same_round_ratios(results: dict[str, dict], pairs) -> None:
    """For each ``(runs key, ratio name)``: every policy's ratio to non-spec, the median of the
    same-round ratios of its ``runs key`` list (one entry per round), and those ratios as
    ``<ratio name>_runs`` (in place; nothing without a non-spec entry)."""
    base = results.get(BASELINE)
    if not base:
        return
    for res in results.values():
        for key, name in pairs:
            ratios = [round(x / b, 3) for x, b in zip(res[key], base[key]) if b]
            res[name] = round(statistics.median(ratios), 3) if ratios else None
            res[f"{name}_runs"] = ratios


STUDY_FIELDS = ("normalized_latency_s_per_token", "mean_latency_s", "peak_kv_blocks", "wall_s", "throughput",
                "goodput", "answer_tokens", "mean_concurrent_candidates", "speculation_budget",
                "speculation_bound_steps")


def _study_cell(runs: list[dict]) -> dict:
    """One (sweep value, policy) cell: the figures of its median-wall-time run, and every run's wall,
    throughput and goodput (``*_runs``)."""
    ordered = sorted(runs, key=lambda r: r["wall_s"])
    cell = {k: ordered[(len(ordered) - 1) // 2][k] for k in STUDY_FIELDS}
    for key in ("wall_s", "throughput", "goodput"):
        cell[f"{key}_runs"] = [r[key] for r in runs]
    cell["normalized_latency_runs"] = [r["normalized_latency_s_per_token"] for r in runs]
    return cell


def _study_ratios(row: dict[str, dict]) -> None:
    """Ratios against non-spec in one sweep value's row (in place): each the median of the same-round
    ratios (a slow spell of a shared machine hits every policy of a round alike)."""
    _same_round_ratios(row, (("throughput_runs", "ratio_vs_nonspec"), ("goodput_runs", "goodput_ratio_vs_nonspec"),
                             ("normalized_latency_runs", "normalized_latency_vs_nonspec")))


def _run_study(models, settings, problems, policies, points: list[tuple[str, Any, int]], repeats: int,
               label: str, on_run) -> dict[str, dict]:
    """``repeats`` rounds over every ``(sweep value, SearchConfig, max_concurrent)`` point and policy;
    a cell is the median run of its rounds (:func:`_study_cell`), ratios as :func:`_study_ratios`."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    runs: dict[str, dict[str, list]] = {value: {name: [] for name in policies} for value, _, _ in points}
    for _ in range(repeats):
        for value, cfg, concurrent in points:
            for name in policies:
                policy, overrides = policy_spec(name)
                res = run_policy(models, settings, problems, dataclasses.replace(cfg, **overrides), policy,
                                 concurrent)
                runs[value][name].append(res)
                if on_run:
                    on_run(f"{name} {label}={value}", None, res)
    out = {}
    for value, row_runs in runs.items():
        row = {name: _study_cell(r) for name, r in row_runs.items()}
        _study_ratios(row)
        out[value] = row
    return out


def run_beam_size_study(models: tuple, settings, problems: Sequence, search_cfg, policies: Sequence[str],
                        beam_sizes: Sequence[int], max_concurrent: int, on_run=None,
                        repeats: int = 1) -> dict[str, dict]:
    """The paper's beam-size study: every policy at every beam size N (M as in ``search_cfg``),
    all problems issued at once, in ``repeats`` rounds.

    Returns:
        ``{str(N): {policy: {...}}}``: per cell the :data:`STUDY_FIELDS` of its median run, each run's
        ``wall_s_runs``/``throughput_runs``/``goodput_runs``/``normalized_latency_runs``, and when
        non-spec ran ``ratio_vs_nonspec``, ``goodput_ratio_vs_nonspec`` and
        ``normalized_latency_vs_nonspec`` (lower is better), each with its ``_runs``.

    Raises:
        ValueError: a beam size not divisible by the beam width, or ``repeats`` < 1.
    """
    # raises ValueError when M does not divide N
    points = [(str(n), dataclasses.replace(search_cfg, beam_size=n), max_concurrent) for n in beam_sizes]
    return _run_study(models, settings, problems, policies, points, repeats, "N", on_run)


def run_concurrency_study(models: tuple, settings, problems: Sequence, search_cfg, policies: Sequence[str],
                          levels: Sequence[int], on_run=None, repeats: int = 1) -> dict[str, dict]:
    """The paper's concurrency study: every policy with at most C problems in flight, for each C,
    in ``repeats`` rounds.

    Each level runs on the first ``max(levels)`` problems issued at once (fewer problems than C
    cannot keep C in flight: the caller passes enough).

    Returns:
        ``{str(C): {policy: {...}}}``, the fields of :func:`run_beam_size_study`.

    Raises:
        ValueError: ``repeats`` < 1.
    """
    points = [(str(c), search_cfg, c) for c in levels]
    return _run_study(models, settings, problems, policies, points, repeats, "C", on_run)

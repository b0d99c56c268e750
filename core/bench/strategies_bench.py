"""Search strategies side by side (``specscale bench strategies``): accuracy against generated tokens.

The figure people draw to choose a strategy: greedy decoding (one path), best-of-N, beam search and
DVTS at a few N on the same problems with the same models, each point its accuracy and the tokens
it generated. Every run goes through :func:`core.bench.search_bench.run_policy` on fresh engines.

Best-of-N runs once, at the largest N: its first n samples are exactly the samples of a run at
N = n (each sample's seed derives from its tree path, and samples never interact), so the points at
smaller N are the picks over the first n completions of that run, and their tokens those of the n
samples. Beam search and DVTS run at every N: their candidates compete for the N slots, so a
subset of a larger run is not what a smaller run would have searched.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from core.search.policy import check_fit

from .search_bench import run_policy

STRATEGIES = ("best-of-n", "beam", "dvts")
# strategies whose run at N = n equals the first n completions of a run at a larger N
SUBSET_EQUIVALENT = ("best-of-n",)


def strategy_config(search_cfg, strategy: str, n: int):
    """The search settings of one point: ``greedy`` is one path at temperature 0 (N = M = 1);
    best-of-N, beam and DVTS take N and the beam width M of ``search_cfg`` (capped at N).

    Raises:
        ValueError: N not divisible by M for beam or DVTS.
    """
    if strategy == "greedy":
        return dataclasses.replace(search_cfg, strategy="beam", beam_size=1, beam_width=1, temperature=0.0)
    width = 1 if strategy == "best-of-n" else min(search_cfg.beam_width, n)
    return dataclasses.replace(search_cfg, strategy=strategy, beam_size=n, beam_width=width)


def strategy_points(sizes: Sequence[int]) -> list[tuple[str, int]]:
    """``(strategy, N)`` of every row: greedy once, then each strategy at each N."""
    return [("greedy", 1)] + [(s, n) for n in sizes for s in STRATEGIES]


def strategy_runs(sizes: Sequence[int]) -> list[tuple[str, int]]:
    """``(strategy, N)`` of every run: greedy, best-of-N at the largest N only, beam and DVTS at each N."""
    largest = max(sizes)
    return ([("greedy", 1)] + [(s, largest) for s in SUBSET_EQUIVALENT]
            + [(s, n) for n in sizes for s in STRATEGIES if s not in SUBSET_EQUIVALENT])


def run_strategies(models: tuple, settings, problems: Sequence, search_cfg, policy: str, sizes: Sequence[int],
                   max_concurrent: int, on_run=None) -> list[dict[str, Any]]:
    """The runs of :func:`strategy_runs`; returns a row per :func:`strategy_points` entry, in that order.

    Row keys: ``strategy``, ``n``, ``beam_width``, ``accuracy`` (of ``pred`` by ``search_cfg.select``),
    ``accuracy_best``/``_weighted``/``_majority``, ``generated_tokens`` (every token sampled),
    ``tokens_per_problem``, ``answer_tokens``, ``wall_s``, ``subset_of``. A best-of-N row below the
    largest N is read from the largest run (``subset_of`` its N, ``wall_s`` None): the picks over
    each problem's first n completions, its tokens those of the n samples' paths. ``on_run(row)``
    gets each row as soon as its run is done.

    Raises:
        ValueError: ``policy`` makes no sense for a strategy (see :func:`core.search.policy.check_fit`),
            or N not divisible by M.
    """
    runs = [(strategy, n, strategy_config(search_cfg, strategy, n)) for strategy, n in strategy_runs(sizes)]
    for _, _, cfg in runs:
        check_fit(policy, cfg.strategy)
    rows: dict[tuple[str, int], dict] = {}
    for strategy, n, cfg in runs:
        smaller = sorted(k for k in set(sizes) if k < n) if strategy in SUBSET_EQUIVALENT else []
        res = run_policy(models, settings, problems, cfg, policy, max_concurrent, subsets=smaller)
        new = [_row(strategy, k, strategy_config(search_cfg, strategy, k).beam_width, res["at_n"][str(k)],
                    res["at_n"][str(k)]["answer_tokens"], res["problems"], None, subset_of=n) for k in smaller]
        new.append(_row(strategy, n, cfg.beam_width, res, res["output_tokens"], res["problems"], res["wall_s"]))
        for row in new:
            rows[(strategy, row["n"])] = row
            if on_run:
                on_run(row)
    return [rows[point] for point in strategy_points(sizes)]


def _row(strategy: str, n: int, width: int, acc: dict, tokens: int, problems: int, wall_s: float | None,
         subset_of: int | None = None) -> dict[str, Any]:
    """One row of the sweep: accuracies from ``acc`` (a run's result or one of its ``at_n`` entries)."""
    return {"strategy": strategy, "n": n, "beam_width": width, "accuracy": acc["accuracy"],
            **{k: acc[k] for k in ("accuracy_best", "accuracy_weighted", "accuracy_majority")},
            "generated_tokens": tokens, "tokens_per_problem": round(tokens / max(1, problems), 1),
            "answer_tokens": acc.get("answer_tokens", tokens), "wall_s": wall_s, "subset_of": subset_of}

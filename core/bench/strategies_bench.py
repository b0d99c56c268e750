"""Search strategies side by side (``specscale bench strategies``): accuracy against generated tokens.

The figure people draw to choose a strategy: greedy decoding (one path), best-of-N, beam search and
DVTS at a few N on the same problems with the same models, each point its accuracy and the tokens
it generated. Every run goes through :func:`core.bench.search_bench.run_policy` on fresh engines.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from core.search.policy import check_fit

from .search_bench import run_policy

STRATEGIES = ("best-of-n", "beam", "dvts")


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
    """``(strategy, N)`` of every run: greedy once, then each strategy at each N."""
    return [("greedy", 1)] + [(s, n) for n in sizes for s in STRATEGIES]


def run_strategies(models: tuple, settings, problems: Sequence, search_cfg, policy: str, sizes: Sequence[int],
                   max_concurrent: int, on_run=None) -> list[dict[str, Any]]:
    """One run per :func:`strategy_points` entry; returns a row per run.

    Row keys: ``strategy``, ``n``, ``beam_width``, ``accuracy`` (of ``pred`` by ``search_cfg.select``),
    ``accuracy_best``/``_weighted``/``_majority``, ``generated_tokens`` (every token sampled),
    ``tokens_per_problem``, ``answer_tokens``, ``wall_s``.

    Raises:
        ValueError: ``policy`` makes no sense for a strategy (see :func:`core.search.policy.check_fit`),
            or N not divisible by M.
    """
    points = [(strategy, n, strategy_config(search_cfg, strategy, n)) for strategy, n in strategy_points(sizes)]
    for _, _, cfg in points:
        check_fit(policy, cfg.strategy)
    rows = []
    for strategy, n, cfg in points:
        res = run_policy(models, settings, problems, cfg, policy, max_concurrent)
        row = {"strategy": strategy, "n": n, "beam_width": cfg.beam_width, "accuracy": res["accuracy"],
               **{k: res[k] for k in ("accuracy_best", "accuracy_weighted", "accuracy_majority")},
               "generated_tokens": res["output_tokens"], "tokens_per_problem": round(res["output_tokens"] /
                                                                                     max(1, res["problems"]), 1),
               "answer_tokens": res["answer_tokens"], "wall_s": res["wall_s"]}
        rows.append(row)
        if on_run:
            on_run(row)
    return rows

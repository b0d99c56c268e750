"""Turning step scores into path scores, and completed paths into one final answer."""

from __future__ import annotations

import math
from typing import Callable, Sequence

AGGREGATIONS: dict[str, Callable[[Sequence[float]], float]] = {
    "last": lambda s: s[-1],
    "min": min,
    "prod": math.prod,
    "mean": lambda s: sum(s) / len(s),
}


def aggregate(scores: Sequence[float], how: str = "last") -> float:
    """Path score from its step scores (``last`` is the search-and-learn default).

    Raises:
        ValueError: unknown method. An empty list scores 0.0.
    """
    if how not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation '{how}'; choose one of {', '.join(AGGREGATIONS)}")
    return float(AGGREGATIONS[how](scores)) if scores else 0.0


def weighted_vote(answers: Sequence[str | None], weights: Sequence[float]) -> tuple[str | None, float]:
    """Answer with the largest summed weight over groups of equivalent answers (math-verify).

    Returns ``(answer, its summed weight)``; ``(None, 0.0)`` when no path has an answer. Ties go to
    the group seen first (paths come best-first, so that is the best path's group).
    """
    # imported here: math-verify (sympy) takes a second to import, and settings checks need only AGGREGATIONS
    from core.grading.equivalence import answers_equivalent

    groups: list[tuple[str, float]] = []
    for ans, w in zip(answers, weights):
        if ans is None:
            continue
        for i, (rep, total) in enumerate(groups):
            if answers_equivalent(ans, rep):
                groups[i] = (rep, total + w)
                break
        else:
            groups.append((ans, w))
    if not groups:
        return None, 0.0
    return max(groups, key=lambda g: g[1])

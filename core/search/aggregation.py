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


def answer_groups(answers: Sequence[str | None], weights: Sequence[float]) -> list[tuple[str, float, int]]:
    """Group equivalent answers (math-verify): ``(first answer of the group, summed weight, count)``
    per group, in the order groups are first seen; answers that are None are left out."""
    # imported here: math-verify (sympy) takes a second to import, and settings checks need only AGGREGATIONS
    from core.grading.equivalence import answers_equivalent

    groups: list[tuple[str, float, int]] = []
    for ans, w in zip(answers, weights):
        if ans is None:
            continue
        for i, (rep, total, count) in enumerate(groups):
            if answers_equivalent(ans, rep):
                groups[i] = (rep, total + w, count + 1)
                break
        else:
            groups.append((ans, w, 1))
    return groups


def weighted_vote(answers: Sequence[str | None], weights: Sequence[float]) -> tuple[str | None, float]:
    """Answer with the largest summed weight over groups of equivalent answers (math-verify).

    Returns ``(answer, its summed weight)``; ``(None, 0.0)`` when no path has an answer. Ties go to
    the group seen first (paths come best-first, so that is the best path's group).
    """
    groups = answer_groups(answers, weights)
    if not groups:
        return None, 0.0
    rep, total, _ = max(groups, key=lambda g: g[1])
    return rep, total


def select_answers(answers: Sequence[str | None], path_scores: Sequence[float]) -> dict[str, tuple]:
    """The answer each selection rule picks from completions given best-first.

    Returns ``{"best": (answer,), "weighted-vote": (answer, summed path score), "majority":
    (answer, completions agreeing)}``: the best path's answer; the answer whose equivalent
    completions have the largest summed path score (the weighted vote of Snell et al. 2024 /
    search-and-learn); the answer the most completions agree on. Ties go to the group seen
    first, which holds the better path. Answers are None when no completion has one.
    """
    groups = answer_groups(answers, path_scores)
    if not groups:
        return {"best": (answers[0] if answers else None,), "weighted-vote": (None, 0.0), "majority": (None, 0)}
    weighted = max(groups, key=lambda g: g[1])
    majority = max(groups, key=lambda g: g[2])
    return {"best": (answers[0],), "weighted-vote": (weighted[0], weighted[1]), "majority": (majority[0], majority[2])}


def subset_sizes(n: int) -> list[int]:
    """The subset sizes an answer record is graded at: 1, 2, 4, ... below ``n``, then ``n`` itself
    (search-and-learn's powers of two, with N kept when it is not one). Empty for ``n`` < 1."""
    sizes = []
    k = 1
    while k < n:
        sizes.append(k)
        k *= 2
    return sizes + [n] if n >= 1 else []

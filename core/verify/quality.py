"""How well a scorer tells a correct step from a wrong one (`specscale bench verifier`).

Pairs come from reference solutions (GSM8K): every solution step that contains a number is a
correct step, and its *wrong twin* is the same text with one number changed. Both are scored as the
next step after the same correct prefix, through the :class:`~core.verify.verifier.Verifier`, so any
registered scorer can be measured the way the search uses it. Two figures summarise a scorer:

- AUROC: the probability that a random correct step outscores a random wrong one (Mann-Whitney U
  divided by the number of correct x wrong comparisons; ties count half);
- pairwise accuracy: the fraction of pairs whose correct step outscores its own twin (ties half),
  which is what beam search needs when siblings differ by one slip.
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass
from decimal import Decimal

from .reference import path_prefixes, solution_steps, step_request
from .verifier import Verifier

# A number as written in GSM8K prose: thousands separators ("80,000") or plain, optional decimals.
NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")
# Shifts (in units of the number's second-highest digit) a wrong twin draws from; never 0.
DELTAS = (-3, -2, -1, 1, 2, 3)


def change_number(text: str, index: int, delta: int) -> str:
    """``text`` with its ``index``-th number (0-based, see :data:`NUMBER`) shifted by ``delta`` units.

    The unit keeps the change plausible for the number's size: 1 for numbers below 100, else
    10 ** (integer digits - 2) (so 16 -> 18, 150 -> 170, 130,000 -> 150,000). A shift that would
    make the number negative is applied upwards instead. Decimal places and thousands separators
    are kept. Because ``delta != 0`` the value, hence the text, always changes.

    Raises:
        IndexError: ``text`` has no number of that index.
        ValueError: ``delta`` is 0.
    """
    if delta == 0:
        raise ValueError("delta must not be 0 (the twin would equal the step)")
    match = list(NUMBER.finditer(text))[index]
    raw = match.group()
    plain = raw.replace(",", "")
    whole, _, frac = plain.partition(".")
    unit = 10 ** max(0, len(whole.lstrip("0") or "0") - 2)
    value = Decimal(plain)
    new = value + delta * unit
    if new < 0:
        new = value + abs(delta) * unit
    spec = f"{',' if ',' in raw else ''}.{len(frac)}f"
    return text[:match.start()] + format(new, spec) + text[match.end():]


def wrong_twin(text: str, rng: random.Random) -> str | None:
    """``text`` with one number changed (number and shift drawn from ``rng``), or None without numbers."""
    count = len(NUMBER.findall(text))
    if not count:
        return None
    return change_number(text, rng.randrange(count), rng.choice(DELTAS))


@dataclass
class StepPair:
    """A correct step and its wrong twin after the same correct prefix.

    problem: the problem statement. prefix: the correct steps before this one.
    """

    problem_id: str
    problem: str
    prefix: list[str]
    correct: str
    wrong: str


def build_pairs(problems, seed: int = 0) -> list[StepPair]:
    """One pair per numbered step of each problem's reference solution (``extra["solution"]``).

    The twin of step i of problem ``id`` draws from ``random.Random(f"{seed}:{id}:{i}")``, so a
    pair does not depend on which other problems are in the run.
    """
    pairs = []
    for p in problems:
        steps = solution_steps(p.extra.get("solution") or "")
        for i, step in enumerate(steps):
            twin = wrong_twin(step, random.Random(f"{seed}:{p.id}:{i}"))
            if twin is not None:
                pairs.append(StepPair(p.id, p.problem, steps[:i], step, twin))
    return pairs


def auroc(positive: list[float], negative: list[float]) -> float:
    """Area under the ROC curve of ``positive`` (label 1) vs ``negative`` scores; ties count half.

    Computed as the Mann-Whitney U statistic over ``len(positive) * len(negative)`` comparisons,
    with average ranks for tied scores.

    Raises:
        ValueError: either list is empty.
    """
    if not positive or not negative:
        raise ValueError("AUROC needs at least one positive and one negative score")
    labelled = sorted([(s, 1) for s in positive] + [(s, 0) for s in negative], key=lambda x: x[0])
    rank_sum, i = 0.0, 0
    while i < len(labelled):
        j = i
        while j < len(labelled) and labelled[j][0] == labelled[i][0]:
            j += 1
        mean_rank = (i + 1 + j) / 2  # ranks i+1 .. j share their average
        rank_sum += mean_rank * sum(label for _, label in labelled[i:j])
        i = j
    n_pos, n_neg = len(positive), len(negative)
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def pairwise_accuracy(correct: list[float], wrong: list[float]) -> float:
    """Fraction of pairs ``(correct[i], wrong[i])`` with the correct score higher; ties count half.

    Raises:
        ValueError: empty or unequal lists.
    """
    if not correct or len(correct) != len(wrong):
        raise ValueError("pairwise accuracy needs two non-empty lists of equal length")
    wins = sum(1.0 if c > w else 0.5 if c == w else 0.0 for c, w in zip(correct, wrong))
    return wins / len(correct)


def score_pairs(verifier: Verifier, pairs: list[StepPair], system_prompt: str, delimiter: str,
                flush_tasks: int = 64) -> tuple[list[float], list[float]]:
    """Scores of each pair's correct and wrong step, through ``verifier`` (its scorer and engine).

    Step texts get ``delimiter`` appended, as generated steps end with it. Scoring goes depth by
    depth, as the search does: the correct steps of a depth, then their wrong twins, in flushes of
    at most ``flush_tasks`` tasks. So each input's prefix (problem and earlier steps) is already
    in the PRM's prefix cache from the flush before, and a pair costs about its two steps' tokens.

    Returns:
        ``(correct_scores, wrong_scores)``, each ``len(pairs)`` floats in [0, 1].

    Raises:
        ValueError: an input longer than the PRM engine's ``max_model_len``.
    """
    scorer = verifier.scorer
    parents: dict[tuple[str, int], list[int]] = {}
    scores: dict[tuple[int, int], float] = {}
    by_depth: dict[int, list[int]] = {}
    for k, pair in enumerate(pairs):
        by_depth.setdefault(len(pair.prefix), []).append(k)
    for depth in sorted(by_depth):
        for side in (0, 1):  # 0: correct, 1: wrong twin
            todo = by_depth[depth]
            for start in range(0, len(todo), max(1, flush_tasks)):
                for k in todo[start:start + max(1, flush_tasks)]:
                    pair = pairs[k]
                    key = (pair.problem_id, depth)
                    if key not in parents:
                        parents[key] = path_prefixes(scorer, pair.problem, system_prompt,
                                                     [s + delimiter for s in pair.prefix])[-1]
                    text = pair.wrong if side else pair.correct
                    verifier.submit((k, side), step_request(scorer, parents[key], text + delimiter, depth == 0))
                for task in verifier.flush("bench"):
                    scores[task.owner] = task.score
    return [scores[(k, 0)] for k in range(len(pairs))], [scores[(k, 1)] for k in range(len(pairs))]


def evaluate_scorer(verifier: Verifier, pairs: list[StepPair], system_prompt: str, delimiter: str) -> dict:
    """AUROC, pairwise accuracy, mean scores, pair count and seconds of one scorer on ``pairs``.

    Raises:
        ValueError: no pairs (see :func:`auroc`), or an input too long for the PRM engine.
    """
    t0 = time.perf_counter()
    correct, wrong = score_pairs(verifier, pairs, system_prompt, delimiter)
    seconds = time.perf_counter() - t0
    return {
        "auroc": round(auroc(correct, wrong), 4),
        "pairwise_accuracy": round(pairwise_accuracy(correct, wrong), 4),
        # 4 significant digits: inverse-perplexity scores of a weak model can be ~1e-5
        "mean_correct": float(f"{sum(correct) / len(correct):.4g}"),
        "mean_wrong": float(f"{sum(wrong) / len(wrong):.4g}"),
        "pairs": len(pairs),
        "seconds": round(seconds, 2),
        "prm_computed_tokens": verifier.stats.computed_tokens,
    }

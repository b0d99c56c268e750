"""Inequalities in one variable as the intervals they describe, for answers joined by "or" or "and".

math-verify compares one inequality with an interval gold (``x \\ge 2`` is ``[2,\\infty)``); an answer
written as several inequalities joined by "or" (``x<2`` or ``x>3``) is the union of their intervals,
which is written out here so that math-verify compares it with a union gold
(``(-\\infty, 2) \\cup (3, \\infty)``). A range with points left out (``0<x<36, x \\ne 9``) is the
union of its pieces (``(0,9) \\cup (9,36)``). Two inequalities joined by "and" hold together: their
intersection (``x > -1 and x < 6`` is ``(-1,6)``), never the union a list would be.
"""

from __future__ import annotations

import re

__all__ = ["as_difference", "as_intersection", "as_union", "unsolved_inequality"]

_LESS = {"<": "<", "\\lt": "<", "\\le": "<=", "\\leq": "<=", "\\leqslant": "<=",
         ">": ">", "\\gt": ">", "\\ge": ">=", "\\geq": ">=", "\\geqslant": ">="}
_REL = r"(<|>|\\l(?:eq?(?:slant)?|t)(?![A-Za-z])|\\g(?:eq?(?:slant)?|t)(?![A-Za-z]))"
_BOUND = r"([^<>=\\,]+?|-?\\infty|[^<>=,]*?\\(?:frac|sqrt|pi)[^<>=,]*?)"
# the variable: a letter or a Greek letter's command (\lambda), never a relation's (\le), or a function's
# value at one (f(x): "\frac{\pi^2}{8} \le f(x) \le \frac{5\pi^2}{4}" is the range [\pi^2/8, 5\pi^2/4])
_VAR = r"([A-Za-z](?:\([A-Za-z]\))?|\\(?!(?:le|ge|lt|gt)(?:q|qslant)?(?![a-z]))[a-z]+)"
_CHAIN = re.compile(rf"^\s*{_BOUND}\s*{_REL}\s*{_VAR}\s*{_REL}\s*{_BOUND}\s*$")
_ONE_SIDE = re.compile(rf"^\s*{_VAR}\s*{_REL}\s*{_BOUND}\s*$")
_ONE_SIDE_REVERSED = re.compile(rf"^\s*{_BOUND}\s*{_REL}\s*{_VAR}\s*$")


def _interval_of(item: str) -> tuple[str, str] | None:
    """``(variable, interval)`` for an inequality in one variable: ``0 < x \\le 4`` -> ``("x", "(0,4]")``,
    ``x > 3`` -> ``("x", "(3,\\infty)")``; None for anything else."""
    def lower(rel, bound):  # x rel bound with rel in > >=: the interval starts at bound
        return ("[" if rel == ">=" else "(") + bound.strip()

    def upper(rel, bound):
        return bound.strip() + ("]" if rel == "<=" else ")")

    m = _CHAIN.match(item)
    if m:
        a, r1, var, r2, b = m.groups()
        r1, r2 = _LESS[r1], _LESS[r2]
        if r1[0] == r2[0] == "<":
            return var, lower(">=" if r1 == "<=" else ">", a) + "," + upper(r2, b)
        if r1[0] == r2[0] == ">":  # b > x > a
            return var, lower(">=" if r2 == ">=" else ">", b) + "," + upper("<=" if r1 == ">=" else "<", a)
        return None
    m = _ONE_SIDE.match(item)
    if m:
        var, rel, bound = m.group(1), _LESS[m.group(2)], m.group(3)
    else:
        m = _ONE_SIDE_REVERSED.match(item)
        if not m:
            return None
        bound, rel, var = m.group(1), _LESS[m.group(2)], m.group(3)
        rel = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[rel]  # a < x is x > a
    if rel[0] == "<":
        return var, "(-\\infty," + upper(rel, bound)
    return var, lower(rel, bound) + ",\\infty)"


_EXCEPT = re.compile(r"^\s*([A-Za-z])\s*(?:\\neq?(?![A-Za-z])|!=)\s*(-?\d+(?:\.\d+)?)\s*$")


def _bound_value(bound: str) -> float | None:
    """A bound's value: a plain number or (minus) infinity; None for any other bound."""
    b = bound.strip("[]() ")
    if b in ("\\infty", "+\\infty", "-\\infty"):
        return float("-inf") if b.startswith("-") else float("inf")
    try:
        return float(b)
    except ValueError:
        return None


def _without_points(interval: str, points: list[str]) -> str | None:
    """``(0,36)`` without the points ``["9"]`` -> ``(0,9) \\cup (9,36)``; None when a bound is not a plain
    number or a point does not lie inside the interval."""
    left, right = interval.split(",")
    low, high = _bound_value(left), _bound_value(right)
    values = sorted({float(p): p for p in points}.items())
    if low is None or high is None or not all(low < v < high for v, _ in values):
        return None
    pieces, start = [], left
    for _, point in values:
        pieces.append(f"{start},{point})")
        start = f"({point}"
    return " \\cup ".join([*pieces, f"{start},{right}"])


# an interval without some of its points: (0, 36) \setminus \{9\}, (0,36) \ {9}
_DIFFERENCE = re.compile(r"^\s*(?:[A-Za-z]\s*(?:\\in(?![A-Za-z])|∈)\s*)?([\[(][^,\[\]()]+,[^,\[\]()]+[\])])\s*(?:\\setminus|\\backslash|\\(?=\s)|∖|-)\s*"
                         r"\\?\{\s*([^{}]+?)\s*\\?\}\s*$")


def as_difference(s: str) -> str | None:
    """An interval with points taken out as the union of its pieces: ``(0, 36) \\setminus \\{9\\}`` ->
    ``(0,9) \\cup (9,36)``; None for anything else (a bound or point that is not a plain number)."""
    m = _DIFFERENCE.match(s)
    if not m:
        return None
    points = [p.strip() for p in m.group(2).split(",")]
    if not all(re.fullmatch(r"-?\d+(?:\.\d+)?", p) for p in points):
        return None
    return _without_points(re.sub(r"\s", "", m.group(1)), points)


def as_union(items: list[str]) -> str | None:
    """Inequalities in one variable joined by "or" (or listed) as the union of their intervals:
    ``x<2, x>3`` -> ``(-\\infty,2) \\cup (3,\\infty)``; None unless every item is such an inequality."""
    if len(items) == 1:
        items = re.split(r"\s+or\s+|\s*\\(?:lor|vee)\s*", items[0])
    if len(items) < 2:
        return None
    excepted = [_EXCEPT.match(item) for item in items[1:]]
    if all(excepted):  # 0<x<36, x \\ne 9: the range without its points
        first = _interval_of(items[0])
        if first and all(m.group(1) == first[0] for m in excepted):
            return _without_points(first[1], [m.group(2) for m in excepted])
        return None
    intervals = [_interval_of(item) for item in items]
    if not all(intervals) or len({var for var, _ in intervals}) != 1:
        return None
    return " \\cup ".join(interval for _, interval in intervals)


def _end(interval: str, side: int) -> tuple[float, bool] | None:
    """``(value, closed)`` of an interval's left (``side`` 0) or right (1) end; None when not a number."""
    part = interval.split(",")[side]
    value = _bound_value(part)
    return None if value is None else (value, "[" in part or "]" in part)


def as_intersection(s: str) -> str | None:
    """Two inequalities in one variable joined by "and" (``x > -1 and x \\le 6``, ``\\land``) as the
    interval where both hold (``(-1,6]``); None for anything else, an intersection of one point or
    none, or a bound that is not a plain number."""
    parts = re.split(r"\s+and\s+|\s*\\(?:land|wedge)\s*", s.strip())
    if len(parts) != 2:
        return None
    intervals = [_interval_of(part) for part in parts]
    if not all(intervals) or intervals[0][0] != intervals[1][0]:
        return None
    ends = [(_end(i, 0), _end(i, 1), i) for _, i in intervals]
    if any(lo is None or hi is None for lo, hi, _ in ends):
        return None
    # the higher left end, closed only when every interval starting there is closed; the lower right end
    (low, lo_closed), left = max(((lo, i) for lo, _, i in ends), key=lambda e: (e[0][0], not e[0][1]))
    (high, hi_closed), right = min(((hi, i) for _, hi, i in ends), key=lambda e: (e[0][0], e[0][1]))
    if low >= high:
        return None
    return ("[" if lo_closed else "(") + left.split(",")[0].strip("[( ") + "," + \
        right.split(",")[1].strip(")] ") + ("]" if hi_closed else ")")


_RELATION_SIGN = re.compile(rf"{_REL}|≤|≥")


def unsolved_inequality(item: str) -> bool:
    """Whether ``item`` is an inequality that no lone variable is bounded by: ``x^2-5x+6>0``, ``2x-7 \\ge 1``
    (a condition still to solve, which math-verify would read as the set it describes); False for a
    solved one (``x > 2``, ``0 < t \\le 4``, ``2 \\le x``, ``|x| < \\sqrt{3}``) and for anything without a
    relation sign."""
    if not _RELATION_SIGN.search(item) or _interval_of(item) is not None:
        return False
    sides = [side.strip() for side in _RELATION_SIGN.split(item) if side is not None and side.strip()
             and not _RELATION_SIGN.fullmatch(side.strip())]
    # a variable's absolute value counts as solved too: |x| < \\sqrt{3}
    bare = [re.sub(r"\\(?:left|right)(?=\|)|\\[lr]vert|\|", "", side).strip() for side in sides]
    return not any(re.fullmatch(_VAR + r"(?:_\{?\w+\}?)?", side) for side in bare)


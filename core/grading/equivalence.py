"""Decide whether two answer strings denote the same mathematical object.

Both sides go through the same normalisation before anything compares them (:func:`grade`):

1. presentation is dropped: Unicode forms (:func:`core.grading.extract.normalise_unicode`; ``−``,
   ``≤``, ``±``, ``π``, ``√2`` become LaTeX), surrounding ``$...$``/``\\(...\\)``, a whole
   ``\\boxed{}``, trailing punctuation, ``\\text{}`` wrappers, ``\\left``/``\\right``, ``\\%`` and
   ``%`` (math-verify reads ``\\%`` as /100 on the side that has it, so ``62.5\\%`` never matched
   ``62.5``), degree signs (``90^\\circ`` is ``90``), currency ``\\$``; ``1e3``-style numbers become
   decimals (math-verify reads ``e`` as Euler's number);
2. units: a number followed by a unit (``5 dollars``, ``864 inches^2``) loses the unit when the
   gold has none or the same one (``m`` = ``meters``); a different unit is a different answer
   (``5 m`` is not ``5\\text{ cm}``, ``\\$5.40`` is not ``5.4\\text{ cents}``); a single letter is
   never taken for a unit when the problem uses it as a variable (gold ``6m`` must not accept
   ``6``), nor without the problem at hand; a value in a unit of measure other than the one the
   problem's question asks for is wrong where the gold has no unit (``1.25 kilometers`` for "How
   many miles ...?", :func:`core.grading.units.asked_unit`);
3. a leading name (``m_{\\max}=``, ``x \\in``, ``N=``) is dropped from both sides; where both sides
   name an item the names must agree (``a=3, b=2`` is not ``a=2, b=3``); an equation answers a named
   gold when its sides differ by the gold's difference (``y - 1 = 2(x+1)`` is ``y = 2x + 3``); a function's gold
   (``f(x)=2x+3``) math-verify compares by its right-hand side;
4. lists: top-level commas and "and" split both sides (a run like ``27,54,108,135`` is a list, not
   thousands separators), ``a \\pm b`` is the two items ``a+b, a-b``, a set ``\\{1, 2\\}`` is its
   items; the gold's items must be matched one to one, in any order (``-2, -2`` does not accept
   ``-2``), in order when the gold names them and the answer does not (so a set of two is never
   the tuple or interval ``(1, 2)``, one item);
5. a time or ratio (``7:30``, ``3:2``) equals only one with the same numbers in the same order;
6. ``\\sqrt13`` is the root of 13 (what a model means, not TeX's ``\\sqrt{1}3``), a repeating decimal
   its fraction (``1.\\overline{3}`` = ``\\frac43``), a plain-text mixed number one (``137 1/2``);
   numbers that both name their base compare by value (``40_{10}`` is not ``40_9``); inequalities
   joined by "or" are the union of their intervals; "square"/"cubic" units are powers; word answers
   compare without case, a leading article or direction verb (``an ellipse`` = ``\\text{ellipse}``,
   ``facing east`` = ``east``);
   equal normalised strings are equal; otherwise math-verify decides, in a child process with a hard
   time limit (:mod:`core.grading.mv_worker`, which also holds the exactness, interval and power
   rules), and only when it reads the gold *whole*: a gold it cannot parse (prose, ``t(0,4]``) is
   compared as a normalised string, never as a partial parse;
7. letters differing only in case never match (math-verify lowercases symbols: ``N`` vs ``n``);
8. an answer that is an expression of the problem statement, not worked out (``2 + 3`` for "What is
   2 + 3?"), answers nothing: a path cut off while restating the question is wrong even where
   math-verify would evaluate it to the gold.
"""

from __future__ import annotations

import atexit
import functools
import logging
import math
import re
import threading
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from .extract import _THOUSANDS_RUN, ascii_relations, normalise_unicode
from .forms import choice_letter, column_as_tuple, exact_forms, in_base, option_value, scaled_identity, transposed_row
from .intervals import as_intersection, as_union, unsolved_inequality
from .mv_worker import MathVerifyProcess
from .question import question_of
from .units import DIMENSIONS, MEASURES, SHORT_UNITS, asked_unit, compound_values, named_units, rate_key, unit_key

__all__ = ["answers_equivalent", "canonical_answer", "grade", "Grade", "grading_stats", "problem_variables",
           "set_time_limit"]

logger = logging.getLogger(__name__)

# Seconds a grading call may spend in math-verify (per comparison or parse, across all its tries).
_TIME_LIMIT_S = 10.0

# sympy can stall on huge inputs; answers longer than this are compared as strings only.
_MAX_SYMBOLIC_LEN = 500

_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textrm|textit|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_THOUSANDS_SEP = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
# Lookahead keeps \leftarrow / \rightarrow intact.
_LEFT_RIGHT = re.compile(r"\\(?:left|right)(?![A-Za-z])")
_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")
_DECIMAL = re.compile(r"^(-?\d+)\.(\d*?)0*$")
_SCIENTIFIC = re.compile(r"(?<![\w.\\^{])(\d+(?:\.\d+)?|\.\d+)[eE]([-+]?\d+)(?![\w.])")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°")
# LaTeX thousands separators: 10,\!080 and 11,\! 111 (with a space after the thin negative space)
_LATEX_THOUSANDS = re.compile(r"(\d)\s*(?:\{,\}|,\\!)\s*(?=\d)")
_PERCENT = re.compile(r"\\?%")
# Spacing macros (\! \, \; \: "\ ") and ~; a LaTeX line break \\ is matched first, so that its
# second backslash and a following space are not taken for "\ ".
_SPACING = re.compile(r"\\\\|\\[!,;: ]|\\q?quad(?![A-Za-z])|~")
_TRAILING = " \t\n.,;:!"
# A leading name: a letter or command, a subscript, primes, an event or argument list in brackets
# (P(\text{AB and CD cross})); then = or \in. (A function's name, f(x)=, is
# math-verify's: it compares such a gold by its right-hand side.)
_LHS_NAME = re.compile(
    r"^\s*(?P<name>(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{[^{}]*\}|_[A-Za-z0-9])?'*(?:\((?=[^()=]*[\s\\,])[^()=]*\))?)"
    r"\s*(?:=|\\in(?![A-Za-z]))\s*(?P<rhs>[^=]+)$")
_QUANTITY = (r"-?(?:\d+(?:,\d{3})*(?:\.\d+)?|\.\d+)(?:\s*\\[dt]?frac\s*\{?\d+\}?\s*\{?\d+\}?|\s*\\pi(?![A-Za-z])"
             r"|\s*\\sqrt\s*\{\d+\})?|-?\\[dt]?frac\s*\{?\d+\}?\s*\{?\d+\}?|-?\\sqrt\s*\{\d+\}")
_UNIT_WORD = r"[A-Za-z]+(?:\s*\^\s*\{?\d+\}?)?"
_WITH_UNIT = re.compile(rf"^(?P<q>{_QUANTITY})\s*(?P<u>(?<![A-Za-z\\]){_UNIT_WORD}(?:\s*(?:/|\s|\\cdot)\s*{_UNIT_WORD})*)$")
# Letters that name constants, never units: the imaginary unit and Euler's number.
_CONSTANTS = frozenset("ie")
_IDENT = re.compile(r"(?<![A-Za-z\\])[A-Za-z](?![A-Za-z])")
# Words that are math when written without a backslash; any other run of three or more letters is prose.
_MATH_WORDS = frozenset("sin cos tan cot sec csc log ln exp sqrt max min gcd lcm mod arcsin arccos arctan pi inf".split())
_COMMAND = re.compile(r"\\[A-Za-z]+")
# Unicode math symbols as LaTeX (after normalise_unicode); √ takes one operand: √2, √x, √(x+1)
_UNICODE_LATEX = {"−": "-", "≤": "\\le ", "≥": "\\ge ", "≠": "\\ne ", "±": "\\pm ", "∓": "\\mp ",
                  "×": "\\times ", "÷": "\\div ", "·": "\\cdot ", "∞": "\\infty ", "π": "\\pi ", "∈": "\\in ",
                  "∪": "\\cup ", "∩": "\\cap ", "¢": " cents ",
                  **{ch: f"\\{name} " for ch, name in zip("αβγδεθλμρστφψω", "alpha beta gamma delta epsilon theta lambda "
                                                          "mu rho sigma tau phi psi omega".split())}}
_UNICODE_SQRT = re.compile(r"√\s*(?:\((?P<p>[^()]*)\)|\{(?P<b>[^{}]*)\}|(?P<t>\d+(?:\.\d+)?|[A-Za-z]|\\[A-Za-z]+))")
# A top-level "and" or "or" between list items ("2 and 5", "1, 3, and 5", "1 \text{ and } 5" once unwrapped)
_AND = re.compile(r"\s*,?\s+(?:and|or)\s+")
# A time or ratio: numbers joined by colons, a time perhaps with a.m. / p.m.
_COLON_FORM = re.compile(r"^(?P<numbers>\d+(?:\.\d+)?(?:\s*:\s*\d+(?:\.\d+)?)+)(?:\s*(?P<half>[ap])\.?\s*m\.?)?$",
                         re.IGNORECASE)
# More than this many \pm in one item are left as they are (each doubles the items).
_MAX_PM = 4


def canonical_answer(ans: str) -> str:
    """Return a normalized string key for grouping equivalent answers.

    Cheap and purely syntactic, meant for score-weighted voting where every
    candidate is bucketed: removes whitespace, ``$``, ``\\$``,
    ``\\left``/``\\right``, spacing macros (``\\!``, ``\\,``, ``\\;``),
    ``\\text{...}``-style wrappers, ``^\\circ``, a trailing period,
    thousands separators in plain numbers and trailing decimal zeros
    (``18.0`` -> ``18``); maps ``\\dfrac``/``\\tfrac`` to ``\\frac``.

    Args:
        ans: An answer string as returned by ``extract_answer``.

    Returns:
        The normalized key; two answers with equal keys are equivalent, but
        equivalent answers may still get different keys (``0.5`` vs
        ``\\frac{1}{2}``) -- use ``answers_equivalent`` for that.

    Raises:
        Nothing; non-string input is converted with ``str``.
    """
    s = str(ans)
    # Escaped \$ is a currency sign, not a math delimiter; both go.
    s = s.replace("\\$", "").replace("$", "")
    s = _LEFT_RIGHT.sub("", s)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = s.replace("\\displaystyle", "")
    s = _drop_spacing(s)
    s = s.replace("{,}", ",")
    s = _unwrap_text(s)
    s = s.replace("^\\circ", "").replace("^{\\circ}", "")
    s = re.sub(r"\s+", "", s)
    s = s.rstrip(".")
    if _THOUSANDS_SEP.match(s):
        s = s.replace(",", "")
    m = _DECIMAL.match(s)
    if m:
        s = m.group(1) + ("." + m.group(2) if m.group(2) else "")
    if s == "-0":
        s = "0"
    return s


def _drop_spacing(s: str) -> str:
    return _SPACING.sub(lambda m: m.group(0) if m.group(0) == "\\\\" else "", s)


def _unwrap_text(s: str) -> str:
    # Applied repeatedly so \text{\textbf{x}}-style nesting unwraps fully.
    prev = None
    while prev != s:
        prev = s
        s = _TEXT_WRAPPER.sub(r"\1", s)
    return s


# ------------------------------------------------------------------------------- normalisation
def _strip_wrappers(s: str) -> str:
    """Drop surrounding math delimiters, a whole ``\\boxed{}`` and trailing punctuation, repeatedly."""
    from .extract import last_boxed

    prev = None
    while prev != s:
        prev = s
        s = s.strip().rstrip(_TRAILING).strip()
        for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
            if len(s) > len(left) + len(right) and s.startswith(left) and s.endswith(right) \
                    and not s.endswith("\\" + right):
                s = s[len(left):-len(right)]
                break
        if re.match(r"^\\(?:boxed|fbox)\s*\{", s):
            inner = last_boxed(s)
            if inner is not None and s.rstrip().endswith("}") and s.count("\\boxed") + s.count("\\fbox") == 1:
                s = inner
    return s


def _scientific_to_decimal(m: re.Match) -> str:
    try:
        return format(Decimal(m.group(0)).normalize(), "f")
    except InvalidOperation:
        return m.group(0)


def _unicode_to_latex(s: str) -> str:
    """``≤`` -> ``\\le``, ``−`` -> ``-``, ``√2`` -> ``\\sqrt{2}`` ... (after :func:`normalise_unicode`)."""
    s = normalise_unicode(s)
    if s.isascii():
        return s
    s = _UNICODE_SQRT.sub(lambda m: "\\sqrt{" + (m.group("p") or m.group("b") or m.group("t")) + "}", s)
    for char, latex in _UNICODE_LATEX.items():
        s = s.replace(char, latex)
    return s


def _join_and(s: str) -> str:
    """A top-level "and" or "or" between items is a comma: ``2 and 5`` -> ``2, 5``, and a hedge names
    two answers (``24 or 32`` -> ``24, 32``; inside brackets it stays)."""
    out, last = [], 0
    for m in _AND.finditer(s):
        head = s[:m.start()]
        depth = sum(head.count(c) for c in "([{") - sum(head.count(c) for c in ")]}")
        if depth == 0 and m.start() > 0:
            out += [s[last:m.start()], ", "]
            last = m.end()
    return "".join(out) + s[last:]


_DOLLARS = re.compile(r"\\?\$(?=\s*\d)|\bdollars?\b", re.IGNORECASE)
_CENTS = re.compile(r"¢|\bcents?\b", re.IGNORECASE)


def _currency(ans: str) -> str | None:
    """``dollars`` or ``cents`` when one side names its money in one of them (``\\$5.40``, ``5.4 cents``,
    ``5¢``), else None: the two are the same unit only in name."""
    if _CENTS.search(ans):
        return "cents"
    return "dollars" if _DOLLARS.search(ans) else None


def _in_dollars(problem: str | None) -> bool:
    """Whether a problem counts money in dollars and its question does not ask for cents: "$5 a day ...
    How much money does she save?" (a gold without a unit is then in dollars, the GSM8K convention)."""
    return bool(problem) and bool(re.search(r"\$\s*\d|\bdollars?\b", problem)) and \
        not re.search(r"\bcents?\b|¢", question_of(problem), re.IGNORECASE)


# a function written in plain text ("cos x / sin x") is LaTeX's, and one applied to a lone term without
# brackets applies to that term only: \cos x / \sin x is (\cos x)/(\sin x), as a reader takes it
_PLAIN_FUNCTION = re.compile(r"(?<![\\A-Za-z])(arcsin|arccos|arctan|sinh|cosh|tanh|sin|cos|tan|cot|sec|csc|ln|log|exp)"
                             r"(?![A-Za-z])")
_BARE_ARGUMENT = re.compile(r"(\\(?:arcsin|arccos|arctan|sinh|cosh|tanh|sin|cos|tan|cot|sec|csc|ln|log|exp)"
                            r"(?:_\s*(?:\{\d+\}|\d))?(?:\^\s*(?:\{-?\d+\}|\d))?)\s+(\d*(?:[A-Za-z]|\\(?:theta|alpha|beta|phi|pi))|\d+)"
                            r"(?![A-Za-z\d^_({.])")
# \sqrt13: what a model means is the root of the number, not TeX's \sqrt{1}3
_BARE_SQRT = re.compile(r"\\sqrt[ \t]*(\d+)")
def _prepare(ans: str) -> str:
    """The presentation-free form of one side (step 1 of the module docstring)."""
    # thousands separators, then spacing, before the wrappers go: 10,\!080 is a number, \,1\, is 1
    s = _strip_wrappers(_drop_spacing(_LATEX_THOUSANDS.sub(r"\1,", _unicode_to_latex(ascii_relations(str(ans))))))
    s = _LEFT_RIGHT.sub("", s)
    s = _BARE_SQRT.sub(r"\\sqrt{\1}", s)
    s = exact_forms(s)
    s = _unwrap_text(s)
    s = _BARE_ARGUMENT.sub(r"\1(\2)", _PLAIN_FUNCTION.sub(r"\\\1", s))
    s = s.replace("\\$", "")
    s = _UNESCAPED_DOLLAR.sub("", s)
    s = _PERCENT.sub("", s)
    s = _DEGREES.sub("", s)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = s.replace("{:}", ":")  # LaTeX's colon without spacing: 7{:}30
    s = re.sub(r"\\\\\s*\[\s*-?[\d.]+\s*(?:pt|em|ex|mm|cm)\s*\]", r"\\\\", s)  # a matrix row's spacing: \\[2pt]
    s = _drop_spacing(s)
    s = _SCIENTIFIC.sub(_scientific_to_decimal, s)
    s = re.sub(r"\s+", " ", s)
    s = as_intersection(s) or _join_and(s)  # "x > -1 and x < 6" is one interval, "2 and 5" two items
    return s.strip().rstrip(_TRAILING).strip()


def problem_variables(problem: str | None) -> frozenset[str] | None:
    """Single letters a problem statement uses as variables (None when there is no statement).

    Letters standing alone inside its math (``$...$``, ``\\(...\\)``), outside ``\\text{}`` and LaTeX
    commands. A statement without any math (plain-text problems) gives the letters standing alone
    in its prose instead, except the words "a", "A" and "I"; where there is math, a lone letter in
    the prose is a unit ("in m") more often than a variable.
    """
    if problem is None:
        return None
    from .extract import math_segments

    found: set[str] = set()
    segments = math_segments(problem)
    for _, _, content in segments:
        content = _TEXT_WRAPPER.sub(" ", content)
        found.update(_IDENT.findall(_COMMAND.sub(" ", content)))
    if not segments:
        found.update(c for c in _IDENT.findall(_COMMAND.sub(" ", problem)) if c not in "aAI")
    return frozenset(found)


def _split_unit(s: str) -> tuple[str, str | None]:
    """``("864", "inches^2")`` for ``864 inches^2``; ``(s, None)`` when ``s`` is not a number and a unit."""
    m = _WITH_UNIT.match(s)
    if not m:
        return s, None
    return m.group("q").strip(), m.group("u").strip()


def _droppable(unit: str, variables: frozenset[str] | None) -> bool:
    """Whether ``unit`` may be dropped: a unit word, not a variable of the problem (see module docstring)."""
    if rate_key(unit):
        return True  # "km/h", "hours a week": a rate of units of measure
    letters = re.sub(r"\^\s*\{?\d+\}?|[\s/{}]|\\cdot", "", unit)
    if len(letters) == 1:
        # one letter: only a known unit letter, only with the problem at hand, and not its variable
        return (variables is not None and letters in SHORT_UNITS and letters not in _CONSTANTS
                and letters not in variables)
    words = [w for w in re.findall(r"[A-Za-z]+", unit) if w.lower() not in ("sq", "cu")]  # "sq ft", "cu in"
    if variables is not None and all(len(w) <= 3 and set(w) <= variables for w in words):
        return False  # "2ab" with a and b variables of the problem is a product
    return all(w in SHORT_UNITS or len(w) >= 3 for w in words)


def _drop_units(pred: str, gold: str, variables: frozenset[str] | None) -> tuple[str, str]:
    """Step 2 of the module docstring on one (pred, gold) pair of items."""
    pq, pu = _split_unit(pred)
    gq, gu = _split_unit(gold)
    if gu is not None and pu is not None and unit_key(pu) == unit_key(gu) and \
            not (variables and re.fullmatch(r"[A-Za-z]", gu) and gu in variables):
        return pq, gq  # the same unit on both sides, however spelt (5 m, 5 meters)
    if gu is not None:
        if not _droppable(gu, variables):
            return pred, gold
        gold = gq
        if pu is not None and unit_key(pu) == unit_key(gu):
            pred = pq
        return pred, gold
    if pu is not None and _droppable(pu, variables):
        pred = pq
    return pred, gold


def _other_unit(pred: str, gold: str, problem: str | None) -> bool:
    """Whether ``pred`` is a value in a unit of measure other than the one the question asks for
    (:func:`core.grading.units.asked_unit`), or, where it asks none, in a unit the problem never names
    while it names another of the same dimension; never where the gold writes that unit itself."""
    unit = _split_unit(pred)[1]
    if not problem or unit is None:
        return False
    key = unit_key(unit)
    base = key.split("^")[0]  # "25 feet" for square feet is a slip of the pen, not another quantity
    gold_unit = _split_unit(gold)[1]
    if gold_unit is not None and unit_key(gold_unit) == key:
        return False
    asked = asked_unit(problem)
    if rate_key(unit) or (asked and "/" in asked):
        # "75 m/s" answers no "speed in km/h?"; a rate against one unit asked ("60 miles per hour" for
        # "How many miles does it go each hour?") or one unit against a rate asked is read as the same; with
        # no unit asked, a rate in a unit the problem never names beside one it does ("50 km/h" for miles)
        if rate_key(unit) and asked is None:
            named = named_units(problem)
            return any(u not in named and any(DIMENSIONS.get(n) == DIMENSIONS[u] for n in named)
                       for u in rate_key(unit).split("/"))
        return bool(rate_key(unit) and asked and "/" in asked and key != asked)
    if base not in MEASURES:
        return False
    if asked is not None:
        return base != asked.split("^")[0]
    # no unit asked: one the problem never names, beside one of the same dimension it does ("4 seconds"
    # where its rates are in feet per minute, "16 gallons" where it counts liters)
    named = named_units(problem)
    return base not in named and any(DIMENSIONS[u] == DIMENSIONS[base] for u in named)


def _compound_matches(values: dict, gold: str, problem: str | None) -> bool:
    """Whether a value written in two units (:func:`core.grading.units.compound_values`) is the gold: its
    value in the gold's unit, else in the unit the question asks for, else in either of its units."""
    quantity, unit = _split_unit(gold)
    try:
        target = Fraction(quantity.replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return False
    asked = unit_key(unit) if unit is not None else asked_unit(problem)
    if asked is not None:
        return values.get(asked) == target
    return target in values.values()


def _interval_like(gold: str) -> bool:
    """Whether a gold item is an interval or a union of intervals: ``(-\\infty, 2) \\cup (3, \\infty)``, ``[2,5)``."""
    bare = re.sub(r"\\(?:left|right)(?![A-Za-z])", "", gold).strip()
    return "\\cup" in bare or bool(re.fullmatch(r"[\[(][^\[\]()]*,[^\[\]()]*[\])]", bare))


_DECIMAL_COMMA = re.compile(r"(?<![\d.,])(?:(-?\d+),(\d{1,2}|\d{4,})|(-?0),(\d{3}))(?![\d,])")


def _decimal_comma(pred: str, gold: str) -> str:
    """``pred`` with a decimal comma as a point (``2,70`` -> ``2.70``, ``3,21`` -> ``3.21``: most languages
    but English write decimals so) where the gold is one value, not a list, and the prediction one number
    with a comma that no thousands separator makes (not three digits after it, ``2,500`` stays, unless a
    zero comes before it: ``0,375``). A list's
    two items could never equal a gold of one value, so the reading costs no list."""
    if "," in gold or len(_DECIMAL_COMMA.findall(pred)) != 1 or pred.count(",") != 1:
        return pred
    return _DECIMAL_COMMA.sub(lambda m: ".".join(g for g in m.groups() if g is not None), pred)


def _distinct(items: list[str]) -> list[str]:
    """``items`` without the ones that write an earlier item's value again: ``["1/2", "0.5"]`` -> ``["1/2"]``
    (a value and its decimal: one answer, not two); the same form again stays, a multiplicity (``1, 2, 2,
    4``). Plain numbers, fractions and mixed numbers (``4\\tfrac12``) are compared exactly, anything else as written."""
    def value(item: str):
        compact = re.sub(r"\\[dt]?frac(\d)(\d)", r"\\frac{\1}{\2}", item.replace(" ", ""))  # \tfrac12
        mixed = re.fullmatch(r"(\d+)\\[dt]?frac\{(\d+)\}\{(\d+)\}", compact)
        if mixed and int(mixed.group(3)) and int(mixed.group(2)) < int(mixed.group(3)):  # 4\tfrac12 is 9/2
            return int(mixed.group(1)) + Fraction(int(mixed.group(2)), int(mixed.group(3)))
        plain = re.sub(r"\\[dt]?frac\{(-?\d+)\}\{(\d+)\}", r"\1/\2", compact)
        try:
            return Fraction(plain)
        except (ValueError, ZeroDivisionError):
            return canonical_answer(item)

    written: dict = {}  # value -> its forms as written; the same form again is a multiplicity ("1, 2, 2, 4")
    out = []
    for item in items:
        forms = written.setdefault(value(item), set())
        if forms and canonical_answer(item) not in forms:
            continue
        forms.add(canonical_answer(item))
        out.append(item)
    return out


def _coordinates(p_items: list[str], g_items: list[str]) -> list[str]:
    """Values named one letter each (``x = 15``, ``y = -29``), as many as the entries of a gold that is one
    tuple (``(15,-29)``), as that tuple: a point given by its coordinates, x, y, z in their order, other
    names in the order written; other items unchanged."""
    if len(g_items) != 1 or len(p_items) < 2 or not re.fullmatch(r"\(.*\)", g_items[0].strip()):
        return p_items
    if len(_split_items(g_items[0].strip()[1:-1])) != len(p_items):
        return p_items
    named = [_split_name(p) for p in p_items]
    names = [n for n, _ in named]
    if not all(n and re.fullmatch(r"[A-Za-z]", n) for n in names) or len(set(names)) != len(names):
        return p_items
    if set(names) <= set("xyz"):
        named.sort()  # coordinates x, y, z come in their order, however the answer lists them
    return ["(" + ", ".join(v for _, v in named) + ")"]


def _split_name(s: str) -> tuple[str | None, str]:
    """``("m_{\\max}", "n^2-n-1")`` for ``m_{\\max}=n^2-n-1``, ``("x", "[-2,7]")`` for ``x \\in [-2,7]``;
    ``(None, s)`` when ``s`` has no leading name."""
    m = _LHS_NAME.match(s)
    return (re.sub(r"\s+", "", m.group("name")), m.group("rhs").strip()) if m else (None, s)


def _strip_name(s: str) -> str:
    """``n^2-n-1`` for ``m_{\\max}=n^2-n-1``; ``[-2,7]`` for ``x \\in [-2,7]``; anything else unchanged."""
    return _split_name(s)[1]


def _names_conflict(pred_name: str | None, gold_name: str | None) -> bool:
    """Both sides name their item, with different names: ``a=3`` against ``b=3``, ``x_1`` against
    ``x_2``; a name and the same letter with a subscript (``m`` and ``m_{\\max}``) do not conflict."""
    if not (pred_name and gold_name) or pred_name == gold_name:
        return False
    bases = pred_name.split("_", 1)[0], gold_name.split("_", 1)[0]
    return bases[0] != bases[1] or ("_" in pred_name and "_" in gold_name)


def _asked_item(items: list[str], problem: str | None) -> list[str] | None:
    """The value of the one item that names the expression the question asks for: ``["3.21"]`` from
    ``b = 1.3, c = 1.91, b + c = 3.21`` for "What is $b+c$?"; None when no item, or several, name it, or an
    item names nothing ("r = 4, 7/2")."""
    if not problem or not all("=" in item for item in items):
        return None  # "r = 4, 7/2": a second value of r, unnamed, is a second answer
    asked = {re.sub(r"\s+", "", m) for m in re.findall(r"\$([^$]+)\$", question_of(problem))}
    found = [item.split("=")[1].strip() for item in items
             if item.count("=") == 1 and re.sub(r"\s+", "", item.split("=")[0]) in asked]
    return found if len(found) == 1 else None


def _split_items(s: str) -> list[str]:
    """Top-level comma-separated items (brackets, braces and ``\\{ \\}`` nest; ``1,000`` is one number,
    ``27,54,108,135`` four)."""
    protected = {i for m in _THOUSANDS_RUN.finditer(s) for i in range(m.start(), m.end())}
    items, depth, start, i, n = [], 0, 0, 0, len(s)
    while i < n:
        ch = s[i]
        if ch == "\\":
            if s.startswith("\\{", i):
                depth += 1
            elif s.startswith("\\}", i):
                depth -= 1
            i += 2
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0 and i not in protected:
            items.append(s[start:i].strip())
            start = i + 1
        i += 1
    items.append(s[start:].strip())
    return [x for x in items if x] or [s]


def _set_items(item: str) -> list[str] | None:
    """The items of a set written ``\\{a, b\\}`` (the whole item), or None when ``item`` is no such set."""
    if not (item.startswith("\\{") and item.endswith("\\}")):
        return None
    depth, i = 0, 0
    while i < len(item):  # the opening \{ must close at the very end
        if item.startswith("\\{", i):
            depth += 1
        elif item.startswith("\\}", i):
            depth -= 1
            if depth == 0 and i != len(item) - 2:
                return None
        i += 2 if item[i] == "\\" else 1
    inner = item[2:-2].strip()
    return _split_items(inner) if inner else None


def _expand_pm(items: list[str]) -> list[str]:
    """``a \\pm b`` is two items, ``a+b`` and ``a-b`` (``\\mp`` the other way round), each sign in turn."""
    out = []
    for item in items:
        m = re.search(r"\\(?:pm|mp)(?![A-Za-z])", item)
        if not m or len(re.findall(r"\\(?:pm|mp)(?![A-Za-z])", item)) > _MAX_PM:
            out.append(item)
            continue
        signs = ("+", "-") if m.group(0) == "\\pm" else ("-", "+")
        for sign in signs:
            expanded = item[:m.start()] + sign + item[m.end():]
            expanded = re.sub(r"(^|=|\()\s*\+\s*", r"\1", expanded).strip()  # a leading + goes
            out.extend(_expand_pm([expanded]))
    return out


def _colon_parts(item: str) -> tuple[list[Decimal], str | None] | None:
    """``([7, 30], "p")`` for a time or ratio ``7:30 p.m.`` (``None`` for no a.m./p.m.); None for anything else."""
    m = _COLON_FORM.match(item)
    if not m:
        return None
    half = m.group("half")
    return [Decimal(x) for x in re.split(r"\s*:\s*", m.group("numbers"))], half.lower() if half else None


def _same_colon_form(pred: tuple | None, gold: tuple | None) -> bool:
    """Same numbers in the same order, and the same half of the day where both say which."""
    if pred is None or gold is None:
        return False
    return pred[0] == gold[0] and (pred[1] is None or gold[1] is None or pred[1] == gold[1])


def _items(s: str) -> list[str]:
    """A prepared side as its list items: commas, a whole set's items (also a named one, ``n \\in \\{-2, 1\\}``),
    ``\\pm`` expanded."""
    items = _split_items(s)
    if len(items) == 1 and _set_items(_strip_name(items[0])):
        items = _set_items(_strip_name(items[0]))
    return _expand_pm(items)


def _words_key(s: str) -> str:
    """A word answer's key: lowercased, without a leading article or a verb of direction (``facing east``)."""
    s = re.sub(r"^(?:a|an|the)\s+(?=\S)", "", s.strip(), flags=re.IGNORECASE)
    s = re.sub(r"^(?:facing|heading|pointing|moving|going|travell?ing|looking)\s+(?=\S)", "", s, flags=re.IGNORECASE)
    s = re.sub(r"(?<=\S)\s+(?:function|number|integer)s?$", "", s, flags=re.IGNORECASE)  # an even function = even
    return canonical_answer(s).lower()


def _is_prose(s: str) -> bool:
    """True when ``s`` holds a word (three or more letters outside LaTeX commands, not a math name).

    math-verify reads prose as a product of letters (``all even numbers`` -> ``E*E*a*l*l*n*v``) or
    picks a number out of it; prose is compared as a string instead.
    """
    s = re.sub(r"\\(?:begin|end)\s*\{[^{}]*\}", " ", s)  # environment names: pmatrix, cases
    return any(w.lower() not in _MATH_WORDS for w in re.findall(r"[A-Za-z]{3,}", _COMMAND.sub(" ", s)))


def _identifiers(s: str) -> set[str]:
    return set(_IDENT.findall(_COMMAND.sub(" ", s)))


def _case_conflict(pred: str, gold: str) -> bool:
    """True when the two sides name the same letters only up to case (``N`` vs ``n``)."""
    p, g = _identifiers(pred), _identifiers(gold)
    return p != g and {c.lower() for c in p} == {c.lower() for c in g}


# ------------------------------------------------------------------------------------ math-verify
_PROCESS = MathVerifyProcess()
atexit.register(_PROCESS.close)


@dataclass
class GradingStats:
    """Counters of the grading calls of this process (read with :func:`grading_stats`).

    calls: math-verify requests made; timeouts: those that ran past the time limit (the child was
    stopped, or its soft limit hit); errors: requests math-verify failed on.
    """

    calls: int = 0
    timeouts: int = 0
    errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **counts: int) -> None:
        with self.lock:
            for key, n in counts.items():
                setattr(self, key, getattr(self, key) + n)


_STATS = GradingStats()
# answers that once ran past the limit are not sent to math-verify again (a run's paths repeat them)
_SLOW: set[str] = set()
_PARSED: dict[str, tuple[bool, str | None]] = {}
_EQUAL: dict[tuple[str, str], bool] = {}
_CACHE_MAX = 50_000


def grading_stats() -> dict:
    """``{"calls", "timeouts", "errors"}`` of math-verify requests made by this process so far."""
    with _STATS.lock:
        return {"calls": _STATS.calls, "timeouts": _STATS.timeouts, "errors": _STATS.errors}


def set_time_limit(seconds: float) -> float:
    """Set the hard time limit of one math-verify request (default 10 s); returns the previous one.

    Raises:
        ValueError: ``seconds`` is not positive.
    """
    global _TIME_LIMIT_S
    if not seconds > 0:
        raise ValueError(f"time limit must be > 0 seconds, got {seconds}")
    previous, _TIME_LIMIT_S = _TIME_LIMIT_S, float(seconds)
    return previous


def _ask(payload: dict, texts: tuple[str, ...]) -> tuple[dict | None, bool]:
    """One math-verify request with the time limit: ``(answer or None, timed_out)``."""
    if any(t in _SLOW or len(t) > _MAX_SYMBOLIC_LEN for t in texts):
        return None, False
    _STATS.add(calls=1)
    try:
        answer = _PROCESS.request(payload, _TIME_LIMIT_S)
    except RuntimeError:
        logger.warning("math-verify worker could not start; answers are compared as strings only")
        _STATS.add(errors=1)
        return None, False
    if answer is None or answer.get("timeout"):
        _STATS.add(timeouts=1)
        _SLOW.update(texts)
        logger.warning("grading ran past %.0f s and was stopped: %r", _TIME_LIMIT_S, texts)
        return None, True
    if "error" in answer:
        _STATS.add(errors=1)
        logger.debug("math-verify failed on %r: %s", texts, answer["error"])
        return None, False
    return answer, False


def _read(text: str) -> tuple[bool, str | None, bool]:
    """math-verify's reading of one normalised item: ``(parsed whole, its sympy form, timed_out)``."""
    if text in _PARSED:
        ok, value = _PARSED[text]
        return ok, value, False
    answer, timed_out = _ask({"op": "parse", "text": text}, (text,))
    if answer is None:
        return False, None, timed_out
    if len(_PARSED) >= _CACHE_MAX:
        _PARSED.clear()
    _PARSED[text] = (bool(answer["ok"]), answer["value"])
    return bool(answer["ok"]), answer["value"], False


def _math_equal(pred: str, gold: str) -> tuple[bool, bool]:
    key = (pred, gold)
    if key in _EQUAL:
        return _EQUAL[key], False
    answer, timed_out = _ask({"op": "equal", "gold": gold, "pred": pred}, (gold, pred))
    if answer is None:
        return False, timed_out
    if len(_EQUAL) >= _CACHE_MAX:
        _EQUAL.clear()
    _EQUAL[key] = bool(answer["equal"])
    return _EQUAL[key], False


# ------------------------------------------------------------------------------------------ grade
@dataclass(frozen=True)
class Grade:
    """The verdict on one answer.

    correct: the prediction is equivalent to the gold answer.
    gold_parsed: how the gold was read, JSON-ready: ``{"as": "math", "value": sympy form}`` when
        math-verify read it whole, ``{"as": "text", "value": normalised string}`` when it could not
        (compared as a string), ``{"as": "list", "items": [...]}`` for a list of such readings;
        None when there is no gold.
    timed_out: some comparison ran past the time limit (it then counts as not equivalent).
    """

    correct: bool
    gold_parsed: dict | None = None
    timed_out: bool = False


def _compare_item(pred: str, gold: str, variables) -> tuple[bool, bool]:
    """``(equivalent, timed_out)`` for one prepared item on each side."""
    pred, gold = _drop_units(pred, gold, variables)
    if re.fullmatch(r"\([A-E]\)", gold.strip()) or (re.fullmatch(r"[A-E]", gold.strip()) and re.match(r"\(|(?:option|choice)\s", pred, re.IGNORECASE)):
        if choice_letter(pred):  # (C) Plane, option C: the choice (C), also where the gold writes it C
            return choice_letter(pred) == choice_letter(gold), False
    elif option_value(pred):  # "(B) 9" answers a gold 9 by its option's value
        pred = option_value(pred)
    based = in_base(pred), in_base(gold)
    if None not in based:  # both name their base: 40_{10} is not 40_9
        return based[0] == based[1], False
    if pred.startswith("(") or gold.startswith("("):  # a vector written as a tuple: (-18, -49, 96)
        pred, gold = column_as_tuple(pred), column_as_tuple(gold)
    (pred_name, pred), (gold_name, gold) = _split_name(pred), _split_name(gold)
    if not pred or not gold or _case_conflict(pred, gold) or _names_conflict(pred_name, gold_name):
        return False, False
    if gold_name and not pred_name and "=" in pred:
        # k^2=5 is no answer to a gold k=5 (math-verify would take its right side); an equation is the same
        # one when its two sides differ by the gold's difference: y - 1 = 2(x+1) is y = 2x + 3
        if pred.count("=") != 1:
            return False, False
        left, right = pred.split("=")
        if not left.strip() or not right.strip():
            return False, False
        return _math_equal(f"({left})-({right})", f"({gold_name})-({gold})")
    if canonical_answer(pred) == canonical_answer(gold):
        return True, False
    colons = _colon_parts(pred), _colon_parts(gold)
    if colons != (None, None):  # 7:30 is neither 7 nor 7/30
        return _same_colon_form(*colons), False
    if _is_prose(gold) or _is_prose(pred):  # words compare as words: East = east, an ellipse = ellipse
        glossed = re.fullmatch(r"([^()]+?)\s*\(([A-Za-z][A-Za-z ]*)\)", pred.strip())
        if glossed:  # a word answer with its translation: "Osten (east)"
            return _words_key(gold) in (_words_key(glossed.group(1)), _words_key(glossed.group(2))), False
        return _words_key(pred) == _words_key(gold), False
    gold_ok, _, timed_out = _read(gold)
    if not gold_ok:  # prose, or a form math-verify reads only in part: the strings decided
        return False, timed_out
    return _math_equal(pred, gold)


def _gold_reading(gold: str, variables: frozenset[str] | None) -> tuple[dict, bool]:
    """How a prepared gold is read (see :attr:`Grade.gold_parsed`) and whether reading it timed out."""
    items = _split_items(gold)
    if len(items) > 1:
        readings = [_gold_reading(item, variables) for item in items]
        return {"as": "list", "items": [r for r, _ in readings]}, any(t for _, t in readings)
    quantity, unit = _split_unit(gold)
    item = _strip_name(quantity if unit is not None and _droppable(unit, variables) else gold)
    if _is_prose(item):  # words (Evelyn, all even numbers): not a product of letters
        return {"as": "text", "value": item}, False
    ok, value, timed_out = _read(item)
    if ok:
        return {"as": "math", "value": value}, timed_out
    return {"as": "text", "value": canonical_answer(item)}, timed_out


# an expression still to be worked out: operands joined by an operator, a root, a binomial coefficient
_UNWORKED = re.compile(r"[\w})]\s*(?:[-+*/^]|\\times|\\cdot|\\div)\s*[\w{(\\]|\\sqrt|\\d?binom|\\log|\\ln|\\lceil|\\lfloor")


def _restates(pred: str, problem: str) -> bool:
    """Whether ``pred`` is an expression of the problem statement itself, not worked out (``2 + 3`` for
    "What is 2 + 3?", ``\\dbinom{8}{4}`` for "Compute $\\dbinom{8}{4}$", ``\\log_2 64`` for "Evaluate $\\log_264$",
    an unreduced fraction for
    "Simplify $\\frac{84}{144}$"): a path cut off while it
    restates the question answers nothing, though math-verify would evaluate it to the gold."""
    key = canonical_answer(pred)
    unreduced = any(math.gcd(int(a), int(b)) > 1 for a, b in re.findall(r"\\frac\{(\d+)\}\{(\d+)\}", pred))
    # braces and brackets do not matter: \lceil{\sqrt{20}}\rceil^2 in the problem is \lceil \sqrt{20} \rceil^2
    # in the answer, and \log_264 is \log_2 64, which _prepare writes \log_2(64)
    return len(key) >= 3 and bool(unreduced or _UNWORKED.search(pred)) and \
        re.sub(r"[{}()]", "", key) in re.sub(r"[{}()]", "", _problem_key(problem))


@functools.lru_cache(maxsize=256)
def _problem_key(problem: str) -> str:
    """The problem statement in the form :func:`canonical_answer` gives answers; cached, since every pick
    and ``at_n`` entry of a record is graded against the same statement."""
    return canonical_answer(_prepare(problem))


def grade(pred: str | None, gold: str | None, problem: str | None = None, *, read_gold: bool = True) -> Grade:
    """Grade ``pred`` against ``gold`` (see the module docstring for the rules).

    Safe from any thread and in worker processes: math-verify runs in a child process and each
    request is stopped after the time limit (:func:`set_time_limit`); timeouts are counted
    (:func:`grading_stats`) and graded as not equivalent.

    Args:
        pred: the predicted answer, e.g. from :func:`core.grading.extract.extract_answer`; may be None.
        gold: the reference answer; may be None.
        problem: the problem statement, to tell a unit from a variable (``6m``); None: no single
            letter is ever dropped as a unit.
        read_gold: also report how the gold was read (one math-verify parse, cached per gold).

    Returns:
        A :class:`Grade`; ``correct`` is False when either side is None or empty.

    Raises:
        Nothing.
    """
    if gold is None or not str(gold).strip():
        return Grade(False)
    try:
        gold_s = _prepare(gold)
        variables = problem_variables(problem)
        reading, timed_out = _gold_reading(gold_s, variables) if read_gold and gold_s else (None, False)
        if pred is None or not str(pred).strip() or not gold_s:
            return Grade(False, reading, timed_out)
        if _currency(str(pred)) and _currency(str(gold)) and _currency(str(pred)) != _currency(str(gold)):
            return Grade(False, reading, timed_out)  # $5.40 is not 5.4 cents
        if _currency(str(pred)) == "cents" and not _currency(str(gold)) and _in_dollars(problem):
            return Grade(False, reading, timed_out)  # "20 cents" where the problem counts its money in dollars
        # -\mathbf{I} answers a gold written out as its matrix, (-2, -14, -7)^T a column vector
        pred = transposed_row(scaled_identity(str(pred), str(gold)), str(gold))
        # "each child can have soup **once**": how many times, in a word
        pred = {"once": "1", "twice": "2", "thrice": "3"}.get(str(pred).strip(" *.").lower(), pred)
        pred_s = _decimal_comma(_prepare(pred), gold_s)
        if canonical_answer(pred_s) == canonical_answer(gold_s):
            return Grade(True, reading, timed_out)
        if problem and not choice_letter(pred_s) and _restates(pred_s, problem):  # "(B) 3/5" quotes its option
            return Grade(False, reading, timed_out)  # "2 + 3" restates "What is 2 + 3?": no answer
        compound = compound_values(pred_s)
        if compound is not None:  # 2 hours 40 minutes: 160 (minutes) or 8/3 (hours)
            return Grade(_compound_matches(compound, gold_s, problem), reading, timed_out)
        g_items, p_items = _items(gold_s), _items(pred_s)
        # inequalities joined by "or" are the union of their intervals: x<2 or x>3 = (-\infty,2) \cup (3,\infty)
        g_union, p_union = as_union(g_items), as_union(p_items)
        g_items, p_items = [g_union] if g_union else g_items, [p_union] if p_union else p_items
        p_items = _coordinates(p_items, g_items)
        if len(p_items) > len(g_items) == 1:
            p_items = _asked_item(p_items, problem) or p_items  # "b = 1.3, c = 1.91, b + c = 3.21" for "What is $b+c$?"
        if len(p_items) > len(g_items):
            p_items = _distinct(p_items)  # "1/2 or 0.5" is one value written twice
        if len(g_items) != len(p_items):
            return Grade(False, reading, timed_out)
        if any(map(unsolved_inequality, p_items)) and any(map(_interval_like, g_items)):
            return Grade(False, reading, timed_out)  # x^2-5x+6>0 states the condition, not the set it solves to
        if len(p_items) == 1 and _other_unit(p_items[0], g_items[0], problem):
            return Grade(False, reading, timed_out)  # 1.25 kilometers answers no "How many miles ...?"
        # items the gold names (a=2, b=3) are taken in order by an answer that names none (2, 3)
        gold_names = [_split_name(g)[0] for g in g_items]
        in_order = (len(g_items) > 1 and all(gold_names) and len(set(gold_names)) == len(gold_names)
                    and not any(_split_name(p)[0] for p in p_items))
        unused = list(range(len(p_items)))
        for index, g in enumerate(g_items):
            for k in ([index] if in_order else unused):
                equal, late = _compare_item(p_items[k], g, variables)
                timed_out = timed_out or late
                if equal:
                    unused.remove(k)
                    break
            else:
                return Grade(False, reading, timed_out)
        return Grade(True, reading, timed_out)
    except Exception:  # a grading bug must not stop a run: log it, count the answer wrong
        logger.warning("grading failed: %r vs %r", pred, gold, exc_info=True)
        return Grade(False, None, False)


def answers_equivalent(pred: str | None, gold: str | None, problem: str | None = None) -> bool:
    """Return True if ``pred`` and ``gold`` are the same answer (:func:`grade` without the gold's reading).

    Args:
        pred: Predicted answer, e.g. from ``extract_answer``; may be None.
        gold: Reference answer (``18``, ``\\frac{14}{3}``, ``\\text{(C)}`` ...); may be None.
        problem: the problem statement, see :func:`grade`.

    Returns:
        True if equivalent; False if not, if either side is None/empty, or if the comparison ran
        past the time limit.

    Raises:
        Nothing.
    """
    return grade(pred, gold, problem, read_gold=False).correct

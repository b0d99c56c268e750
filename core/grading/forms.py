"""Answer forms read as the values they write, before two answers are compared.

Each reading is exact (no float tolerance): a repeating decimal is its fraction, a plain-text mixed
number the LaTeX one, a set in set-builder notation its condition, a column vector its tuple, a
number with a base subscript its value, a choice letter its letter.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["choice_letter", "column_as_tuple", "exact_forms", "in_base", "repeating_value", "rows_as_matrix", "scaled_identity", "transposed_row"]

# a column vector is the tuple of its entries: \begin{pmatrix} -18 \\ -49 \\ 96 \end{pmatrix} = (-18, -49, 96)
_MATRIX = re.compile(r"^\\begin\{([pb])matrix\}(.*)\\end\{\1matrix\}$", re.S)


def column_as_tuple(s: str) -> str:
    """A column vector (one entry per row, two rows or more) as its tuple; anything else unchanged."""
    m = _MATRIX.match(s.strip())
    if not m or "&" in m.group(2):
        return s
    entries = [e.strip() for e in re.split(r"\\\\", m.group(2)) if e.strip()]
    return "(" + ", ".join(entries) + ")" if len(entries) >= 2 else s


# a row written transposed: (-2, -14, -7)^T, \begin{pmatrix} 1 & 2 \end{pmatrix}^{\top}
_TRANSPOSED = re.compile(r"^(.*?)\s*\^\s*(?:\{\s*(?:T|\\top|\\intercal|t)\s*\}|T|\\top|\\intercal)$", re.S)


def transposed_row(pred: str, gold: str) -> str:
    """A row vector written transposed (``(-2, -14, -7)^T``, a one-row ``pmatrix`` with ``^{\\top}``) as the tuple of
    its entries when the gold is a column vector or a tuple, which it then equals; anything else unchanged."""
    m = _TRANSPOSED.match(pred.strip())
    if not m or not (gold.strip().startswith("(") or column_as_tuple(gold) != gold):
        return pred
    row = m.group(1).strip()
    matrix = _MATRIX.match(row)
    if matrix and not re.search(r"\\\\", matrix.group(2)):
        return "(" + ", ".join(e.strip() for e in matrix.group(2).split("&")) + ")"
    return row if row.startswith("(") and row.endswith(")") else pred


# a multiple of the identity or the zero matrix by name: -\mathbf{I}, 2I, \mathbf{0}
_NAMED_MATRIX = re.compile(r"^(-?)\s*(\d*)\s*(?:\\mathbf\s*\{([I0])\}|\\mathbf\s*([I0])\b|([I]))$")


def scaled_identity(pred: str, gold: str) -> str:
    """``pred`` as the square matrix it names when the gold is a square ``pmatrix``/``bmatrix`` of size n
    (``-\\mathbf{I}`` -> ``-1`` on the diagonal, ``\\mathbf{0}`` -> all zeros); anything else unchanged.
    The size comes from the gold: a named matrix says nothing of its own."""
    named, square = _NAMED_MATRIX.match(pred.strip()), _MATRIX.match(gold.strip())
    if not named or not square:
        return pred
    rows = [r for r in re.split(r"\\\\", square.group(2)) if r.strip()]
    n = len(rows)
    if n < 2 or any(r.count("&") != n - 1 for r in rows):
        return pred
    letter = named.group(3) or named.group(4) or named.group(5)
    scale = named.group(1) + (named.group(2) or "1")
    if letter == "0":
        entries = [["0"] * n for _ in range(n)]
    else:
        entries = [[scale if i == j else "0" for j in range(n)] for i in range(n)]
    return "\\begin{pmatrix} " + " \\\\ ".join(" & ".join(r) for r in entries) + " \\end{pmatrix}"


# a matrix written as a list of its rows: [[-1, 0], [0, -1]]
_ROW_LIST = re.compile(r"^\[\s*\[(.*)\]\s*\]$", re.S)


def rows_as_matrix(s: str) -> str:
    """A matrix written as the list of its rows (``[[-1, 0], [0, -1]]``, two rows or more of one
    length) as LaTeX's ``pmatrix``; anything else unchanged."""
    m = _ROW_LIST.match(s.strip())
    if not m:
        return s
    rows = [[e.strip() for e in row.split(",")] for row in re.split(r"\]\s*,\s*\[", m.group(1))]
    if len(rows) < 2 or len({len(r) for r in rows}) != 1 or any(not e or re.search(r"[\[\]]", e) for r in rows for e in r):
        return s
    return "\\begin{pmatrix} " + " \\\\ ".join(" & ".join(r) for r in rows) + " \\end{pmatrix}"


# a set in set-builder notation over one variable whose condition names it: \{t : t > 2\}, \{x \mid x \le 1\}
_SET_BUILDER = re.compile(r"^\\\{\s*([A-Za-z])\s*(?::|\\mid|\|)\s*((?=[^{}]*\1)[^{}]+?)\s*\\\}$")
# a mixed number in plain text, 137 1/2, read as the LaTeX one (math-verify's 137\frac{1}{2} is 275/2)
_MIXED = re.compile(r"(?<![\d./])(\d+)\s+(\d+)/(\d+)(?![\d/])")
# a repeating decimal: 1.\overline{3}, 0.1\overline{6}, 0.\dot{3}
_REPEATING = re.compile(r"(?<![\d.])(\d*)\.(\d*)\\(?:overline|dot)\s*\{?(\d+)\}?")


def repeating_value(whole: str, fixed: str, period: str) -> Fraction:
    """The value of the decimal ``whole.fixed`` followed by ``period`` repeated forever (digit strings; ``whole``
    may be empty): ``("1", "", "3")`` -> 4/3, ``("0", "1", "6")`` -> 1/6."""
    whole = whole or "0"
    return Fraction(int(whole + fixed + period) - int(whole + fixed), 10 ** len(fixed) * (10 ** len(period) - 1))


def _repeating_fraction(m: re.Match) -> str:
    """A repeating decimal as the fraction it is: ``1.\\overline{3}`` -> ``\\frac{4}{3}``."""
    value = repeating_value(m.group(1), m.group(2), m.group(3))
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}" if value.denominator != 1 else str(value.numerator)


def choice_letter(s: str) -> str | None:
    """The letter of a multiple-choice answer: ``(C)``, ``C``, ``(C) Plane``, ``(B) 9``, ``option B``,
    ``choice (B)``; None for anything else."""
    s = re.sub(r"^(?:option|choice)\s+(?=\(?[A-E]\)?$)", "", s.strip(), flags=re.IGNORECASE)
    m = re.fullmatch(r"\(?([A-E])\)?(?:\s+[A-Za-z ]+|(?<=\))\s+\S.*)?", s)
    return m.group(1) if m and (s.startswith("(") or len(s) == 1) else None


def option_value(s: str) -> str | None:
    """The value a choice letter's option text gives (``(B) 9`` -> ``9``), else None."""
    m = re.fullmatch(r"\(([A-E])\)\s+(.*\S)", s.strip())
    return m.group(2) if m else None


def in_base(s: str) -> int | None:
    """The value of a number written with its base as a subscript (``40_9`` -> 36, ``1011_{2}`` -> 11),
    else None (also for digits the base does not have)."""
    m = re.fullmatch(r"([0-9A-Za-z]+)_\{?(\d+)\}?", s.replace(" ", ""))
    if not m or not 2 <= int(m.group(2)) <= 36:
        return None
    try:
        return int(m.group(1), int(m.group(2)))
    except ValueError:
        return None


# a vector in angle brackets is its tuple: \langle -7, 16, 5 \rangle = (-7, 16, 5)
_ANGLE_VECTOR = re.compile(r"^(?:\\langle|⟨)\s*([^⟨⟩]*?,[^⟨⟩]*?)\s*(?:\\rangle|⟩)$")
# a set written in plain braces, as models write it outside LaTeX: {3, 5, 7}
_PLAIN_BRACES_SET = re.compile(r"^\{\s*([^{}\\]*,[^{}\\]*?)\s*\}$")


# a tuple or interval written with ";" between its items, as in Czech, Polish, Russian or Ukrainian: "(1{,}5; -13)"
_SEMICOLON_ITEMS = re.compile(r"[(\[](?:\\[,;!: ]|[^()\[\];])*;(?:\\[,;!: ]|[^()\[\];])*(?:[)\]]|\\rangle|⟩)")


def local_notation(s: str) -> str:
    """A tuple or interval in the continental notation as the plain one: ``;`` between its items and a decimal
    comma (``(1{,}5;\\ -13)`` -> ``(1.5, -13)``), and an angle bracket closing an interval that a round or
    square one opened (Czech ``(3;\\,4\\rangle`` -> ``(3, 4]``: closed at 4), and a French interval's outward
    brackets (``]3; 5]`` -> ``(3, 5]``); anything else as it is."""
    # French intervals: "]a; b]" is (a, b], "[a; b[" is [a, b)
    s = re.sub(r"^(\\left)?\]", lambda m: (m.group(1) or "") + "(", s.strip().rstrip("."))
    s = re.sub(r"(\\right)?\[$", lambda m: (m.group(1) or "") + ")", s)
    if ";" not in s:
        return s

    def plain(m: re.Match) -> str:
        inner = re.sub(r"(?<=\d)(?:\{,\}|,)(?=\d)", ".", m.group(0))  # decimal commas
        return inner.replace(";", ",")
    s = _SEMICOLON_ITEMS.sub(plain, s)
    return re.sub(r"([(\[][^()\[\]⟨⟩]*?,[^()\[\]⟨⟩]*?)(?:\\rangle|⟩)", r"\1]", s)


def exact_forms(s: str) -> str:
    """``s`` with repeating decimals as fractions (``1.\\overline{3}`` -> ``\\frac{4}{3}``), a set-builder set
    as its condition (``\\{t : t > 2\\}`` -> ``t > 2``) and a plain-text mixed number in LaTeX
    (``137 1/2`` -> ``137\\frac{1}{2}``, which math-verify reads as 275/2), a matrix as the list of its
    rows in ``pmatrix`` (:func:`rows_as_matrix`), a vector in angle brackets as its tuple, a set in plain
    braces (``{3, 5, 7}``) as LaTeX's ``\\{3, 5, 7\\}``, and ``;`` between items (:func:`local_notation`)."""
    s = rows_as_matrix(_REPEATING.sub(_repeating_fraction, local_notation(s)))
    s = _ANGLE_VECTOR.sub(r"(\1)", s.strip())
    s = _PLAIN_BRACES_SET.sub(r"\\{\1\\}", s)
    s = _SET_BUILDER.sub(r"\2", s)
    return _MIXED.sub(lambda m: f"{m.group(1)}\\frac{{{m.group(2)}}}{{{m.group(3)}}}"
                      if int(m.group(2)) < int(m.group(3)) else m.group(0), s)

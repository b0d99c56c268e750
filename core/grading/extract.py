"""Pull a final answer string out of a free-form solution.

Nothing here judges correctness; see :mod:`core.grading.equivalence` for that. An answer is taken
whole: a list stays a list (``69, 84``), an expression stays an expression (``2^{1009}``,
``3x+2``), a tuple or interval keeps its brackets. Only a quantity written in prose loses its unit
(``25 cm^2`` -> ``25``); inside ``$...$`` the grader decides about units, with the problem at hand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["last_boxed", "final_boxes", "gsm8k_hash_answer", "math_segments", "leading_expression",
           "extract_answer"]

# The negative lookahead keeps macros that merely start with these names
# (e.g. a user-defined ``\boxedanswer``) from being taken for a box.
_BOX_CMD = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")

# A thousands separator only sits between a digit and exactly three digits;
# anything else (``1,2`` as a list of solutions) must keep its comma.
_THOUSANDS_SEP = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")

_ANSWER_PHRASE = re.compile(r"(?:final\s+answer|the\s+answer)\s*(?:is\b|:)\s*:?", re.IGNORECASE)

# A number as written in prose: thousands groups (``12,345,678``), a decimal part, an exponent (``4e-3``).
_NUMBER = re.compile(r"\d+(?:,\d{3}(?!\d))*(?:\.\d+)?(?:[eE][-+]?\d+(?![A-Za-z]))?|\.\d+")
_WORD = re.compile(r"[A-Za-z]+")
_OPERATORS = "+-*/^×÷·−"
_OPEN, _CLOSE = "([{", ")]}"
# Between two math segments that together are one answer: "$69$ and $84$", "$1$, $3$ or $5$".
_SEGMENT_JOINER = re.compile(r"^\s*(?:,|and|or|,\s*and|,\s*or)\s*$", re.IGNORECASE)


def _braced_group(text: str, start: int) -> str | None:
    """Return the content of the brace group opening at ``text[start]``.

    Escaped braces (``\\{``) are literal characters in LaTeX and must not
    count towards the balance; ``\\\\`` is skipped as a unit so that
    ``\\\\{`` is read as a line break followed by a real group.
    """
    end = _braced_end(text, start)
    return None if end is None else text[start + 1:end - 1]


def _braced_end(text: str, start: int) -> int | None:
    """Index just past the brace group opening at ``text[start]``, or None if it never closes."""
    depth = 0
    i = start
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


@dataclass
class _Box:
    start: int  # index of the backslash
    end: int  # index just past the box
    content: str | None  # None: the braces never close


def _boxes(text: str) -> list[_Box]:
    """Every ``\\boxed``/``\\fbox`` in ``text``, boxes nested in another box left out."""
    out: list[_Box] = []
    n = len(text)
    for m in _BOX_CMD.finditer(text):
        if out and out[-1].content is not None and m.start() < out[-1].end:
            continue  # inside the previous box
        pos = m.end()
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos >= n:
            out.append(_Box(m.start(), n, None))
            continue
        if text[pos] == "{":
            end = _braced_end(text, pos)
            if end is None:
                out.append(_Box(m.start(), n, None))
            else:
                out.append(_Box(m.start(), end, text[pos + 1:end - 1].strip()))
            continue
        tok = re.match(r"[^\s$]+", text[pos:])
        token = tok.group(0).rstrip(".,;") if tok else ""
        out.append(_Box(m.start(), pos + (tok.end() if tok else 0), token or None))
    return out


def last_boxed(text: str) -> str | None:
    """Return the content of the last ``\\boxed`` / ``\\fbox`` in ``text``.

    Handles nested braces (``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``)
    and the brace-less form ``\\boxed 5`` (content runs to the next
    whitespace or ``$``, trailing ``.,;`` dropped).

    Args:
        text: Solution text, typically model output or a MATH reference
            solution.

    Returns:
        The content of the last box, stripped of surrounding whitespace (may
        be ``""`` for ``\\boxed{}``), or None if there is no box or the last
        box's braces never close (e.g. a generation cut off mid-answer).

    Raises:
        Nothing.
    """
    if not text:
        return None
    boxes = _boxes(text)
    return boxes[-1].content if boxes else None


def final_boxes(text: str) -> str | None:
    """The answer the boxes of a solution give: the last box, or the list of boxes on its line.

    A two-answer problem is often closed with ``\\boxed{69}`` and ``\\boxed{84}`` on one line; keeping
    only the last would drop an answer. So when the line of the last box holds several boxes, the
    answer is their contents joined by ``", "`` (``"69, 84"``). Boxes on earlier lines (intermediate
    results) are ignored.

    Args:
        text: a solution.

    Returns:
        The answer, or None when there is no box, the last box is empty or its braces never close.

    Raises:
        Nothing.
    """
    if not text:
        return None
    boxes = _boxes(text)
    if not boxes or not boxes[-1].content:
        return None
    line_start = text.rfind("\n", 0, boxes[-1].start) + 1
    on_line = [b.content for b in boxes if b.start >= line_start and b.content]
    return ", ".join(on_line)


def gsm8k_hash_answer(text: str) -> str | None:
    """Return the GSM8K-style answer written after the last ``####``.

    Args:
        text: Solution text containing a line such as ``#### 2,125``.

    Returns:
        The rest of that line, stripped, with thousands separators removed
        (``2,125`` -> ``2125``) and a trailing period dropped; None if there
        is no ``####`` or nothing follows it on its line.

    Raises:
        Nothing.
    """
    if not text:
        return None
    idx = text.rfind("####")
    if idx < 0:
        return None
    ans = text[idx + 4 :].split("\n", 1)[0].strip()
    ans = _THOUSANDS_SEP.sub("", ans)
    ans = ans.rstrip(".").strip()
    return ans or None


def math_segments(text: str, start: int = 0) -> list[tuple[int, int, str]]:
    """Inline and display math in ``text`` from ``start``: ``$...$``, ``$$...$$``, ``\\(...\\)``, ``\\[...\\]``.

    An escaped dollar (``\\$18.90``, currency) is text inside or outside math, never a delimiter.

    Returns:
        ``(start, end, content)`` per closed segment, in order; ``content`` is stripped. A segment
        that never closes is left out.
    """
    out: list[tuple[int, int, str]] = []
    n = len(text)
    i = start
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n and text[i + 1] in "([":
            close = "\\)" if text[i + 1] == "(" else "\\]"
            end = _find_unescaped(text, close, i + 2)
            if end < 0:
                i += 2
                continue
            out.append((i, end + 2, text[i + 2:end].strip()))
            i = end + 2
            continue
        if ch == "\\":
            i += 2
            continue
        if ch == "$":
            delim = "$$" if text.startswith("$$", i) else "$"
            end = _find_unescaped(text, delim, i + len(delim))
            if end < 0:
                return out
            out.append((i, end + len(delim), text[i + len(delim):end].strip()))
            i = end + len(delim)
            continue
        i += 1
    return out


def _find_unescaped(text: str, delim: str, start: int) -> int:
    """Index of the first ``delim`` at or after ``start`` that is not an escaped character, or -1."""
    i, n = start, len(text)
    while i < n:
        if text.startswith(delim, i):
            return i
        i += 2 if text[i] == "\\" else 1
    return -1


def leading_expression(text: str) -> str | None:
    """The mathematical expression that ``text`` (prose) starts with, whole; None if it starts otherwise.

    Read token by token: numbers (``12,345,678`` is one number and loses its separators; ``4e-3``
    is one number), single-letter variables, operators, brackets, and commas between items (a list
    or tuple stays one: ``1, 3, 5``, ``(2,4)``). Implicit products need no space (``3x+2``, ``2(n-1)``).
    The expression ends where prose begins: a word of two or more letters, or any letter after a
    space that follows a complete term (a unit: ``25 cm^2`` -> ``25``, ``5 m/s^2`` -> ``5``).

    Args:
        text: prose that may start with an expression, e.g. the rest of "The answer is ...".

    Returns:
        The expression as written (spacing kept, thousands separators removed), or None when
        ``text`` does not start with one or its brackets do not close.
    """
    s = text.strip()
    n = len(s)
    i = 0
    expect_operand = True  # at the start, after an operator, an opening bracket or a comma
    depth = 0
    end = 0  # end of the last complete term
    while i < n:
        j = i
        while j < n and s[j] == " ":
            j += 1
        if j >= n:
            break
        spaced, ch = j > i, s[j]
        word = _WORD.match(s, j)
        single_letter = word is not None and word.end() - j == 1
        if expect_operand:
            number = _NUMBER.match(s, j)
            if number:
                i, expect_operand, end = number.end(), False, number.end()
            elif single_letter:
                i, expect_operand, end = j + 1, False, j + 1
            elif ch in _OPEN:
                depth, i = depth + 1, j + 1
            elif ch in "-+−":
                i = j + 1
            else:
                break
        elif ch in _OPERATORS:
            i, expect_operand = j + 1, True
        elif ch in _CLOSE and depth > 0:
            depth, i, end = depth - 1, j + 1, j + 1
        elif ch == ",":
            i, expect_operand = j + 1, True
        elif not spaced and single_letter:  # implicit product with a variable: 3x, 2n
            i, end = j + 1, j + 1
        elif not spaced and ch in _OPEN:  # implicit product with a bracket: 2(n-1)
            depth, i, expect_operand = depth + 1, j + 1, True
        else:
            break
    if depth or not end:
        return None
    if s[:end] == "a" and re.match(r" +[A-Za-z]{2}", s[end:]):
        return None  # the article: "a multiple of 3"
    # a bracket left open after the last complete term (an unfinished group) makes no expression
    expr = s[:end]
    if expr.count("(") + expr.count("[") + expr.count("{") != expr.count(")") + expr.count("]") + expr.count("}"):
        return None
    return _THOUSANDS_SEP.sub("", expr).strip() or None


def _phrase_answer(rest: str) -> str | None:
    """The answer in the text after "the answer is": its math, else its expression, else its words."""
    lead = re.match(r"[\s:*]*", rest)
    body = rest[lead.end():]
    segments = math_segments(body)
    if segments and segments[0][0] == 0:
        parts = [segments[0][2]]
        for (_, prev_end, _), (start, _, content) in zip(segments, segments[1:]):
            if not _SEGMENT_JOINER.match(body[prev_end:start]):
                break
            parts.append(content)
        parts = [p for p in parts if p]
        if parts:
            return ", ".join(parts)
    # the sentence: to a full stop followed by space or the end, or to the end of the line
    m = re.match(r"(.*?)(?:\.(?=\s|$)|\n|$)", body, re.S)
    sentence = m.group(1).replace("**", "").strip()
    if not sentence:
        return None
    if "\\" in sentence:  # LaTeX without $: take it whole
        return sentence.rstrip(".").strip() or None
    if "=" in sentence:  # "2 * 1 = 2 bolts": the value is after the last "="
        sentence = sentence.rsplit("=", 1)[1].strip()
    expr = leading_expression(sentence)
    if expr is not None:
        return expr
    # prose first ("approximately 18 dollars"): the first expression that starts with a number
    for num in re.finditer(r"(?<![\w.])-?\d", sentence):
        expr = leading_expression(sentence[num.start():])
        if expr is not None:
            return expr
    return sentence.rstrip(".").strip() or None


def extract_answer(text: str) -> str | None:
    """Extract the final answer from a solution.

    Sources are tried in this order, first hit wins:

    1. boxes (:func:`final_boxes`): the last ``\\boxed{...}`` / ``\\fbox{...}``, or the comma-joined
       list of the boxes on its line -- the MATH convention;
    2. the text after the last ``####`` -- the GSM8K convention;
    3. the last phrase like "The final answer is X" / "the answer is X":

       * X in math (``$...$``, ``\\(...\\)``): the math, whole (``$69, 84$`` -> ``69, 84``;
         ``$2^{1009}$`` -> ``2^{1009}``); math segments joined by "," / "and" / "or" form a list;
       * X in prose: the expression the sentence starts with (:func:`leading_expression`), a list
         or tuple kept whole (``1, 3, 5``, ``(2,4)``), thousands separators dropped (``1,000`` ->
         ``1000``), a unit dropped (``25 cm^2`` -> ``25``); after an ``=``, the value after the
         last one; prose before the first number skipped ("approximately 18 dollars" -> ``18``);
         plain words when there is no number ("yes").

    Args:
        text: A reference solution or model generation.

    Returns:
        The answer string, or None if no source yields a non-empty answer.

    Raises:
        Nothing.
    """
    if not text:
        return None
    boxed = final_boxes(text)
    if boxed:
        return boxed
    hashed = gsm8k_hash_answer(text)
    if hashed:
        return hashed
    matches = list(_ANSWER_PHRASE.finditer(text))
    for m in reversed(matches):
        ans = _phrase_answer(text[m.end():])
        if ans:
            return ans
    return None

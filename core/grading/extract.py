"""Pull a final answer string out of a free-form solution.

Nothing here judges correctness; see :mod:`core.grading.equivalence` for that.
"""

from __future__ import annotations

import re

__all__ = ["last_boxed", "gsm8k_hash_answer", "extract_answer"]

# The negative lookahead keeps macros that merely start with these names
# (e.g. a user-defined ``\boxedanswer``) from being taken for a box.
_BOX_CMD = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")

# A thousands separator only sits between a digit and exactly three digits;
# anything else (``1,2`` as a list of solutions) must keep its comma.
_THOUSANDS_SEP = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")

# Sentence ends at ". " / end of line, not at the dot of a decimal like 3.5.
_ANSWER_PHRASE = re.compile(
    r"(?:final\s+answer|the\s+answer)\s*(?:is|:)\s*:?\s*(.+?)(?:\.(?=\s|$)|\n|$)",
    re.IGNORECASE,
)


def _braced_group(text: str, start: int) -> str | None:
    """Return the content of the brace group opening at ``text[start]``.

    Escaped braces (``\\{``) are literal characters in LaTeX and must not
    count towards the balance; ``\\\\`` is skipped as a unit so that
    ``\\\\{`` is read as a line break followed by a real group.
    """
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
                return text[start + 1 : i]
        i += 1
    return None


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
    matches = list(_BOX_CMD.finditer(text))
    if not matches:
        return None
    pos = matches[-1].end()
    n = len(text)
    while pos < n and text[pos] in " \t":
        pos += 1
    if pos >= n:
        return None
    if text[pos] == "{":
        content = _braced_group(text, pos)
        return None if content is None else content.strip()
    m = re.match(r"[^\s$]+", text[pos:])
    if m is None:
        return None
    token = m.group(0).rstrip(".,;")
    return token or None


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


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")


def extract_answer(text: str) -> str | None:
    """Extract the final answer from a solution.

    Sources are tried in this order, first hit wins:

    1. the last ``\\boxed{...}`` / ``\\fbox{...}`` -- the MATH dataset (and
       models prompted MATH-style) put the answer there;
    2. the text after the last ``####`` -- the GSM8K convention;
    3. the last phrase like "The final answer is X" / "the answer is X",
       X running to the end of the line or sentence, with ``$``, markdown bold
       and a trailing period removed; when X is plain prose (no LaTeX) that
       contains numbers, the last number ("18 dollars" -> ``18``,
       "2 * 1 = 2 bolts" -> ``2``).

    Args:
        text: A reference solution or model generation.

    Returns:
        The answer string, or None if no source yields a non-empty answer.

    Raises:
        Nothing.
    """
    if not text:
        return None
    boxed = last_boxed(text)
    if boxed:
        return boxed
    hashed = gsm8k_hash_answer(text)
    if hashed:
        return hashed
    matches = list(_ANSWER_PHRASE.finditer(text))
    if matches:
        raw = matches[-1].group(1)
        # Markdown bold is common in chat-model output ("**The answer is 5**").
        ans = raw.replace("$", "").replace("**", "").strip().rstrip(".").strip()
        if "\\" not in ans:
            numbers = _NUMBER.findall(ans)
            if numbers:
                return numbers[-1].replace(",", "")
        if ans:
            return ans
    return None

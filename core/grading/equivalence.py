"""Decide whether two answer strings denote the same mathematical object."""

from __future__ import annotations

import logging
import re
import threading

from math_verify import parse, verify
from math_verify.errors import TimeoutException

__all__ = ["answers_equivalent", "canonical_answer"]

logger = logging.getLogger(__name__)

# Seconds allowed per math_verify parse / comparison when a timeout can be
# enforced (main thread only, see _timeout()).
_TIMEOUT_S = 5

# sympy can stall on huge inputs and, off the main thread, nothing would
# interrupt it; answers longer than this are compared as strings only.
_MAX_SYMBOLIC_LEN = 500

_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textrm|mathrm|mbox)\s*\{([^{}]*)\}")
_THOUSANDS_SEP = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
# Lookahead keeps \leftarrow / \rightarrow intact.
_LEFT_RIGHT = re.compile(r"\\(?:left|right)(?![A-Za-z])")
_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")
_DECIMAL = re.compile(r"^(-?\d+)\.(\d*?)0*$")


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
    for sp in ("\\!", "\\,", "\\;", "\\:", "\\ ", "~"):
        s = s.replace(sp, "")
    s = s.replace("{,}", ",")
    # Applied repeatedly so \text{\textbf{x}}-style nesting unwraps fully.
    prev = None
    while prev != s:
        prev = s
        s = _TEXT_WRAPPER.sub(r"\1", s)
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


def _timeout() -> int | None:
    """Timeout to hand to math_verify for the calling thread.

    math_verify enforces timeouts with ``signal.alarm``, which Python only
    permits in the main thread; elsewhere it raises ValueError. So the
    timeout is used where it works and disabled (None) elsewhere -- the
    length cap in ``answers_equivalent`` is the only guard in that case.
    """
    if threading.current_thread() is threading.main_thread():
        return _TIMEOUT_S
    return None


def _wrap(s: str) -> str:
    # Inline-math delimiters beat \boxed{}: both parse LaTeX the same way, but
    # \boxed{4.} and stray unbalanced braces come back empty, while $...$
    # falls back to the raw string. Only unescaped $ are delimiters; \$
    # (currency) is left for math_verify, which drops it itself.
    return "$" + _UNESCAPED_DOLLAR.sub("", s).strip() + "$"


def answers_equivalent(pred: str | None, gold: str | None) -> bool:
    """Return True if ``pred`` and ``gold`` are the same answer.

    First compares ``canonical_answer`` keys (fast, exact); failing that,
    asks ``math_verify`` for symbolic / numeric equivalence, with both
    sides parsed as inline LaTeX. If math_verify cannot parse a side, or
    errors or times out, the canonical-key result (False) stands.

    Safe to call from any thread: signal-based timeouts are only enabled in
    the main thread.

    Args:
        pred: Predicted answer, e.g. from ``extract_answer``; may be None.
        gold: Reference answer (``18``, ``\\frac{14}{3}``, ``\\text{(C)}``
            ...); may be None.

    Returns:
        True if equivalent; False if not, or if either side is None/empty.

    Raises:
        Nothing.
    """
    if pred is None or gold is None:
        return False
    try:
        pred_s, gold_s = str(pred).strip(), str(gold).strip()
        if not pred_s or not gold_s:
            return False
        if canonical_answer(pred_s) == canonical_answer(gold_s):
            return True
        if len(pred_s) > _MAX_SYMBOLIC_LEN or len(gold_s) > _MAX_SYMBOLIC_LEN:
            return False
        t = _timeout()
        gold_parsed = parse(_wrap(gold_s), parsing_timeout=t)
        pred_parsed = parse(_wrap(pred_s), parsing_timeout=t)
        if not gold_parsed or not pred_parsed:
            return False
        return bool(verify(gold_parsed, pred_parsed, timeout_seconds=t))
    # TimeoutException derives from BaseException, so it needs naming here.
    except (Exception, TimeoutException):
        logger.debug("answer comparison failed: %r vs %r", pred, gold, exc_info=True)
        return False

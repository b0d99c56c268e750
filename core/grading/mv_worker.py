"""math-verify in a child process, so every grading call has a hard time limit on any thread.

math-verify bounds its own work with ``signal.alarm``, which Python allows only on the main thread;
elsewhere the timeout must be switched off, and a pathological answer (``9^{9^{9^{9}}}``: sympy
evaluates the tower as one huge integer power inside C code) then holds its thread for minutes. A
signal could not stop that C loop even on the main thread. A child process can always be stopped:
:class:`MathVerifyProcess` sends each request over a pipe, waits at most the call's time limit for
the answer and kills the child when it does not come (the next request starts a fresh one). This
works from any thread, from a process-pool worker (daemonic processes may start subprocesses, only
not ``multiprocessing`` children) and after a fork (a forked copy starts its own child).

Inside the child, math-verify runs on the main thread with a soft limit (``setitimer``) per
request, so slow but interruptible work ends without a restart; the hard limit in the parent is
the guarantee.

The child speaks JSON lines: ``{"op": "parse", "text": s}`` and ``{"op": "equal", "gold": g,
"pred": p}``; see :func:`_handle`.

Equality is math-verify's ``verify`` with three rules of ours (:func:`_equal`):

* exact where both sides are exact: math-verify compares numbers after rounding to 6 places or with
  ``evalf(chop=True)``, so ``\\frac{1}{2^{98}}`` equalled ``\\frac{1}{2^{99}}`` and ``\\frac{1}{3}``
  equalled ``0.333333``; here decimals are read as the exact fractions they write, and two values
  are equal when their difference is zero: exactly for rationals, else when its evaluation shrinks
  with the precision asked (a zero does; ``\\sqrt{10^{100}+1} - 10^{50}``, 5e-51, does not). Only a
  gold that writes decimals allows a tolerance, half a unit of its last digit (gold ``3.14``
  accepts ``3.1416``, not ``3.15``);
* an inequality answer is compared with an interval gold as the set it describes (``x \\ge 2`` is
  ``[2,\\infty)``, ``0<t\\le 4`` is ``(0,4]``), its ends open or closed as written;
* roots and powers are compared with the variables positive (``\\frac{1}{\\sqrt{n}}`` is
  ``\\sqrt{1/n}``), when a side has a fractional power of a variable.
"""

from __future__ import annotations

import json
import logging
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding the ``core`` package
_BOOT = "from core.grading.mv_worker import serve; serve()"
# Starting the child imports sympy and math-verify: seconds on a busy machine, more than a request.
START_TIMEOUT_S = 120.0
_PARSE_CACHE_MAX = 20_000


class _SoftTimeout(BaseException):
    """Raised by the child's interval timer; a BaseException so math-verify's ``except Exception`` lets it pass."""


# ------------------------------------------------------------------------------------------ child
def _parse(text: str, cache: dict):
    """math-verify's reading of ``text`` as one inline formula: ``(sympy object or None, whole)``.

    Only LaTeX extraction runs, on ``$text$``: its pattern takes the whole formula, which the LaTeX
    parser then reads completely or not at all. (math-verify's plain-expression fallback would
    pick a number out of a formula it cannot read: ``0`` out of ``t(0,4]``.) ``whole`` is True when
    an object was read. Unit words are kept: the caller has decided about units, and ``6m`` must
    not be read as ``6`` when ``m`` is a variable.
    """
    if text in cache:
        return cache[text]
    from latex2sympy2_extended.latex2sympy2 import NormalizationConfig
    from math_verify import parse
    from math_verify.parser import LatexExtractionConfig

    config = [LatexExtractionConfig(normalization_config=NormalizationConfig(
        basic_latex=True, units=False, malformed_operators=True, nits=True, boxed="all", equations=False))]
    found = parse("$" + text + "$", extraction_config=config, fallback_mode="no_fallback", parsing_timeout=None)
    obj = next((x for x in found if not isinstance(x, str)), None)
    if len(cache) >= _PARSE_CACHE_MAX:
        cache.clear()
    cache[text] = (obj, obj is not None)
    return obj, obj is not None


# Half a unit of the gold's last decimal digit, while one comparison runs (None: the gold is exact).
_TOLERANCE: list = [None]
_PATCHED: list = [False]


def _gold_tolerance(gold_text: str):
    """Half a unit of the last digit of the gold's most precise decimal (``3.14`` -> 0.005), or None."""
    from sympy import Rational

    digits = [len(m) for m in re.findall(r"(?<![\d.])\d*\.(\d+)(?![\d.])", gold_text)]
    return Rational(1, 2 * 10 ** max(digits)) if digits else None


def _exact(expr):
    """``expr`` with its decimals as the fractions they write (0.333333 -> 333333/1000000)."""
    from sympy import Float, Rational

    try:
        floats = expr.atoms(Float)
    except Exception:
        return expr
    return expr.xreplace({f: Rational(str(f)) for f in floats}) if floats else expr


def _same_value(a, b, tolerance) -> bool:
    """Whether two numbers (or expressions) are equal: exactly, or within ``tolerance``."""
    from sympy import N, nan, zoo

    a, b = _exact(_doit(a)), _exact(_doit(b))
    if a == b:
        return True
    difference = _doit(a - b)
    if getattr(difference, "free_symbols", None) or difference in (nan, zoo) or not difference.is_number:
        return False  # symbolic: math-verify's simplify decides
    if tolerance is not None:
        return bool(abs(N(difference, 60)) <= tolerance)
    if difference.is_Rational:  # exact: 2^200 + 1 is not 2^200
        return difference == 0
    # radicals, pi, logs: sympy evaluates to the precision asked; a zero shrinks with the precision
    # (0.e-190, then 0.e-400), a difference that is there stays (5.0e-51 both times)
    first = abs(N(difference, 60))
    if first == 0:
        return True
    second = abs(N(difference, 120))
    return bool(second == 0 or second < first * 10 ** -30)


def _doit(a):
    try:
        return a.doit()
    except Exception:
        return a


def _numeric_eq(a, b, float_rounding, numeric_precision):
    """Our replacement of math-verify's ``sympy_numeric_eq`` (see the module docstring)."""
    from sympy import Float, MatrixBase

    if isinstance(a, MatrixBase) and isinstance(b, MatrixBase):
        a, b = _doit(a), _doit(b)
        return a.shape == b.shape and all(_numeric_eq(x, y, float_rounding, numeric_precision)
                                          for x, y in zip(a, b))
    try:
        tolerance = _TOLERANCE[0] if a.has(Float) else None
        return _same_value(a, b, tolerance)
    except Exception:
        return False


def _patch_math_verify() -> None:
    """Install :func:`_numeric_eq` in math-verify's grader (in this child process only)."""
    if not _PATCHED[0]:
        import math_verify.grader

        math_verify.grader.sympy_numeric_eq = _numeric_eq
        _PATCHED[0] = True


def _fractional_power_of_a_variable(expr) -> bool:
    from sympy import Pow, preorder_traversal

    return any(isinstance(e, Pow) and not e.exp.is_integer and e.base.free_symbols for e in preorder_traversal(expr))


def _equal(gold, pred, gold_text: str) -> bool:
    """Our equality of two parsed answers (see the module docstring)."""
    from math_verify import verify
    from sympy import Expr, Symbol

    _patch_math_verify()
    _TOLERANCE[0] = _gold_tolerance(gold_text)
    try:
        if verify([gold], [pred], timeout_seconds=None, allow_set_relation_comp=True):
            return True
        if not (isinstance(gold, Expr) and isinstance(pred, Expr)):
            return False
        if not (_fractional_power_of_a_variable(gold) or _fractional_power_of_a_variable(pred)):
            return False
        positive = {s: Symbol(s.name, positive=True) for s in gold.free_symbols | pred.free_symbols
                    if isinstance(s, Symbol)}
        return bool(verify([gold.xreplace(positive)], [pred.xreplace(positive)], timeout_seconds=None))
    finally:
        _TOLERANCE[0] = None


def _handle(request: dict, cache: dict) -> dict:
    """Answer one request.

    ``parse``: ``{"ok": whole, "value": str(object) or None}``.
    ``equal``: ``{"equal": bool, "gold_ok": bool, "pred_ok": bool}``; equal only when both sides
    parse whole and :func:`_equal` (math-verify's ``verify`` with our rules) holds.
    """
    op = request.get("op")
    if op == "parse":
        obj, whole = _parse(request["text"], cache)
        return {"ok": whole, "value": str(obj) if obj is not None else None}
    if op == "equal":
        gold, gold_ok = _parse(request["gold"], cache)
        pred, pred_ok = _parse(request["pred"], cache)
        equal = bool(gold_ok and pred_ok and _equal(gold, pred, request["gold"]))
        return {"equal": equal, "gold_ok": gold_ok, "pred_ok": pred_ok}
    if op == "sleep":  # for tests: slow work that the soft limit can interrupt
        time.sleep(float(request["seconds"]))
        return {"slept": True}
    raise ValueError(f"unknown op {op!r}")


def serve() -> None:
    """The child's loop: one JSON request per stdin line, one JSON answer per stdout line."""
    logging.disable(logging.CRITICAL)  # math-verify logs its timeout warning on every parse
    import math_verify  # noqa: F401  (import before "ready", so requests are timed without it)

    def on_alarm(signum, frame):
        raise _SoftTimeout()

    signal.signal(signal.SIGALRM, on_alarm)
    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    cache: dict = {}
    for line in sys.stdin:
        try:
            request = json.loads(line)
            soft = float(request.get("soft_s") or 0)
            if soft > 0:
                signal.setitimer(signal.ITIMER_REAL, soft)
            try:
                answer = _handle(request, cache)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _SoftTimeout:
            answer = {"timeout": True}
        except Exception as exc:  # a bad request or a math-verify bug: answered, the loop goes on
            answer = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        out.write(json.dumps(answer) + "\n")
        out.flush()


# ----------------------------------------------------------------------------------------- parent
class MathVerifyProcess:
    """A math-verify child process with a hard time limit per request.

    Thread-safe: requests are serialised by a lock; a request that cannot get the lock within its
    own limit is answered as a timeout too, so no caller ever waits longer than its limit (plus the
    child's start, at most :data:`START_TIMEOUT_S`, once per start).
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._owner = os.getpid()
        self._buf = b""
        self.starts = 0
        self.kills = 0

    def _start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = _ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        # own session: a Ctrl-C in the terminal stops the run, which then closes the child's stdin
        self._proc = subprocess.Popen([sys.executable, "-u", "-c", _BOOT], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                                      start_new_session=True, close_fds=True)
        self._buf = b""
        self.starts += 1
        ready = self._read_line(time.monotonic() + START_TIMEOUT_S)
        if ready is None or not json.loads(ready).get("ready"):
            self._kill()
            raise RuntimeError("the math-verify worker process did not start")

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.kill()
            proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass

    def _read_line(self, deadline: float) -> bytes | None:
        """One line from the child, or None at the deadline. Raises EOFError when the child died."""
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise EOFError("math-verify worker exited")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def request(self, payload: dict, limit_s: float) -> dict | None:
        """Send one request; its answer, or None when it took longer than ``limit_s`` seconds.

        The child stops interruptible work itself after 80% of the limit (answer ``{"timeout":
        true}``); a late or crashed child is killed, and the next request starts a new one.

        Raises:
            RuntimeError: the child cannot be started (no subprocesses on this platform, ...).
        """
        if not self._lock.acquire(timeout=limit_s):
            return None
        try:
            if self._owner != os.getpid():  # a forked copy must not talk to its parent's child
                self._proc, self._owner, self._buf = None, os.getpid(), b""
            if self._proc is None or self._proc.poll() is not None:
                self._kill()
                self._start()
            # the child's own limit comes first unless the payload sets one (0: none, for tests)
            line = json.dumps({"soft_s": max(0.1, limit_s * 0.8), **payload}) + "\n"
            try:
                self._proc.stdin.write(line.encode())
                self._proc.stdin.flush()
                answer = self._read_line(time.monotonic() + limit_s)
            except (OSError, EOFError):
                answer = None
            except BaseException:
                # a stop signal raised while waiting: the child still owes this answer, which the
                # next request would read as its own, so a fresh child serves the next one
                self._kill()
                raise
            if answer is None:
                self.kills += 1
                self._kill()
                return None
            return json.loads(answer)
        finally:
            self._lock.release()

    def close(self) -> None:
        """Stop the child (it also exits by itself when this process ends and its stdin closes)."""
        with self._lock:
            if self._owner == os.getpid():
                self._kill()

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
"""

from __future__ import annotations

import json
import logging
import os
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


def _handle(request: dict, cache: dict) -> dict:
    """Answer one request.

    ``parse``: ``{"ok": whole, "value": str(object) or None}``.
    ``equal``: ``{"equal": bool, "gold_ok": bool, "pred_ok": bool}``; equal only when both sides
    parse whole and math-verify's ``verify(gold, pred)`` holds.
    """
    from math_verify import verify

    op = request.get("op")
    if op == "parse":
        obj, whole = _parse(request["text"], cache)
        return {"ok": whole, "value": str(obj) if obj is not None else None}
    if op == "equal":
        gold, gold_ok = _parse(request["gold"], cache)
        pred, pred_ok = _parse(request["pred"], cache)
        equal = bool(gold_ok and pred_ok and verify([gold], [pred], timeout_seconds=None))
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

"""Grading never stalls a run: every math-verify call has a hard time limit on any thread and in
worker processes, and timeouts are counted (issue 15, item 2)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

import pytest

from core.grading import equivalence
from core.grading.equivalence import answers_equivalent, grade, grading_stats
from core.grading.mv_worker import MathVerifyProcess
from specscale_cli.signals import Interrupted, StopSignals

# sympy evaluates this tower as one integer power in C: no signal interrupts it, only a kill
PATHOLOGICAL = "9^{9^{9^{9}}}"


@pytest.fixture
def short_limit():
    previous = equivalence.set_time_limit(2.0)
    yield 2.0
    equivalence.set_time_limit(previous)


def test_pathological_answer_off_the_main_thread(short_limit):
    before = grading_stats()["timeouts"]
    result = {}

    def run():
        t0 = time.monotonic()
        result["grade"] = grade(PATHOLOGICAL, "1")
        result["seconds"] = time.monotonic() - t0

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive()
    assert result["grade"].correct is False and result["grade"].timed_out is True
    # the limit plus, at most, the start of a fresh math-verify child
    assert result["seconds"] < short_limit + 30
    assert grading_stats()["timeouts"] == before + 1
    # the same answer is not retried (the paths of a run repeat their answers), and grading goes on
    t0 = time.monotonic()
    assert answers_equivalent(PATHOLOGICAL, "2") is False
    assert time.monotonic() - t0 < 1.0
    assert answers_equivalent("0.5", "\\frac{1}{2}") is True
    assert grading_stats()["timeouts"] == before + 1


@pytest.mark.slow
def test_pathological_answer_in_a_pool_worker():
    # a multiprocessing pool's workers are daemonic: they cannot start multiprocessing children,
    # but grading still stops the comparison (its default limit is 10 s)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        t0 = time.monotonic()
        assert pool.apply(answers_equivalent, (PATHOLOGICAL, "3")) is False
        assert time.monotonic() - t0 < 60


def test_hard_limit_kills_and_restarts_the_child():
    proc = MathVerifyProcess()
    try:
        assert proc.request({"op": "parse", "text": "\\frac{1}{2}"}, 30) == {"ok": True, "value": "1/2"}
        t0 = time.monotonic()
        # soft_s 0: no limit inside the child, so only the kill can end this comparison
        assert proc.request({"op": "equal", "gold": "1", "pred": PATHOLOGICAL, "soft_s": 0}, 1.0) is None
        assert time.monotonic() - t0 < 5 and proc.kills == 1
        assert proc.request({"op": "parse", "text": "x+1"}, 30) == {"ok": True, "value": "x + 1"}
        assert proc.starts == 2
        # slow Python work ends at the soft limit inside the child, which then lives on
        assert proc.request({"op": "sleep", "seconds": 30}, 1.0) == {"timeout": True}
        assert proc.kills == 1 and proc.starts == 2
    finally:
        proc.close()


def test_a_waiting_call_is_bounded_by_its_own_limit():
    proc = MathVerifyProcess()
    try:
        proc.request({"op": "parse", "text": "1"}, 30)  # started
        held = threading.Thread(target=proc.request, args=({"op": "sleep", "seconds": 3}, 10.0))
        held.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        assert proc.request({"op": "parse", "text": "2"}, 0.5) is None
        assert time.monotonic() - t0 < 1.5
        held.join()
    finally:
        proc.close()


def _sigint_after(seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, os.kill, args=(os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def test_a_stop_signal_while_the_child_works_keeps_requests_in_step():
    """Ctrl-C lands while the parent waits for an answer: the answer the child still owes must not
    be read as the next request's."""
    proc = MathVerifyProcess()
    try:
        proc.request({"op": "parse", "text": "1"}, 30)  # started
        with StopSignals():
            timer = _sigint_after(0.3)
            with pytest.raises(Interrupted):
                proc.request({"op": "sleep", "seconds": 2, "soft_s": 0}, 10.0)
            timer.join()
        assert proc.request({"op": "parse", "text": "\\frac{1}{2}"}, 30) == {"ok": True, "value": "1/2"}
    finally:
        proc.close()


def test_a_stop_signal_during_grading_stops_the_run_instead_of_failing_the_grade(monkeypatch):
    """grade() counts a grading bug as a wrong answer and goes on; a stop signal is no such bug (a
    real Ctrl-C that landed here was lost and the run went on reading stdin)."""
    class SlowChild:
        def request(self, payload, limit_s):
            time.sleep(5)

    monkeypatch.setattr(equivalence, "_PROCESS", SlowChild())
    with StopSignals():
        timer = _sigint_after(0.3)
        t0 = time.monotonic()
        with pytest.raises(Interrupted):
            grade("\\frac{7}{13}", "\\frac{14}{26}")
        timer.join()
    assert time.monotonic() - t0 < 3

"""One engine replica of a scaled-out `solve` run (runs inside a Ray actor; see :mod:`.pool`).

A replica owns a generator engine and a verifier on one device and runs one
:class:`~core.search.driver.SearchDriver` on a thread of its own, over a stream fed by the run's
driver process. The driver talks to it through one call, :meth:`Replica.exchange`: hand over some
problems, get back every record finished since the last call and how many more problems fit
(``max_concurrent`` minus those held). The call waits, up to a limit, until there is something to
report, so an idle pair of processes does not spin and a finished record travels at once.

The replica never touches the output folder: answer records (graded here, so grading's time limit
holds where the search ran) and traces go back to the driver, which writes them.

The class is plain Python; :mod:`.pool` turns it into a Ray actor, so importing this module needs
neither Ray nor torch (tests drive it in their own process).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import traceback
from collections import deque
from dataclasses import replace

from core.search.config import PICK_FIELDS

# a snapshot of the replica's figures is taken at most this often (seconds) by the search thread,
# the only thread that may read the engines (they change mid-step)
SNAPSHOT_EVERY_S = 0.25
# how long the search thread sleeps between looks at an empty inbox when it has nothing in flight
IDLE_WAIT_S = 0.1


class Replica:
    """A search engine replica fed with problems by the driver process of a run.

    Args:
        index: the replica's number in the run (0-based; for messages).
        settings: :class:`core.settings.ModelSettings` (model paths as this machine finds them).
        search_cfg: :class:`core.search.config.SearchConfig`. policy: policy name.
        max_concurrent: problems this replica searches at once.
        traces: send each problem's trace with its record.
        threads: torch CPU threads (a CPU replica's share of the cores); None leaves torch's default.
        source: the input's name, for error messages of problems that fail here.
    """

    def __init__(self, index: int, settings, search_cfg, policy: str, max_concurrent: int, traces: bool,
                 threads: int | None, source: str = ""):
        self.index = index
        self.settings = settings
        self.search_cfg = search_cfg
        self.policy = policy
        self.max_concurrent = max_concurrent
        self.traces = traces
        self.threads = threads
        self.source = source
        self._cond = threading.Condition()
        self._inbox: deque = deque()
        self._outbox: list[tuple[str, dict, dict | None]] = []
        self._holding = 0  # problems taken from the inbox by the search and not yet reported
        self._closed = False
        self._failure: str | None = None
        self._finished = False
        self._counts = {"done": 0, "errors": 0, "graded": 0, "correct": 0,
                        **{f"correct_{rule}": 0 for rule in PICK_FIELDS}}
        self._snap: dict | None = None
        self._snap_count = 0  # snapshots taken so far (fresh_stats waits for the next one)
        self._next_snap = 0.0
        self._runtime = None
        self._driver = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ called by the driver process
    def start(self) -> dict:
        """Load the models and start searching (problems arrive through :meth:`exchange`).

        Returns:
            ``pid``, ``node`` (host name), ``device``, ``threads`` (torch CPU threads),
            ``max_model_len`` and ``prm_max_model_len`` (the engines' context limits) and ``stats``
            (the first snapshot, see :meth:`exchange`); or ``error`` (one line) when a model cannot
            be loaded or an engine cannot be sized.
        """
        import torch

        from core.models.loader import ModelLoadError
        from core.search.driver import SearchDriver
        from core.solver import build_runtime

        if self.threads:
            torch.set_num_threads(self.threads)
        settings = self.settings
        if str(settings.device).startswith("cuda"):
            # Ray shows the actor only its own GPU (CUDA_VISIBLE_DEVICES), which torch calls cuda:0
            settings = replace(settings, device="cuda")
        try:
            runtime = build_runtime(settings)
        except (ModelLoadError, ValueError) as exc:
            return {"error": str(exc), "pid": os.getpid(), "node": socket.gethostname()}
        self._runtime = runtime
        start_grading()
        self._driver = SearchDriver(runtime.engine, runtime.generator.tokenizer, runtime.generator.eos_token_ids,
                                    runtime.verifier, runtime.scorer, self.search_cfg, policy=self.policy,
                                    max_concurrent=self.max_concurrent, on_result=self._on_result,
                                    on_error=self._on_error, on_iteration=self._on_iteration,
                                    should_stop=lambda: self._closed, source=self.source)
        self._take_snapshot()
        self._thread = threading.Thread(target=self._search, name=f"specscale-replica-{self.index}", daemon=True)
        self._thread.start()
        return {"pid": os.getpid(), "node": socket.gethostname(), "device": settings.device,
                "threads": torch.get_num_threads(), "max_model_len": runtime.max_model_len,
                "prm_max_model_len": runtime.prm_max_model_len, "stats": self._snap}

    def exchange(self, problems: list, more: bool, wait_s: float) -> dict:
        """Take ``problems``; return what finished since the last call.

        Waits until a record is ready, the search failed, or (``more``: the driver has problems
        left to hand out) this replica has room; at most ``wait_s`` seconds.

        Returns:
            ``answers``: ``(record, trace or None)`` pairs; ``errors``: error records of problems
            that could not be searched; ``room``: how many more problems fit now; ``stats``: the
            replica's latest :func:`core.metrics.snapshot` (``None`` before :meth:`start`);
            ``failure``: the traceback of an exception that ended the search, else None.
        """
        deadline = time.monotonic() + wait_s
        with self._cond:
            self._inbox.extend(problems)
            self._cond.notify_all()
            while not (self._outbox or self._failure or self._finished or (more and self._room() > 0)):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            out, self._outbox = self._outbox, []
            room = self._room()
        return {"answers": [(record, trace) for kind, record, trace in out if kind == "answer"],
                "errors": [record for kind, record, _ in out if kind == "error"],
                "room": room, "stats": self._snap, "failure": self._failure}

    def fresh_stats(self, timeout_s: float = 10.0) -> dict | None:
        """A snapshot taken after this call began (the run's final figures), or the latest one when
        the search thread takes none within ``timeout_s`` seconds."""
        with self._cond:
            seen = self._snap_count
            self._next_snap = 0.0
            self._cond.notify_all()  # an idle search thread wakes, sees the snapshot due and takes it
            deadline = time.monotonic() + timeout_s
            while self._snap_count == seen and not (self._finished or self._failure):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
        return self._snap

    def pid(self) -> int:
        """This replica's process id."""
        return os.getpid()

    def close(self) -> None:
        """Stop admitting problems (the driver kills the actor once it no longer needs it)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # ------------------------------------------------------------------ the search thread
    def _room(self) -> int:
        return max(0, self.max_concurrent - len(self._inbox) - self._holding)

    def _search(self) -> None:
        try:
            self._driver.run(self._stream())
        except BaseException:  # noqa: BLE001 - reported to the driver, which ends the run with it
            self._failure = traceback.format_exc()
        finally:
            with self._cond:
                self._finished = True
                self._cond.notify_all()

    def _stream(self):
        """The problems the driver hands over, as a stream for :meth:`SearchDriver.run`."""
        from core.search.driver import NOT_YET

        while True:
            with self._cond:
                if self._inbox:
                    item = self._inbox.popleft()
                    self._holding += 1
                elif self._closed:
                    return
                elif self._driver.active:
                    item = NOT_YET  # go on with the problems in flight; ask again next iteration
                else:
                    self._cond.wait(IDLE_WAIT_S)
                    item = None
            if item is None:
                self._on_iteration(self._driver.stats)  # idle: keep the figures fresh for the dashboard
                continue
            yield item

    def _report(self, kind: str, record: dict, trace: dict | None) -> None:
        with self._cond:
            self._outbox.append((kind, record, trace))
            self._holding -= 1
            self._cond.notify_all()

    def _on_result(self, problem, result: dict, search) -> None:
        from core.search.records import answer_record, count_record, problem_trace

        record = answer_record(problem, result, search)
        trace = problem_trace(search) if self.traces else None
        count_record(self._counts, record)
        self._next_snap = 0.0  # show the new count in the next snapshot
        self._report("answer", record, trace)

    def _on_error(self, err) -> None:
        from core.search.records import error_record

        self._counts["errors"] += 1
        self._next_snap = 0.0
        self._report("error", error_record(err), None)

    def _on_iteration(self, stats) -> None:
        if time.perf_counter() >= self._next_snap:
            self._take_snapshot()

    def _take_snapshot(self) -> None:
        from core.metrics import snapshot

        self._next_snap = time.perf_counter() + SNAPSHOT_EVERY_S
        rt = self._runtime
        # replaced whole: the exchange thread only ever reads a finished snapshot
        self._snap = snapshot(self._driver.stats, rt.engine, rt.verifier, dict(self._counts), None, None)
        with self._cond:
            self._snap_count += 1
            self._cond.notify_all()


def start_grading() -> None:
    """Start this process's math-verify child now, while the replica loads, rather than at its
    first answer (a second or so of the first problem's time otherwise)."""
    from core.grading.equivalence import grade

    grade("1", "2")

"""The driver side of a scaled-out run: a Ray session, K replicas, and the loop that feeds them.

docs/design.md, "Scale-out". The driver process keeps everything that makes a run safe to stop and
resume: it alone reads the input and writes the output folder. :class:`ReplicaPool` hands each
replica (:class:`~core.distributed.replica.Replica`, one Ray actor each) problems when it has room,
and each reply brings back the records finished meanwhile, which the caller writes.

No problem is lost or written twice when a replica dies: the pool remembers which problems each
replica holds (handed out, no record back yet); a replica whose call fails with a Ray actor or
node error is dropped and its problems go back to the head of the queue for the others; a record
is passed on only for an id not passed on before.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable

from core.io.problems import Problem, ProblemError

from . import RAY_INSTALL_HINT, ReplicaFailed, ReplicasLost, ray_missing
from .figures import merge_snapshots, replica_row

# Ray's shared-memory object store of a local session: it holds only the records and traces on
# their way to the driver (the models never travel), so a small one keeps the run's memory modest
OBJECT_STORE_BYTES = 128 << 20
# longest a replica holds one exchange call open when it has nothing to report (seconds): the
# dashboard's figures are never older than this
EXCHANGE_WAIT_S = 0.5
# longest the driver waits on its replicas before it looks at the clock and the dashboard again
POLL_S = 1.0


def local_cpus() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _absolute_spec(spec: str) -> str:
    """A model path that exists here, made absolute (a replica's working folder is not ours)."""
    path = Path(spec).expanduser()
    return str(path.resolve()) if path.exists() else spec


class RaySession:
    """Connects this process to Ray for the ``with`` block: a new local cluster, or ``address``.

    A local cluster gets ``num_cpus`` (default: this process's cores), no dashboard, a small object
    store (:data:`OBJECT_STORE_BYTES`), no usage reporting and no worker log forwarding; it stops
    when the block ends. Joining a cluster (``address``: ``auto``, ``host:port`` or ``ray://...``)
    only connects and disconnects. Ray replaces the SIGTERM handler when it connects; the handlers
    in place before are put back, so a stop signal still ends the run in order.

    Raises:
        RuntimeError: Ray is not installed (message names the install command).
        ConnectionError: no cluster at ``address``.
    """

    def __init__(self, address: str | None = None, device: str = "cpu", num_cpus: int | None = None):
        self.address = address
        self.device = device
        self.num_cpus = num_cpus

    def __enter__(self) -> RaySession:
        if ray_missing():
            raise RuntimeError(f"Ray is not installed: {RAY_INSTALL_HINT}")
        # read by Ray when it starts: never report usage over the network
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        import ray

        saved = {}
        if threading.current_thread() is threading.main_thread():
            saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        common = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                      namespace="specscale", ignore_reinit_error=False)
        try:
            if self.address:
                _probe(self.address)
                ray.init(address=self.address, **common)
            else:
                cuda = str(self.device).startswith("cuda")
                ray.init(num_cpus=self.num_cpus or local_cpus(), num_gpus=None if cuda else 0,
                         object_store_memory=OBJECT_STORE_BYTES, _node_ip_address="127.0.0.1", **common)
        finally:
            for signum, handler in saved.items():
                signal.signal(signum, handler)
        return self

    def __exit__(self, *exc) -> bool:
        import ray

        # a second stop signal while Ray shuts down must not leave the session half-closed
        with _signals_ignored():
            ray.shutdown()
        return False

    def resources(self) -> tuple[float, float, float]:
        """``(cpus, most cpus on one node, gpus)`` of the cluster's live nodes."""
        import ray

        cpus = gpus = most = 0.0
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            res = node.get("Resources", {})
            cpus += res.get("CPU", 0.0)
            gpus += res.get("GPU", 0.0)
            most = max(most, res.get("CPU", 0.0))
        return cpus, most, gpus


def _probe(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast on a ``host:port`` (or ``ray://host:port``) that accepts no connection: Ray itself
    retries such an address for minutes before it gives up.

    Raises:
        ConnectionError: nothing listens there (or the host is unknown).
    """
    import socket

    hostport = address.split("://", 1)[-1].rsplit("/", 1)[0]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto", or a form Ray resolves itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConnectionError(f"nothing answers at {hostport} ({exc.strerror or exc})") from exc


class _signals_ignored:
    def __enter__(self):
        self.saved = {}
        if threading.current_thread() is threading.main_thread():
            self.saved = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}

    def __exit__(self, *exc):
        for signum, handler in self.saved.items():
            signal.signal(signum, handler)
        return False


def replica_resources(workers: int, device: str, cpus: float, most_on_a_node: float, gpus: float) -> dict:
    """What each of ``workers`` replicas asks Ray for, and its torch CPU threads.

    CUDA: one GPU each (and a share of one CPU for its Python loop). CPU: the cluster's cores split
    evenly, no more than one node has, rounded down to 1/100 of a core so that all K fit; torch
    threads = that share, at least 1.

    Returns:
        ``num_cpus``, ``num_gpus`` and ``threads`` (None: torch's default).

    Raises:
        ValueError: CUDA replicas and fewer GPUs than ``workers``, or no CPU at all.
    """
    if cpus <= 0:
        raise ValueError("the Ray cluster has no CPU for the replicas")
    share = min(most_on_a_node, math.floor(100 * cpus / workers) / 100)
    if str(device).startswith("cuda"):
        if gpus < workers:
            raise ValueError(f"--workers {workers} on --device {device} needs {workers} GPUs, one per replica; "
                             f"the Ray cluster has {int(gpus)}")
        return {"num_cpus": min(1.0, share), "num_gpus": 1, "threads": None}
    return {"num_cpus": share, "num_gpus": 0, "threads": max(1, int(share))}


class ReplicaPool:
    """K search replicas of one run, fed with problems from one stream.

    Args:
        session: the connected :class:`RaySession`.
        settings: :class:`core.settings.ModelSettings`. search_cfg: :class:`core.search.config.SearchConfig`.
        policy: policy name. workers: replicas to start (>= 1).
        max_concurrent: problems each replica searches at once.
        traces: replicas send each problem's trace with its record.
        source: the input's name (for error messages of problems that fail in a replica).
        log: called with one-line notes for the user (a replica lost, where its problems went).
    """

    def __init__(self, session: RaySession, settings, search_cfg, policy: str, workers: int, max_concurrent: int,
                 traces: bool = True, source: str = "", log: Callable[[str], None] | None = None):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.session = session
        self.settings = replace(settings, generator=_absolute_spec(settings.generator), prm=_absolute_spec(settings.prm))
        self.search_cfg = search_cfg
        self.policy = policy
        self.workers = workers
        self.max_concurrent = max_concurrent
        self.traces = traces
        self.source = source
        self.log = log or (lambda line: None)
        self.actors: list = []
        self.infos: list[dict] = []
        self._snaps: list[dict | None] = []
        # replica -> problem id -> (problem, perf_counter when handed out): its problems in flight
        self._held: list[dict[str, tuple[Problem, float]]] = []
        self._written: set[str] = set()
        self._started = time.perf_counter()
        self._problem_times: list[float] = []

    # ------------------------------------------------------------------ start and stop
    def start(self, on_poll: Callable[[], None] | None = None) -> list[dict]:
        """Start the replicas and wait until each has loaded its models.

        Returns:
            One info dict per replica (see :meth:`Replica.start`), with ``replica`` and ``status``.

        Raises:
            ValueError: a model cannot be loaded or an engine sized (the first replica's message),
                or the cluster lacks the GPUs asked for.
            ReplicasLost: every replica died while loading.
        """
        import ray

        from .replica import Replica

        cpus, most, gpus = self.session.resources()
        res = replica_resources(self.workers, self.settings.device, cpus, most, gpus)
        if self.settings.threads:
            res["threads"] = self.settings.threads  # --threads: the user's count for every replica
        actor_cls = ray.remote(Replica).options(num_cpus=res["num_cpus"], num_gpus=res["num_gpus"], max_restarts=0,
                                                # a second slot: pid() and close() need not wait behind exchange()
                                                max_concurrency=2)
        self.actors = [actor_cls.remote(i, self.settings, self.search_cfg, self.policy, self.max_concurrent,
                                        self.traces, res["threads"], self.source) for i in range(self.workers)]
        self.infos = [{"replica": i, "status": "starting", "threads": res["threads"]} for i in range(self.workers)]
        self._snaps = [None] * self.workers
        self._held = [{} for _ in range(self.workers)]
        pending = {actor.start.remote(): i for i, actor in enumerate(self.actors)}
        errors = []
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=POLL_S)
            for ref in ready:
                i = pending.pop(ref)
                try:
                    info = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    raise ReplicaFailed(f"replica {i} failed while loading: {exc}") from None
                except ray.exceptions.RayError as exc:
                    self._lose(i, exc)
                    continue
                if "error" in info:
                    errors.append(info["error"])
                    continue
                self._snaps[i] = info.pop("stats", None)
                self.infos[i].update(info, status="running")
            if on_poll is not None:
                on_poll()
        if errors:
            raise ValueError(errors[0])
        if not self.live:
            raise ReplicasLost("every replica died while loading its models")
        self._started = time.perf_counter()
        return self.infos

    def close(self) -> None:
        """Stop every replica (kills its actor; a killed replica's problems in flight are dropped)."""
        import ray

        for actor in self.actors:
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone with its node
                pass

    @property
    def live(self) -> list[int]:
        """Indexes of the replicas that are running."""
        return [i for i, info in enumerate(self.infos) if info["status"] == "running"]

    # ------------------------------------------------------------------ the run
    def run(self, stream: Iterable[Problem | ProblemError], on_answer: Callable[[dict, dict | None], None],
            on_error: Callable[[dict], None], on_poll: Callable[[], None] | None = None) -> None:
        """Search every problem of ``stream`` on the replicas; pass on each record once.

        Args:
            stream: the input (read only here, lazily, as replicas have room).
            on_answer: called with ``(record, trace or None)`` for each problem answered.
            on_error: called with the error record of each item that could not be searched (bad
                input lines of ``stream`` included).
            on_poll: called at least every :data:`POLL_S` seconds (dashboard).

        Raises:
            ReplicasLost: every replica died with problems left (those handed out are not answered).
            ReplicaFailed: a replica's search raised an exception.
            Whatever ``on_answer``/``on_error`` raise (the run stops there).
        """
        import ray

        from core.search.records import error_record

        it = iter(stream)
        exhausted = False
        requeued: deque[Problem] = deque()  # a lost replica's problems, handed out again first

        def take(n: int) -> list[Problem]:
            nonlocal exhausted
            out: list[Problem] = []
            while len(out) < n:
                if requeued:
                    out.append(requeued.popleft())
                    continue
                if exhausted:
                    break
                item = next(it, None)
                if item is None:
                    exhausted = True
                elif isinstance(item, ProblemError):
                    on_error(error_record(item))  # a bad input line never leaves this process
                else:
                    out.append(item)
            return out

        def finished() -> bool:
            return exhausted and not requeued and not any(self._held[i] for i in self.live)

        def call(i: int, problems: list[Problem]) -> None:
            now = time.perf_counter()
            for p in problems:
                self._held[i][p.id] = (p, now)
            more = bool(requeued) or not exhausted
            pending[self.actors[i].exchange.remote(problems, more, EXCHANGE_WAIT_S)] = i

        pending: dict = {}
        # the first problems are dealt out one at a time, so a short input is spread over every replica
        # instead of filling the first one's room
        first: dict[int, list[Problem]] = {i: [] for i in self.live}
        while any(len(batch) < self.max_concurrent for batch in first.values()) and not exhausted:
            for batch in first.values():
                if len(batch) < self.max_concurrent:
                    batch += take(1)
        for i, batch in first.items():
            call(i, batch)
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
            for ref in ready:
                i = pending.pop(ref)
                try:
                    reply = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    raise ReplicaFailed(f"replica {i}: {exc}") from None
                except ray.exceptions.RayError as exc:
                    # the process or its node is gone: its problems go to the others
                    requeued.extendleft(reversed(self._lose(i, exc)))
                    if not self.live and not finished():
                        raise ReplicasLost(f"every replica was lost; {len(requeued)} problems in flight were not "
                                           f"answered") from None
                    for j in self.live:
                        if j not in pending.values():
                            call(j, [])  # an idle replica asks for the requeued problems
                    continue
                if reply["stats"] is not None:
                    self._snaps[i] = reply["stats"]
                for record, trace in reply["answers"]:
                    self._held[i].pop(record["id"], None)
                    if record["id"] in self._written:
                        continue  # never twice, whatever a replica sends
                    on_answer(record, trace)
                    self._written.add(record["id"])
                    self._problem_times.append(record.get("time_s") or 0.0)
                for record in reply["errors"]:
                    self._held[i].pop(record["id"], None)
                    if record["id"] in self._written:
                        continue
                    on_error(record)
                    self._written.add(record["id"])
                if reply["failure"]:
                    raise ReplicaFailed(f"replica {i} stopped with an error:\n{reply['failure']}")
                if not finished():
                    call(i, take(reply["room"]))
            if on_poll is not None:
                on_poll()
        self.refresh_stats()

    def refresh_stats(self, timeout_s: float = 10.0) -> None:
        """Fetch every running replica's figures as they are now (a reply's may be a moment old)."""
        import ray

        refs = {self.actors[i].fresh_stats.remote(): i for i in self.live}
        if not refs:
            return
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
        for ref in ready:
            try:
                snap = ray.get(ref)
            except ray.exceptions.RayError:
                continue  # lost right at the end: its last figures stay
            if snap is not None:
                self._snaps[refs[ref]] = snap

    def _lose(self, i: int, exc: BaseException) -> list[Problem]:
        """Mark replica ``i`` lost; returns its problems in flight in input order."""
        import ray

        info = self.infos[i]
        info["status"] = "lost"
        held = sorted((p for p, _ in self._held[i].values()), key=lambda p: p.line)
        self._held[i] = {}
        try:
            ray.kill(self.actors[i])  # so that it can never report again, should it come back
        except Exception:  # noqa: BLE001 - already gone
            pass
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        where = f" (pid {info['pid']} on {info['node']})" if info.get("pid") else ""
        others = len(self.live)
        self.log(f"replica {i}{where} was lost: {reason}; "
                 + (f"its {len(held)} problem(s) in flight go to the {others} other replica(s)" if held and others
                    else f"{others} replica(s) left"))
        return held

    # ------------------------------------------------------------------ figures
    @property
    def generated_tokens(self) -> int:
        """Tokens sampled by all replicas so far (lost ones' included)."""
        return sum(s.get("generated_tokens", 0) for s in self._snaps if s)

    def snapshot(self, counts: dict, total: int | None, tokens_per_s_now: float | None = None) -> dict:
        """The run's figures now (see :func:`core.distributed.figures.merge_snapshots`)."""
        from core.memory import peak_rss_bytes

        now = time.perf_counter()
        rows = [replica_row(info, self._snaps[i], len(self._held[i])) for i, info in enumerate(self.infos)]
        ages = [now - t for held in self._held for _, t in held.values()]
        return merge_snapshots([s for s in self._snaps if s], rows, counts, total, now - self._started,
                               tokens_per_s_now, self._problem_times, ages, len(self.live) * self.max_concurrent,
                               peak_rss_bytes())

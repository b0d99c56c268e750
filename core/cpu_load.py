"""torch's CPU thread count, chosen from the cores that other processes leave free.

torch runs each CPU operation on all its threads (one per core by default) and they wait for each
other at its end. When another process holds one of the cores, every operation waits for the
thread that lost its core: on the 2-core development machine a one-problem solve sampled 32
tokens in 45 s with two threads beside a one-thread benchmark, and in 2.6 s with one thread; the
demo took 23 minutes with two threads beside a two-thread job, and 5 with one. So unless
``--threads`` (or ``OMP_NUM_THREADS``) fixes the count, a run measures how busy its cores are with
other work and gives torch the cores left free, at least one; `solve` looks again every few
seconds as the run goes on, so a run that started beside a test suite gets its second thread
back when the suite ends.

The measure is other processes' CPU time on this process's cores (Linux ``/proc/stat``, less this
process's own time from ``os.times``), not the load average: the load average counts this run
itself, and lags a minute behind, so it would still count an install that just finished.
"""

from __future__ import annotations

import os
import time
from typing import Callable

# a core counts as taken once other processes use at least this share of it (a shell, an editor or
# a finished install use far less; a single-threaded job uses a whole core)
TAKEN_SHARE = 0.5
# seconds between two readings while a run goes on, and the shortest window a reading may cover
RECHECK_S = 10.0
MIN_WINDOW_S = 0.3


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS has one), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _affinity() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def busy_jiffies(stat_text: str, cpus: set[int] | None) -> int | None:
    """Busy clock ticks (user, nice, system, irq, softirq, steal) summed over ``cpus`` (None: all
    of them) from the text of ``/proc/stat``; None when no matching ``cpuN`` line is found."""
    total, seen = 0, 0
    for line in stat_text.splitlines():
        if not (line.startswith("cpu") and line[3:4].isdigit()):
            continue
        name, *fields = line.split()
        if cpus is not None and int(name[3:]) not in cpus:
            continue
        values = [int(v) for v in fields[:8]] + [0] * (8 - len(fields[:8]))
        user, nice, system, _idle, _iowait, irq, softirq, steal = values
        total += user + nice + system + irq + softirq + steal
        seen += 1
    return total if seen else None


def cores_for_torch(cores: int, others_busy: float) -> int:
    """Threads to give torch: the cores that other work (``others_busy`` cores' worth of CPU) leaves
    free, a core counting as taken from :data:`TAKEN_SHARE` of it; at least 1."""
    taken = int(others_busy + (1 - TAKEN_SHARE))
    return max(1, min(cores, cores - taken))


class OtherWork:
    """CPU time that other processes spend on this process's cores, between two readings.

    Created as early as possible (before heavy imports), so the first :meth:`measure` covers a
    window of a second or more. Where ``/proc/stat`` does not exist (not Linux) every measure is None.
    """

    def __init__(self, read_stat: Callable[[], str] | None = None, clock: Callable[[], float] = time.monotonic,
                 own_cpu_s: Callable[[], float] | None = None):
        self._read_stat = read_stat or _read_proc_stat
        self._clock = clock
        self._own_cpu_s = own_cpu_s or _own_cpu_seconds
        self._cpus = _affinity()
        self._hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._last = self._reading()

    def _reading(self) -> tuple[float, int, float] | None:
        try:
            busy = busy_jiffies(self._read_stat(), self._cpus)
        except (OSError, ValueError):
            return None
        return None if busy is None else (self._clock(), busy, self._own_cpu_s())

    def measure(self, min_window_s: float = MIN_WINDOW_S) -> float | None:
        """Cores' worth of CPU that other processes used since the last reading (0.0 = idle cores;
        1.0 = one core kept busy), and starts a new window. None when the window is shorter than
        ``min_window_s`` seconds (the last reading is kept) or no reading is possible."""
        now = self._reading()
        last = self._last
        if now is None or last is None:
            self._last = now
            return None
        window = now[0] - last[0]
        if window < min_window_s:
            return None
        self._last = now
        others_s = (now[1] - last[1]) / self._hz - (now[2] - last[2])
        return max(0.0, others_s / window)


def _read_proc_stat() -> str:
    with open("/proc/stat") as f:
        return f.read()


def _own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def fixed_threads(requested: int | None) -> int | None:
    """The thread count the user fixed: ``--threads``, else a numeric ``OMP_NUM_THREADS``, else None."""
    if requested:
        return requested
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(env) if env.isdigit() and int(env) > 0 else None


class ThreadGovernor:
    """Sets torch's CPU thread count: fixed when asked, else the cores other work leaves free.

    Args:
        requested: ``--threads`` (None: follow the load, unless ``OMP_NUM_THREADS`` fixes it).
        watch: the :class:`OtherWork` started when the command began.
        cores: cores this process may use (default :func:`usable_cores`).
        recheck_s: least seconds between two readings in :meth:`tick`.
        set_threads / get_threads: torch's ``set_num_threads`` / ``get_num_threads`` (tests pass
            stand-ins); imported on first use, so nothing here imports torch before it is needed.

    A change during the run needs two readings in a row that agree, so one busy moment of another
    process does not make the count flap. torch's thread count is per calling thread: call
    :meth:`settle` and :meth:`tick` from the thread that runs the models.
    """

    def __init__(self, requested: int | None, watch: OtherWork | None, cores: int | None = None,
                 recheck_s: float = RECHECK_S, set_threads: Callable[[int], None] | None = None,
                 get_threads: Callable[[], int] | None = None, clock: Callable[[], float] = time.monotonic):
        self.fixed = fixed_threads(requested)
        self.watch = watch
        self.cores = cores or usable_cores()
        self.recheck_s = recheck_s
        self._set, self._get = set_threads, get_threads
        self._clock = clock
        self._next = 0.0
        self._pending: int | None = None
        self.threads: int | None = None
        self.changes = 0

    @property
    def following(self) -> bool:
        """True when the count follows the load (nothing fixed it, and there is more than one core)."""
        return self.fixed is None and self.watch is not None and self.cores > 1

    def _torch(self) -> None:
        if self._set is None:
            import torch

            self._set, self._get = torch.set_num_threads, torch.get_num_threads

    def _apply(self, n: int) -> None:
        self._torch()
        self._set(n)
        self.threads = n

    def settle(self) -> str | None:
        """Choose the first thread count (call before the models load); returns a note to print
        when other work takes cores, else None."""
        if self.fixed is not None:
            self._apply(self.fixed)
            return None
        # torch is imported first: it is needed anyway, and its import (a second or more) makes the
        # window since the program started long enough to measure
        self._torch()
        others = self.watch.measure() if self.following else None
        self._next = self._clock() + self.recheck_s
        n = self.cores if others is None else cores_for_torch(self.cores, others)
        self._apply(n)
        if n < self.cores:
            return (f"other processes keep {others:.1f} of this machine's {self.cores} cores busy, so torch runs "
                    f"{_threads(n)} (threads that share a core with other work wait on each other at every "
                    f"operation); the count follows the load as the run goes on, --threads N fixes it")
        return None

    def tick(self) -> str | None:
        """Look again at most every ``recheck_s`` seconds; returns a note when the count changed."""
        if not self.following or self._clock() < self._next:
            return None
        self._next = self._clock() + self.recheck_s
        others = self.watch.measure()
        if others is None:
            return None
        n = cores_for_torch(self.cores, others)
        if n == self.threads:
            self._pending = None
            return None
        if self._pending != n:
            self._pending = n  # a second reading must agree
            return None
        before = self.threads
        self._pending = None
        self._apply(n)
        self.changes += 1
        return (f"torch threads {before} -> {n}: other processes keep {others:.1f} of {self.cores} cores busy")


def torch_threads() -> int:
    """torch's CPU thread count in the calling thread now (imports torch)."""
    import torch

    return torch.get_num_threads()


_program_watch: OtherWork | None = None


def start_program_watch() -> OtherWork:
    """Start (or restart) the reading that the program's first :func:`program_watch` measures from;
    the command line calls it first thing, so the window covers the checks and imports."""
    global _program_watch
    _program_watch = OtherWork()
    return _program_watch


def program_watch() -> OtherWork:
    """The watch started with the program (one is started now if none was)."""
    return _program_watch or start_program_watch()


def _threads(n: int) -> str:
    return f"{n} thread{'' if n == 1 else 's'}"

"""Whether a CPU run is about to share its cores with other heavy work, and what to say about it.

torch runs each CPU operation on all its threads (one per core by default) and they wait for each
other at its end. When another process holds one of the cores, every operation waits for the
thread that lost its core: on the 2-core development machine the demo took 23 minutes beside a
benchmark with two threads and 5 minutes with one. The tool does not change its thread count on
its own (a run's speed would then depend on what else ran when it started); it says so and names
the flag.
"""

from __future__ import annotations

import os


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS has one), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def busy_note(load_1min: float, cores: int, threads: int | None) -> str | None:
    """A one-line note when other work already keeps the cores busy and torch would use them all.

    Args:
        load_1min: the 1-minute load average (runnable processes, see ``os.getloadavg``) before
            this run starts its own work.
        cores: cores this process may run on.
        threads: the ``--threads`` asked for (None: torch's default, one per core).

    Returns:
        The note, or None when the run uses one thread, has the machine to itself (load below
        ``cores - 0.5``, so a finished install or an editor does not count), or has one core.
    """
    if cores < 2 or (threads is not None and threads < 2) or load_1min < cores - 0.5:
        return None
    used = threads or cores
    return (f"this machine is busy (load average {load_1min:.1f} on {cores} cores) and torch would run {used} "
            f"threads that wait on each other at every operation; beside other heavy work that is several "
            f"times slower than one thread: pass --threads 1 (or set OMP_NUM_THREADS=1)")


def current_busy_note(threads: int | None) -> str | None:
    """:func:`busy_note` for this machine now; None where the OS has no load average."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    if threads is None and os.environ.get("OMP_NUM_THREADS", "").strip().isdigit():
        threads = int(os.environ["OMP_NUM_THREADS"])
    return busy_note(load, usable_cores(), threads)

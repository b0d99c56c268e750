"""Memory figures of this process and of the machine, for KV pool sizing and run reports."""

from __future__ import annotations

import os
import sys

__all__ = ["peak_rss_bytes", "physical_memory_bytes"]


def peak_rss_bytes() -> int | None:
    """The most resident memory this process has held so far, in bytes (None where unknown).

    ``getrusage``'s ``ru_maxrss`` (kilobytes on Linux, bytes on macOS); on Windows psutil's peak
    working set. Children (the math-verify grading process) are not included.
    """
    try:
        import resource
    except ImportError:  # Windows
        try:
            import psutil

            return int(psutil.Process().memory_info().peak_wset)
        except (ImportError, AttributeError, OSError):
            return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _cgroup_limit_bytes() -> int | None:
    """The memory limit of this process's cgroup (containers), None when there is none."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path, encoding="ascii") as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:  # v1 writes a huge number for "no limit"
            return int(text)
    return None


def physical_memory_bytes() -> int | None:
    """Memory this process may use in bytes: the machine's physical memory, or a container's lower
    limit (None where neither is known)."""
    total = None
    try:
        total = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        try:
            import psutil

            total = int(psutil.virtual_memory().total)
        except (ImportError, AttributeError, OSError):
            pass
    limit = _cgroup_limit_bytes()
    if limit is not None and (total is None or limit < total):
        return limit
    return total

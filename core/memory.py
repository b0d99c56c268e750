"""Memory figures of this process and of the machine, for KV pool sizing and run reports."""

from __future__ import annotations

import os
import sys

__all__ = ["peak_rss_bytes", "physical_memory_bytes", "release_free_memory"]

_LIBC = None


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


def release_free_memory() -> None:
    """Hand memory the C heap holds but no longer uses back to the system (glibc ``malloc_trim``).

    Loading a tokenizer and a model leaves tens of MB of freed temporaries in the C heap, which
    glibc keeps (SmolLM2: ~30 MB); trimming once after loading returns them. A no-op where the C
    library has no ``malloc_trim``.
    """
    global _LIBC
    if _LIBC is None:
        _LIBC = False
        if sys.platform.startswith("linux"):
            import ctypes
            import ctypes.util

            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                _LIBC = libc if hasattr(libc, "malloc_trim") else False
            except OSError:
                pass
    if _LIBC:
        _LIBC.malloc_trim(0)

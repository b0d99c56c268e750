"""Durable writes for the output folder: atomic file replacement and fsync'ed appends.

Every byte `solve` writes under ``OUT`` goes through this module, so a full disk or an I/O error
surfaces in one place, as :class:`OutputWriteError` naming the file, and never leaves a partial
file behind: an atomic write leaves the previous file (or none), a failed append is cut back to
where it started. Writes go through :func:`os.write` (not buffered file objects) so that a test
can make the disk "fill up" after N bytes by patching that one function.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

# prefix of every temporary file this module creates; a run that is killed mid-write leaves one,
# and the next run in the same folder removes it (see core.io.output_folder.remove_leftovers)
TMP_PREFIX = ".tmp-"
TMP_SUFFIX = ".part"


class OutputWriteError(OSError):
    """Writing to the output folder failed (disk full, I/O error, folder removed).

    Attributes:
        path: the file that could not be written.
        errno / strerror: from the underlying :class:`OSError`.
    """

    def __init__(self, path: str | Path, cause: OSError):
        super().__init__(cause.errno, cause.strerror or str(cause), str(path))
        self.path = Path(path)

    def __str__(self) -> str:
        return f"cannot write {self.path}: {self.strerror}"


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (:func:`os.write` may write less than asked).

    Raises:
        OSError: the write failed (ENOSPC, EIO, ...); a zero-byte write counts as ENOSPC.
    """
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[n:]


def fsync_dir(directory: str | Path) -> None:
    """Persist a directory entry (a new or renamed file) where the platform allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # Windows cannot open directories; its rename is durable enough here
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomically(target: str | Path, data: bytes, mode: int = 0o666) -> Path:
    """Replace ``target`` with ``data``: temporary file in the same folder, fsync, rename.

    Readers see either the old complete file or the new complete one. The file gets ``mode``
    less the process umask, like a file made by ``open``.

    Args:
        target: the file to write.
        data: its whole new content, in bytes.

    Returns:
        ``target`` as a :class:`Path`.

    Raises:
        OutputWriteError: the folder or file cannot be written; the temporary file is removed and
            ``target`` is unchanged.
    """
    target = Path(target)
    tmp_name = None
    try:
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f"{TMP_PREFIX}{target.name[:40]}.",
                                        suffix=TMP_SUFFIX)
        try:
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fd, mode & ~umask)  # mkstemp makes 0600; outputs are as readable as any file
            write_all(fd, data)
            os.fsync(fd)  # without it a machine crash right after the rename can leave an empty file
        finally:
            os.close(fd)
        os.replace(tmp_name, target)
    except OSError as exc:
        if tmp_name is not None:
            try:
                os.unlink(tmp_name)
            except OSError:
                pass
        raise OutputWriteError(target, exc) from exc
    except BaseException:
        if tmp_name is not None:
            try:
                os.unlink(tmp_name)
            except OSError:
                pass
        raise
    fsync_dir(target.parent)
    return target


class DurableAppender:
    """Appends byte records to one file, each on disk (fsync'ed) before :meth:`append` returns.

    A record is written whole or not at all: when a write or fsync fails, the file is cut back
    to its size before that record, so the file always ends after a complete record.

    Args:
        path: the file, created when missing (its folder must exist).

    Raises:
        OutputWriteError: the file cannot be opened.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        existed = self.path.exists()
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as exc:
            raise OutputWriteError(self.path, exc) from exc
        if not existed:
            fsync_dir(self.path.parent)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        return self._fd < 0

    def size(self) -> int:
        """Current size of the file in bytes."""
        return os.fstat(self._fd).st_size

    def append(self, data: bytes) -> None:
        """Append ``data`` and fsync.

        Raises:
            ValueError: the appender is closed.
            OutputWriteError: the write or fsync failed; the file is cut back to its earlier size
                (best effort: a file system that refuses even that keeps the partial bytes, which
                ``--resume`` cuts off as a torn line).
        """
        if self.closed:
            raise ValueError(f"appender for {self.path} is closed")
        start = self.size()
        try:
            write_all(self._fd, data)
            os.fsync(self._fd)
        except OSError as exc:
            try:
                os.ftruncate(self._fd, start)
            except OSError:
                pass
            raise OutputWriteError(self.path, exc) from exc

    def close(self) -> None:
        """Close the file (safe to call twice).

        Raises:
            OutputWriteError: the final close failed (some file systems report a deferred write
                error only here).
        """
        if self.closed:
            return
        fd, self._fd = self._fd, -1
        try:
            os.close(fd)
        except OSError as exc:
            raise OutputWriteError(self.path, exc) from exc

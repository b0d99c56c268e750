"""Crash-safe output: the append-only answers file and one trace file per problem.

Layout under the output directory ``OUT``::

    OUT/answers.jsonl          one JSON object per finished problem, appended as each finishes
    OUT/traces/<safe id>.json  the search trace of one problem (see :func:`safe_filename`)
    OUT/summary.json           run totals and the config used, written when the run ends

A batch run can be killed at any moment (Ctrl-C, OOM killer, preemption). Every answer line is
flushed and fsync'ed before :meth:`AnswerWriter.write` returns, and trace files are replaced
atomically, so whatever was reported as written survives and no file is ever left half-written
(except, after a crash of the whole machine mid-write, the last line of ``answers.jsonl``).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path
from types import TracebackType

import orjson

ANSWERS_FILENAME = "answers.jsonl"
TRACES_DIRNAME = "traces"
SUMMARY_FILENAME = "summary.json"

# Portable across Linux, macOS and Windows file systems and safe in shells without quoting.
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]")
# Leaves room for the ".json" suffix and a temp-file prefix within the usual 255-byte name limit.
_MAX_STEM = 200
_WINDOWS_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)),
                     *(f"LPT{i}" for i in range(1, 10))}


def _fsync_dir(directory: Path) -> None:
    """Persist a directory entry (new or renamed file) where the platform allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # Windows cannot open directories; its rename is durable enough for our purpose.
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class AnswerWriter:
    """Appends one JSON line per record to ``OUT/answers.jsonl``, durably.

    The file is opened in append mode, so reopening the same directory (e.g. to resume a run)
    keeps the lines already there. Use as a context manager or call :meth:`close`.

    Args:
        out_dir: output directory; created (with parents) if missing.

    Raises:
        OSError: the directory cannot be created or the file cannot be opened.
    """

    def __init__(self, out_dir: str | Path) -> None:
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.out_dir / ANSWERS_FILENAME
        existed = self.path.exists()
        self._fh = open(self.path, "ab")
        if not existed:
            _fsync_dir(self.out_dir)
        elif self._ends_without_newline():
            # A previous run died mid-line; start on a fresh line so the next record is not glued
            # onto the torn fragment (readers then lose only that fragment, not our record too).
            self._fh.write(b"\n")
            self._sync()

    def _ends_without_newline(self) -> bool:
        size = self.path.stat().st_size
        if size == 0:
            return False
        with open(self.path, "rb") as fh:
            fh.seek(size - 1)
            return fh.read(1) != b"\n"

    def _sync(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        return self._fh.closed

    def write(self, record: dict) -> None:
        """Append ``record`` as one JSON line and force it to disk before returning.

        Args:
            record: a JSON-serialisable dict (string keys; str, int, float, bool, None, list,
                dict values).

        Raises:
            TypeError: ``record`` is not serialisable by orjson (nothing is written then).
            ValueError: the writer is closed.
            OSError: the write or fsync failed (e.g. disk full).
        """
        if self._fh.closed:
            raise ValueError(f"AnswerWriter for {self.path} is closed")
        # Serialise before touching the file so a bad record cannot leave a partial line.
        line = orjson.dumps(record) + b"\n"
        self._fh.write(line)
        self._sync()

    def close(self) -> None:
        """Close the file. Safe to call more than once."""
        if not self._fh.closed:
            self._fh.close()

    def __enter__(self) -> AnswerWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def safe_filename(problem_id: str) -> str:
    """File name (with ``.json`` suffix) under which the trace of ``problem_id`` is stored.

    An id made only of ``A-Z a-z 0-9 . _ -`` (and not hidden, reserved or too long) is used as is:
    ``gsm8k-test-0000`` -> ``gsm8k-test-0000.json``. Any other id is made readable (unsafe
    characters become ``_``, a trailing ``.json`` is dropped) and gets 8 hex digits of its hash, so
    that distinct ids never share a file: ``test/precalculus/807.json`` ->
    ``test_precalculus_807-<hash>.json``, while ``a/b`` and ``a_b`` stay apart.

    Args:
        problem_id: the problem id (any string).

    Returns:
        A bare file name (no directory part) ending in ``.json``.
    """
    stem = problem_id[:-5] if problem_id.lower().endswith(".json") else problem_id
    stem = _UNSAFE_CHARS.sub("_", stem)
    if stem.startswith("."):
        stem = "_" + stem[1:]
    if not stem:
        stem = "_"
    if stem.split(".")[0].upper() in _WINDOWS_RESERVED:
        stem = "_" + stem
    if len(stem) > _MAX_STEM:
        digest = hashlib.sha256(problem_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        stem = f"{stem[:_MAX_STEM - 17]}-{digest}"
    elif stem != problem_id:
        # the readable form lost information: a hash of the exact id keeps names distinct
        stem += "-" + hashlib.sha256(problem_id.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return stem + ".json"


def write_trace(out_dir: str | Path, problem_id: str, trace: dict) -> Path:
    """Write the trace of one problem to ``OUT/traces/<safe_filename(problem_id)>``, atomically.

    The JSON is written to a temporary file in the same directory, fsync'ed and then renamed over
    the target, so readers see either the previous complete file or the new complete one. An
    existing trace for the same id is replaced.

    Args:
        out_dir: output directory ``OUT``; ``OUT/traces`` is created if missing.
        problem_id: problem id, mapped to a file name by :func:`safe_filename`.
        trace: JSON-serialisable dict.

    Returns:
        Path of the written trace file.

    Raises:
        TypeError: ``trace`` is not serialisable by orjson (nothing is written then).
        OSError: the directory or file cannot be written.
    """
    traces_dir = Path(out_dir) / TRACES_DIRNAME
    traces_dir.mkdir(parents=True, exist_ok=True)
    target = traces_dir / safe_filename(problem_id)
    # Indented: traces are meant to be read by people as well as by the `trace` command.
    _replace_atomically(target, orjson.dumps(trace, option=orjson.OPT_INDENT_2) + b"\n")
    return target


def write_summary(out_dir: str | Path, summary: dict) -> Path:
    """Write ``OUT/summary.json`` (run totals and config, see README "summary.json"), atomically.

    Raises:
        TypeError: ``summary`` is not serialisable by orjson (nothing is written then).
        OSError: the file cannot be written.
    """
    target = Path(out_dir) / SUMMARY_FILENAME
    _replace_atomically(target, orjson.dumps(summary, option=orjson.OPT_INDENT_2) + b"\n")
    return target


def _replace_atomically(target: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file next to ``target``, fsync it, then rename it over ``target``."""
    directory = target.parent
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{target.stem[:40]}.", suffix=".tmp")
    try:
        # mkstemp creates 0600; these files are as readable as answers.jsonl (umask applies)
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            # Without this a machine crash right after the rename can leave an empty file.
            os.fsync(fh.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except OSError:
            pass
        raise
    _fsync_dir(directory)

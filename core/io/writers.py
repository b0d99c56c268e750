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
import re
from pathlib import Path
from types import TracebackType

import orjson

from .durable import DurableAppender, OutputWriteError, write_atomically

ANSWERS_FILENAME = "answers.jsonl"
TRACES_DIRNAME = "traces"
SUMMARY_FILENAME = "summary.json"

# Portable across Linux, macOS and Windows file systems and safe in shells without quoting.
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]")
# Leaves room for the ".json" suffix and a temp-file prefix within the usual 255-byte name limit.
_MAX_STEM = 200
_WINDOWS_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)),
                     *(f"LPT{i}" for i in range(1, 10))}


class AnswerWriter:
    """Appends one JSON line per record to ``OUT/answers.jsonl``, durably.

    The file is opened in append mode, so reopening the same directory (e.g. to resume a run)
    keeps the lines already there. Use as a context manager or call :meth:`close`.

    Args:
        out_dir: output directory; created (with parents) if missing.

    Raises:
        OutputWriteError: the directory cannot be created or the file cannot be opened or written.
    """

    def __init__(self, out_dir: str | Path) -> None:
        self.out_dir = Path(out_dir)
        self.path = self.out_dir / ANSWERS_FILENAME
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputWriteError(self.out_dir, exc) from exc
        self._file = DurableAppender(self.path)
        if self._ends_without_newline():
            # A previous run died mid-line; start on a fresh line so the next record is not glued
            # onto the torn fragment (readers then lose only that fragment, not our record too).
            self._file.append(b"\n")

    def _ends_without_newline(self) -> bool:
        size = self._file.size()
        if size == 0:
            return False
        with open(self.path, "rb") as fh:
            fh.seek(size - 1)
            return fh.read(1) != b"\n"

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        return self._file.closed

    def write(self, record: dict) -> None:
        """Append ``record`` as one JSON line and force it to disk before returning.

        Args:
            record: a JSON-serialisable dict (string keys; str, int, float, bool, None, list,
                dict values).

        Raises:
            TypeError: ``record`` is not serialisable by orjson (nothing is written then).
            ValueError: the writer is closed.
            OutputWriteError: the write or fsync failed (e.g. disk full); the file still ends after
                the last whole record.
        """
        if self.closed:
            raise ValueError(f"AnswerWriter for {self.path} is closed")
        # Serialise before touching the file so a bad record cannot leave a partial line.
        self._file.append(orjson.dumps(record) + b"\n")

    def close(self) -> None:
        """Close the file. Safe to call more than once.

        Raises:
            OutputWriteError: the close reported a deferred write error.
        """
        self._file.close()

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
        OutputWriteError: the directory or file cannot be written (the old file, if any, is kept).
    """
    traces_dir = Path(out_dir) / TRACES_DIRNAME
    try:
        traces_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputWriteError(traces_dir, exc) from exc
    # Indented: traces are meant to be read by people as well as by the `trace` command.
    data = orjson.dumps(trace, option=orjson.OPT_INDENT_2) + b"\n"
    return write_atomically(traces_dir / safe_filename(problem_id), data)


def write_summary(out_dir: str | Path, summary: dict) -> Path:
    """Write ``OUT/summary.json`` (run totals and config, see docs/solve.md "Live dashboard and summary.json"), atomically.

    Raises:
        TypeError: ``summary`` is not serialisable by orjson (nothing is written then).
        OutputWriteError: the file cannot be written (the old file, if any, is kept).
    """
    data = orjson.dumps(summary, option=orjson.OPT_INDENT_2) + b"\n"
    return write_atomically(Path(out_dir) / SUMMARY_FILENAME, data)

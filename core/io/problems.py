"""Streaming reader for problem files (JSONL, one JSON object per line).

A batch run over thousands of problems must not die on line 812 because one record is malformed,
so :func:`read_problems` never raises for a bad line: it yields a :class:`ProblemError` in its
place and goes on. Only a file that cannot be opened at all raises.
"""

from __future__ import annotations

import errno
import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterator, Sequence

import orjson

from core.grading.extract import gsm8k_hash_answer

_UTF8_BOM = b"\xef\xbb\xbf"


@dataclass
class Problem:
    """One valid problem record.

    Attributes:
        id: unique id (string; numeric ids are converted, missing ids are made up as ``line-<N>``
            for files and ``row-<N>`` for dataset rows, N being 1-based).
        problem: the problem statement, unchanged.
        answer: reference answer as a string (numbers converted, a GSM8K ``#### 42`` solution reduced
            to ``42``), or None when the record has none.
        line: 1-based line number in the source file (row number in the split for datasets).
        extra: every other field of the record (e.g. ``solution``, ``subject``, ``level``).
    """

    id: str
    problem: str
    answer: str | None
    line: int
    extra: dict = field(default_factory=dict)


def problem_hash(text: str) -> str:
    """A short content hash of a problem statement (16 hex digits of its UTF-8 SHA-256), which an
    answer record keeps so that ``--resume`` can tell when the input's problem changed since."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass
class ProblemError:
    """One line of a problem file that could not be turned into a :class:`Problem`.

    Attributes:
        id: the record's id when it could be read, else None.
        line: 1-based line number in the source file (row number in the split for datasets).
        field: the offending field, or None when the whole line is bad (invalid JSON, not UTF-8...).
        message: what is wrong, in words.
        source: the path as given to :func:`read_problems` (``<stdin>`` for ``-``).
    """

    id: str | None
    line: int
    field: str | None
    message: str
    source: str

    def describe(self) -> str:
        """One-line, ``file:line:`` prefixed description, e.g.
        ``problems.jsonl:7: field 'problem': missing or empty``.

        Returns:
            The description (no trailing newline).
        """
        where = f"{self.source}:{self.line}: "
        if self.field is not None:
            where += f"field {self.field!r}: "
        return where + self.message


def _open_source(path: str | Path) -> tuple[IO[bytes], str, bool]:
    """Open ``path`` for binary reading; returns (handle, display name, whether we own it)."""
    if str(path) == "-":
        return sys.stdin.buffer, "<stdin>", False
    p = Path(path)
    # Re-raise with our own wording so the CLI can print str(exc) and the user sees which file.
    if p.is_dir():
        raise IsADirectoryError(errno.EISDIR, "problem file is a directory", str(path))
    try:
        fh = open(p, "rb")
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "problem file not found", str(path)) from None
    except PermissionError:
        raise PermissionError(errno.EACCES, "problem file is not readable", str(path)) from None
    return fh, str(path), True


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array",
            dict: "object"}.get(type(value), type(value).__name__)


def _bad_utf8_message(raw: bytes) -> str | None:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at position {exc.start + 1})"
    return None


DEFAULT_PROBLEM_FIELDS = ("problem", "question")
# the longest input line read: a problem statement is kilobytes, and a line of hundreds of MB
# (a file of another kind, a broken export) must not be read into memory whole
MAX_LINE_BYTES = 16 << 20
# field names that commonly hold a problem statement in other datasets, tried first when a record
# lacks the expected field and the error suggests --problem-field
_LIKELY_PROBLEM_FIELDS = ("prompt", "input", "query", "instruction", "text", "content", "statement")


def read_problems(
    path: str | Path,
    problem_fields: Sequence[str] = DEFAULT_PROBLEM_FIELDS,
    answer_field: str = "answer",
    id_field: str = "id",
) -> Iterator[Problem | ProblemError]:
    """Stream the records of a JSONL problem file, one per non-blank line, in file order.

    The file is opened when this function is called (so a missing file fails at once, before any
    work starts) but read lazily, one line at a time, as the returned iterator is consumed. Each
    line is checked by :func:`parse_record`; a missing id becomes ``line-<N>`` (N = the 1-based
    line number, blank lines counted, so made-up ids are stable across reruns of the same file).

    Args:
        path: file to read, or ``-`` for standard input.
        problem_fields: candidate names of the problem statement field, in order of preference.
        answer_field: name of the reference answer field.
        id_field: name of the id field.

    Returns:
        An iterator of :class:`Problem` for good lines and :class:`ProblemError` for bad ones (at
        most one error per line). Blank lines produce nothing; an empty file produces nothing.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        IsADirectoryError: ``path`` is a directory.
        PermissionError: ``path`` cannot be read.
        OSError: other failures to open or read the file. Bad *content* never raises.
    """
    if not problem_fields:
        raise ValueError("problem_fields must name at least one field")
    fh, source, owned = _open_source(path)
    return _iter_problems(fh, source, owned, tuple(problem_fields), answer_field, id_field)


def _iter_problems(
    fh: IO[bytes],
    source: str,
    owned: bool,
    problem_fields: tuple[str, ...],
    answer_field: str,
    id_field: str,
) -> Iterator[Problem | ProblemError]:
    # id -> line where it was first seen; ids of rejected lines count too, so whether a line is a
    # duplicate does not depend on whether an earlier line happened to be valid.
    seen: dict[str, int] = {}
    try:
        for lineno, raw, size in iter_lines(fh):
            if raw is None:
                yield ProblemError(None, lineno, None, f"line of {size / (1 << 20):.1f} MiB, more than the "
                                   f"{MAX_LINE_BYTES >> 20} MiB a problem record may hold; not read", source)
                continue
            if lineno == 1 and raw.startswith(_UTF8_BOM):
                # Editors on Windows often save with a BOM; orjson would reject the whole line.
                raw = raw[len(_UTF8_BOM):]
            if not raw.strip():
                continue
            yield _parse_line(raw, lineno, source, problem_fields, answer_field, id_field, seen)
    finally:
        if owned:
            fh.close()


def count_records(path: Path) -> int:
    """Non-blank lines of a JSONL file, read with :func:`iter_lines`' size limit (a giant line counts once).

    Raises:
        OSError: the file cannot be read.
    """
    with open(path, "rb") as fh:
        return sum(1 for _, raw, _ in iter_lines(fh) if raw is None or raw.strip())


def iter_lines(fh: IO[bytes], max_bytes: int | None = None) -> Iterator[tuple[int, bytes | None, int]]:
    """The lines of a binary stream, each read with a size limit so one giant line cannot fill memory.

    Args:
        fh: the stream.
        max_bytes: longest line kept (default :data:`MAX_LINE_BYTES`); a longer one is read through
            in 1 MiB pieces and dropped.

    Returns:
        An iterator of ``(1-based line number, line bytes with its ending or None when too long,
        line size in bytes)``.
    """
    limit = MAX_LINE_BYTES if max_bytes is None else max_bytes
    lineno = 0
    while True:
        raw = fh.readline(limit + 1)
        if not raw:
            return
        lineno += 1
        if len(raw) <= limit or raw.endswith(b"\n"):
            yield lineno, raw, len(raw)
            continue
        size = len(raw)
        del raw
        while True:
            piece = fh.readline(1 << 20)
            size += len(piece)
            if not piece or piece.endswith(b"\n"):
                break
        yield lineno, None, size


def _parse_line(
    raw: bytes,
    lineno: int,
    source: str,
    problem_fields: tuple[str, ...],
    answer_field: str,
    id_field: str,
    seen: dict[str, int],
) -> Problem | ProblemError:
    # Parse without the line ending so orjson's error positions are columns within this line.
    raw = raw.rstrip(b"\r\n")
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        # orjson reports bad UTF-8 as a generic decode error; say plainly what is wrong instead.
        bad_utf8 = _bad_utf8_message(raw)
        if bad_utf8 is not None:
            return ProblemError(None, lineno, None, bad_utf8, source)
        # orjson's own "line 1 column N" would read as a file line number next to ours.
        return ProblemError(None, lineno, None, f"invalid JSON: {exc.msg} (column {exc.colno})", source)
    return parse_record(obj, lineno, source, problem_fields, answer_field, id_field, seen)


def gold_answer(raw: str) -> str:
    """The reference answer held by an answer field: the text after ``####`` when the field holds a
    whole GSM8K-style worked solution (``... #### 42`` -> ``42``, thousands separators dropped, see
    :func:`core.grading.extract.gsm8k_hash_answer`), else the field unchanged.

    Raises:
        ValueError: the field has ``####`` with nothing after it.
    """
    if "####" not in raw:
        return raw
    hashed = gsm8k_hash_answer(raw)
    if hashed is None:
        raise ValueError("has '####' but no answer after it")
    return hashed


def _missing_problem_message(obj: dict, problem_fields: Sequence[str], answer_field: str, id_field: str) -> str:
    """``missing (also looked for 'question'); fields present: prompt, id; use --problem-field prompt``."""
    others = ", ".join(repr(f) for f in problem_fields[1:])
    also = f" (also looked for {others})" if others else ""
    present = ", ".join(obj) or "none"
    text_fields = [k for k, v in obj.items() if isinstance(v, str) and v.strip() and k not in (answer_field, id_field)]
    likely = [k for k in _LIKELY_PROBLEM_FIELDS if k in text_fields] + text_fields
    hint = f"; use --problem-field {likely[0]}" if likely else "; choose the field with --problem-field"
    return f"missing{also}; fields present: {present}{hint}"


def parse_record(
    obj: object,
    line: int,
    source: str,
    problem_fields: Sequence[str] = DEFAULT_PROBLEM_FIELDS,
    answer_field: str = "answer",
    id_field: str = "id",
    seen: dict[str, int] | None = None,
    id_prefix: str = "line",
) -> Problem | ProblemError:
    """Check one decoded record (a JSONL line or a dataset row) and turn it into a :class:`Problem`.

    The record must be an object with a non-empty string problem statement, taken from the first of
    ``problem_fields`` that it has. ``answer_field`` is optional (absent or null gives
    ``answer=None``); a number is converted to its string form; a GSM8K worked solution ending in
    ``#### 42`` gives ``42`` (see :func:`gold_answer`; the whole text goes to ``extra["solution"]``
    when the record has no ``solution``). ``id_field`` is optional (missing or null becomes
    ``<id_prefix>-<line>``); a numeric id is converted to a string. Ids must be unique within one
    ``seen`` map: a repeated id is an error on the later record, naming the first one's line.
    Fields other than the used problem field, answer and id go to :attr:`Problem.extra`.

    Args:
        obj: the decoded record.
        line: its 1-based line (or row) number, used in errors and made-up ids.
        source: file or dataset name for errors.
        problem_fields / answer_field / id_field: field names, as in :func:`read_problems`.
        seen: id -> line of the records seen so far in this input; updated in place (None: no
            duplicate check).
        id_prefix: prefix of made-up ids.

    Returns:
        The :class:`Problem`, or a :class:`ProblemError` naming the offending field. Never raises.
    """
    def error(message: str, field_name: str | None = None, pid: str | None = None) -> ProblemError:
        return ProblemError(id=pid, line=line, field=field_name, message=message, source=source)

    if not isinstance(obj, dict):
        return error(f"expected a JSON object, got {_type_name(obj)}")

    raw_id = obj.get(id_field)
    if raw_id is None:
        pid = f"{id_prefix}-{line}"
    elif isinstance(raw_id, str) and raw_id.strip():
        pid = raw_id
    elif isinstance(raw_id, (int, float)) and not isinstance(raw_id, bool):
        pid = str(raw_id)
    elif isinstance(raw_id, str):
        return error("empty", id_field)
    else:
        return error(f"must be a string or a number, got {_type_name(raw_id)}", id_field)

    if seen is not None:
        first = seen.get(pid)
        if first is not None:
            return error(f"duplicate id {pid!r} (first seen on line {first})", id_field, pid)
        seen[pid] = line

    pfield = next((name for name in problem_fields if name in obj), None)
    if pfield is None:
        return error(_missing_problem_message(obj, problem_fields, answer_field, id_field), problem_fields[0], pid)
    text = obj.get(pfield)
    if text is not None and not isinstance(text, str):
        return error(f"must be a string, got {_type_name(text)}", pfield, pid)
    if not text or not text.strip():
        return error("missing or empty", pfield, pid)

    raw_answer = obj.get(answer_field)
    extra = {k: v for k, v in obj.items() if k not in (pfield, answer_field, id_field)}
    if raw_answer is None:
        answer = None
    elif isinstance(raw_answer, str):
        try:
            answer = gold_answer(raw_answer)
        except ValueError as exc:
            return error(str(exc), answer_field, pid)
        if answer != raw_answer:
            extra.setdefault("solution", raw_answer)
    elif isinstance(raw_answer, (int, float)) and not isinstance(raw_answer, bool):
        answer = str(raw_answer)
    else:
        return error(f"must be a string or a number, got {_type_name(raw_answer)}",
                     answer_field, pid)

    return Problem(id=pid, problem=text, answer=answer, line=line, extra=extra)

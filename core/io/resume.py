"""Resuming a run: what ``OUT/answers.jsonl`` already holds, and the settings it was made with.

``solve --resume`` reruns the same input into the same ``OUT`` and searches only the problems
without a record there. Two files make that safe:

- ``OUT/answers.jsonl`` is scanned once at start (:func:`scan_answers`). A last line without its
  newline is what a killed run leaves behind mid-write: it is cut off, so the file again holds
  whole records only and the problem is solved again. Every record found marks its input item done
  (:meth:`DoneRecords.covers`), so a resumed run never writes a second record for one input line.
- ``OUT/run.json`` holds the run's settings, written when a run starts (:func:`write_run_config`).
  A resume compares them with its own (:func:`config_differences`): answers made with other
  models, search settings, policy or input fields would silently mix two experiments in one file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import orjson

from .durable import write_atomically
from .problems import Problem, ProblemError, problem_hash

RUN_FILENAME = "run.json"
# the part of run.json that is informative only; everything else must match on --resume
INFO_KEY = "info"


class ResumeError(Exception):
    """``OUT`` cannot be resumed (unreadable ``run.json``); the message names the file."""


@dataclass
class DoneRecords:
    """What an earlier run wrote for which input items.

    Attributes:
        answered: ids of answer records.
        hashes: id -> ``problem_hash`` of the answer records that have one (records of older
            versions do not).
        error_lines: line -> ids of the error records written for that input line (None when the
            line's id could not be read, e.g. invalid JSON).
        answers/errors: how many answer and error records the file holds.
        graded/correct: answer records with a ``correct`` field, and how many of them are correct.
        correct_by: per selection rule (``best``, ``weighted``, ``majority``), records whose
            ``correct_<rule>`` is true.
        at_n: the counts of the records' ``at_n`` entries (the picks over their first n
            completions), keyed as a run counts them: ``graded@<n>``, ``correct@<n>``,
            ``correct_<rule>@<n>``.
        unreadable: 1-based line numbers of ``answers.jsonl`` lines that are not JSON objects
            with an ``id`` (a torn fragment of a killed write, or a hand edit).
        removed_to: where :func:`scan_answers` moved the unreadable lines when it repaired the
            file (None when it did not).
        truncated_bytes: size of the torn last line cut off by :func:`scan_answers`.
    """

    answered: set[str] = field(default_factory=set)
    hashes: dict[str, str] = field(default_factory=dict)
    error_lines: dict[int, set[str | None]] = field(default_factory=dict)
    answers: int = 0
    errors: int = 0
    graded: int = 0
    correct: int = 0
    correct_by: dict[str, int] = field(default_factory=dict)
    at_n: dict[str, int] = field(default_factory=dict)
    unreadable: list[int] = field(default_factory=list)
    removed_to: Path | None = None
    truncated_bytes: int = 0

    def __len__(self) -> int:
        return self.answers + self.errors

    def covers(self, item: Problem | ProblemError) -> str | None:
        """Whether ``item`` already has a record: ``"answer"``, ``"error"`` or None.

        A problem is done when an answer record has its id. Any input item is done when an error
        record sits at its line and the ids agree where both are known, so a line that failed
        (bad JSON, a prompt too long for the model...) is not tried again, and a line whose id is
        only known now (the JSON was fixed since) is not given a second record either.
        """
        if isinstance(item, Problem) and item.id in self.answered:
            return "answer"
        ids = self.error_lines.get(item.line)
        if ids is not None and (None in ids or item.id is None or item.id in ids):
            return "error"
        return None


def scan_answers(path: str | Path, truncate: bool = True) -> DoneRecords:
    """Read an ``answers.jsonl`` written by :class:`core.io.writers.AnswerWriter`, repairing it.

    Args:
        path: the file; a missing file gives empty :class:`DoneRecords`.
        truncate: repair the file: cut a torn last line (no trailing newline, not a whole JSON
            object) off, add the missing newline after a last record that is whole, and rewrite
            the file atomically without unreadable lines (torn fragments in the middle, left when
            a killed run's fragment was followed by later records); those lines are appended to
            ``<path>.removed`` first, so nothing is lost.

    Returns:
        The records found (unreadable and removed lines reported in it).

    Raises:
        OSError: the file cannot be read or repaired.
    """
    done = DoneRecords()
    path = Path(path)
    if not path.is_file():
        return done
    data = path.read_bytes()
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    if tail.strip():
        try:
            whole = isinstance(orjson.loads(tail), dict)
        except orjson.JSONDecodeError:
            whole = False
        if whole:
            lines.append(tail)
            if truncate:
                with open(path, "ab") as fh:
                    fh.write(b"\n")
                    fh.flush()
                    os.fsync(fh.fileno())
        else:
            done.truncated_bytes = len(tail)
            if truncate:
                with open(path, "r+b") as fh:
                    fh.truncate(len(data) - len(tail))
                    fh.flush()
                    os.fsync(fh.fileno())
    kept: list[bytes] = []
    removed: list[bytes] = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        if _count_record(raw, done):
            kept.append(raw)
        else:
            done.unreadable.append(number)
            removed.append(raw)
    if truncate and removed:
        done.removed_to = path.with_name(path.name + ".removed")
        with open(done.removed_to, "ab") as fh:
            fh.write(b"".join(raw + b"\n" for raw in removed))
            fh.flush()
            os.fsync(fh.fileno())
        write_atomically(path, b"".join(raw + b"\n" for raw in kept))
    return done


def _count_record(raw: bytes, done: DoneRecords) -> bool:
    """Count one line of answers.jsonl into ``done``; False when it is not a readable record."""
    try:
        rec = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    if not isinstance(rec, dict) or "id" not in rec:
        return False
    if "error" in rec:
        line = rec.get("line")
        if not isinstance(line, int):
            return False
        done.error_lines.setdefault(line, set()).add(rec["id"])
        done.errors += 1
    else:
        done.answered.add(str(rec["id"]))
        if isinstance(rec.get("problem_hash"), str):
            done.hashes[str(rec["id"])] = rec["problem_hash"]
        done.answers += 1
        if "correct" in rec:
            done.graded += 1
            done.correct += bool(rec["correct"])
            for key, value in rec.items():
                if key.startswith("correct_") and value:
                    rule = key[len("correct_"):]
                    done.correct_by[rule] = done.correct_by.get(rule, 0) + 1
            at_n = rec.get("at_n")
            for n, entry in (at_n.items() if isinstance(at_n, dict) else ()):
                done.at_n[f"graded@{n}"] = done.at_n.get(f"graded@{n}", 0) + 1
                for key, value in (entry.items() if isinstance(entry, dict) else ()):
                    if key.startswith("correct") and value is True:
                        done.at_n[f"{key}@{n}"] = done.at_n.get(f"{key}@{n}", 0) + 1
    return True


@dataclass
class SkipCounts:
    """How many input items :func:`skip_done` passed over, by the kind of record they had."""

    answers: int = 0
    errors: int = 0
    # (id, line) of skipped problems whose statement differs from the one their record was made for
    changed: list[tuple[str, int]] = field(default_factory=list)
    # (id, line) of input lines with an error record that now read as a valid problem (fixed since)
    fixed: list[tuple[str, int]] = field(default_factory=list)


def skip_done(items: Iterable[Problem | ProblemError], done: DoneRecords,
              counts: SkipCounts | None = None) -> Iterator[Problem | ProblemError]:
    """Yield the items of ``items`` that have no record in ``done``, lazily, in order.

    Args:
        items: the input stream.
        done: records of the earlier run.
        counts: updated with the items skipped (optional), and with the answered problems whose
            statement changed since their record was written (they are skipped all the same: the
            record is kept, never duplicated).
    """
    counts = counts if counts is not None else SkipCounts()
    for item in items:
        kind = done.covers(item)
        if kind == "answer":
            counts.answers += 1
            recorded = done.hashes.get(item.id)
            if recorded is not None and recorded != problem_hash(item.problem):
                counts.changed.append((item.id, item.line))
        elif kind == "error":
            counts.errors += 1
            if isinstance(item, Problem):
                counts.fixed.append((item.id, item.line))
        else:
            yield item


def read_run_config(out_dir: str | Path) -> dict | None:
    """``OUT/run.json``, or None when there is none.

    Raises:
        ResumeError: the file exists but is not a JSON object.
    """
    path = Path(out_dir) / RUN_FILENAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ResumeError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    try:
        config = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ResumeError(f"{path}: invalid JSON ({exc.msg})") from exc
    if not isinstance(config, dict):
        raise ResumeError(f"{path}: expected a JSON object")
    return config


def write_run_config(out_dir: str | Path, config: dict) -> Path:
    """Write ``OUT/run.json`` atomically (temporary file, fsync, rename).

    Raises:
        TypeError: ``config`` is not JSON-serialisable (nothing is written then).
        OutputWriteError: the file cannot be written (an earlier run.json is kept).
    """
    data = orjson.dumps(config, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    return write_atomically(Path(out_dir) / RUN_FILENAME, data)


def _flatten(value, prefix: str = "") -> dict[str, object]:
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for key, sub in value.items():
            out.update(_flatten(sub, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: value}


def config_differences(old: dict, new: dict, ignore: tuple[str, ...] = ()) -> list[str]:
    """The settings that differ between two run configs, as ``"search.beam_size: 4 -> 8"``.

    Everything but the :data:`INFO_KEY` part and the dotted fields in ``ignore`` is compared, field
    by field; a field present on one side only counts as a difference (shown as ``missing``).

    Returns:
        One string per differing field, sorted by field name; empty when the configs match.
    """
    a = _flatten({k: v for k, v in old.items() if k != INFO_KEY})
    b = _flatten({k: v for k, v in new.items() if k != INFO_KEY})
    diffs = []
    for key in sorted(set(a) | set(b)):
        if key in ignore:
            continue
        if a.get(key, KeyError) != b.get(key, KeyError):
            show = lambda d: orjson.dumps(d[key]).decode() if key in d else "missing"  # noqa: E731
            diffs.append(f"{key}: {show(a)} -> {show(b)}")
    return diffs

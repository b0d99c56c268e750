"""The output folder of one run: checked, locked and cleaned before any model loads.

A run writes ``OUT/answers.jsonl``, ``OUT/traces/``, ``OUT/run.json`` and ``OUT/summary.json``
(see :mod:`core.io.writers`). Everything that could make those writes fail, or make two runs
write into one folder, is found here, in well under a second, before minutes of model loading
and search are spent:

- the folder's shape: each of those names must be a file or folder of the right kind;
- one run per folder: an exclusive lock (:class:`RunLock`) held for the whole run;
- leftovers of a killed run: temporary files that were never renamed into place are removed;
- room to write: a small real probe file is written, fsync'ed and removed (a zero-byte probe
  passes on a full disk);
- on ``--resume``: ``run.json`` must be readable (``--force`` moves an unreadable one aside and
  goes on) and ``answers.jsonl`` is repaired (:func:`core.io.resume.scan_answers`).
"""

from __future__ import annotations

import errno
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from .durable import TMP_PREFIX, TMP_SUFFIX, fsync_dir, write_all
from .problems import count_records
from .resume import (INFO_KEY, RUN_FILENAME, DoneRecords, ResumeError, config_differences, read_run_config,
                     scan_answers)
from .writers import ANSWERS_FILENAME, SUMMARY_FILENAME, TRACES_DIRNAME

LOCK_FILENAME = ".specscale.lock"
# big enough that a full file system refuses it, small enough to cost nothing
PROBE_BYTES = 64 << 10
# names of temporary files that earlier versions (and this one) leave when killed mid-write
_LEFTOVER_PATTERNS = (f"{TMP_PREFIX}*{TMP_SUFFIX}", ".*.tmp", ".write-test")
# the top-level keys every run.json written by `solve` has
RUN_CONFIG_KEYS = ("version", "policy", "models", "search", "input")
# run.json's record of the context limit the generator engine used
USED_CONTEXT = "models.max_model_len"
# settings that change when work runs, never what is searched: a resumed run may change them
SCHEDULING_ONLY = ("search.speculation_budget",)


class OutputFolderError(Exception):
    """The output folder cannot be used as asked; the message is one line naming the path."""


class RunLock:
    """An exclusive lock on an output folder, held from before the checks to the end of the run.

    The lock is an advisory ``flock`` on ``OUT/.specscale.lock``, whose content names the holder
    (pid, start time, command). The kernel drops the lock when its process exits, however it
    exits (kill -9 included), so a lock file left by a dead run is stale and simply taken over.
    A run that ends removes the file while it still holds the lock; a process that opened the
    file before that and locks it after finds it no longer at the path and starts over, so two
    runs never hold locks on two files of the same name.

    Raises:
        OutputFolderError: another live process holds the lock (the message names its pid), or
            the lock file cannot be created.
    """

    def __init__(self, out: Path, command: str = ""):
        self.path = out / LOCK_FILENAME
        self._fd = -1
        try:
            import fcntl
        except ImportError:  # not POSIX (Windows): run unlocked rather than not at all
            return
        for _ in range(_LOCK_ATTEMPTS):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise OutputFolderError(f"cannot create the lock file {self.path}: {exc.strerror or exc}") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = _read_holder(fd)
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise OutputFolderError(f"{out} is in use by another specscale run ({holder}); wait for it to "
                                            f"end or choose another -o") from exc
                raise OutputFolderError(f"cannot lock {self.path}: {exc.strerror or exc}") from exc
            if _same_file(fd, self.path):
                break
            os.close(fd)  # the run that held it ended and removed it meanwhile: lock the file now there
        else:
            raise OutputFolderError(f"cannot lock {self.path}: it was replaced {_LOCK_ATTEMPTS} times while locking")
        self._fd = fd
        info = f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}"
        try:
            os.ftruncate(fd, 0)
            write_all(fd, (info + (f", command: {command}" if command else "") + "\n").encode())
        except OSError:
            pass  # the lock holds without its note; only the message of a second run is poorer

    @property
    def held(self) -> bool:
        """True while this process holds the lock."""
        return self._fd >= 0

    def release(self) -> None:
        """Remove the lock file and drop the lock (safe to call twice). The file goes first, while
        the lock is held, so a waiting process never locks a file that is about to vanish."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            try:
                if _same_file(fd, self.path):
                    self.path.unlink()
            except OSError:
                pass  # a folder that cannot be written keeps the file; the next run takes it over
            os.close(fd)  # closing the descriptor drops the flock


_LOCK_ATTEMPTS = 5


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        here, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text.splitlines()[0] if text else "holder unknown"


def check_shape(out: Path, resume: bool, force: bool, traces: bool) -> None:
    """Refuse an output folder whose entries have the wrong kind, before any work.

    Raises:
        OutputFolderError: ``OUT`` is not a folder; ``answers.jsonl`` or ``summary.json`` is not a
            regular file; ``traces`` is not a folder (when traces are written); ``run.json`` is a
            folder (unless ``--resume --force``, which moves it aside).
    """
    if out.exists() and not out.is_dir():
        raise OutputFolderError(f"output folder {out} is a file; choose another -o")
    for name in (ANSWERS_FILENAME, SUMMARY_FILENAME):
        path = out / name
        if path.exists() and not path.is_file():
            raise OutputFolderError(f"{path} is not a regular file (a {_kind(path)}); move it away or choose "
                                    f"another -o")
    traces_dir = out / TRACES_DIRNAME
    if traces and traces_dir.exists() and not traces_dir.is_dir():
        raise OutputFolderError(f"{traces_dir} is a {_kind(traces_dir)}, not a folder; move it away, choose another "
                                f"-o, or pass --no-traces")
    run_json = out / RUN_FILENAME
    if run_json.exists() and not run_json.is_file() and not (resume and force):
        raise OutputFolderError(f"{run_json} is a {_kind(run_json)}, not a file; move it away"
                                + (", or pass --force to resume anyway (it is moved aside and run.json rewritten "
                                   "from this run's settings)" if resume else ""))


def _kind(path: Path) -> str:
    if path.is_dir():
        return "folder"
    if path.is_file():
        return "file"
    return "special file"


def remove_leftovers(out: Path) -> list[Path]:
    """Delete temporary files that a killed run left in ``OUT`` and ``OUT/traces``.

    Only safe while holding the folder's :class:`RunLock` (no other run is writing there).

    Returns:
        The files removed.
    """
    removed = []
    for folder in (out, out / TRACES_DIRNAME):
        if not folder.is_dir():
            continue
        for pattern in _LEFTOVER_PATTERNS:
            for path in folder.glob(pattern):
                if path.is_file() and path.name != LOCK_FILENAME:
                    try:
                        path.unlink()
                        removed.append(path)
                    except OSError:
                        pass
    return removed


def probe_writable(out: Path, size: int = PROBE_BYTES) -> None:
    """Write ``size`` bytes to a probe file in ``out``, fsync and remove it.

    Raises:
        OutputFolderError: the folder cannot be written (read-only, no space left, I/O error).
    """
    probe = out / f"{TMP_PREFIX}write-probe{TMP_SUFFIX}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            write_all(fd, b"\0" * size)
            os.fsync(fd)
        finally:
            os.close(fd)
            probe.unlink(missing_ok=True)
    except OSError as exc:
        raise OutputFolderError(f"output folder {out} is not writable: {exc.strerror or exc}") from exc


def move_aside(path: Path) -> Path:
    """Rename ``path`` to ``<name>.unreadable-<n>`` next to it (the first free n) and return the new path.

    Raises:
        OSError: the rename failed.
    """
    n = 1
    while (target := path.with_name(f"{path.name}.unreadable-{n}")).exists():
        n += 1
    path.rename(target)
    fsync_dir(path.parent)
    return target


@dataclass
class PreparedOutput:
    """An output folder made ready for one run (see :func:`prepare_output`).

    Attributes:
        out: the folder.
        created: True when this run created it (:meth:`discard` then removes it again).
        lock: the folder's lock, held until :meth:`close`.
        done: records of an earlier run that a resumed run skips (empty otherwise).
        previous: the earlier run's run.json on ``--resume`` (None otherwise, or unreadable).
        force: ``--force`` was given (differing settings are accepted).
        forced_over: with ``--force``, when the earlier run.json records other settings: those
            settings (all of it but its info part), for this run's run.json to keep; None otherwise.
        notes: one-line notices for the user (leftovers removed, a repaired answers file, a
            run.json moved aside), in the order they happened.
    """

    out: Path
    created: bool
    lock: RunLock
    done: DoneRecords = field(default_factory=DoneRecords)
    notes: list[str] = field(default_factory=list)
    previous: dict | None = None
    force: bool = False
    forced_over: dict | None = None

    def close(self) -> None:
        """Release the lock; the folder and its content stay."""
        self.lock.release()

    def discard(self) -> None:
        """Undo a run that never started: release the lock and remove the folder if this run
        created it and nothing but the lock file is in it."""
        self.lock.release()
        if not self.created:
            return
        try:
            if {p.name for p in self.out.iterdir()} <= {LOCK_FILENAME}:
                shutil.rmtree(self.out)
        except OSError:
            pass


@dataclass(frozen=True)
class FolderMode:
    """What a run does with what an earlier run left in its output folder: the `solve` flags of the
    same names.

    overwrite: delete the earlier answers, traces, run.json and summary first.
    resume: keep the earlier records and solve only the problems without one.
    force: with ``resume``, go on even when run.json is unreadable or records other settings.
    """

    overwrite: bool = False
    resume: bool = False
    force: bool = False


def prepare_output(out: Path, config: dict, mode: FolderMode, *, traces: bool = True,
                   command: str = "") -> PreparedOutput:
    """Check, lock and clean ``out`` for a run, and read what a resumed run must skip.

    Order: create the folder, take its lock, check its shape, remove leftovers, probe it with a
    real write; then ``overwrite`` deletes the earlier answers, traces, run.json and summary;
    without ``resume`` a folder holding answers is refused; with ``resume`` run.json must be a
    readable run config whose settings equal ``config`` (``force`` goes on anyway: an unreadable
    run.json is moved aside, the earlier settings that differ are kept in
    :attr:`PreparedOutput.forced_over`, and the run rewrites run.json) and ``answers.jsonl`` is
    scanned and repaired. On any error the lock is released and a folder this call created is
    removed again. ``config`` is not changed.

    Args:
        out: the output folder.
        config: this run's run.json content (see :func:`core.io.resume.config_differences`).
        mode: --overwrite, --resume and --force (:class:`FolderMode`).
        traces: whether the run writes traces (a file named ``traces`` is then in the way).
        command: the run's command line, noted in the lock file for a second run's message.

    Returns:
        The :class:`PreparedOutput`, holding the lock.

    Raises:
        OutputFolderError: any reason the folder cannot serve this run, in one line.
    """
    overwrite, resume, force = mode.overwrite, mode.resume, mode.force
    if resume and overwrite:
        raise OutputFolderError("--resume keeps the answers in OUT and --overwrite deletes them: pass one of them")
    if force and not resume:
        raise OutputFolderError("--force works with --resume (it resumes a run made with other settings)")
    if out.exists() and not out.is_dir():
        raise OutputFolderError(f"output folder {out} is a file; choose another -o")
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputFolderError(f"output folder {out} cannot be created: {exc.strerror or exc}") from exc
    try:
        lock = RunLock(out, command)
    except OutputFolderError:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise
    prepared = PreparedOutput(out, created, lock, force=force)
    try:
        _prepare_locked(prepared, config, overwrite, resume, force, traces)
    except BaseException:
        prepared.discard()
        raise
    return prepared


def refuse_earlier_answers(out: Path, overwrite: bool, resume: bool) -> None:
    """Refuse a folder whose answers file holds answers when neither --resume nor --overwrite says
    what to do with them. Cheap (no input, no lock), so ``solve`` calls it before reading the input.

    Raises:
        OutputFolderError: OUT/answers.jsonl is a non-empty file and neither flag is given.
    """
    answers = out / ANSWERS_FILENAME
    if not (overwrite or resume) and answers.is_file() and answers.stat().st_size > 0:
        raise OutputFolderError(f"{answers} already holds answers of an earlier run; pass --resume to solve only "
                                f"the problems it lacks, --overwrite to replace it, or choose another -o")


def refuse_other_settings(out: Path, config: dict, resume: bool, force: bool) -> None:
    """The early, input-free part of the ``--resume`` settings check, so that a mismatch is refused
    before the input is read (a table input loads ``datasets``, about a second).

    Compares every part of ``config`` but ``input`` (its resolved fields are known only once the
    input is opened; :func:`prepare_output` compares the whole config later). Anything it cannot
    judge (no run.json, an unreadable one, ``--force``) is left to that later check.

    Raises:
        OutputFolderError: OUT/run.json is a readable run config whose settings differ from ``config``.
    """
    if not resume or force:
        return
    try:
        previous = read_run_config(out)
    except ResumeError:
        return
    if previous is None or any(key not in previous for key in RUN_CONFIG_KEYS):
        return
    without_input = lambda c: {k: v for k, v in c.items() if k != "input"}  # noqa: E731
    diffs = config_differences(without_input(previous), without_input(config), ignore=(USED_CONTEXT, *SCHEDULING_ONLY))
    if diffs:
        raise _other_settings(out / RUN_FILENAME, diffs)


def _other_settings(run_json: Path, diffs: list[str]) -> OutputFolderError:
    return OutputFolderError(f"{run_json} records other settings than this run ({'; '.join(diffs)}); rerun with "
                             f"the same settings, or pass --force to resume anyway")


def _remove_traces(traces: Path) -> tuple[int, int]:
    """Delete the trace files (``*.json``) an earlier run wrote in ``traces``, and the folder when
    nothing else is in it: ``(traces removed, other entries kept)``. A file a user put there stays."""
    if not traces.is_dir():
        return 0, 0
    removed = kept = 0
    for entry in traces.iterdir():
        if entry.is_file() and entry.suffix == ".json":
            entry.unlink()
            removed += 1
        else:
            kept += 1
    if not kept:
        traces.rmdir()
    return removed, kept


def _prepare_locked(prepared: PreparedOutput, config: dict, overwrite: bool, resume: bool, force: bool,
                    traces: bool) -> None:
    out = prepared.out
    check_shape(out, resume, force, traces)
    leftovers = remove_leftovers(out)
    if leftovers:
        prepared.notes.append(f"removed {len(leftovers)} temporary file(s) left by an interrupted run in {out}")
    probe_writable(out)
    answers = out / ANSWERS_FILENAME
    has_answers = answers.is_file() and answers.stat().st_size > 0
    if overwrite:
        try:
            records = count_records(answers) if has_answers else 0
            for stale in (answers, out / RUN_FILENAME, out / SUMMARY_FILENAME):
                if stale.is_file():
                    stale.unlink()
            removed_traces, kept = _remove_traces(out / TRACES_DIRNAME)
        except OSError as exc:
            raise OutputFolderError(f"--overwrite cannot delete the earlier run in {out}: {exc.strerror or exc}") \
                from exc
        if records or removed_traces:
            note = (f"--overwrite: removed the earlier run in {out} ({records} record{'s' * (records != 1)} in "
                    f"{ANSWERS_FILENAME}, {removed_traces} trace{'s' * (removed_traces != 1)})")
            if kept:
                note += f"; kept {kept} other file{'s' * (kept != 1)} in {out / TRACES_DIRNAME}"
            prepared.notes.append(note)
        return
    if not resume:
        refuse_earlier_answers(out, overwrite, resume)
        return
    run_json = out / RUN_FILENAME
    had_run_json = run_json.exists()
    previous = None
    try:
        previous = read_run_config(out) if run_json.is_file() or not run_json.exists() else None
        if previous is not None:
            missing = [key for key in RUN_CONFIG_KEYS if key not in previous]
            if missing:
                raise ResumeError(f"{run_json}: not a run config of specscale solve (no {', '.join(missing)})")
        elif run_json.exists():
            raise ResumeError(f"{run_json}: is a {_kind(run_json)}, not a file")
    except ResumeError as exc:
        if not force:
            raise OutputFolderError(f"{exc}; pass --force to resume anyway (run.json is then rewritten "
                                    f"from this run's settings)") from exc
        try:
            moved = move_aside(run_json)
        except OSError as move_exc:
            raise OutputFolderError(f"{exc}; and it cannot be moved aside: {move_exc.strerror or move_exc}") \
                from move_exc
        prepared.notes.append(f"{exc}; moved it to {moved.name} and going on with this run's settings (--force)")
    if previous is None and has_answers and not force:
        raise OutputFolderError(f"{run_json} is missing, so the settings behind {answers} cannot be checked; pass "
                                f"--force to resume anyway")
    if not had_run_json and not has_answers:
        # not an error: a script may pass --resume on every call, the first one included
        prepared.notes.append(f"--resume: {out} holds no earlier run (no {ANSWERS_FILENAME}, no {RUN_FILENAME}); "
                              f"starting a new one")
    prepared.previous = previous
    # the context limit an engine uses is the flag capped by the model's own, known only once the
    # model loads: run.json records the used value, so it is compared after loading
    # (core.io.output_folder.check_used_context), not here
    diffs = (config_differences(previous, config, ignore=(USED_CONTEXT, *SCHEDULING_ONLY))
             if previous is not None else [])
    if diffs and not force:
        raise _other_settings(run_json, diffs)
    if diffs:
        # run.json gets this run's settings; keep those the earlier answers were made with
        prepared.forced_over = {k: v for k, v in previous.items() if k != INFO_KEY}
    try:
        prepared.done = scan_answers(answers)
    except OSError as exc:
        raise OutputFolderError(f"{answers}: cannot be read or repaired: {exc.strerror or exc}") from exc


def check_used_context(prepared: PreparedOutput, used: int) -> None:
    """On ``--resume``, refuse a run whose engine uses another context limit than the earlier one.

    ``--max-model-len`` is capped by the model's own limit, so only the value the engine really
    uses (known once the model is loaded) says whether two runs generate alike; run.json records it.

    Raises:
        OutputFolderError: the earlier run recorded another limit (unless ``--force``).
    """
    previous = prepared.previous
    if prepared.force or not previous:
        return
    recorded = previous.get("models", {}).get("max_model_len")
    if recorded is not None and recorded != used:
        raise OutputFolderError(f"{prepared.out / RUN_FILENAME} records a context of {recorded} tokens but this run's "
                                f"engine uses {used} (--max-model-len, capped by the model's limit); rerun with "
                                f"--max-model-len {recorded}, or pass --force to resume anyway")

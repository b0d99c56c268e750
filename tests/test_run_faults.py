"""Faults of a `solve` run as an operator meets them: a full disk at every write path, broken output
folders, two runs into one folder, unreadable run.json with --force, leftovers of a killed run,
SIGTERM, and giant input lines. Each ends in its documented exit code and one line, and the next
`--resume` finishes the run with nothing lost or written twice."""

from __future__ import annotations

import errno
import os
import shlex
import signal
import subprocess
import sys

import orjson
import pytest

from solve_helpers import GSM8K, ROOT, records, run_solve, tiny_flags, wait_for_answers, without_timing

from core.io.output_folder import LOCK_FILENAME

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")

ARGS = ["--limit", "3", "--max-concurrent", "1"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def reference(tiny_dir, tmp_path_factory):
    """Records of an uninterrupted run over the first 3 GSM8K problems, without timing fields."""
    out = tmp_path_factory.mktemp("reference") / "out"
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out)], tiny_dir)
    assert res.exit_code == 0, res.output
    return without_timing(records(out))


def _error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(("error:", "Error:"))]


def _assert_resume_completes(tiny_dir, out, reference):
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out), "--resume"], tiny_dir)
    assert res.exit_code == 0, res.output
    recs = records(out)
    assert len({r["id"] for r in recs}) == len(recs)  # never written twice
    assert without_timing(recs) == reference


# ------------------------------------------------------------------ 1. a full disk at each write path


class FailingWrites:
    """Stands in for ``os.write``: the first ``files_ok`` files whose path holds ``match`` are written
    normally, then the next such file gets ``partial`` bytes and the error ``err`` (a disk that fills
    up mid-write)."""

    def __init__(self, match: str, files_ok: int = 0, partial: int = 0, err: int = errno.ENOSPC):
        self.match, self.files_ok, self.partial, self.err = match, files_ok, partial, err
        self.real = os.write
        self.paths: list[str] = []
        self.failed = False

    def __call__(self, fd, data):
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = ""
        if self.match in path and not self.failed:
            if path not in self.paths:
                self.paths.append(path)
            if len(self.paths) > self.files_ok:
                self.failed = True
                if self.partial:
                    self.real(fd, bytes(data)[: self.partial])
                raise OSError(self.err, os.strerror(self.err))
        return self.real(fd, data)


# (write path, FailingWrites arguments, answers written before the failure)
DISK_FULL_CASES = {
    "run.json": (dict(match="run.json"), 0),
    "trace": (dict(match="/traces/", files_ok=1, partial=100), 1),
    "answers": (dict(match="answers.jsonl", files_ok=0, partial=0), 0),
    "summary": (dict(match="summary.json", partial=10), 3),
    "answers-eio": (dict(match="answers.jsonl", err=errno.EIO), 0),
}


@pytest.mark.parametrize("case", list(DISK_FULL_CASES))
@pytest.mark.slow
def test_disk_full_at_each_write_path_exits_3_and_resume_finishes(tiny_dir, reference, tmp_path, monkeypatch, case):
    kwargs, answered = DISK_FULL_CASES[case]
    failing = FailingWrites(**kwargs)
    out = tmp_path / "out"
    monkeypatch.setattr(os, "write", failing)
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out)], tiny_dir)
    monkeypatch.undo()
    assert failing.failed
    assert res.exit_code == 3, res.output
    assert "Traceback" not in res.output
    (line,) = _error_lines(res.output)
    reason = "Input/output error" if kwargs.get("err") == errno.EIO else "No space left on device"
    assert line.startswith(f"error: cannot write {out}") and reason in line
    recs = records(out) if (out / "answers.jsonl").exists() else []
    assert len(recs) == answered  # every line on disk is a whole record
    assert not [p for p in out.rglob("*") if p.name.endswith(".part")]  # no temporary file left
    _assert_resume_completes(tiny_dir, out, reference)


def test_failed_answer_write_is_cut_back_to_the_last_whole_record(tiny_dir, tmp_path, monkeypatch):
    """The second answer line fails after 15 of its bytes: the file keeps exactly the first line."""
    out = tmp_path / "out"
    real_write, seen = os.write, []

    def write(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("answers.jsonl"):
            seen.append(bytes(data))
            if len(seen) == 2:
                real_write(fd, bytes(data)[:15])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out)], tiny_dir)
    monkeypatch.undo()
    assert res.exit_code == 3 and "1 answer and 0 error records of this run" in res.output
    assert (out / "answers.jsonl").read_bytes() == seen[0]


def test_final_close_failure_exits_3(tiny_dir, reference, tmp_path, monkeypatch):
    """Some file systems report a deferred write error only when the file is closed."""
    out = tmp_path / "out"
    real_close = os.close

    def close(fd):
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = ""
        real_close(fd)
        if path.endswith("answers.jsonl"):
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "close", close)
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out)], tiny_dir)
    monkeypatch.undo()
    assert res.exit_code == 3 and "Traceback" not in res.output
    assert _error_lines(res.output)[0].startswith(f"error: cannot write {out / 'answers.jsonl'}: Input/output error")
    assert len(records(out)) == 3
    _assert_resume_completes(tiny_dir, out, reference)


def test_probe_refuses_a_full_disk_before_loading(tiny_dir, tmp_path, monkeypatch):
    """A zero-byte probe passes on a full disk; the real one fails, before any model loads."""
    monkeypatch.setattr(os, "write", FailingWrites(match="write-probe"))
    out = tmp_path / "out"
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out)], tiny_dir)
    assert res.exit_code == 2 and "loading" not in res.output
    assert _error_lines(res.output) == [f"Error: output folder {out} is not writable: No space left on device"]
    assert not out.exists()  # the folder this run made is gone again


# ------------------------------------------------------------------ 2. a broken output folder


def _answers_dir(out):
    (out / "answers.jsonl").mkdir(parents=True)


def _traces_file(out):
    out.mkdir()
    (out / "traces").write_text("x")


def _run_json_dir(out):
    (out / "run.json").mkdir(parents=True)


def _summary_dir(out):
    (out / "summary.json").mkdir(parents=True)


def _out_is_file(out):
    out.write_text("x")


BROKEN_SHAPES = {
    "answers.jsonl is a folder": (_answers_dir, "{out}/answers.jsonl is not a regular file (a folder); move it away "
                                                "or choose another -o"),
    "traces is a file": (_traces_file, "{out}/traces is a file, not a folder; move it away, choose another -o, or "
                                       "pass --no-traces"),
    "run.json is a folder": (_run_json_dir, "{out}/run.json is a folder, not a file; move it away"),
    "summary.json is a folder": (_summary_dir, "{out}/summary.json is not a regular file (a folder); move it away or "
                                               "choose another -o"),
    "OUT is a file": (_out_is_file, "Invalid value for '-o' / '--output': Directory '{out}' is a file."),
}


@pytest.mark.parametrize("shape", list(BROKEN_SHAPES))
def test_broken_output_folder_is_refused_before_loading(tiny_dir, tmp_path, shape):
    make, message = BROKEN_SHAPES[shape]
    out = tmp_path / "out"
    make(out)
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out)], tiny_dir)
    assert res.exit_code == 2 and "Traceback" not in res.output and "loading" not in res.output
    assert _error_lines(res.output) == ["Error: " + message.format(out=out)]


# ------------------------------------------------------------------ 3. SIGTERM


@pytest.mark.slow
def test_sigterm_stops_like_ctrl_c_and_resume_finishes(tiny_dir, reference, tmp_path):
    out = tmp_path / "out"
    err_path = tmp_path / "stderr.txt"
    cmd = [sys.executable, "-m", "specscale_cli", "solve", str(GSM8K), *ARGS, "-o", str(out), "--no-dashboard",
           *tiny_flags(tiny_dir)]
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=err)
        try:
            wait_for_answers(proc, out, err_path)
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    stderr = err_path.read_text()
    assert rc == 143, stderr
    assert "Traceback" not in stderr and "stopped by SIGTERM:" in stderr
    first = records(out)
    assert 1 <= len(first) < 3
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert summary["problems_answered"] == len(first) and summary["problems_total"] == 3
    hint = stderr.split("To go on: ", 1)[1].splitlines()[0]
    argv = shlex.split(hint)
    assert argv[:4] == [sys.executable, "-m", "specscale_cli", "solve"] and argv[-1] == "--resume"
    res = run_solve(argv[4:])
    assert res.exit_code == 0, res.output
    assert without_timing(records(out)) == reference
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert (summary["problems_total"], summary["problems_answered"]) == (3, 3)  # the whole run, not this part
    recs = records(out)
    assert summary["graded"] == 3 and summary["correct"] == sum(r["correct"] for r in recs)
    for rule in ("best", "weighted", "majority"):
        assert summary[f"accuracy_{rule}"] == round(sum(r[f"correct_{rule}"] for r in recs) / 3, 4)


# ------------------------------------------------------------------ 4. giant input lines


_RSS_WRAPPER = ("import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:]).returncode; "
                "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(rc)")


def _solve_peak_rss_kib(args: list[str], tiny_dir) -> tuple[int, int, str]:
    """(exit code, peak resident KiB of the solve process, stderr) of a real `solve` subprocess."""
    cmd = [sys.executable, "-c", _RSS_WRAPPER, sys.executable, "-m", "specscale_cli", "solve", *args,
           "--no-dashboard", *tiny_flags(tiny_dir)]
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, timeout=900)
    return proc.returncode, int(proc.stdout.decode().split()[-1]), proc.stderr.decode()


@pytest.mark.slow
def test_giant_lines_become_error_records_within_a_memory_bound(tiny_dir, tmp_path):
    good = GSM8K.read_bytes().splitlines()[:2]
    small = tmp_path / "small.jsonl"
    small.write_bytes(b"\n".join(good) + b"\n")
    rc, base_kib, err = _solve_peak_rss_kib([str(small), "-o", str(tmp_path / "small-out")], tiny_dir)
    assert rc == 0, err
    huge = tmp_path / "huge.jsonl"
    with open(huge, "wb") as fh:
        fh.write(good[0] + b"\n")
        fh.write(orjson.dumps({"id": "one-mb", "problem": "7 + " * (1 << 18)}) + b"\n")
        fh.write(orjson.dumps({"id": "fifty-mb", "problem": "x" * (50 << 20)}) + b"\n")
        fh.write(good[1] + b"\n")
    out = tmp_path / "huge-out"
    rc, huge_kib, err = _solve_peak_rss_kib([str(huge), "-o", str(out)], tiny_dir)
    assert rc == 1, err
    recs = {r.get("line"): r for r in records(out) if "error" in r}
    assert set(recs) == {2, 3}
    assert recs[2]["error"]["message"] == "1,048,576 characters cannot fit the model context (1024 tokens); not tokenized"
    assert recs[3]["error"]["message"] == ("line of 50.0 MiB, more than the 16 MiB a problem record may hold; "
                                          "not read")
    assert sorted(r["id"] for r in records(out) if "error" not in r) == sorted(
        orjson.loads(g)["id"] for g in good)
    # a 50 MB line read whole, decoded and tokenized would cost hundreds of MB; reading it in
    # pieces and refusing the 1 MB text by its length keeps the run near a run without them
    assert huge_kib - base_kib < 80 << 10, (base_kib, huge_kib)


# ------------------------------------------------------------------ issue 18: one run per folder


@pytest.mark.slow
def test_second_run_into_a_locked_folder_is_refused_and_a_stale_lock_is_taken_over(tiny_dir, reference, tmp_path):
    out = tmp_path / "out"
    first_problem = GSM8K.read_bytes().splitlines(keepends=True)[0]
    cmd = [sys.executable, "-m", "specscale_cli", "solve", "-", "-o", str(out), "--no-dashboard",
           "--max-concurrent", "1", *tiny_flags(tiny_dir)]
    holder = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        holder.stdin.write(first_problem)
        holder.stdin.flush()  # stdin stays open: the run waits for more input, holding the folder
        wait_for_answers(holder, out)
        second = subprocess.run([sys.executable, "-m", "specscale_cli", "solve", str(GSM8K), *ARGS, "-o", str(out),
                                 "--resume", "--no-dashboard", *tiny_flags(tiny_dir)],
                                cwd=ROOT, env=ENV, capture_output=True, timeout=300)
        assert second.returncode == 2
        message = _error_lines(second.stderr.decode())
        assert len(message) == 1 and message[0].startswith(
            f"Error: {out} is in use by another specscale run (pid {holder.pid}, started ")
        assert len(records(out)) == 1  # the refused run wrote nothing
    finally:
        holder.kill()  # kill -9: the lock file stays behind, its lock does not
        holder.wait()
        holder.stdin.close()
    assert (out / LOCK_FILENAME).is_file()
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out), "--resume"], tiny_dir)
    assert res.exit_code == 0, res.output
    recs = records(out)
    assert len(recs) == len({r["id"] for r in recs}) == 3
    assert not (out / LOCK_FILENAME).exists()  # a run that ends takes its lock file with it


def test_a_lock_file_removed_while_it_is_being_locked_is_locked_again_where_it_now_is(tmp_path, monkeypatch):
    import fcntl

    from core.io.output_folder import RunLock

    real_flock, calls = fcntl.flock, []

    def flock(fd, op):
        real_flock(fd, op)
        calls.append(fd)
        if len(calls) == 1:
            # the run that held it ends between our open and our flock: it removes the file, and
            # the next run creates another one of the same name
            (tmp_path / LOCK_FILENAME).unlink()
            (tmp_path / LOCK_FILENAME).write_text("")

    monkeypatch.setattr(fcntl, "flock", flock)
    lock = RunLock(tmp_path, "cmd")
    assert len(calls) == 2 and lock.held
    assert os.fstat(lock._fd).st_ino == os.stat(tmp_path / LOCK_FILENAME).st_ino
    monkeypatch.undo()
    with pytest.raises(Exception, match="in use by another specscale run"):
        RunLock(tmp_path, "second")  # the file at the path is the locked one
    lock.release()
    assert not (tmp_path / LOCK_FILENAME).exists() and not lock.held


BAD_RUN_JSON = {
    "invalid JSON": (b"{not json", "invalid JSON"),
    "empty": (b"", "invalid JSON"),
    "an array": (b"[1, 2]", "expected a JSON object"),
    "an object of another kind": (b'{"a": 1}', "not a run config of specscale solve (no version, policy, models, "
                                               "search, input)"),
    "a folder": (None, "is a folder, not a file"),
}


@pytest.mark.parametrize("form", list(BAD_RUN_JSON))
def test_force_resumes_over_an_unreadable_run_json(tiny_dir, reference, tmp_path, form):
    content, words = BAD_RUN_JSON[form]
    out = tmp_path / "out"
    assert run_solve([str(GSM8K), "--limit", "1", "-o", str(out)], tiny_dir).exit_code == 0
    first = records(out)
    run_json = out / "run.json"
    run_json.unlink()
    if content is None:
        run_json.mkdir()
        (run_json / "keep.txt").write_text("user data")
    else:
        run_json.write_bytes(content)
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out), "--resume"], tiny_dir)
    assert res.exit_code == 2 and words in res.output and "pass --force to resume anyway" in res.output
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out), "--resume", "--force"], tiny_dir)
    assert res.exit_code == 0, res.output
    assert "moved it to run.json.unreadable-1" in res.output
    config = orjson.loads(run_json.read_bytes())
    assert config["policy"] == "non-spec" and config["search"]["beam_size"] == 4  # this run's settings
    moved = out / "run.json.unreadable-1"
    if content is None:
        assert (moved / "keep.txt").read_text() == "user data"
    else:
        assert moved.read_bytes() == content  # nothing lost
    recs = records(out)
    assert recs[:1] == first and without_timing(recs) == reference


def test_leftover_temporary_files_are_removed_on_resume(tiny_dir, reference, tmp_path):
    out = tmp_path / "out"
    assert run_solve([str(GSM8K), "--limit", "1", "-o", str(out)], tiny_dir).exit_code == 0
    old_style = out / "traces" / ".gsm8k-test-0001.abc123.tmp"  # what a kill mid-trace-write left before
    new_style = out / "traces" / ".tmp-gsm8k-test-0001.json.x1y2.part"
    old_style.write_bytes(b"")
    new_style.write_bytes(b'{"half')
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out), "--resume"], tiny_dir)
    assert res.exit_code == 0, res.output
    assert "removed 2 temporary file(s) left by an interrupted run" in res.output
    assert not old_style.exists() and not new_style.exists()
    assert without_timing(records(out)) == reference


def test_torn_fragment_in_the_middle_is_removed_and_kept_aside(tiny_dir, reference, tmp_path):
    out = tmp_path / "out"
    assert run_solve([str(GSM8K), "--limit", "2", "-o", str(out)], tiny_dir).exit_code == 0
    a, b = (out / "answers.jsonl").read_bytes().splitlines(keepends=True)
    fragment = b'{"id": "gsm8k-test-0002", "pre'
    (out / "answers.jsonl").write_bytes(a + fragment + b"\n" + b)
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out), "--resume"], tiny_dir)
    assert res.exit_code == 0, res.output
    assert f"removed unreadable lines 2 (torn fragments of an interrupted write) from {out / 'answers.jsonl'}" \
           in res.output
    assert (out / "answers.jsonl.removed").read_bytes() == fragment + b"\n"
    assert (out / "answers.jsonl").read_bytes().startswith(a + b)
    assert without_timing(records(out)) == reference


def test_failed_model_load_leaves_no_folder(tmp_path):
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "llama", "vocab_size": 10}')  # no weights, no tokenizer
    out = tmp_path / "new" / "out"
    res = run_solve([str(GSM8K), "--limit", "1", "-o", str(out), "--generator", str(broken), "--prm", str(broken)])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "cannot load model" in _error_lines(res.output)[0]
    assert not out.exists()


def test_prm_preemptions_are_counted(tiny_loaded):
    """Preemptions in the PRM's engine are reported apart from the generator's (summary.json,
    dashboard): here only the PRM engine's small pool overflows."""
    from core.engine.sequence import SamplingParams, StopCriteria
    from core.metrics import snapshot
    from core.search.driver import RunStats
    from core.settings import ModelSettings
    from core.solver import build_runtime

    settings = ModelSettings(gen_kv_bytes=8 << 20, prm_kv_bytes=20 * 4 * 256, block_size=4, max_model_len=64,
                             max_num_batched_tokens=32)
    rt = build_runtime(settings, generator=tiny_loaded, prm=tiny_loaded)
    prm_engine = rt.verifier.engine
    prompts = [list(range(100 + i, 105 + 3 * i)) for i in range(8)]
    seqs = prm_engine.generate(prompts, SamplingParams(temperature=0), StopCriteria(step_delimiter=None, max_tokens=30))
    for s in seqs:
        prm_engine.free(s)
    snap = snapshot(RunStats(), rt.engine, rt.verifier, {"done": 0, "errors": 0, "graded": 0, "correct": 0}, 0)
    assert snap["prm_preemptions"] == prm_engine.num_preemptions > 0
    assert snap["preemptions"] == rt.engine.num_preemptions == 0

"""`solve --resume` and Ctrl-C: records kept, never duplicated, torn lines cut, settings checked."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys

import orjson
import pytest

from solve_helpers import GSM8K, ROOT, records, run_solve, tiny_flags, wait_for_answers, without_timing

from core.io.problems import Problem, ProblemError
from core.io.resume import (RUN_FILENAME, DoneRecords, config_differences, read_run_config, scan_answers, skip_done,
                            write_run_config)

# ------------------------------------------------------------------ scan_answers / covers (no model)


def _write(path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(lines))


def test_scan_answers_counts_records_and_truncates_torn_line(tmp_path):
    f = tmp_path / "answers.jsonl"
    whole = [b'{"id":"a","pred":"1"}\n', b'{"id":null,"line":3,"error":{"field":null}}\n',
             b'{"id":"d","line":4,"error":{"field":"id"}}\n']
    _write(f, whole + [b'{"id":"b","pred":"tor'])
    done = scan_answers(f)
    assert (done.answers, done.errors, len(done)) == (1, 2, 3)
    assert done.answered == {"a"} and done.error_lines == {3: {None}, 4: {"d"}}
    assert done.truncated_bytes == len(b'{"id":"b","pred":"tor')
    assert f.read_bytes() == b"".join(whole)  # the fragment is gone, the whole records are untouched


def test_scan_answers_keeps_whole_last_record_missing_its_newline(tmp_path):
    f = tmp_path / "answers.jsonl"
    _write(f, [b'{"id":"a"}\n', b'{"id":"b"}'])
    done = scan_answers(f)
    assert done.answered == {"a", "b"} and done.truncated_bytes == 0
    assert f.read_bytes() == b'{"id":"a"}\n{"id":"b"}\n'


def test_scan_answers_without_truncate_leaves_file(tmp_path):
    f = tmp_path / "answers.jsonl"
    _write(f, [b'{"id":"a"}\n', b'{"id'])
    done = scan_answers(f, truncate=False)
    assert done.truncated_bytes == 4 and f.read_bytes() == b'{"id":"a"}\n{"id'


def test_scan_answers_reports_unreadable_middle_lines(tmp_path):
    f = tmp_path / "answers.jsonl"
    _write(f, [b'{"id":"a"}\n', b"garbage\n", b"[1]\n", b'{"no_id":1}\n', b'{"id":"x","error":{}}\n', b'{"id":"b"}\n'])
    done = scan_answers(f)
    assert done.unreadable == [2, 3, 4, 5] and done.answered == {"a", "b"}


def test_scan_missing_file(tmp_path):
    assert len(scan_answers(tmp_path / "answers.jsonl")) == 0


def test_covers_matches_answers_by_id_and_errors_by_line():
    done = DoneRecords(answered={"a"}, error_lines={3: {None}, 5: {"dup"}})
    assert done.covers(Problem("a", "p", None, 9)) == "answer"  # by id, wherever it sits now
    assert done.covers(Problem("b", "p", None, 3)) == "error"  # line 3 failed before its id was known
    assert done.covers(ProblemError(None, 3, None, "bad", "f")) == "error"
    assert done.covers(ProblemError("dup", 5, "id", "duplicate", "f")) == "error"
    assert done.covers(Problem("other", "p", None, 5)) is None  # another id on line 5: not the same item
    assert done.covers(Problem("c", "p", None, 4)) is None
    items = [Problem("a", "p", None, 1), Problem("c", "p", None, 4), ProblemError(None, 3, None, "bad", "f")]
    assert list(skip_done(items, done)) == [items[1]]


def test_run_config_round_trip_and_differences(tmp_path):
    cfg = {"version": 1, "policy": "non-spec", "search": {"beam_size": 4, "seed": 0},
           "input": {"id_field": "id"}, "info": {"limit": 3}}
    write_run_config(tmp_path, cfg)
    assert read_run_config(tmp_path) == cfg
    other = {**cfg, "search": {"beam_size": 8, "seed": 0}, "input": {}, "info": {"limit": 10}}
    assert config_differences(cfg, other) == ['input.id_field: "id" -> missing', "search.beam_size: 4 -> 8"]
    assert config_differences(cfg, {**cfg, "info": {}}) == []  # info is never compared
    assert read_run_config(tmp_path / "nowhere") is None


# ------------------------------------------------------------------ solve --resume (tiny model)

ARGS = ["--limit", "3", "--max-concurrent", "2"]


@pytest.fixture(scope="module")
def reference(tiny_dir, tmp_path_factory):
    """An uninterrupted run over the first 3 GSM8K examples: its OUT folder."""
    out = tmp_path_factory.mktemp("reference") / "out"
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out)], tiny_dir)
    assert res.exit_code == 0, res.output
    return out


def _copy_run(src, dst):
    dst.mkdir()
    for name in ("answers.jsonl", RUN_FILENAME):
        (dst / name).write_bytes((src / name).read_bytes())
    return dst


@pytest.mark.slow
def test_interrupt_then_resume_equals_uninterrupted_run(tiny_dir, reference, tmp_path, monkeypatch):
    """Ctrl-C mid-search (KeyboardInterrupt in a generator step after the first answer was written):
    exit 130, the written answer kept, the hint's command resumes and the result equals a run that
    was never stopped."""
    from core.engine.engine import GenerationEngine
    from core.io.writers import AnswerWriter

    real_step, real_write, written = GenerationEngine.step, AnswerWriter.write, []

    def write(self, record):
        real_write(self, record)
        written.append(record["id"])

    def step(self):
        if written:
            signal.raise_signal(signal.SIGINT)  # a real Ctrl-C, delivered mid-step
        return real_step(self)

    monkeypatch.setattr(AnswerWriter, "write", write)
    monkeypatch.setattr(GenerationEngine, "step", step)
    out = tmp_path / "out"
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out)], tiny_dir)
    monkeypatch.undo()
    assert res.exit_code == 130, res.output
    assert "Traceback" not in res.output
    assert [r["id"] for r in records(out)] == written and len(written) == 1
    hint = res.output.split("To go on: ", 1)[1].strip()
    argv = shlex.split(hint)
    assert argv[:3] == ["specscale", "solve", str(GSM8K)] and argv[-3:] == ["-o", str(out), "--resume"]

    from click.testing import CliRunner

    from specscale_cli.main import cli

    res = CliRunner().invoke(cli, argv[1:], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    recs = records(out)
    assert recs[0]["id"] == written[0] and len({r["id"] for r in recs}) == len(recs) == 3
    assert without_timing(recs) == without_timing(records(reference))
    # the whole run's counts, and which part this session did; its token figures are its own
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert (summary["problems_total"], summary["problems_answered"], summary["errors"]) == (3, 3, 0)
    assert summary["session"] == {"answers": 2, "errors": 0, "kept_answers": 1, "kept_errors": 0}
    assert summary["generated_tokens"] == sum(r["num_sampled_tokens"] for r in recs[1:])
    # accuracy over the first n completions counts the kept record too, as the uninterrupted run did
    assert summary["accuracy_at_n"] == orjson.loads((reference / "summary.json").read_bytes())["accuracy_at_n"]
    assert list(summary["accuracy_at_n"]) == list(recs[0]["at_n"])
    table = " ".join(res.output.split())  # the summary table wraps at the test terminal's width
    assert "3 answered, 0 errors (of 3); 2 this session, 1 kept from before" in table
    assert " tok/s) this session" in table


def test_a_stop_while_a_record_is_written_counts_that_record_in_the_summary(tiny_dir, tmp_path, monkeypatch):
    """Ctrl-C that lands while an answer line is written is held to the end of that record; the
    summary then counts the record (it once said 0 answered beside 1 line in answers.jsonl)."""
    from core.io.writers import AnswerWriter

    real_write = AnswerWriter.write

    def write(self, record):
        real_write(self, record)
        signal.raise_signal(signal.SIGINT)  # arrives inside the record's critical block

    monkeypatch.setattr(AnswerWriter, "write", write)
    out = tmp_path / "out"
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out)], tiny_dir)
    monkeypatch.undo()
    assert res.exit_code == 130, res.output
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert len(records(out)) == 1
    assert (summary["problems_answered"], summary["errors"]) == (1, 0)
    assert "1 answer and 0 error records of this run" in res.output


def test_resume_cuts_torn_line_and_solves_that_problem_again(tiny_dir, reference, tmp_path):
    out = _copy_run(reference, tmp_path / "out")
    lines = (out / "answers.jsonl").read_bytes().splitlines(keepends=True)
    torn = lines[-1][: len(lines[-1]) // 2]
    (out / "answers.jsonl").write_bytes(b"".join(lines[:-1]) + torn)
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out), "--resume"], tiny_dir)
    assert res.exit_code == 0, res.output
    assert f"cut a torn last line ({len(torn)} bytes)" in res.output
    recs = records(out)
    assert (out / "answers.jsonl").read_bytes().startswith(b"".join(lines[:-1]))
    assert len(recs) == 3 and without_timing(recs) == without_timing(records(reference))


def test_resume_with_nothing_left_loads_no_model(reference, tiny_dir, tmp_path):
    out = _copy_run(reference, tmp_path / "out")
    before = (out / "answers.jsonl").read_bytes()
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out), "--resume"], tiny_dir)
    assert res.exit_code == 0, res.output
    assert "nothing to do" in res.output and "loading" not in res.output
    assert (out / "answers.jsonl").read_bytes() == before


def test_resume_warns_about_problems_edited_since_their_answers(reference, tiny_dir, tmp_path):
    """An answered problem whose text changed in the input is named (id and line) and its record kept,
    never solved twice; an unchanged input gives no warning."""
    out = _copy_run(reference, tmp_path / "out")
    before = (out / "answers.jsonl").read_bytes()
    lines = GSM8K.read_bytes().splitlines(keepends=True)
    second = orjson.loads(lines[1])
    lines[1] = orjson.dumps({**second, "problem": second["problem"] + " (edited)"}) + b"\n"
    edited = tmp_path / "edited.jsonl"
    edited.write_bytes(b"".join(lines))
    res = run_solve([str(edited), *ARGS, "-o", str(out), "--resume"], tiny_dir)
    assert res.exit_code == 0, res.output
    assert f"1 problem of {edited} changed since their answers were written: {second['id']!r} (line 2)" in res.output
    assert "nothing to do" in res.output and (out / "answers.jsonl").read_bytes() == before
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out), "--resume"], tiny_dir)
    assert res.exit_code == 0 and "changed since" not in res.output


def test_resume_names_lines_fixed_since_their_error_records(tiny_dir, tmp_path):
    """A line that failed and reads as a valid problem now is named, not retried (it keeps one record)."""
    lines = GSM8K.read_bytes().splitlines(keepends=True)[:2]
    broken = tmp_path / "in.jsonl"
    broken.write_bytes(lines[0] + b'{"id": "fixme", "problem": \n')
    out = tmp_path / "out"
    assert run_solve([str(broken), "-o", str(out)], tiny_dir).exit_code == 1
    before = (out / "answers.jsonl").read_bytes()
    broken.write_bytes(lines[0] + b'{"id": "fixme", "problem": "What is 2 + 2?"}\n')
    res = run_solve([str(broken), "-o", str(out), "--resume"], tiny_dir)
    assert res.exit_code == 1, res.output
    assert f"1 line of {broken} with an error record now read as valid problems: 'fixme' (line 2)" in res.output
    assert (out / "answers.jsonl").read_bytes() == before


def test_resume_into_a_folder_without_a_run_says_it_starts_a_new_one(tiny_dir, tmp_path):
    out = tmp_path / "fresh"
    res = run_solve([str(GSM8K), "--limit", "1", "-o", str(out), "--resume"], tiny_dir)
    assert res.exit_code == 0, res.output
    assert f"note: --resume: {out} holds no earlier run" in res.output and len(records(out)) == 1
    res = run_solve([str(GSM8K), "--limit", "2", "-o", str(out), "--resume"], tiny_dir)
    assert res.exit_code == 0 and "holds no earlier run" not in res.output and len(records(out)) == 2


def test_resume_refuses_other_settings_unless_force(reference, tiny_dir, tmp_path):
    out = _copy_run(reference, tmp_path / "out")
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out), "--resume", "--temperature", "0.5"], tiny_dir)
    assert res.exit_code == 2
    assert "search.temperature: 0.8 -> 0.5" in res.output and "--force" in res.output
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out), "--resume", "--temperature", "0.5", "--force"], tiny_dir)
    assert res.exit_code == 0 and "nothing to do" in res.output


def test_forced_resume_keeps_the_earlier_settings_in_run_json(reference, tiny_dir, tmp_path):
    """run.json gets this run's settings and keeps those the earlier answers were made with; a
    later resume with this run's settings goes on without --force."""
    out = _copy_run(reference, tmp_path / "out")
    earlier = orjson.loads((out / RUN_FILENAME).read_bytes())
    res = run_solve([str(GSM8K), "--limit", "4", "-o", str(out), "--resume", "--temperature", "0.5", "--force"],
                    tiny_dir)
    assert res.exit_code == 0, res.output
    written = orjson.loads((out / RUN_FILENAME).read_bytes())
    assert written["search"]["temperature"] == 0.5 and earlier["search"]["temperature"] == 0.8
    assert written["info"]["forced_over"] == {k: v for k, v in earlier.items() if k != "info"}
    assert written["models"]["max_model_len"] == earlier["models"]["max_model_len"] == 1024
    assert len(records(out)) == 4
    res = run_solve([str(GSM8K), "--limit", "4", "-o", str(out), "--resume", "--temperature", "0.5"], tiny_dir)
    assert res.exit_code == 0 and "nothing to do" in res.output


def test_limit_and_concurrency_may_change_on_resume(reference, tiny_dir, tmp_path):
    out = _copy_run(reference, tmp_path / "out")
    res = run_solve([str(GSM8K), "--limit", "2", "--max-concurrent", "1", "-o", str(out), "--resume"], tiny_dir)
    assert res.exit_code == 0 and "nothing to do" in res.output


def test_resume_without_run_json_needs_force(reference, tiny_dir, tmp_path):
    out = _copy_run(reference, tmp_path / "out")
    (out / RUN_FILENAME).unlink()
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out), "--resume"], tiny_dir)
    assert res.exit_code == 2 and "run.json is missing" in res.output


def test_existing_answers_refused_without_resume(reference, tiny_dir, tmp_path):
    out = _copy_run(reference, tmp_path / "out")
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out)], tiny_dir)
    assert res.exit_code == 2 and "--resume" in res.output and "--overwrite" in res.output
    res = run_solve([str(GSM8K), *ARGS, "-o", str(out), "--resume", "--overwrite"], tiny_dir)
    assert res.exit_code == 2 and "pass one of them" in res.output


def test_error_records_are_kept_not_retried(tiny_dir, tmp_path):
    """A line that became an error record is skipped on resume (never a second record) and still
    makes the exit code 1."""
    src = tmp_path / "p.jsonl"
    good = GSM8K.read_text().splitlines()[0]
    src.write_text("{broken\n" + good + "\n")
    out = tmp_path / "out"
    res = run_solve([str(src), "-o", str(out)], tiny_dir)
    assert res.exit_code == 1
    before = records(out)
    src.write_text('{"id": "fixed", "problem": "What is 2 + 2?"}\n' + good + "\n")  # line 1 fixed since
    res = run_solve([str(src), "-o", str(out), "--resume"], tiny_dir)
    assert res.exit_code == 1 and "nothing to do" in res.output and "keeping the 1 answer and 1 error record" in res.output
    assert records(out) == before


@pytest.mark.slow
def test_sigint_stops_a_real_process_and_resume_finishes(tiny_dir, tmp_path):
    """Ctrl-C as a real SIGINT to `python -m specscale_cli solve -` reading stdin: stdin stays open,
    so the run cannot have ended on its own when the signal arrives."""
    problems = b"".join(GSM8K.read_bytes().splitlines(keepends=True)[:3])
    out = tmp_path / "out"
    err_path = tmp_path / "stderr.txt"
    cmd = [sys.executable, "-m", "specscale_cli", "solve", "-", "-o", str(out), "--no-dashboard",
           "--max-concurrent", "1", *tiny_flags(tiny_dir)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with open(err_path, "wb") as err:
        # a shell starts background jobs with SIGINT ignored; Python keeps an ignored SIGINT ignored
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=err, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            proc.stdin.write(problems)
            proc.stdin.flush()
            wait_for_answers(proc, out, err_path)
            proc.send_signal(signal.SIGINT)
            rc = proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.stdin.close()
    stderr = err_path.read_text()
    assert rc == 130, stderr
    assert "Traceback" not in stderr and "interrupted:" in stderr
    first = records(out)  # every line parses: no torn record
    assert 1 <= len(first) < 3
    hint = stderr.split("To go on: ", 1)[1].splitlines()[0]
    assert hint.endswith("(with the same input on stdin)")
    argv = shlex.split(hint.split("   (", 1)[0])
    # the program as it was started (here a module run), so the line can be pasted as it is
    assert argv[:5] == [sys.executable, "-m", "specscale_cli", "solve", "-"] and argv[-1] == "--resume"

    from click.testing import CliRunner

    from specscale_cli.main import cli

    res = CliRunner().invoke(cli, argv[3:], input=problems, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    recs = records(out)
    assert recs[: len(first)] == first
    assert sorted(r["id"] for r in recs) == sorted(orjson.loads(line)["id"] for line in problems.splitlines())


@pytest.mark.slow
def test_resume_compares_the_context_the_engine_used(tiny_dir, tmp_path):
    """run.json records the context the engine used (--max-model-len capped by the model's 1024):
    the same flags resume; a run that would use another context is refused unless --force."""
    out = tmp_path / "out"
    res = run_solve([str(GSM8K), "--limit", "1", "-o", str(out)], tiny_dir, max_model_len=4096)
    assert res.exit_code == 0, res.output
    assert orjson.loads((out / RUN_FILENAME).read_bytes())["models"]["max_model_len"] == 1024
    res = run_solve([str(GSM8K), "--limit", "2", "-o", str(out), "--resume"], tiny_dir, max_model_len=4096)
    assert res.exit_code == 0, res.output
    assert len(records(out)) == 2
    res = run_solve([str(GSM8K), "--limit", "3", "-o", str(out), "--resume"], tiny_dir, max_model_len=512)
    assert res.exit_code == 2
    assert "records a context of 1024 tokens but this run's engine uses 512" in res.output
    assert len(records(out)) == 2
    res = run_solve([str(GSM8K), "--limit", "3", "-o", str(out), "--resume", "--force"], tiny_dir, max_model_len=512)
    assert res.exit_code == 0, res.output
    assert orjson.loads((out / RUN_FILENAME).read_bytes())["models"]["max_model_len"] == 512


def test_ctrl_c_while_torch_imports_is_a_stop_while_loading(tiny_dir, tmp_path, monkeypatch):
    """A Ctrl-C in the first second (torch being imported to settle its threads) ended in a traceback,
    exit 1 and an empty output folder."""
    from specscale_cli import solve as solve_cmd

    def settle(*args, **kw):
        signal.raise_signal(signal.SIGINT)  # a real Ctrl-C, delivered while the threads are settled
        raise AssertionError("the stop did not reach the run")

    monkeypatch.setattr(solve_cmd, "settle_threads", settle)
    out = tmp_path / "out"
    res = run_solve([str(GSM8K), "--limit", "1", "-o", str(out)], tiny_dir)
    assert res.exit_code == 130, res.output
    assert "Ctrl-C while loading models; nothing was solved" in res.output and "Traceback" not in res.output
    assert not out.exists()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the dropped stop, on purpose
def test_a_stop_swallowed_by_a_finalizer_is_raised_at_the_next_checkpoint(tiny_dir, tmp_path, monkeypatch):
    """The handler raises where the signal lands; inside a library object's __del__ Python prints the
    exception and drops it (seen once in 14 Ctrl-Cs during a model load: the run went on to exit 0)."""
    import time

    from specscale_cli import solve as solve_cmd

    class Finalizer:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)
            time.sleep(0.01)

    real_load = solve_cmd._load

    def load(settings):
        runtime = real_load(settings)
        Finalizer()  # collected at once: the Interrupted raised inside it is dropped
        return runtime

    monkeypatch.setattr(solve_cmd, "_load", load)
    out = tmp_path / "out"
    res = run_solve([str(GSM8K), "--limit", "1", "-o", str(out)], tiny_dir)
    assert res.exit_code == 130, res.output
    assert "Ctrl-C while loading models; nothing was solved" in res.output
    assert not out.exists()

"""Usage errors answer before torch is imported or a model loads: each in a real subprocess, with
a bound far above what it takes (about 0.3 s) and far below a model load (tens of seconds)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import orjson
import pytest

from solve_helpers import GSM8K

# generous: a busy 2-core machine takes about 0.3 s; importing torch alone takes 2-3 s
BOUND_S = 1.5
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


def _solve(args: list[str], tmp_path) -> tuple[int, str, float]:
    cmd = [sys.executable, "-m", "specscale_cli", "solve", *args, "--no-dashboard"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, timeout=120)
    return proc.returncode, proc.stderr.decode(), time.perf_counter() - t0


def _write(path, lines):
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    return path


# a run config of another policy and no model fields: a --resume over it must be refused
EARLIER_RUN_JSON = {"version": 1, "policy": "specscale", "models": {}, "search": {}, "input": {}}

CASES = {
    "missing file": (lambda d: ["nope.jsonl"], "no such file: nope.jsonl"),
    "a device, not a file": (lambda d: ["/dev/null"], "/dev/null is not a regular file (a device, pipe or socket)"),
    "N not divisible by M": (lambda d: [str(GSM8K), "-n", "6", "-m", "4"], "must be divisible by beam width M=4"),
    "unknown preset": (lambda d: [str(GSM8K), "--preset", "nope"], "unknown preset 'nope'"),
    "unknown scorer": (lambda d: [str(GSM8K), "--scorer", "nope"], "'nope' is not one of 'likelihood', 'lm-judge'"),
    "cuda on a CPU build": (lambda d: [str(GSM8K), "--device", "cuda"], "--device cuda: "),
    "every record lacks the field": (
        lambda d: [_write(d / "p.jsonl", [{"prompt": "1+1?", "id": 1}, {"prompt": "2+2?", "id": 2}]).name],
        "p.jsonl: no valid problem in 2 records; p.jsonl:1: field 'problem': missing (also looked for 'question'); "
        "fields present: prompt, id; use --problem-field prompt (and 1 more bad record)"),
    "a CSV without the field": (lambda d: [str(_csv(d))], "no column 'problem' or 'question' (columns: prompt, id)"),
    "a CSV with a header and no row": (lambda d: [str(_write_text(d / "h.csv", "problem,answer\n"))],
                                       "h.csv: no problems (the file has no data rows)"),
    "a speculation budget under non-spec": (
        lambda d: [str(GSM8K), "--policy", "non-spec", "--speculation-budget", "8"],
        "--speculation-budget: only the speculative policies naive-spec and specscale have a speculation budget"),
    "a malformed speculation budget": (
        lambda d: [str(GSM8K), "--policy", "specscale", "--speculation-budget", "lots"],
        "speculation budget must be 'auto', 'off' or a number of rows >= 1, got 'lots'"),
    "unknown model path": (lambda d: [str(GSM8K), "--generator", "./no-model"], "--generator ./no-model: no such model"),
    "hub name offline": (lambda d: [str(GSM8K), "--generator", "org/not-cached"],
                         "--generator org/not-cached: not in the local Hugging Face cache, and HF_HUB_OFFLINE=1"),
    "answers.jsonl is a folder": (lambda d: [str(GSM8K), "-o", str(_answers_dir(d))], "is not a regular file"),
    "a CSV into a folder with answers": (lambda d: [str(_csv(d)), "-o", str(_earlier_run(d))],
                                         "already holds answers of an earlier run"),
    "a CSV resumed with other settings": (lambda d: [str(_csv(d)), "-o", str(_earlier_run(d, EARLIER_RUN_JSON)),
                                                     "--resume"],
                                          'policy: "specscale" -> "non-spec"'),
}


def _earlier_run(d, run_json: dict | None = None):
    """An output folder with one answer and, when given, that run.json."""
    (d / "out").mkdir()
    if run_json is not None:
        (d / "out" / "run.json").write_bytes(orjson.dumps(run_json))
    (d / "out" / "answers.jsonl").write_text('{"id": "1"}\n')
    return d / "out"


def _write_text(path, text):
    path.write_text(text)
    return path


def _csv(d):
    path = d / "p.csv"
    path.write_text("prompt,id\nWhat is 1+1?,1\n")
    return path


def _answers_dir(d):
    (d / "out" / "answers.jsonl").mkdir(parents=True)
    return d / "out"


@pytest.mark.parametrize("case", list(CASES))
def test_usage_error_answers_at_once(tmp_path, case):
    make_args, words = CASES[case]
    rc, err, seconds = _solve(make_args(tmp_path), tmp_path)
    assert rc == 2, err
    assert words in err and "Traceback" not in err
    assert seconds < BOUND_S, f"{case}: {seconds:.2f} s"
    assert not (tmp_path / "runs").exists()  # no output folder left behind


def test_csv_parquet_and_json_problems_files_are_read_as_tables(tmp_path):
    """A table given as PROBLEMS goes through `datasets`, never line by line as JSON."""
    from core.io.problems import Problem
    from specscale_cli.inputs import InputChoice, open_input

    rows = [{"id": "a", "problem": "What is 1+1?", "answer": "2"}, {"id": "b", "problem": "What is 2+2?", "answer": 4}]
    csv = tmp_path / "p.csv"
    csv.write_text("id,problem,answer\na,What is 1+1?,2\nb,What is 2+2?,4\n")
    js = tmp_path / "p.json"
    js.write_bytes(orjson.dumps(rows))
    for path in (csv, js):
        got = list(open_input(InputChoice(problems=str(path))).open())
        assert [(p.id, p.problem, p.answer) for p in got if isinstance(p, Problem)] == [
            ("a", "What is 1+1?", "2"), ("b", "What is 2+2?", "4")], path


def test_stdin_whose_every_record_is_bad_is_a_usage_error(tmp_path):
    cmd = [sys.executable, "-m", "specscale_cli", "solve", "-", "--no-dashboard"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=ENV, input=b"a,b\n1,2\n", capture_output=True, timeout=120)
    assert proc.returncode == 2
    assert ("<stdin>: no valid problem in 2 records; <stdin>:1: invalid JSON" in proc.stderr.decode()
            and "PROBLEMS must be JSONL" in proc.stderr.decode())


@pytest.mark.parametrize("args, words", [
    (["--dataset", "org/some-dataset"], "org/some-dataset: the Hugging Face hub cannot be reached"),
    ([str(GSM8K), "--generator", "org/some-model"], "--generator org/some-model: the Hugging Face hub cannot be "
                                                   "reached"),
])
def test_an_unreachable_hub_fails_in_one_line_without_retries(tmp_path, args, words):
    # a hub endpoint that refuses connections at once: what a machine without network sees
    env = {k: v for k, v in ENV.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"
    env["HF_HOME"] = str(tmp_path / "hf-home")  # nothing cached
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "specscale_cli", "solve", *args, "--no-dashboard"], cwd=tmp_path,
                          env=env, capture_output=True, timeout=120)
    seconds = time.perf_counter() - t0
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert words in err and "Retry" not in err and "Traceback" not in err
    assert seconds < 10, f"{seconds:.1f} s"  # datasets' import is most of it; its retries took 24 s
    assert not (tmp_path / "runs").exists()

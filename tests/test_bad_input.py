"""Bad input to `specscale solve`: each case gives a one-line error naming file, line and field,
never a traceback; bad lines become error records (exit 1) and the run goes on, bad settings stop
before any work (exit 2)."""

from __future__ import annotations

import os
import sys

import orjson
import pytest
from click.testing import CliRunner

from conftest import save_tiny_model
from solve_helpers import GSM8K, records, run_solve

from core.io.resume import RUN_FILENAME
from specscale_cli.main import cli

LONG_PROBLEM = "word " * 400  # ~400 tokens: more than the 256-token context the bad-lines run allows

# (line, content): one file holding every kind of bad line next to two good problems
BAD_FILE_LINES = [
    (1, orjson.dumps({"id": "ok", "problem": "What is 2 + 3?", "answer": "5"})),
    (2, b""),
    (3, b"{not json"),
    (4, b"[1, 2]"),
    (5, orjson.dumps({"id": "no-problem", "answer": "1"})),
    (6, orjson.dumps({"id": "blank-problem", "problem": "   "})),
    (7, orjson.dumps({"id": "number-problem", "problem": 42})),
    (8, orjson.dumps({"id": "ok", "problem": "The same id again"})),
    (9, b'{"id": "latin1", "problem": "caf\xe9"}'),
    (10, orjson.dumps({"id": "too-long", "problem": LONG_PROBLEM})),
    (11, orjson.dumps({"problem": "What is 1 + 1?"})),
    (12, b"   "),
]

# line -> (error.field, words the message must hold)
EXPECTED_ERRORS = {
    3: (None, "invalid JSON"),
    4: (None, "expected a JSON object, got array"),
    5: ("problem", "missing (also looked for 'question'); fields present: id, answer"),
    6: ("problem", "missing or empty"),
    7: ("problem", "must be a string, got number"),
    8: ("id", "duplicate id 'ok' (first seen on line 1)"),
    9: (None, "not valid UTF-8 (byte 0xe9"),
    10: ("problem", "does not fit the model context (256 tokens)"),
}


@pytest.fixture(scope="module")
def bad_run(tiny_dir, tmp_path_factory):
    """One solve run over the file of bad lines: (result, OUT, input path)."""
    tmp = tmp_path_factory.mktemp("bad-lines")
    src = tmp / "mixed.jsonl"
    src.write_bytes(b"\n".join(content for _, content in BAD_FILE_LINES) + b"\n")
    out = tmp / "out"
    res = run_solve([str(src), "-o", str(out)], tiny_dir, max_model_len=256)
    return res, out, src


def test_bad_lines_run_goes_on_and_exits_1(bad_run):
    res, out, _ = bad_run
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output
    recs = records(out)
    answers = {r["id"] for r in recs if "error" not in r}
    assert answers == {"ok", "line-11"}  # the made-up id of line 11 is its line number
    assert sorted(r["line"] for r in recs if "error" in r) == sorted(EXPECTED_ERRORS)
    assert len(recs) == 2 + len(EXPECTED_ERRORS)  # blank lines 2 and 12 give nothing


@pytest.mark.parametrize("line", sorted(EXPECTED_ERRORS))
def test_each_bad_line_names_file_line_and_field(bad_run, line):
    res, out, src = bad_run
    field, words = EXPECTED_ERRORS[line]
    (rec,) = [r for r in records(out) if r.get("line") == line and "error" in r]
    assert rec["error"]["field"] == field
    assert words in rec["error"]["message"]
    prefix = f"{src}:{line}: " + (f"field {field!r}: " if field else "")
    assert rec["error"]["where"] == prefix + rec["error"]["message"]
    # printed on stderr as exactly one line
    printed = [ln for ln in res.output.splitlines() if ln.startswith(f"error: {src}:{line}: ")]
    assert printed == [f"error: {rec['error']['where']}"]


# ------------------------------------------------------------------ usage errors: exit 2, before any work


def _usage_error(args: list[str], tmp_path) -> str:
    """Run solve, check exit 2, no traceback, nothing written; return the one-line error message."""
    out = tmp_path / "o"
    res = CliRunner().invoke(cli, ["solve", *args, "-o", str(out), "--no-dashboard"])
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert "Traceback" not in res.output
    assert not (out / "answers.jsonl").exists() and not (out / RUN_FILENAME).exists()
    last = res.output.strip().splitlines()[-1]
    assert last.startswith("Error: "), res.output
    return last


def test_empty_file(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert f"{empty}: no problems" in _usage_error([str(empty)], tmp_path)


def test_only_blank_lines(tmp_path):
    blank = tmp_path / "blank.jsonl"
    blank.write_bytes(b"\n  \n\t\n")
    assert f"{blank}: no problems" in _usage_error([str(blank)], tmp_path)


@pytest.mark.parametrize("args, words", [
    (["--preset", "no-such-preset"], "unknown preset 'no-such-preset'"),
    (["-n", "6", "-m", "4"], "beam size N=6 must be divisible by beam width M=4"),
    (["--temperature", "-0.5"], "temperature must be >= 0, got -0.5"),
    (["-n", "0", "-m", "1"], "beam size N must be >= 1, got 0"),
    (["--beam-width", "0"], "beam width M must be >= 1, got 0"),
])
def test_invalid_settings(tmp_path, args, words):
    assert words in _usage_error([str(GSM8K), *args], tmp_path)


def test_unknown_model_path(tmp_path):
    missing = tmp_path / "no-model"
    message = _usage_error([str(GSM8K), "--generator", str(missing), "--prm", str(missing)], tmp_path)
    assert message == f"Error: --generator {missing}: no such model: give a model folder, a .gguf file, a hub name " \
                      f"(org/name), synthetic:NAME or one of the embedded models: smollm2-135m-instruct"


def test_output_under_a_file_is_not_writable(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    res = CliRunner().invoke(cli, ["solve", str(GSM8K), "-o", str(blocker / "out"), "--no-dashboard"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    last = res.output.strip().splitlines()[-1]
    assert last == f"Error: output folder {blocker / 'out'} cannot be created: Not a directory"


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0, reason="root writes through permission bits")
def test_read_only_output_folder(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        res = CliRunner().invoke(cli, ["solve", str(GSM8K), "-o", str(ro), "--no-dashboard"])
    finally:
        ro.chmod(0o755)
    assert res.exit_code == 2 and f"output folder {ro} is not writable" in res.output


@pytest.mark.parametrize("args, words", [
    ([], "give exactly one input"),
    ([str(GSM8K), "--dataset", str(GSM8K)], "give exactly one input"),
    ([str(GSM8K), "--shuffle"], "--shuffle works with --dataset"),
    ([str(GSM8K), "--split", "test"], "--split works with --dataset"),
    ([str(GSM8K), "--problem-field", ""], "--problem-field must not be empty"),
])
def test_input_option_conflicts(tmp_path, args, words):
    assert words in _usage_error(args, tmp_path)


@pytest.mark.parametrize("dataset, words", [
    ("missing.parquet", "missing.parquet: no such file"),
    ("some-org/some-dataset", "HF_HUB_OFFLINE=1 forbids downloading it"),
])
def test_dataset_that_cannot_be_loaded(tmp_path, monkeypatch, dataset, words):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert words in _usage_error(["--dataset", dataset], tmp_path)


def test_dataset_without_problem_column(tmp_path):
    src = tmp_path / "rows.jsonl"
    src.write_text('{"prompt": "x", "answer": "1"}\n')
    message = _usage_error(["--dataset", str(src)], tmp_path)
    assert "no column 'problem' or 'question' (columns: prompt, answer)" in message


def test_dataset_with_invalid_json(tmp_path):
    src = tmp_path / "rows.jsonl"
    src.write_text('{"problem": "x"}\n{broken\n')
    message = _usage_error(["--dataset", str(src)], tmp_path)
    assert f"{src}: cannot be loaded as a dataset" in message and "pass the file as PROBLEMS" in message


# ------------------------------------------------------------------ a path that outgrows the PRM context


def test_path_longer_than_prm_context_is_an_error_record(smollm2, tmp_path):
    """The PRM refuses inputs longer than its context; the driver turns that problem into an error
    record (instead of the engine's ValueError stopping the run), frees its KV, and goes on."""
    from core.io.problems import Problem
    from core.search.config import SearchConfig
    from core.search.driver import SearchDriver
    from core.solver import ModelSettings, build_runtime
    from core.verify.base import chat_prompt_ids

    tok = smollm2.tokenizer
    # a delimiter the model never writes: every step runs to its 8-token limit (which ends the path)
    cfg = SearchConfig(beam_size=2, beam_width=2, max_steps=3, max_step_tokens=8, step_delimiter="QQQZ",
                       temperature=0.8)
    short, long = "What is 1 + 1?", "Count the words: " + "word " * 40
    short_len = len(chat_prompt_ids(tok, short, cfg.system_prompt))
    long_len = len(chat_prompt_ids(tok, long, cfg.system_prompt))
    prm_context = long_len + 4
    assert short_len + 8 <= prm_context
    gen = save_tiny_model(tmp_path / "gen", tok)
    # the likelihood PRM reads exactly the generator's path: prompt + one step of 8 tokens, which
    # fits for the short problem and not for the long one
    prm = save_tiny_model(tmp_path / "prm", tok, seed=1, max_position_embeddings=prm_context)
    runtime = build_runtime(ModelSettings(generator=str(gen), prm=str(prm), scorer="likelihood",
                                          gen_kv_bytes=50 << 20, prm_kv_bytes=50 << 20, max_model_len=1024))
    assert runtime.verifier.engine.max_model_len == prm_context
    results, errors = {}, []
    driver = SearchDriver(runtime.engine, tok, runtime.generator.eos_token_ids, runtime.verifier, runtime.scorer,
                          cfg, on_result=lambda p, r, s: results.setdefault(p.id, r), on_error=errors.append,
                          source="p.jsonl")
    driver.run([Problem("long", long, None, 1), Problem("short", short, None, 2)])
    assert list(results) == ["short"] and len(results["short"]["completions"]) == 2
    (err,) = errors
    assert (err.id, err.line, err.field) == ("long", 1, "problem")
    assert f"needs {long_len + 8} tokens of PRM input, more than the PRM context ({prm_context} tokens)" \
        in err.message
    # nothing of the given-up problem stays behind: no queued task, no sequence, no KV block
    assert not runtime.verifier.queue and not runtime.engine.has_work()
    assert runtime.engine.pool.num_used == 0 and runtime.verifier.engine.pool.num_used == 0

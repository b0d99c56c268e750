"""`specscale solve` end to end: a tiny random model saved as an HF folder, and the embedded SmolLM2."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from core.io.writers import safe_filename
from specscale_cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
GSM8K = ROOT / "examples" / "gsm8k_sample.jsonl"


def solve(args, model_dir=None):
    base = ["solve", *args, "--no-progress"]
    if model_dir is not None:
        base += ["--generator", str(model_dir), "--prm", str(model_dir), "--step-delimiter", "e",
                 "-n", "4", "-m", "2", "--max-steps", "2", "--max-step-tokens", "32",
                 "--kv-cache-gb", "0.05", "--prm-kv-cache-gb", "0.05", "--max-model-len", "1024"]
    return CliRunner().invoke(cli, base, catch_exceptions=False)


def records(out: Path) -> list[dict]:
    return [orjson.loads(line) for line in (out / "answers.jsonl").read_bytes().splitlines()]


def test_solve_writes_answers_and_traces(tiny_dir, tmp_path):
    out = tmp_path / "out"
    res = solve([str(GSM8K), "--limit", "3", "-o", str(out)], tiny_dir)
    assert res.exit_code == 0, res.output
    recs = records(out)
    gold = [orjson.loads(line) for line in GSM8K.read_bytes().splitlines()[:3]]
    assert sorted(r["id"] for r in recs) == sorted(g["id"] for g in gold)
    for r in recs:
        g = next(x for x in gold if x["id"] == r["id"])
        assert r["gold"] == g["answer"]
        assert isinstance(r["correct"], bool)
        assert len(r["completions"]) == 4
        assert all(c["end_reason"] in {"eos", "length", "step-cap"} for c in r["completions"])
        scores = [c["path_score"] for c in r["completions"]]
        assert scores == sorted(scores, reverse=True)
        trace = orjson.loads((out / "traces" / safe_filename(r["id"])).read_bytes())
        assert len(trace["nodes"]) == r["num_nodes"] + 1
        assert trace["nodes"][0]["parent"] is None
        statuses = {n["status"] for n in trace["nodes"][1:]}
        assert statuses <= {"selected", "pruned", "completed"}


def test_same_seed_same_answers_file(tiny_dir, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        assert solve([str(GSM8K), "--limit", "2", "-o", str(out), "--max-concurrent", "2"], tiny_dir).exit_code == 0

    def strip(rs):
        return sorted(({k: v for k, v in r.items() if k != "time_s"} for r in rs), key=lambda r: r["id"])

    assert strip(records(a)) == strip(records(b))


def test_bad_lines_become_error_records(tiny_dir, tmp_path):
    good = GSM8K.read_text().splitlines()
    src = tmp_path / "mixed.jsonl"
    src.write_text("\n".join([good[0], "{not json", '{"id": "x", "answer": "1"}', "", good[1]]) + "\n")
    out = tmp_path / "out"
    res = solve([str(src), "-o", str(out)], tiny_dir)
    assert res.exit_code == 1
    recs = records(out)
    errors = {r["line"]: r for r in recs if "error" in r}
    assert set(errors) == {2, 3}
    assert errors[3]["error"]["field"] == "problem"
    assert "mixed.jsonl:2" in res.output and "mixed.jsonl:3" in res.output
    assert sorted(r["id"] for r in recs if "error" not in r) == sorted(orjson.loads(good[i])["id"] for i in (0, 1))


def test_usage_errors_exit_2(tmp_path):
    res = CliRunner().invoke(cli, ["solve", str(GSM8K), "-n", "6", "-m", "4", "-o", str(tmp_path / "o")])
    assert res.exit_code == 2 and "divisible" in res.output
    res = CliRunner().invoke(cli, ["solve", str(GSM8K), "--generator", str(tmp_path / "nope"), "-o",
                                   str(tmp_path / "o")])
    assert res.exit_code == 2 and "no such model" in res.output
    res = CliRunner().invoke(cli, ["solve", str(tmp_path / "missing.jsonl")])
    assert res.exit_code == 2 and "no such file" in res.output


@pytest.mark.slow
def test_embedded_model_end_to_end(smollm2, tmp_path):
    """The real main job on the embedded SmolLM2 (generator and likelihood scorer), 2 problems."""
    out = tmp_path / "out"
    res = solve([str(GSM8K), "--limit", "2", "-o", str(out), "-n", "2", "-m", "2", "--max-steps", "2",
                 "--max-step-tokens", "24"])
    assert res.exit_code == 0, res.output
    recs = records(out)
    assert len(recs) == 2
    for r in recs:
        assert len(r["completions"]) == 2
        assert r["num_generated_tokens"] > 0
        assert all(0.0 <= s <= 1.0 for c in r["completions"] for s in c["step_scores"])


def test_trace_command_views(tiny_dir, tmp_path):
    out = tmp_path / "out"
    assert solve([str(GSM8K), "--limit", "1", "-o", str(out), "--policy", "specscale"], tiny_dir).exit_code == 0
    rec = records(out)[0]
    path = out / "traces" / safe_filename(rec["id"])
    raw = orjson.loads(path.read_bytes())
    assert raw["policy"] == "specscale"
    runner = CliRunner()
    res = runner.invoke(cli, ["trace", str(path), "--format", "json"])
    assert res.exit_code == 0, res.output
    summary = orjson.loads(res.output)
    assert summary["nodes"] == len(raw["nodes"]) - 1 == rec["num_nodes"]
    assert summary["completed"] == 4
    assert summary["tokens_generated"] == sum(n["num_tokens"] for n in raw["nodes"])
    assert summary["tokens_wasted"] == sum(n["num_tokens"] for n in raw["nodes"]
                                           if n["status"] in ("pruned", "cancelled"))
    res = runner.invoke(cli, ["trace", str(path), "--format", "dot"])
    assert res.exit_code == 0 and res.output.startswith("digraph")
    assert res.output.count("->") == len(raw["nodes"]) - 1
    res = runner.invoke(cli, ["trace", str(path)])
    assert res.exit_code == 0 and rec["id"] in res.output and "tokens wasted" in res.output
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    res = runner.invoke(cli, ["trace", str(bad)])
    assert res.exit_code == 2 and "not a specscale trace" in res.output
    # the record names its tree, and the run's folder with --id finds the same file
    assert rec["trace"] == f"traces/{path.name}" and (out / rec["trace"]).is_file()
    by_id = runner.invoke(cli, ["trace", str(out), "--id", rec["id"], "--format", "json"])
    assert by_id.exit_code == 0 and orjson.loads(by_id.output) == summary
    for target in (out, out / "answers.jsonl"):
        res = runner.invoke(cli, ["trace", str(target)])
        assert res.exit_code == 2 and "--id" in res.output and rec["id"] in res.output, res.output
    res = runner.invoke(cli, ["trace", str(out / "answers.jsonl"), "--id", "no-such-id"])
    assert res.exit_code == 2 and "no trace of problem 'no-such-id'" in res.output
    res = runner.invoke(cli, ["trace", str(path), "--id", rec["id"]])
    assert res.exit_code == 2 and "one trace file already" in res.output


def test_existing_output_is_refused_unless_overwrite(tiny_dir, tmp_path):
    out = tmp_path / "out"
    assert solve([str(GSM8K), "--limit", "1", "-o", str(out)], tiny_dir).exit_code == 0
    res = solve([str(GSM8K), "--limit", "1", "-o", str(out)], tiny_dir)
    assert res.exit_code == 2 and "--overwrite" in res.output
    assert len(records(out)) == 1
    mine = out / "traces" / "my-notes.txt"  # a file of the user's own among the traces
    mine.write_text("keep me")
    res = solve([str(GSM8K), "--limit", "2", "-o", str(out), "--overwrite"], tiny_dir)
    assert res.exit_code == 0 and len(records(out)) == 2
    assert (f"note: --overwrite: removed the earlier run in {out} (1 record in answers.jsonl, 1 trace); kept 1 other "
            f"file in {out / 'traces'}") in res.output
    assert mine.read_text() == "keep me" and len(list((out / "traces").glob("*.json"))) == 2


@pytest.mark.parametrize("args, message", [
    (["--device", "tpu"], "invalid --device"),
    (["--step-delimiter", ""], "must not be empty"),
    (["--temperature", "-1"], "temperature"),
])
def test_more_usage_errors(tmp_path, args, message):
    res = CliRunner().invoke(cli, ["solve", str(GSM8K), "-o", str(tmp_path / "o"), *args])
    assert res.exit_code == 2 and message in res.output


def test_directory_as_problems_file(tmp_path):
    res = CliRunner().invoke(cli, ["solve", str(tmp_path)])
    assert res.exit_code == 2 and "is a directory" in res.output

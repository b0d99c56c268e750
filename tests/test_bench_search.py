"""`specscale bench search`: arrivals, metrics and the CLI on a tiny random model."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import orjson
import pytest
from click.testing import CliRunner
from rich.console import Console

from test_cli import GSM8K
from conftest import make_runtime
from test_search import PROBLEMS

from core.bench import search_bench
from core.bench.search_bench import parse_policies, poisson_arrivals, step_wait_seconds
from core.search.config import SearchConfig
from core.search.driver import SearchDriver
from specscale_cli.bench_report import results_table
from specscale_cli.main import cli


def test_poisson_arrivals_follow_exponential_gaps_from_the_seed():
    got = poisson_arrivals(5, 0.5, seed=3)
    rng = random.Random(3)
    want, t = [0.0], 0.0
    for _ in range(4):
        t += rng.expovariate(0.5)
        want.append(t)
    assert got == want
    assert poisson_arrivals(5, 0.5, seed=3) == got
    assert poisson_arrivals(5, 0.5, seed=4) != got
    with pytest.raises(ValueError, match="> 0"):
        poisson_arrivals(3, 0.0)


def test_parse_policies_keeps_order_and_rejects_unknown_names():
    assert parse_policies("specscale:ep+cd+lv, non-spec,non-spec") == ["specscale:ep+cd+lv", "non-spec"]
    with pytest.raises(ValueError, match="unknown policy specscale:xx"):
        parse_policies("non-spec,specscale:xx")
    with pytest.raises(ValueError, match="none given"):
        parse_policies(" , ")


def test_step_wait_is_first_child_start_minus_step_end():
    def node(parent, t_start, t_finish):
        n = SimpleNamespace(parent=parent, children=[], t_start=t_start, t_finish=t_finish)
        if parent is not None:
            parent.children.append(n)
        return n

    root = node(None, 0.0, None)
    a = node(root, 0.0, 1.0)
    b = node(root, 0.0, 2.0)  # no children: not counted
    node(a, 3.5, 4.0)
    node(a, 1.5, None)
    leaf_parent = node(a, 2.0, 2.5)
    node(leaf_parent, 2.25, None)  # started before its parent finished (speculative): clamps to 0
    assert step_wait_seconds([root, a, b, *a.children, *leaf_parent.children]) == [0.5, 0.0]


def test_driver_admits_nothing_before_its_arrival(tiny_chat):
    cfg = SearchConfig(beam_size=2, beam_width=2, temperature=1.0, max_steps=2, step_delimiter="e",
                       max_step_tokens=16, max_tokens=64)
    rt = make_runtime(tiny_chat)
    admitted = {}

    def on_result(problem, result, search):
        admitted[problem.id] = search.tree.t0

    driver = SearchDriver(rt.engine, tiny_chat.tokenizer, tiny_chat.eos_token_ids, rt.verifier, rt.scorer, cfg,
                          max_concurrent=4, on_result=on_result)
    import time

    t_call = time.perf_counter()
    driver.run(PROBLEMS, arrivals=[0.0, 0.4])
    assert set(admitted) == {"p1", "p2"}
    assert admitted["p2"] - t_call >= 0.4


def test_repeats_run_in_rounds_and_report_the_median_run_and_same_round_ratios(monkeypatch):
    walls = {"non-spec": [10.0, 14.0, 12.0], "specscale": [5.0, 9.0, 6.0]}
    calls = []

    def fake_run_policy(models, settings, problems, cfg, policy, max_concurrent, arrivals=None):
        i = calls.count(policy)
        calls.append(policy)
        wall = walls[policy][i]
        return {"wall_s": wall, "throughput": 120 / wall, "goodput": 60 / wall, "accuracy": 0.5, "round": i}

    monkeypatch.setattr(search_bench, "run_policy", fake_run_policy)
    out = search_bench.run_benchmark(None, None, ["p"], SearchConfig(), ["non-spec", "specscale:ep+cd+lv"], 4,
                                     repeats=3)
    assert calls == ["non-spec", "specscale"] * 3  # rounds, not one policy's runs back to back
    base, spec = out["policies"]["non-spec"], out["policies"]["specscale:ep+cd+lv"]
    assert base["round"] == 2 and spec["round"] == 2  # the median wall times: 12 s and 6 s
    assert spec["wall_s_runs"] == [5.0, 9.0, 6.0]
    # same-round ratios 10/5, 14/9, 12/6; the median is reported
    assert spec["ratio_vs_nonspec_runs"] == [2.0, 1.556, 2.0]
    assert spec["ratio_vs_nonspec"] == 2.0 and base["ratio_vs_nonspec"] == 1.0
    assert spec["accuracy_delta_vs_nonspec"] == 0.0
    console = Console(width=400, record=True)
    console.print(results_table(out["policies"], []))
    assert "2.00x (1.56-2.00)" in console.export_text()  # the median and the range of the rounds
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        search_bench.run_benchmark(None, None, ["p"], SearchConfig(), ["non-spec"], 4, repeats=0)


def test_bench_search_cli_writes_results_csv_plots_and_json(tiny_dir, tmp_path):
    out = tmp_path / "bench"
    args = ["bench", "search", "--problems", str(GSM8K), "--limit", "2", "--policies", "non-spec,specscale:ep+cd+lv",
            "--request-rates", "50", "-o", str(out), "--json",
            "--generator", str(tiny_dir), "--prm", str(tiny_dir), "--step-delimiter", "e", "-n", "4", "-m", "2",
            "--max-steps", "2", "--max-step-tokens", "16", "--kv-cache-gb", "0.05", "--prm-kv-cache-gb", "0.05",
            "--max-model-len", "1024"]
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    printed = json.loads(res.stdout.strip().splitlines()[-1])
    assert printed == json.loads((out / "results.json").read_text())
    pol = printed["policies"]
    assert list(pol) == ["non-spec", "specscale:ep+cd+lv"]
    base, spec = pol["non-spec"], pol["specscale:ep+cd+lv"]
    assert base["ratio_vs_nonspec"] == 1.0 and base["goodput_ratio_vs_nonspec"] == 1.0
    assert spec["ratio_vs_nonspec"] == round(spec["throughput"] / base["throughput"], 3)
    # same candidate seeds, same decisions: both policies return the same completions
    assert spec["answer_tokens"] == base["answer_tokens"] > 0
    assert spec["accuracy_delta_vs_nonspec"] == round(spec["accuracy"] - base["accuracy"], 4)
    for r in pol.values():
        assert r["problems"] == 2
        assert r["output_tokens"] >= r["answer_tokens"] // 4  # N=4 paths share their ancestors' tokens
        parts = r["time_breakdown_s"]
        assert parts["generation"] > 0 and parts["verification"] > 0
        assert sum(parts.values()) == pytest.approx(r["wall_s"], abs=0.01)
        assert r["prm_calls"] >= 1 and r["mean_prm_batch_tokens"] > 0
        assert 0 < r["peak_kv_blocks"] <= r["kv_blocks_total"]
        assert r["mean_concurrent_candidates"] > 0
        lat = r["latency"]["50.0"]
        assert lat["answer_tokens"] == r["answer_tokens"]
        assert lat["normalized_latency_s_per_token"] > 0
    assert sum(spec["prm_calls_by_trigger"].values()) == spec["prm_calls"]
    assert set(base["prm_calls_by_trigger"]) == {"eager"}
    csv_lines = (out / "results.csv").read_text().splitlines()
    assert csv_lines[0].startswith("policy,wall_s,throughput,ratio_vs_nonspec")
    assert [line.split(",")[0] for line in csv_lines[1:]] == ["non-spec", "specscale:ep+cd+lv"]
    for png in ("throughput.png", "time_breakdown.png", "latency.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_search_rejects_bad_rates_and_policies(tmp_path):
    runner = CliRunner()
    res = runner.invoke(cli, ["bench", "search", "--request-rates", "0.1,x", "-o", str(tmp_path)])
    assert res.exit_code == 2 and "not a comma-separated list" in res.output
    res = runner.invoke(cli, ["bench", "search", "--request-rates", "-1", "-o", str(tmp_path)])
    assert res.exit_code == 2 and "> 0" in res.output
    res = runner.invoke(cli, ["bench", "search", "--policies", "fast", "-o", str(tmp_path)])
    assert res.exit_code == 2 and "unknown policy fast" in res.output


def _tiny_bench_flags(tiny_dir):
    return ["--generator", str(tiny_dir), "--prm", str(tiny_dir), "--step-delimiter", "e", "-m", "2",
            "--max-steps", "2", "--max-step-tokens", "16", "--kv-cache-gb", "0.05", "--prm-kv-cache-gb", "0.05",
            "--max-model-len", "1024"]


PNG = b"\x89PNG\r\n\x1a\n"


def test_beam_size_and_concurrency_studies(tiny_dir, tmp_path):
    out = tmp_path / "studies"
    args = ["bench", "search", "--problems", str(GSM8K), "--limit", "2", "--policies", "non-spec,specscale:ep+cd+lv",
            "--beam-sizes", "2,4", "--concurrency", "1,2", "-o", str(out), "--json", *_tiny_bench_flags(tiny_dir)]
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    printed = json.loads(res.stdout.strip().splitlines()[-1])
    assert printed == json.loads((out / "results.json").read_text())
    sizes, levels = printed["beam_size_study"], printed["concurrency_study"]
    assert list(sizes) == ["2", "4"] and list(levels) == ["1", "2"]
    for row in sizes.values():
        base, spec = row["non-spec"], row["specscale:ep+cd+lv"]
        assert spec["answer_tokens"] == base["answer_tokens"] > 0  # the same completions at each N
        assert base["normalized_latency_vs_nonspec"] == 1.0
        assert spec["normalized_latency_vs_nonspec"] == round(
            spec["normalized_latency_s_per_token"] / base["normalized_latency_s_per_token"], 3)
        assert all(r["peak_kv_blocks"] > 0 for r in row.values())
    assert sizes["4"]["non-spec"]["answer_tokens"] > sizes["2"]["non-spec"]["answer_tokens"]  # 4 paths, not 2
    for row in levels.values():
        assert row["non-spec"]["ratio_vs_nonspec"] == 1.0
        assert row["specscale:ep+cd+lv"]["ratio_vs_nonspec"] == round(
            row["specscale:ep+cd+lv"]["throughput"] / row["non-spec"]["throughput"], 3)
    lines = (out / "beam_sizes.csv").read_text().splitlines()
    assert lines[0].startswith("beam_size,policy,") and [tuple(x.split(",")[:2]) for x in lines[1:]] == [
        ("2", "non-spec"), ("2", "specscale:ep+cd+lv"), ("4", "non-spec"), ("4", "specscale:ep+cd+lv")]
    assert len((out / "concurrency.csv").read_text().splitlines()) == 5
    for png in ("beam_sizes.png", "concurrency.png"):
        assert (out / png).read_bytes()[:8] == PNG
    assert not (out / "results.csv").exists()  # the studies ran instead of the comparison


def test_studies_refuse_sizes_m_does_not_divide_and_too_few_problems(tmp_path):
    runner = CliRunner()
    res = runner.invoke(cli, ["bench", "search", "--beam-sizes", "3", "-m", "2", "-o", str(tmp_path)])
    assert res.exit_code == 2 and "beam size 3 is not divisible by the beam width M=2" in res.output
    res = runner.invoke(cli, ["bench", "search", "--concurrency", "8", "--limit", "4", "-o", str(tmp_path)])
    assert res.exit_code == 2 and "--limit 4 problems cannot keep 8 in flight" in res.output


def test_bench_strategies_rows_and_plot(tiny_dir, tmp_path):
    out = tmp_path / "strategies"
    args = ["bench", "strategies", "--problems", str(GSM8K), "--limit", "2", "--sizes", "2,4", "-o", str(out),
            "--json", *_tiny_bench_flags(tiny_dir)]
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    printed = json.loads(res.stdout.strip().splitlines()[-1])
    rows = printed["runs"]
    assert [(r["strategy"], r["n"], r["beam_width"]) for r in rows] == [
        ("greedy", 1, 1), ("best-of-n", 2, 1), ("beam", 2, 2), ("dvts", 2, 2),
        ("best-of-n", 4, 1), ("beam", 4, 2), ("dvts", 4, 2)]
    for r in rows:
        assert r["generated_tokens"] > 0 and 0.0 <= r["accuracy"] <= 1.0
        assert r["tokens_per_problem"] == round(r["generated_tokens"] / 2, 1)
        # best-of-N ran once, at N=4: its N=2 row is the first 2 samples of that run
        assert (r["subset_of"], r["wall_s"] is None) == ((4, True) if r["strategy"] == "best-of-n" and r["n"] == 2
                                                         else (None, False))
    assert rows[0]["generated_tokens"] < rows[-2]["generated_tokens"]  # one greedy path costs less than beam N=4
    lines = (out / "results.csv").read_text().splitlines()
    assert lines[0].startswith("strategy,n,beam_width,accuracy") and len(lines) == 8
    assert (out / "accuracy_vs_tokens.png").read_bytes()[:8] == PNG
    assert printed["complete"] is True and orjson.loads((out / "results.json").read_bytes())["runs"] == rows


def test_bench_strategies_stopped_part_way_keeps_the_runs_it_finished(tiny_dir, tmp_path, monkeypatch):
    import core.bench.strategies_bench as sb

    real, calls = sb.run_policy, []

    def run_policy(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # Ctrl-C during the third run (beam N=2)
        return real(*args, **kwargs)

    monkeypatch.setattr(sb, "run_policy", run_policy)
    out = tmp_path / "strategies"
    args = ["bench", "strategies", "--problems", str(GSM8K), "--limit", "1", "--sizes", "2", "-o", str(out),
            *_tiny_bench_flags(tiny_dir)]
    CliRunner().invoke(cli, args)
    kept = orjson.loads((out / "results.json").read_bytes())
    assert kept["complete"] is False
    assert [(r["strategy"], r["n"]) for r in kept["runs"]] == [("greedy", 1), ("best-of-n", 2)]
    assert len((out / "results.csv").read_text().splitlines()) == 3

"""Run figures (core.metrics), the `solve` dashboard and OUT/summary.json on a tiny random model.

Two real runs of three problems: non-spec with sampling, and specscale (EP, CD, LV) with greedy
sampling, where every candidate of a sequence draws the same token so CD shares whole steps.
"""

from __future__ import annotations

import io
from collections import Counter
from dataclasses import fields

import orjson
import pytest
from rich.console import Console

from core.grading.equivalence import answers_equivalent
from core.io.problems import Problem
from core.io.writers import safe_filename
from core.metrics import TokenRate, final_summary, snapshot
from core.search.config import SearchConfig
from core.search.driver import SearchDriver
from specscale_cli.dashboard import Dashboard, _clock, render_panel, summary_table
from test_cli import GSM8K, records, solve
from conftest import make_runtime

PROBLEMS = [Problem("p1", "What is 2 + 3?", "5", 1), Problem("p2", "Compute 7 * 6.", "42", 2),
            Problem("p3", "Is 9 prime?", "no", 3)]
BASE = dict(beam_size=4, beam_width=2, temperature=1.0, max_steps=4, step_delimiter="e", max_step_tokens=64,
            max_tokens=512, perfect_score=None)
RUNS = {"non-spec": ("non-spec", {}), "specscale-greedy": ("specscale", dict(temperature=0.0)),
        # sampled: candidates of one sequence fork mid-step and speculative steps are cancelled mid-way
        "specscale-sampled": ("specscale", {})}


def _run(loaded, policy, overrides):
    rt = make_runtime(loaded)
    counts = {"done": 0, "errors": 0, "correct": 0, "graded": 0}
    results, trees, live = {}, {}, []
    stream = io.StringIO()
    dash = Dashboard(len(PROBLEMS), stream=stream, refresh_s=0, log_every_s=0.01)

    def on_result(problem, result, search):
        results[problem.id] = result
        trees[problem.id] = search.tree
        counts["done"] += 1
        counts["graded"] += 1
        counts["correct"] += int(answers_equivalent(result["pred"], problem.answer))
        dash.advance(counts)

    def on_iteration(stats):
        dash.update(stats, rt)
        live.append(snapshot(stats, rt.engine, rt.verifier, counts, len(PROBLEMS)))

    driver = SearchDriver(rt.engine, loaded.tokenizer, loaded.eos_token_ids, rt.verifier, rt.scorer,
                          SearchConfig(**{**BASE, **overrides}), policy=policy, max_concurrent=3,
                          on_result=on_result, on_iteration=on_iteration)
    dash.attach(driver.stats, rt)
    with dash:
        stats = driver.run(PROBLEMS)
    final = snapshot(stats, rt.engine, rt.verifier, counts, len(PROBLEMS))
    return dict(rt=rt, counts=counts, results=results, trees=trees, live=live, final=final, log=stream.getvalue(),
                dash=dash)


@pytest.fixture(scope="module", params=list(RUNS))
def run(request, tiny_chat):
    policy, overrides = RUNS[request.param]
    return request.param, _run(tiny_chat, policy, overrides)


def _rule_counts(trees, status):
    return dict(Counter(n.pruned_by for t in trees.values() for n in t.nodes if n.status.value == status))


def test_final_snapshot_agrees_with_results_and_trees(run):
    name, r = run
    s, rt, results = r["final"], r["rt"], r["results"]
    assert s["problems_total"] == s["problems_answered"] == len(results) == len(PROBLEMS)
    assert s["errors"] == 0 and s["graded"] == 3
    correct = sum(answers_equivalent(results[p.id]["pred"], p.answer) for p in PROBLEMS)
    assert s["correct"] == correct and s["accuracy"] == correct / 3
    # answers count each physical step once; the run counts one token per logical candidate
    assert s["generated_tokens"] - s["cd_saved_tokens"] == sum(x["num_generated_tokens"] for x in results.values())
    assert s["generated_tokens"] == sum(x["num_sampled_tokens"] for x in results.values())
    assert s["cd_saved_tokens"] == sum(x["num_cd_saved_tokens"] for x in results.values())
    for pid, res in results.items():
        # every token drawn for a candidate is in its node's step, the part of a cancelled step included
        assert sum(len(n.token_ids) for n in r["trees"][pid].nodes[1:]) == res["num_sampled_tokens"]
        assert res["num_generated_tokens"] == res["num_sampled_tokens"] - res["num_cd_saved_tokens"]
    assert sum(s["flushes_by_trigger"].values()) == s["prm_calls"] == rt.verifier.stats.flushes > 0
    assert s["prm_tasks"] == sum(1 for t in r["trees"].values() for n in t.nodes if n.t_scored is not None)
    assert s["prm_mean_batch_tasks"] == s["prm_tasks"] / s["prm_calls"]
    assert s["pruned_by_rule"] == _rule_counts(r["trees"], "pruned")
    assert s["cancelled_by_rule"] == _rule_counts(r["trees"], "cancelled")
    assert s["pruned_ep"] == s["pruned_by_rule"].get("ep", 0) + s["pruned_by_rule"].get("perfect-score", 0)
    assert s["running_sequences"] == s["logical_candidates"] == s["queue_tasks"] == s["queue_tokens"] == 0
    assert s["kv_blocks_used"] == 0 < s["kv_blocks_peak"] <= s["kv_blocks_total"]
    assert 0 < s["prm_kv_blocks_peak"] <= s["prm_kv_blocks_total"]
    assert s["eta_s"] == 0.0
    if name == "non-spec":
        assert s["pruned_ep"] == 0 and s["cd_saved_tokens"] == 0 and set(s["flushes_by_trigger"]) == {"eager"}
        assert s["pruned_by_rule"]["top-k"] > 0
    elif name == "specscale-greedy":
        # greedy: every candidate on a sequence draws its token, all equal, and all but one are shared
        assert s["cd_saved_tokens"] == s["generated_tokens"] - rt.engine.total_logit_rows > 0
        assert s["pruned_ep"] > 0
    else:
        # speculative steps cancelled while they were still being generated keep what was drawn
        assert any(n.status.value == "cancelled" and n.token_ids and n.t_finish is None
                   for t in r["trees"].values() for n in t.nodes)


def test_live_snapshots_are_consistent(run):
    name, r = run
    live = r["live"]
    assert len(live) > 10
    assert [s["problems_answered"] for s in live] == sorted(s["problems_answered"] for s in live)
    for s in live:
        assert s["kv_blocks_used"] <= s["kv_blocks_peak"] <= s["kv_blocks_total"]
        assert s["logical_candidates"] >= s["running_sequences"]
        assert sum(s["flushes_by_trigger"].values()) == s["prm_calls"]
    assert max(s["running_sequences"] for s in live) > 0
    if name == "specscale-greedy":  # CD: fewer sequences than candidates while steps are shared
        assert any(s["logical_candidates"] > s["running_sequences"] for s in live)


def test_log_lines_when_not_a_terminal(run):
    _, r = run
    s = r["final"]
    assert not r["dash"].live  # a StringIO is no terminal: plain lines, no live panel
    lines = r["log"].splitlines()
    assert len(lines) > 1 and "\x1b" not in r["log"]
    last = lines[-1]
    triggers = ", ".join(f"{k} {v}" for k, v in s["flushes_by_trigger"].items())
    for part in ("problems 3/3 errors 0", f"PRM calls {s['prm_calls']} ({triggers})", f"EP pruned {s['pruned_ep']}",
                 f"CD saved {s['cd_saved_tokens']} tok", f"acc {s['correct']}/3", f"KV 0/{s['kv_blocks_total']}",
                 "queue 0 tasks 0 tok", "seqs 0 cands 0"):
        assert part in last, (part, last)
    assert lines[0].split("] ")[1].startswith("problems 0/3")


def test_panel_and_summary_render(run):
    _, r = run
    s = dict(r["final"], tokens_per_s_now=12.34)
    console = Console(file=io.StringIO(), width=120)
    console.print(render_panel(s, title="specscale solve · test"))
    text = console.file.getvalue()
    for part in ("specscale solve · test", "3/3", "12.3 now", f"{s['generated_tokens']:,} tokens generated",
                 f"generator 0/{s['kv_blocks_total']:,} (peak {s['kv_blocks_peak']:,})",
                 f"{s['pruned_ep']} candidate{'s' * (s['pruned_ep'] != 1)} pruned by EP",
                 f"{s['cd_saved_tokens']:,} token{'s' * (s['cd_saved_tokens'] != 1)} saved by CD",
                 f"{s['correct']}/3", "PRM queue", "errors"):
        assert part in text, (part, text)
    for trigger, n in s["flushes_by_trigger"].items():
        assert f"{trigger} {n}" in text
    console = Console(file=io.StringIO(), width=120)
    console.print(summary_table(final_summary(s, {})))
    text = console.file.getvalue()
    assert "run summary" in text and f"{s['prm_calls']} (" in text and f"EP's rules: {s['pruned_ep']})" in text
    assert f"{sum(s['pruned_by_rule'].values())} candidates lost selection" in text
    assert f"{sum(s['cancelled_by_rule'].values())} candidates never needed" in text


def test_token_rate_window():
    rate = TokenRate(window_s=8.0)
    assert rate.add(0.0, 0) is None
    assert rate.add(1.0, 10) == 10.0
    assert rate.add(2.0, 30) == 15.0
    # the samples at t=0 and t=1 leave the 8 s window; t=2 stays as its left edge
    assert rate.add(10.0, 50) == 20 / 8
    with pytest.raises(ValueError):
        TokenRate(0)


SUMMARY_KEYS = {
    "problems_total", "problems_answered", "errors", "graded", "correct", "accuracy", "wall_s", "generated_tokens",
    "tokens_per_s", "engine_steps", "preemptions", "prm_preemptions", "kv_blocks_total", "kv_blocks_peak", "prm_kv_blocks_total",
    "prm_kv_blocks_peak", "prm_calls", "flushes_by_trigger", "prm_tasks", "prm_prefills", "prm_input_tokens",
    "prm_computed_tokens", "prm_mean_batch_tasks", "prm_mean_batch_tokens", "prm_mean_batch_computed_tokens",
    "prm_queued_s", "pruned_ep", "pruned_by_rule", "cancelled_by_rule", "cd_saved_tokens", "generation_s",
    "verification_s", "peak_rss_bytes", "grading_timeouts", "config", "accuracy_best", "accuracy_weighted",
    "accuracy_majority", "accuracy_at_n", "torch_threads", "session", "speculation_budget",
    "speculation_budget_source", "speculation_bound_steps",
}


def test_solve_writes_summary_json(tiny_dir, tmp_path):
    out = tmp_path / "out"
    res = solve([str(GSM8K), "--limit", "3", "-o", str(out), "--policy", "specscale", "--no-dashboard"], tiny_dir)
    assert res.exit_code == 0, res.output
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert set(summary) == SUMMARY_KEYS
    # the speculation budget in force: specscale's default "auto" is the generator's measured knee
    assert summary["speculation_budget_source"] in ("measured", "cached")
    assert 1 <= summary["speculation_budget"] <= 256 and summary["config"]["search"]["speculation_budget"] == "auto"
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]  # written atomically: no temp file left
    recs = records(out)
    assert summary["problems_total"] == summary["problems_answered"] == len(recs) == 3
    assert summary["errors"] == 0 and summary["graded"] == 3
    assert summary["correct"] == sum(r["correct"] for r in recs)
    assert summary["accuracy"] == round(summary["correct"] / 3, 4)
    for rule in ("best", "weighted", "majority"):
        assert summary[f"accuracy_{rule}"] == round(sum(r[f"correct_{rule}"] for r in recs) / 3, 4)
    # accuracy over each record's first n completions (n = 1, 2, 4 = N), every rule graded
    assert list(summary["accuracy_at_n"]) == ["1", "2", "4"]
    for n, acc in summary["accuracy_at_n"].items():
        assert acc["accuracy"] == round(sum(r["at_n"][n]["correct"] for r in recs) / 3, 4)
        for rule in ("best", "weighted", "majority"):
            assert acc[f"accuracy_{rule}"] == round(sum(r["at_n"][n][f"correct_{rule}"] for r in recs) / 3, 4)
    assert summary["accuracy_at_n"]["4"]["accuracy_best"] == summary["accuracy_best"]
    assert summary["accuracy_best"] == summary["accuracy"]  # the default selection is the best path
    assert summary["generated_tokens"] - summary["cd_saved_tokens"] == sum(r["num_generated_tokens"] for r in recs)
    assert sum(summary["flushes_by_trigger"].values()) == summary["prm_calls"] > 0
    nodes = [n for r in recs for n in orjson.loads((out / "traces" / safe_filename(r["id"])).read_bytes())["nodes"]]
    assert summary["pruned_by_rule"] == dict(Counter(n["pruned_by"] for n in nodes if n["status"] == "pruned"))
    assert summary["cancelled_by_rule"] == dict(Counter(n["pruned_by"] for n in nodes if n["status"] == "cancelled"))
    assert summary["prm_tasks"] == sum(1 for n in nodes if n["t_scored"] is not None)
    assert summary["tokens_per_s"] == pytest.approx(summary["generated_tokens"] / summary["wall_s"], rel=1e-3)
    cfg = summary["config"]
    assert cfg == orjson.loads((out / "run.json").read_bytes())
    assert cfg["policy"] == "specscale" and cfg["models"]["generator"] == cfg["models"]["prm"] == str(tiny_dir)
    assert set(cfg["search"]) == {f.name for f in fields(SearchConfig)}
    given = dict(beam_size=4, beam_width=2, max_steps=2, step_delimiter="e", max_step_tokens=32)
    assert {k: cfg["search"][k] for k in given} == given
    assert cfg["search"]["lv_threshold"] == 1024  # the smollm2-cpu preset's measured threshold
    assert "run summary" in res.output and "summary.json" in res.output


def test_no_progress_is_a_hidden_alias():
    from click.testing import CliRunner

    from specscale_cli.main import cli

    help_text = CliRunner().invoke(cli, ["solve", "--help"]).output
    assert "--no-dashboard" in help_text and "--no-progress" not in help_text


def test_token_rate_at_falls_while_no_token_arrives():
    rate = TokenRate(window_s=8.0)
    rate.add(0.0, 0)
    rate.add(2.0, 100)
    assert rate.rate_at(2.0) == 50.0
    # a PRM flush: no sample for 6 s, the window's tokens spread over more time
    assert rate.rate_at(8.0) == 100 / 8
    # 8 s after the last token the window (2 s .. 10 s) holds none: the rate is 0, not a frozen 50
    assert rate.rate_at(10.0) == 0.0


def test_eta_counts_the_time_spent_on_problems_still_in_flight():
    from core.metrics import estimate_eta

    # 4 at once; answered in 30, 40, 50 s; 4 in flight for 35, 20, 10, 5 s; 6 waiting. The answered
    # ones are the short ones, so the mean counts the time spent on all: (120 + 70) / 3 s
    mean = 190 / 3
    eta = estimate_eta(10, [30.0, 40.0, 50.0], [35.0, 20.0, 10.0, 5.0], slots=4)
    # in flight: mean - age each; then the 6 waiting take the first free slot, a mean each
    ends = sorted([mean - 35, mean - 20, mean - 10, mean - 5])
    for _ in range(6):
        ends = sorted(ends[1:] + [ends[0] + mean])
    assert eta == pytest.approx(max(ends)) == pytest.approx(170.0)
    # a problem in flight longer than the mean still needs a quarter of it
    assert estimate_eta(2, [40.0, 40.0, 40.0], [100.0], slots=1) == pytest.approx((220 / 3) / 4 + 220 / 3)
    assert estimate_eta(0, [10.0], [], slots=4) == 0.0


def test_no_eta_while_it_would_be_guesswork():
    from core.metrics import estimate_eta

    times, ages = [30.0, 40.0, 50.0], [10.0, 10.0]
    assert estimate_eta(10, times, ages, slots=2) is not None
    assert estimate_eta(10, times[:2], ages, slots=2) is None  # fewer than 3 answers
    assert estimate_eta(10, [10.0, 60.0, 100.0], ages, slots=2) is None  # mean known to +-46%, not 20%
    assert estimate_eta(20, times, [10.0] * 7, slots=7) is None  # 3 answered, 7 in flight
    assert estimate_eta(20, times, [10.0] * 6, slots=6) is not None


def test_no_eta_once_every_remaining_problem_is_in_flight():
    from core.metrics import estimate_eta

    times = [150.0, 150.0, 150.0]
    # the ones still running are the long ones: how long is not known
    assert estimate_eta(3, times, [220.0] * 3, slots=4) is None
    # one problem waiting besides those in flight: an estimate again
    assert estimate_eta(4, times, [220.0] * 3, slots=4) > 0
    snap = {"problems_answered": 3, "errors": 0, "problems_total": 10, "eta_s": None, "problems_in_flight": 7}
    from specscale_cli.dashboard import _eta

    assert _eta(snap) == "- (last 7 in flight)"
    # 2 at once: no estimate yet, but only 2 of the 7 left are in flight
    assert _eta({**snap, "problems_in_flight": 2}) == "-"
    assert _eta({**snap, "problems_answered": 0}) == "-"  # before the first answer
    assert _eta({**snap, "eta_s": 65.0}) == "0:01:05"


def _panel_text(snap, width):
    console = Console(file=io.StringIO(), width=200)
    console.print(render_panel(snap, width=width))
    return console.file.getvalue()


def test_panel_keeps_one_width_and_cuts_rows(run):
    _, r = run
    snap = dict(r["final"], tokens_per_s_now=1.0)
    for width in (40, 60, 100):
        lines = _panel_text(snap, width).splitlines()
        assert {len(line) for line in lines} == {width}  # every row cut to the width: no wrap, no stale copy
        # eleven rows (twelve with a speculation budget) and two borders at any width
        assert len(lines) == 13 + (snap.get("speculation_budget") is not None)
        if width >= 60:  # the progress bar gives way before the clock: count, elapsed and ETA stay whole
            assert f"3/3  elapsed {_clock(snap['wall_s'])}  ETA 0:00:00 " in lines[1], lines[1]
    progress = f"3/3  elapsed {_clock(snap['wall_s'])}  ETA 0:00:00"
    assert _panel_text(snap, 100).splitlines()[1].count("━") == 30
    assert _panel_text(snap, 60).splitlines()[1].count("━") == 60 - 4 - 11 - len(progress) - 2
    assert "━" not in _panel_text(snap, 50).splitlines()[1]  # no room for 5: no bar


def test_narrow_panel_keeps_the_clock_threads_and_a_marked_title(run):
    _, r = run
    # the last 2 problems in flight: the ETA's note is long, and the clock comes before it
    snap = dict(r["final"], tokens_per_s_now=1.0, problems_answered=1, eta_s=None, wall_s=75.0, torch_threads=2,
                problems_in_flight=2)
    console = Console(file=io.StringIO(), width=60, color_system=None)
    console.print(render_panel(snap, title="specscale solve · examples/gsm8k_sample.jsonl · specscale", width=60))
    lines = console.file.getvalue().splitlines()
    assert lines[0] == "╭─ specscale solve · examples/gsm8k_sample.jsonl · specs… ─╮"
    assert "1/3  elapsed 0:01:15  ETA - (last 2" in lines[1], lines[1]  # the note may be cut, not the clock
    memory = next(line for line in lines if "memory" in line)
    assert "peak resident" in memory and "2 torch threads" in memory, memory


def test_accuracy_pending_and_plurals(run):
    _, r = run
    snap = dict(r["final"], problems_answered=0, graded=0, correct=0, accuracy=None, logical_candidates=1,
                queue_tasks=1, queue_tokens=1, pruned_ep=1, cd_saved_tokens=1)
    text = _panel_text(snap, 140)
    assert "pending (no answer yet)" in text and "no gold answers" not in text
    for part in ("1 candidate ·", "1 task ·", "1 token", "1 candidate pruned by EP", "1 token saved by CD"):
        assert part in text, part
    snap.update(problems_answered=2)
    assert "no gold answers" in _panel_text(snap, 140)
    summary = dict(r["final"], pruned_by_rule={"top-k": 1}, cancelled_by_rule={"surplus": 1})
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(summary_table(summary))
    assert "1 candidate lost selection" in console.file.getvalue()
    assert "1 candidate never needed" in console.file.getvalue()


def test_eta_simulation_tool_reads_the_real_estimate():
    """tools/eta-simulation drives core.metrics.estimate_eta itself: its medians sit near 1."""
    import subprocess
    import sys
    from pathlib import Path

    tool = Path(__file__).resolve().parents[1] / "tools" / "eta-simulation"
    out = subprocess.run([sys.executable, str(tool), "--runs", "5"], capture_output=True, text=True, timeout=120,
                         check=True).stdout.splitlines()
    rows = [line.split() for line in out[1:]]
    assert [(int(r[0]), int(r[1])) for r in rows] == [(6, 2), (10, 4), (32, 16), (100, 16), (300, 32), (100, 4)]
    medians = [float(r[3]) for r in rows if r[2] != "never"]
    assert len(medians) >= 5 and all(0.7 < m < 1.6 for m in medians), out

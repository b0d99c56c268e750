"""`specscale trace` on a hand-built tree: counts that agree, the legend, the marks, files in
every format, rows cut at the width."""

from __future__ import annotations

import re
from collections import Counter

import orjson
import pytest
from click.testing import CliRunner

from specscale_cli.main import cli
from specscale_cli.trace import summarize


def _node(i, parent, depth, status, score=None, path_score=None, rule=None, spec=False, potential=1, end=None,
          text=None):
    return {"id": i, "parent": parent, "depth": depth, "path": [], "text": text or f"step {i} text",
            "num_tokens": 0 if parent is None else 10 + i, "score": score, "path_score": path_score,
            "status": status, "stop_reason": None, "end_reason": end, "pruned_by": rule, "speculative": spec,
            "potential": potential, "deduplicated": potential > 1, "t_start": 0.0, "t_finish": None,
            "t_submitted": None, "t_scored": None}


# root -> a (selected), b (pruned top-k, with 2 cancelled speculative children), c (pruned by ep);
# a -> a1 (completed, best), a2 (completed), 4 surplus children cancelled
NODES = [
    _node(0, None, 0, "selected", text=""),
    _node(1, 0, 1, "selected", 0.9),
    _node(2, 0, 1, "pruned", 0.2, rule="top-k"),
    _node(3, 0, 1, "pruned", 0.1, rule="ep"),
    _node(4, 1, 2, "completed", 0.95, 0.95, end="eos", text="the answer is 42"),
    _node(5, 1, 2, "completed", 0.5, 0.5, end="step-cap", potential=2),
    *[_node(6 + j, 1, 2, "cancelled", rule="surplus") for j in range(4)],
    *[_node(10 + j, 2, 2, "cancelled", rule="top-k", spec=True) for j in range(2)],
]
TRACE = {"id": "p-1", "problem": "q", "num_prompt_tokens": 30, "policy": "specscale", "nodes": NODES}


@pytest.fixture()
def trace_file(tmp_path):
    path = tmp_path / "p-1.json"
    path.write_bytes(orjson.dumps(TRACE))
    return path


def test_counts_agree_with_each_other():
    s = summarize(TRACE)
    assert (s["nodes"], s["completed"], s["pruned"], s["cancelled"]) == (11, 2, 2, 6)
    assert s["pruned_by_rule"] == {"ep": 1, "top-k": 1}
    assert s["cancelled_by_rule"] == {"surplus": 4, "top-k": 2}
    assert s["pruned"] == sum(s["pruned_by_rule"].values()) and s["cancelled"] == sum(s["cancelled_by_rule"].values())
    assert s["speculative_nodes"] == 2
    assert s["tokens_wasted"] == sum(10 + i for i in (2, 3, 6, 7, 8, 9, 10, 11))


def test_tree_view_has_legend_marks_and_agreeing_summary(trace_file):
    res = CliRunner().invoke(cli, ["trace", str(trace_file)], env={"COLUMNS": "160"})
    assert res.exit_code == 0, res.output
    out = res.output
    rows = {line.split(" d", 1)[1].split()[0]: line for line in out.splitlines() if " d1 s" in line or " d2 s" in line}
    answer_rows = [line for line in out.splitlines() if "★" in line and (" d1 " in line or " d2 " in line)]
    assert len(answer_rows) == 2 and "the answer is 42" in answer_rows[1] and "step 1 text" in answer_rows[0]
    assert sum(line.startswith(("│   ├──  ~", "│   └──  ~")) for line in out.splitlines()) == 2  # speculative rows
    assert "completed [eos] p 0.950" in out and "s 0.950" in out and "x2" in out
    for words in ("legend", "this step's score from the PRM", "path score of a completed path",
                  "lost selection", "a surplus child", "its rows in red", "its rows in bold green",
                  "its text in bold yellow", "each candidate keeps its own row"):
        assert words in out, words
    assert "pruned (by rule)    │ 2 (ep 1, top-k 1)" in out
    assert "cancelled (by rule) │ 6 (surplus 4, top-k 2)" in out
    assert rows  # rows were found


@pytest.mark.parametrize("fmt, check", [
    ("tree", lambda text: "★" in text and "legend" in text and "\x1b" not in text),
    ("dot", lambda text: text.startswith("digraph") and text.count("style=dashed") == 2 and "penwidth=3" in text),
    ("json", lambda text: orjson.loads(text)["cancelled_by_rule"] == {"surplus": 4, "top-k": 2}),
])
def test_output_file_in_every_format(trace_file, tmp_path, fmt, check):
    target = tmp_path / f"view.{fmt}"
    res = CliRunner().invoke(cli, ["trace", str(trace_file), "--format", fmt, "-o", str(target)])
    assert res.exit_code == 0 and res.output == ""
    assert check(target.read_text(encoding="utf-8"))


def test_rows_are_cut_not_wrapped_on_a_narrow_terminal(trace_file):
    long = dict(TRACE, nodes=[dict(n, text="word " * 40) if n["id"] == 4 else n for n in NODES])
    path = trace_file.with_name("long.json")
    path.write_bytes(orjson.dumps(long))
    res = CliRunner().invoke(cli, ["trace", str(path), "--width", "200"], env={"COLUMNS": "50"})
    tree_rows = res.output.split("legend")[0].splitlines()
    assert max(len(line) for line in tree_rows) <= 50
    assert len(tree_rows) == 1 + 11  # the title and one row per node: nothing wrapped onto a second line


def test_a_narrow_terminal_cuts_the_step_text_and_keeps_every_status(trace_file):
    long = dict(TRACE, nodes=[dict(n, text="word " * 40) for n in NODES])
    path = trace_file.with_name("long.json")
    path.write_bytes(orjson.dumps(long))
    res = CliRunner().invoke(cli, ["trace", str(path)], env={"COLUMNS": "80"})
    rows = [line for line in res.output.split("legend")[0].splitlines() if " d1 " in line or " d2 " in line]
    assert len(rows) == 11 and max(len(line) for line in rows) <= 80
    statuses = Counter(re.search(r" d\d s +(?:[\d.]+|-) +(\w+)", row).group(1) for row in rows)
    assert statuses == Counter(n["status"] for n in NODES[1:])
    assert sum("completed [eos] p 0.950" in row for row in rows) == 1


def test_token_counts_are_the_answer_records(trace_file):
    counted = dict(TRACE, num_generated_tokens=150, num_sampled_tokens=180, num_cd_saved_tokens=30)
    s = summarize(counted)
    assert (s["tokens_generated"], s["tokens_sampled"], s["cd_saved_tokens"]) == (150, 180, 30)
    # an older trace without the counts: from the nodes (node 5's step was shared by 2 candidates)
    s = summarize(TRACE)
    assert s["tokens_sampled"] == sum(10 + i for i in range(1, 12))
    assert s["cd_saved_tokens"] == round((10 + 5) / 2)
    assert s["tokens_generated"] == s["tokens_sampled"] - s["cd_saved_tokens"]


def test_a_file_gets_whole_rows_whatever_the_terminal(trace_file, tmp_path):
    long = dict(TRACE, nodes=[dict(n, text="word " * 40) if n["id"] == 4 else n for n in NODES])
    path = trace_file.with_name("long.json")
    path.write_bytes(orjson.dumps(long))
    target = tmp_path / "view.txt"
    res = CliRunner().invoke(cli, ["trace", str(path), "--width", "200", "-o", str(target)], env={"COLUMNS": "50"})
    assert res.exit_code == 0
    text = target.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if "word word" in line)
    # the whole step text and the row's end (status, path score), not cut at the terminal's 50 columns
    assert "word " * 39 in row and "completed [eos] p 0.950" in row and row.endswith("word")
    assert not any(line != line.rstrip() for line in text.splitlines())  # no trailing padding


def test_control_characters_a_model_wrote_are_shown_escaped(tmp_path):
    nodes = [dict(n) for n in NODES]
    nodes[4]["text"] = "the answer is \x1b[31m42\x07 done"
    path = tmp_path / "ctl.json"
    path.write_bytes(orjson.dumps({**TRACE, "nodes": nodes}))
    res = CliRunner().invoke(cli, ["trace", str(path), "--format", "text"], env={"COLUMNS": "160"})
    assert res.exit_code == 0, res.output
    assert "\x1b" not in res.output and "\x07" not in res.output
    assert "the answer is \\x1b[31m42\\x07 done" in res.output

"""`specscale trace`: inspect one search tree written by `solve` (OUT/traces/<id>.json)."""

from __future__ import annotations

import io
import re
import sys
from collections import Counter
from pathlib import Path

import click
import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from core.io.writers import ANSWERS_FILENAME, TRACES_DIRNAME, safe_filename

STATUS_STYLE = {
    "completed": "bold green", "selected": "green", "verified": "cyan", "finished": "cyan",
    "generating": "yellow", "pruned": "red", "cancelled": "dim",
}
WASTED = {"pruned", "cancelled"}
# what each status means, in the words of docs/solve.md "Traces" and `solve --help`
STATUS_MEANING = {
    "completed": "a finished path, one of the N answers",
    "selected": "kept at its depth and expanded",
    "pruned": "lost selection: rule top-k (not in the top-k), ep (k better-scored candidates already), "
              "perfect-score (k candidates scored 1.0)",
    "cancelled": "never needed: below a pruned candidate (its rule), a surplus child (surplus), "
                 "past FastTTS's cap (fasttts-cap), or its problem failed (error)",
}
# one column wide each, so rows stay aligned
ANSWER_MARK, SPECULATIVE_MARK = "★", "~"



# a file is not cut to a terminal: wide enough for any row of a deep tree (--width caps step text)
FILE_WIDTH = 1000

def load_trace(path: Path) -> dict:
    """Read a trace file.

    Raises:
        click.BadParameter: missing file, invalid JSON, or not a trace (no ``nodes`` list).
    """
    try:
        data = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path}: {exc.strerror}", param_hint="TRACE") from exc
    except orjson.JSONDecodeError as exc:
        hint = (f"; {path.name} is a run's answers file: pass its folder and --id ID to show one "
                f"problem's tree" if path.name == ANSWERS_FILENAME else "")
        raise click.BadParameter(f"{path}: invalid JSON ({exc}){hint}", param_hint="TRACE") from exc
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list) or not data["nodes"]:
        raise click.BadParameter(f"{path}: not a specscale trace (no 'nodes' list)", param_hint="TRACE")
    return data


def resolve_trace(target: Path, problem_id: str | None) -> Path:
    """The trace file ``target`` names: a trace file itself, or with ``problem_id`` the trace of
    that problem in a run's output folder (``target`` the folder, its ``answers.jsonl`` or its
    ``traces/``), the file name as :func:`core.io.writers.safe_filename` gives it.

    Raises:
        click.BadParameter: a folder without ``--id`` (the message names some of its ids), an id
            the run has no trace for, or ``--id`` with a trace file.
    """
    if target.is_file() and target.name != ANSWERS_FILENAME:
        if problem_id is not None:
            raise click.BadParameter(f"{target} is one trace file already; --id picks a problem in a run's "
                                     f"output folder", param_hint="--id")
        return target
    out = target.parent if target.name in (ANSWERS_FILENAME, TRACES_DIRNAME) else target
    if not target.exists():
        return target  # load_trace names the missing file
    traces = out / TRACES_DIRNAME
    if problem_id is None:
        ids = _record_ids(out / ANSWERS_FILENAME)
        some = ", ".join(ids[:5]) + (f" ... ({len(ids)} in all)" if len(ids) > 5 else "")
        raise click.BadParameter(f"{target} is a run's output, not one trace: pass --id ID to show one problem's "
                                 f"tree" + (f" (ids: {some})" if ids else f" (no answer records in {out})"),
                                 param_hint="TRACE")
    path = traces / safe_filename(problem_id)
    if not path.is_file():
        raise click.BadParameter(f"no trace of problem {problem_id!r} in {traces} (it has no answer record, or "
                                 f"the run used --no-traces)", param_hint="--id")
    return path


def _record_ids(answers: Path) -> list[str]:
    """Ids of the answer records in ``answers`` (error records have no trace), in file order."""
    ids = []
    try:
        lines = answers.read_bytes().splitlines()
    except OSError:
        return ids
    for line in lines:
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("id"), str) and "error" not in record:
            ids.append(record["id"])
    return ids


def best_path(nodes: list[dict]) -> set[int]:
    """Node ids on the root path of the completed candidate with the highest path score."""
    done = [n for n in nodes if n["status"] == "completed" and n.get("path_score") is not None]
    if not done:
        return set()
    by_id = {n["id"]: n for n in nodes}
    node = max(done, key=lambda n: n["path_score"])
    out = set()
    while node is not None:
        out.add(node["id"])
        node = by_id.get(node["parent"])
    return out


def summarize(trace: dict) -> dict:
    """Counts over the tree: nodes by status, rules, tokens generated, wasted and saved by CD.

    ``pruned``/``pruned_by_rule`` count candidates that lost selection; ``cancelled``/
    ``cancelled_by_rule`` count candidates ended without losing one (below a pruned candidate, a
    surplus child...), as in ``summary.json``, so ``pruned == sum(pruned_by_rule.values())`` and
    the same for cancelled. Tokens, as in the problem's answer record: ``tokens_generated`` what
    the generator computed for the problem (``num_generated_tokens``), ``tokens_sampled`` the
    tokens drawn for its candidates (every node's step, the part drawn before a cancel included:
    ``num_sampled_tokens``), ``cd_saved_tokens`` of those the ones CD drew once for several
    candidates (``num_cd_saved_tokens``); ``tokens_wasted`` the steps of pruned and cancelled
    candidates. A trace written before these counts existed gets estimates from its nodes.
    """
    nodes = trace["nodes"][1:]
    status = Counter(n["status"] for n in nodes)

    def rules(kind: str) -> dict:
        return dict(sorted(Counter(n.get("pruned_by") or "?" for n in nodes if n["status"] == kind).items()))

    sampled = sum(n["num_tokens"] for n in nodes)
    wasted = sum(n["num_tokens"] for n in nodes if n["status"] in WASTED)
    saved = trace.get("num_cd_saved_tokens")
    if saved is None:  # an older trace: a step shared by `potential` candidates was computed once
        saved = round(sum(n["num_tokens"] * (n.get("potential", 1) - 1) / max(1, n.get("potential", 1))
                          for n in nodes))
    sampled = trace.get("num_sampled_tokens", sampled)
    generated = trace.get("num_generated_tokens", sampled - saved)
    return {
        "id": trace.get("id"), "policy": trace.get("policy"), "nodes": len(nodes),
        "max_depth": max((n["depth"] for n in nodes), default=0),
        "status": dict(status),
        "completed": status.get("completed", 0), "pruned": status.get("pruned", 0),
        "cancelled": status.get("cancelled", 0),
        "pruned_by_rule": rules("pruned"), "cancelled_by_rule": rules("cancelled"),
        "tokens_generated": generated, "tokens_sampled": sampled, "tokens_wasted": wasted,
        "cd_saved_tokens": saved,
        "speculative_nodes": sum(1 for n in nodes if n.get("speculative")),
    }


# control characters a model may emit (ESC, BEL, backspace...) would drive the terminal: shown escaped
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _short(text: str, width: int) -> str:
    one_line = _CONTROL.sub(lambda m: repr(m.group())[1:-1], " ".join(text.split()))
    return one_line if len(one_line) <= width else one_line[: width - 1] + "…"


def render_tree(trace: dict, width: int) -> Tree:
    """A rich Tree: one row per node with depth, step score, shortened step text and status.

    ``★`` marks the path of the answer (the completed path with the best path score, which
    `solve` reports as ``pred``), ``~`` a speculative node, ``xK`` a step shared by K candidates
    (CD). Rows are cut at the console's width, never wrapped.
    """
    nodes = trace["nodes"]
    children: dict[int | None, list[dict]] = {}
    for n in nodes:
        children.setdefault(n["parent"], []).append(n)
    best = best_path(nodes)
    root = nodes[0]
    tree = Tree(Text(f"{trace.get('id', '?')}  ({trace.get('policy', '?')}, "
                     f"{root.get('num_tokens', 0) or trace.get('num_prompt_tokens', 0)} prompt tokens)", style="bold",
                     no_wrap=True, overflow="ellipsis"))

    def label(n: dict) -> Text:
        score = "s   -  " if n.get("score") is None else f"s {n['score']:.3f}"
        status = n["status"] + (f" ({n['pruned_by']})" if n.get("pruned_by") else "")
        if n.get("end_reason") and n["status"] == "completed":
            status += f" [{n['end_reason']}] p {n['path_score']:.3f}" if n.get("path_score") is not None else \
                f" [{n['end_reason']}]"
        style = STATUS_STYLE.get(n["status"], "")
        on_answer = n["id"] in best
        # the figures first and the step's text last, so a narrow terminal cuts only the text
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(ANSWER_MARK if on_answer else " ", style="bold yellow")
        line.append(SPECULATIVE_MARK if n.get("speculative") else " ", style="magenta")
        line.append(f" d{n['depth']} {score} {status}", style=style)
        if n.get("potential", 1) > 1:
            line.append(f" x{n['potential']}", style="magenta")
        line.append("  ")
        line.append(_short(n.get("text", ""), width), style="bold yellow" if on_answer else style)
        return line

    def add(branch: Tree, node_id: int) -> None:
        for child in children.get(node_id, []):
            add(branch.add(label(child)), child["id"])

    add(tree, root["id"])
    return tree


def legend() -> Table:
    """What the tree's marks, numbers and colours mean."""
    table = Table(title="legend", title_justify="left", show_header=False, box=None, padding=(0, 1))
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    table.add_row(Text("s 0.812", style="bold"), "this step's score from the PRM (scorer)")
    table.add_row(Text("p 0.640", style="bold"), "path score of a completed path (step scores aggregated)")
    table.add_row(Text(ANSWER_MARK, style="bold yellow"), "the path of the answer: the best path score; its text "
                                                            "in bold yellow")
    table.add_row(Text(SPECULATIVE_MARK, style="magenta"), "speculative: generated before its parent's depth was "
                                                             "decided")
    table.add_row(Text("x3", style="magenta"), "one step generated once for 3 candidates (CD); each candidate keeps "
                                               "its own row, with the same text and score")
    for status, meaning in STATUS_MEANING.items():
        table.add_row(Text(status, style=STATUS_STYLE[status]), f"{meaning}; its rows in {STATUS_STYLE[status]}")
    table.add_row(Text("[eos]", style="bold"), "why a completed path ended: eos, length, step-cap")
    return table


def summary_table(s: dict) -> Table:
    """The counts of :func:`summarize` as a table; pruned and cancelled each with their rules."""
    table = Table(title="summary", show_header=False)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")

    def with_rules(count: int, rules: dict) -> str:
        return f"{count}" + (f" ({', '.join(f'{k} {v}' for k, v in rules.items())})" if rules else "")

    for key in ("nodes", "max_depth", "completed"):
        table.add_row(key.replace("_", " "), str(s[key]))
    table.add_row("pruned (by rule)", with_rules(s["pruned"], s["pruned_by_rule"]))
    table.add_row("cancelled (by rule)", with_rules(s["cancelled"], s["cancelled_by_rule"]))
    table.add_row("speculative nodes", str(s["speculative_nodes"]))
    table.add_row("tokens generated", f"{s['tokens_generated']} computed by the generator")
    table.add_row("tokens sampled", f"{s['tokens_sampled']} drawn for candidates (CD drew {s['cd_saved_tokens']} "
                                    f"of them once for several)")
    table.add_row("tokens wasted", f"{s['tokens_wasted']} in steps of pruned or cancelled candidates")
    return table


def to_dot(trace: dict, width: int = 40) -> str:
    """Graphviz source of the tree (status as colour, the answer's path bold, speculative nodes dashed)."""
    colors = {"completed": "darkgreen", "selected": "green", "pruned": "red", "cancelled": "gray"}
    best = best_path(trace["nodes"])
    lines = ["digraph search {", "  node [shape=box, fontsize=10];"]
    for n in trace["nodes"]:
        text = _short(n.get("text", "") or "(prompt)", width).replace("\\", "\\\\").replace('"', '\\"')
        score = "" if n.get("score") is None else f"\\n{n['score']:.3f}"
        style = ', penwidth=3' if n["id"] in best else ""
        if n.get("speculative"):
            style += ", style=dashed"
        lines.append(f'  n{n["id"]} [label="{text}{score}\\n{n["status"]}", '
                     f'color={colors.get(n["status"], "black")}{style}];')
        if n["parent"] is not None:
            lines.append(f'  n{n["parent"]} -> n{n["id"]};')
    lines.append("}")
    return "\n".join(lines) + "\n"


@click.command()
@click.argument("trace_file", metavar="TRACE", type=click.Path(path_type=Path))
@click.option("--id", "problem_id", metavar="ID", default=None,
              help="With TRACE a run's output folder (or its answers.jsonl): show the tree of problem ID.")
@click.option("--format", "fmt", type=click.Choice(["tree", "text", "dot", "json"]), default="tree", show_default=True,
              help="tree: the tree with a legend and summary counts; text: the same without colours; dot: "
                   "Graphviz source; json: summary counts.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the output to this file instead of stdout (any format; a tree as plain text with "
                   "whole rows).")
@click.option("--width", type=click.IntRange(min=10), default=70, show_default=True,
              help="Characters of step text per row (rows are also cut at the terminal's width).")
def trace(trace_file, problem_id, fmt, output, width):
    """Show one search tree: TRACE is OUT/traces/<id>.json written by `specscale solve`, or the
    run's folder OUT with --id ID.

    Each row is one candidate step: depth, its PRM step score (s), its status (with the path
    score p of a completed path), then its text.

    \b
    pruned     lost selection (rules: top-k, ep, perfect-score)
    cancelled  never needed: below a pruned candidate, a surplus child
               (surplus), past FastTTS's cap (fasttts-cap)
    ★          the path of the answer
    ~          a speculative step
    xK         a step shared by K candidates (CD)
    """
    data = load_trace(resolve_trace(trace_file, problem_id))
    if fmt in ("tree", "text"):
        if output:
            # a file gets plain text with whole rows, whatever the terminal
            console = Console(file=io.StringIO(), width=FILE_WIDTH, no_color=True, highlight=False)
        else:
            console = Console(highlight=False, width=_terminal_width(), no_color=fmt == "text")
        console.print(render_tree(data, width))
        console.print(legend())
        console.print(summary_table(summarize(data)))
        if output:
            _write(output, "".join(line.rstrip() + "\n" for line in console.file.getvalue().splitlines()))
        return
    text = to_dot(data, width) if fmt == "dot" else orjson.dumps(summarize(data), option=orjson.OPT_INDENT_2).decode() + "\n"
    if output:
        _write(output, text)
    else:
        click.echo(text, nl=False)


def _terminal_width() -> int | None:
    """Columns of the terminal the user looks at, also when stdout is piped (``trace ... | less``):
    ``COLUMNS`` if set, else the size of whichever of stdout, stderr, stdin is a terminal; None
    lets rich choose."""
    import os

    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    for stream in (sys.stdout, sys.stderr, sys.stdin):
        try:
            return os.get_terminal_size(stream.fileno()).columns
        except (AttributeError, OSError, ValueError):
            continue
    return None


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}") from exc

"""`specscale trace`: inspect one search tree written by `solve` (OUT/traces/<id>.json)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import click
import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

STATUS_STYLE = {
    "completed": "bold green", "selected": "green", "verified": "cyan", "finished": "cyan",
    "generating": "yellow", "pruned": "red", "cancelled": "dim",
}
WASTED = {"pruned", "cancelled"}


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
        raise click.BadParameter(f"{path}: invalid JSON ({exc})", param_hint="TRACE") from exc
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list) or not data["nodes"]:
        raise click.BadParameter(f"{path}: not a specscale trace (no 'nodes' list)", param_hint="TRACE")
    return data


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
    """Counts over the tree: nodes by status, pruning rules, tokens generated, wasted and saved by CD.

    Tokens: ``generated`` sums every step's tokens; ``wasted`` those of pruned and cancelled
    candidates; ``dedup_saved`` estimates tokens CD did not compute (a step shared by
    ``potential`` candidates was computed once).
    """
    nodes = trace["nodes"][1:]
    status = Counter(n["status"] for n in nodes)
    rules = Counter(n.get("pruned_by") for n in nodes if n.get("pruned_by"))
    generated = sum(n["num_tokens"] for n in nodes)
    wasted = sum(n["num_tokens"] for n in nodes if n["status"] in WASTED)
    saved = sum(n["num_tokens"] * (n.get("potential", 1) - 1) / max(1, n.get("potential", 1)) for n in nodes)
    return {
        "id": trace.get("id"), "policy": trace.get("policy"), "nodes": len(nodes),
        "max_depth": max((n["depth"] for n in nodes), default=0),
        "status": dict(status), "pruned_by": dict(rules),
        "completed": status.get("completed", 0), "pruned": status.get("pruned", 0),
        "cancelled": status.get("cancelled", 0),
        "tokens_generated": generated, "tokens_wasted": wasted, "dedup_saved_tokens": round(saved),
        "speculative_nodes": sum(1 for n in nodes if n.get("speculative")),
    }


def _short(text: str, width: int) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= width else one_line[: width - 1] + "…"


def render_tree(trace: dict, width: int) -> Tree:
    """A rich Tree: one line per node with depth, shortened step text, score and status."""
    nodes = trace["nodes"]
    children: dict[int | None, list[dict]] = {}
    for n in nodes:
        children.setdefault(n["parent"], []).append(n)
    best = best_path(nodes)
    root = nodes[0]
    tree = Tree(Text(f"{trace.get('id', '?')}  ({trace.get('policy', '?')}, "
                     f"{root.get('num_tokens', 0) or trace.get('num_prompt_tokens', 0)} prompt tokens)", style="bold"))

    def label(n: dict) -> Text:
        score = "  -   " if n.get("score") is None else f"{n['score']:.3f}"
        status = n["status"] + (f" ({n['pruned_by']})" if n.get("pruned_by") else "")
        if n.get("end_reason") and n["status"] == "completed":
            status += f" [{n['end_reason']}]"
        style = STATUS_STYLE.get(n["status"], "")
        line = Text(f"d{n['depth']} {score} ", style=style)
        line.append(_short(n.get("text", ""), width), style="bold yellow" if n["id"] in best else style)
        line.append(f"  {status}", style=style)
        if n.get("potential", 1) > 1:
            line.append(f"  x{n['potential']}", style="magenta")
        return line

    def add(branch: Tree, node_id: int) -> None:
        for child in children.get(node_id, []):
            add(branch.add(label(child)), child["id"])

    add(tree, root["id"])
    return tree


def to_dot(trace: dict, width: int = 40) -> str:
    """Graphviz source of the tree (status as colour, best path bold)."""
    colors = {"completed": "darkgreen", "selected": "green", "pruned": "red", "cancelled": "gray"}
    best = best_path(trace["nodes"])
    lines = ["digraph search {", "  node [shape=box, fontsize=10];"]
    for n in trace["nodes"]:
        text = _short(n.get("text", "") or "(prompt)", width).replace("\\", "\\\\").replace('"', '\\"')
        score = "" if n.get("score") is None else f"\\n{n['score']:.3f}"
        style = ', penwidth=3' if n["id"] in best else ""
        lines.append(f'  n{n["id"]} [label="{text}{score}\\n{n["status"]}", '
                     f'color={colors.get(n["status"], "black")}{style}];')
        if n["parent"] is not None:
            lines.append(f'  n{n["parent"]} -> n{n["id"]};')
    lines.append("}")
    return "\n".join(lines) + "\n"


@click.command()
@click.argument("trace_file", metavar="TRACE", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["tree", "dot", "json"]), default="tree", show_default=True,
              help="tree: rich view and summary; dot: Graphviz source; json: summary object.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write dot/json output to this file instead of stdout.")
@click.option("--width", type=click.IntRange(min=10), default=70, show_default=True, help="Step text width.")
def trace(trace_file, fmt, output, width):
    """Show one search tree (OUT/traces/<id>.json written by `specscale solve`)."""
    data = load_trace(trace_file)
    if fmt == "tree":
        console = Console()
        console.print(render_tree(data, width))
        s = summarize(data)
        table = Table(title="summary", show_header=False)
        for key in ("nodes", "max_depth", "completed", "pruned", "cancelled", "speculative_nodes",
                    "tokens_generated", "tokens_wasted", "dedup_saved_tokens"):
            table.add_row(key.replace("_", " "), str(s[key]))
        if s["pruned_by"]:
            table.add_row("pruned by", ", ".join(f"{k} {v}" for k, v in sorted(s["pruned_by"].items())))
        console.print(table)
        return
    text = to_dot(data, width) if fmt == "dot" else json.dumps(summarize(data), indent=2) + "\n"
    if output:
        output.write_text(text, encoding="utf-8")
    else:
        click.echo(text, nl=False)

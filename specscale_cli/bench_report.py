"""Tables and the console of the `specscale bench` reports (their CSV and plot files: core.bench.reports)."""

from __future__ import annotations

from rich.table import Table

from core.bench.reports import COLUMNS, STRATEGY_COLUMNS, get_field

_RATIO_COLUMN = [key for _, key, _ in COLUMNS].index("ratio_vs_nonspec")
# columns a table printed to a file or pipe may use: whole rows in a log, whatever COLUMNS says
LOG_WIDTH = 200


def report_console(stderr: bool = True):
    """The console bench tables go to: the terminal's width on a terminal, :data:`LOG_WIDTH` columns
    in a file or pipe (rich would otherwise assume 80 and cut the figures)."""
    from rich.console import Console

    console = Console(stderr=stderr)
    if not console.is_terminal:
        console.width = LOG_WIDTH
    return console


def _fmt(value, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def results_table(results: dict, rates: list[str]) -> Table:
    """A rich table: one row per policy, throughput-run columns then normalized latency per rate."""
    table = Table(title="specscale bench search", header_style="bold")
    for title, _, _ in COLUMNS:
        table.add_column(title, justify="left" if title == "policy" else "right")
    for rate in rates:
        table.add_column(f"norm lat @{rate}/s (ms/tok)", justify="right")
    best = {rate: min((r["latency"][rate]["normalized_latency_s_per_token"] for r in results.values()), default=None)
            for rate in rates}
    for name, res in results.items():
        row = [name if key is None else _fmt(get_field(res, key), fmt) for _, key, fmt in COLUMNS]
        spread = res.get("ratio_vs_nonspec_runs") or []
        if len(spread) > 1:  # repeated rounds: show the range of same-round ratios next to the median
            row[_RATIO_COLUMN] += f" ({min(spread):.2f}-{max(spread):.2f})"
        for rate in rates:
            value = res["latency"][rate]["normalized_latency_s_per_token"]
            cell = f"{1000 * value:.1f}"
            row.append(f"[bold green]{cell}[/]" if value == best[rate] else cell)
        table.add_row(*row)
    return table


def study_table(study: dict, axis: str, metrics: list[tuple[str, str, float]]) -> Table:
    """A rich table of a sweep (``{value: {policy: {metric: x}}}``): one row per value and policy.

    ``metrics``: ``(column title, result key, scale)`` per column (scale 1000 shows ms for s).
    """
    table = Table(title=f"specscale bench search: {axis} study", header_style="bold")
    table.add_column(axis, justify="right")
    table.add_column("policy")
    for title, _, _ in metrics:
        table.add_column(title, justify="right")
    for value, row in study.items():
        for name, res in row.items():
            cells = [_fmt(None if res.get(key) is None else res[key] * scale, "{:.2f}" if scale == 1 else "{:.1f}")
                     for _, key, scale in metrics]
            table.add_row(value, name, *cells)
    return table


def strategies_table(rows: list[dict]) -> Table:
    """A rich table: one row per strategy run of `specscale bench strategies`."""
    table = Table(title="specscale bench strategies", header_style="bold")
    for title, _, _ in STRATEGY_COLUMNS:
        table.add_column(title, justify="left" if title == "strategy" else "right")
    for row in rows:
        table.add_row(*[_fmt(row.get(key), fmt) for _, key, fmt in STRATEGY_COLUMNS])
    return table

"""What `solve` shows while it runs and when it ends.

On a terminal: a rich live panel, redrawn from the main loop at most every ``refresh_s`` (0.5 s),
so no drawing thread competes with the engine and nothing is computed between redraws. Elsewhere
(a pipe, a log file, ``--no-dashboard``): one plain line every ``log_every_s`` (10 s). The figures
come from :func:`core.metrics.snapshot`; this module only renders them.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from core.metrics import TokenRate, snapshot


# ---------------------------------------------------------------------- number formats
def _int(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


def _clock(seconds: float | None) -> str:
    """h:mm:ss, or '-' when unknown."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def _triggers(by_trigger: dict, sep: str = " · ") -> str:
    return sep.join(f"{k} {v}" for k, v in by_trigger.items()) or "none"


def _accuracy(snap: dict) -> str:
    if not snap["graded"]:
        return "no gold answers"
    return f"{snap['correct']}/{snap['graded']} ({100 * snap['accuracy']:.1f}%)"


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else "-"


# ---------------------------------------------------------------------- renderers
def _bar(done: int, total: int | None, width: int = 30) -> Text:
    """A progress bar as styled text (rich's theme colours); empty when the total is unknown."""
    if not total:
        return Text()
    filled = min(width, round(width * done / total))
    bar = Text()
    bar.append("━" * filled, style="bar.finished" if filled == width else "bar.complete")
    bar.append("━" * (width - filled), style="bar.back")
    bar.append("  ")
    return bar


def render_panel(snap: dict, title: str = "specscale solve") -> Panel:
    """The live panel for one :func:`core.metrics.snapshot`.

    Plain styled text in a panel: rich lays out nested tables several times slower, and this is
    redrawn from the engine loop.
    """
    finished = snap["problems_answered"] + snap["errors"]
    total = snap["problems_total"]
    busy = snap["generation_s"] + snap["verification_s"]
    rows = [
        ("problems", Text.assemble(_bar(finished, total), f"{finished}/{_int(total) if total is not None else '?'}  "
                                   f"ETA {_clock(snap['eta_s'])}  elapsed {_clock(snap['wall_s'])}")),
        ("tokens/s", f"{_rate(snap['tokens_per_s_now'])} now · {_rate(snap['tokens_per_s'])} average · "
                     f"{_int(snap['generated_tokens'])} tokens generated"),
        ("sequences", f"{snap['running_sequences']} running · {snap['logical_candidates']} candidates · "
                      f"{snap['waiting_sequences']} waiting"),
        ("KV blocks", f"generator {_int(snap['kv_blocks_used'])}/{_int(snap['kv_blocks_total'])} "
                      f"(peak {_int(snap['kv_blocks_peak'])}) · PRM {_int(snap['prm_kv_blocks_used'])}/"
                      f"{_int(snap['prm_kv_blocks_total'])} (peak {_int(snap['prm_kv_blocks_peak'])})"),
        ("PRM queue", f"{snap['queue_tasks']} tasks · {_int(snap['queue_tokens'])} tokens"),
        ("PRM calls", f"{snap['prm_calls']} ({_triggers(snap['flushes_by_trigger'])}) · "
                      f"{_rate(snap['prm_mean_batch_tasks'])} tasks, {_rate(snap['prm_mean_batch_tokens'])} tokens "
                      f"per call"),
        ("EP / CD", f"{snap['pruned_ep']} candidates pruned by EP · {_int(snap['cd_saved_tokens'])} tokens saved by CD"),
        ("time", f"generation {snap['generation_s']:.1f} s ({_share(snap['generation_s'], busy)}) · "
                 f"PRM {snap['verification_s']:.1f} s ({_share(snap['verification_s'], busy)})"),
        ("accuracy", _accuracy(snap)),
        ("errors", Text(str(snap["errors"]), style="bold red" if snap["errors"] else "")),
    ]
    body = Text(no_wrap=True, overflow="ellipsis")
    for i, (label, value) in enumerate(rows):
        body.append(f"{label:<11}", style="bold cyan")
        body.append(value if isinstance(value, Text) else Text(value))
        if i < len(rows) - 1:
            body.append("\n")
    return Panel(body, title=title, title_align="left", border_style="blue", expand=False)


def log_line(snap: dict) -> str:
    """One plain line with the key figures (for logs, where a live panel cannot draw)."""
    finished = snap["problems_answered"] + snap["errors"]
    total = snap["problems_total"] if snap["problems_total"] is not None else "?"
    acc = f"{snap['correct']}/{snap['graded']}" if snap["graded"] else "n/a"
    return (f"[{snap['wall_s']:8.1f}s] problems {finished}/{total} errors {snap['errors']} "
            f"ETA {_clock(snap['eta_s'])} | tok/s {_rate(snap['tokens_per_s_now'])} now "
            f"{_rate(snap['tokens_per_s'])} avg | seqs {snap['running_sequences']} "
            f"cands {snap['logical_candidates']} | KV {snap['kv_blocks_used']}/{snap['kv_blocks_total']} "
            f"PRM-KV {snap['prm_kv_blocks_used']}/{snap['prm_kv_blocks_total']} | queue {snap['queue_tasks']} tasks "
            f"{snap['queue_tokens']} tok | PRM calls {snap['prm_calls']} "
            f"({_triggers(snap['flushes_by_trigger'], ', ')}) | EP pruned {snap['pruned_ep']} | "
            f"CD saved {snap['cd_saved_tokens']} tok | gen {snap['generation_s']:.1f}s "
            f"PRM {snap['verification_s']:.1f}s | acc {acc}")


def summary_table(summary: dict) -> Table:
    """End-of-run table of a :func:`core.metrics.final_summary` (the same numbers as summary.json)."""
    s = summary
    table = Table(title="run summary", title_justify="left", show_header=False, box=None, padding=(0, 2))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    total = _int(s["problems_total"]) if s["problems_total"] is not None else "?"
    table.add_row("problems", f"{s['problems_answered']} answered, {s['errors']} errors (of {total})")
    table.add_row("accuracy", _accuracy(s))
    table.add_row("tokens", f"{_int(s['generated_tokens'])} generated in {s['wall_s']:.1f} s "
                            f"({_rate(s['tokens_per_s'])} tok/s)")
    table.add_row("PRM calls", f"{s['prm_calls']} ({_triggers(s['flushes_by_trigger'], ', ')})")
    table.add_row("PRM batches", f"{_rate(s['prm_mean_batch_tasks'])} tasks, {_rate(s['prm_mean_batch_tokens'])} "
                                 f"tokens ({_rate(s['prm_mean_batch_computed_tokens'])} computed) per call; "
                                 f"{s['prm_queued_s']:.1f} s queued (summed over tasks)")
    rules = ", ".join(f"{k} {v}" for k, v in s["pruned_by_rule"].items()) or "none"
    table.add_row("pruned", f"{s['pruned_ep']} by EP (candidates pruned by rule: {rules})")
    table.add_row("CD", f"{_int(s['cd_saved_tokens'])} tokens computed once for several candidates")
    busy = s["generation_s"] + s["verification_s"]
    table.add_row("time", f"generation {s['generation_s']:.1f} s ({_share(s['generation_s'], busy)}), "
                          f"verification {s['verification_s']:.1f} s ({_share(s['verification_s'], busy)})")
    table.add_row("peak KV", f"generator {_int(s['kv_blocks_peak'])}/{_int(s['kv_blocks_total'])} blocks, "
                             f"PRM {_int(s['prm_kv_blocks_peak'])}/{_int(s['prm_kv_blocks_total'])}; "
                             f"{s['preemptions']} preemptions")
    return table


# ---------------------------------------------------------------------- the display
class Dashboard:
    """Live figures of a `solve` run: a rich panel on a terminal, periodic log lines otherwise.

    Args:
        total: number of problems, or None when unknown (stdin).
        enabled: False forces log lines even on a terminal (``--no-dashboard``).
        stream: where to draw (default stderr, so stdout stays clean for pipes).
        title: panel title.
        refresh_s: least seconds between two redraws (and token-rate samples).
        log_every_s: seconds between two log lines when not drawing the panel.
        window_s: sliding window of the "now" token rate.
    """

    def __init__(self, total: int | None, enabled: bool = True, stream=None, title: str = "specscale solve",
                 refresh_s: float = 0.5, log_every_s: float = 10.0, window_s: float = 8.0):
        self.console = Console(file=stream, stderr=stream is None)
        self.live = enabled and self.console.is_terminal
        self.total = total
        self.title = title
        self.refresh_s = refresh_s
        self.log_every_s = log_every_s
        self.rate = TokenRate(window_s)
        self.counts = {"done": 0, "errors": 0, "correct": 0, "graded": 0}
        self._next_sample = 0.0
        self._last_log = time.perf_counter()
        self._live: Live | None = None

    def __enter__(self):
        if self.live:
            # redrawn only from update(): a refresh thread would read the run's state mid-change
            self._live = Live(console=self.console, auto_refresh=False, redirect_stdout=False)
            self._live.start()
        return self

    def __exit__(self, *exc):
        if self._live is not None:
            self._live.stop()
        return False

    def advance(self, counts: dict) -> None:
        """A problem finished (answer or error record): ``counts`` as in :func:`core.metrics.snapshot`."""
        self.counts = dict(counts)
        self._next_sample = 0.0  # show the new count at the next update

    def snapshot(self, stats, runtime) -> dict:
        """The current figures (see :func:`core.metrics.snapshot`)."""
        return snapshot(stats, runtime.engine, runtime.verifier, self.counts, self.total, self.rate.rate())

    def update(self, stats, runtime) -> None:
        """Called every driver iteration; does real work at most every ``refresh_s`` seconds."""
        now = time.perf_counter()
        if now < self._next_sample:
            return
        self._next_sample = now + self.refresh_s
        self.rate.add(now, stats.generated_tokens)
        if self._live is not None:
            self._live.update(render_panel(self.snapshot(stats, runtime), self.title), refresh=True)
        elif now - self._last_log >= self.log_every_s:
            self._last_log = now
            self.console.print(log_line(self.snapshot(stats, runtime)), highlight=False, soft_wrap=True)

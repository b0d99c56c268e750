"""What `solve` shows while it runs and when it ends.

On a terminal: a rich live panel, redrawn by rich's refresh thread about twice a second, so the
clock and the rates keep moving while the main loop is busy (a PRM flush can take a minute on a
CPU). Elsewhere (a pipe, a log file, ``--no-dashboard``): one plain line every ``log_every_s``
(10 s), from a timer thread for the same reason. The figures come from
:func:`core.metrics.snapshot`, which only the main loop computes (it reads the engines, which
change mid-step); the drawing thread only reads the last snapshot and ages its clock-dependent
fields. This module only renders.
"""

from __future__ import annotations

import threading
import time

from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from core.metrics import TokenRate, final_summary, snapshot

# widest the panel gets; on a narrower terminal it takes the terminal's width and cuts its rows
PANEL_WIDTH = 100


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


def _eta(snap: dict) -> str:
    """The ETA; ``-`` while there is none, with what is left when every remaining problem is in flight."""
    finished = snap["problems_answered"] + snap["errors"]
    total = snap["problems_total"]
    left = None if total is None else total - finished
    if (snap["eta_s"] is None and finished > 0 and left is not None and 0 < left
            <= snap["problems_in_flight"]):
        return f"- (last {left} in flight)"
    return _clock(snap["eta_s"])


def _triggers(by_trigger: dict, sep: str = " · ") -> str:
    return sep.join(f"{k} {v}" for k, v in by_trigger.items()) or "none"


def _n(count: int, word: str, plural: str | None = None) -> str:
    """``1 answer``, ``2 answers`` (``plural`` for irregular words)."""
    return f"{count:,} {word if count == 1 else plural or word + 's'}"


def _accuracy(snap: dict) -> str:
    if not snap["graded"]:
        # before the first answer nothing says whether the input has gold answers
        return "pending (no answer yet)" if not snap["problems_answered"] else "no gold answers"
    return f"{snap['correct']}/{snap['graded']} ({100 * snap['accuracy']:.1f}%)"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _rules(by_rule: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in by_rule.items()) or "none"


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


def _speculation(snap: dict) -> str:
    """The speculation budget in force: rows per step, where it came from, how often it held back."""
    budget = snap["speculation_budget"]
    source = {"measured": "measured knee", "cached": "cached knee", "set": "set"}.get(
        snap.get("speculation_budget_source"), "")
    return f"{_int(budget)} rows per step ({source}); held back {_n(snap.get('speculation_bound_steps') or 0, 'step')}"


def render_panel(snap: dict, title: str = "specscale solve", width: int = PANEL_WIDTH) -> Panel:
    """The live panel for one :func:`core.metrics.snapshot`, ``width`` columns wide (borders included).

    Plain styled text in a panel: rich lays out nested tables several times slower. Every row is
    cut to the width, never wrapped, so the panel has the same height and width at every redraw
    (a row that wraps once would leave a stale copy of the panel above the new one).
    """
    finished = snap["problems_answered"] + snap["errors"]
    total = snap["problems_total"]
    busy = snap["generation_s"] + snap["verification_s"]
    # the clock before the ETA: a narrow panel cuts the row's end, and the clock must keep moving
    progress = (f"{finished}/{_int(total) if total is not None else '?'}  elapsed {_clock(snap['wall_s'])}  "
                f"ETA {_eta(snap)}")
    # the bar gives way first on a narrow panel: borders and padding 4, the row label 11, a gap 2
    bar_width = min(30, width - 4 - 11 - len(progress) - 2)
    rows = [
        ("problems", Text.assemble(_bar(finished, total, bar_width) if bar_width >= 5 else Text(), progress)),
        ("tokens/s", f"{_rate(snap['tokens_per_s_now'])} now · {_rate(snap['tokens_per_s'])} average · "
                     f"{_int(snap['generated_tokens'])} tokens generated"),
        ("sequences", f"{snap['running_sequences']} running · {_n(snap['logical_candidates'], 'candidate')} · "
                      f"{snap['waiting_sequences']} waiting"),
        ("KV blocks", f"generator {_int(snap['kv_blocks_used'])}/{_int(snap['kv_blocks_total'])} "
                      f"(peak {_int(snap['kv_blocks_peak'])}) · PRM {_int(snap['prm_kv_blocks_used'])}/"
                      f"{_int(snap['prm_kv_blocks_total'])} (peak {_int(snap['prm_kv_blocks_peak'])})"),
        ("memory", f"peak resident {(snap.get('peak_rss_bytes') or 0) / 2**30:.2f} GiB"
                   + (f" · {_n(snap['torch_threads'], 'torch thread')}" if snap.get("torch_threads") else "")),
        ("PRM queue", f"{_n(snap['queue_tasks'], 'task')} · {_n(snap['queue_tokens'], 'token')}"),
        ("PRM calls", f"{snap['prm_calls']} ({_triggers(snap['flushes_by_trigger'])}) · "
                      f"{_rate(snap['prm_mean_batch_tasks'])} tasks, {_rate(snap['prm_mean_batch_tokens'])} tokens "
                      f"per call"),
        ("EP / CD", f"{_n(snap['pruned_ep'], 'candidate')} pruned by EP · {_n(snap['cd_saved_tokens'], 'token')} "
                    f"saved by CD"),
        ("time", f"generation {snap['generation_s']:.1f} s ({_share(snap['generation_s'], busy)}) · "
                 f"PRM {snap['verification_s']:.1f} s ({_share(snap['verification_s'], busy)})"),
        ("accuracy", _accuracy(snap)),
        ("errors", Text(str(snap["errors"]), style="bold red" if snap["errors"] else "")),
    ]
    if snap.get("speculation_budget") is not None:  # the same for a whole run: the panel keeps its height
        rows.insert(-3, ("budget", _speculation(snap)))
    rows += _replica_rows(snap.get("replicas"))
    body = Text(no_wrap=True, overflow="ellipsis")
    for i, (label, value) in enumerate(rows):
        body.append(f"{label:<11}", style="bold cyan")
        body.append(value if isinstance(value, Text) else Text(value))
        if i < len(rows) - 1:
            body.append("\n")
    # rich cuts a long title without a mark; corners, spaces and a rule of 2 stay
    room = max(1, width - 6)
    title = title if len(title) <= room else title[:room - 1] + "…"
    return Panel(body, title=title, title_align="left", border_style="blue", width=width)


# replica rows on the panel; the rest are summed up in one row, so the panel fits a screen
MAX_REPLICA_ROWS = 8


def _replica_text(row: dict) -> str:
    """One replica's figures: problems, tok/s, KV use, where it runs."""
    if row["status"] != "running" and row["problems_answered"] is None:
        return f"{row['status']}"
    where = f"pid {row['pid']} on {row['node']}" if row.get("pid") else ""
    kv = (f"KV {_int(row['kv_blocks_used'])}/{_int(row['kv_blocks_total'])} · PRM KV "
          f"{_int(row['prm_kv_blocks_used'])}/{_int(row['prm_kv_blocks_total'])}")
    lost = "LOST · " if row["status"] == "lost" else ""
    return (f"{lost}{_int(row['problems_answered'])} answered · {row['in_flight']} in flight · "
            f"{_rate(row['tokens_per_s'])} tok/s · {kv} · {where}")


def _replica_rows(rows: list[dict] | None) -> list[tuple[str, Text]]:
    """Panel rows of a scaled-out run (none for a one-process run)."""
    if not rows:
        return []
    out = [(f"replica {r['replica']}", Text(_replica_text(r), style="red" if r["status"] == "lost" else ""))
           for r in rows[:MAX_REPLICA_ROWS]]
    rest = rows[MAX_REPLICA_ROWS:]
    if rest:
        out.append(("replicas", Text(f"{len(rest)} more: {sum(r['problems_answered'] or 0 for r in rest)} answered, "
                                     f"{sum(r['in_flight'] for r in rest)} in flight, "
                                     f"{sum(1 for r in rest if r['status'] == 'lost')} lost")))
    return out


def log_line(snap: dict) -> str:
    """One plain line with the key figures (for logs, where a live panel cannot draw)."""
    finished = snap["problems_answered"] + snap["errors"]
    total = snap["problems_total"] if snap["problems_total"] is not None else "?"
    acc = (f"{snap['correct']}/{snap['graded']}" if snap["graded"] else
           "pending" if not snap["problems_answered"] else "no gold answers")
    return (f"[{snap['wall_s']:8.1f}s] problems {finished}/{total} errors {snap['errors']} "
            f"ETA {_eta(snap)} | tok/s now {_rate(snap['tokens_per_s_now'])} "
            f"avg {_rate(snap['tokens_per_s'])} | seqs {snap['running_sequences']} "
            f"cands {snap['logical_candidates']} | KV {snap['kv_blocks_used']}/{snap['kv_blocks_total']} "
            f"PRM-KV {snap['prm_kv_blocks_used']}/{snap['prm_kv_blocks_total']} | queue {snap['queue_tasks']} tasks "
            f"{snap['queue_tokens']} tok | PRM calls {snap['prm_calls']} "
            f"({_triggers(snap['flushes_by_trigger'], ', ')}) | EP pruned {snap['pruned_ep']} | "
            f"CD saved {snap['cd_saved_tokens']} tok | "
            + (f"spec budget {snap['speculation_budget']} rows, held {snap.get('speculation_bound_steps') or 0} steps | "
               if snap.get("speculation_budget") is not None else "")
            + f"gen {snap['generation_s']:.1f}s "
            f"PRM {snap['verification_s']:.1f}s"
            + (f" threads {snap['torch_threads']}" if snap.get("torch_threads") else "")
            + f" | acc {acc}"
            + "".join(f" | replica {r['replica']}: {_replica_text(r)}" for r in snap.get("replicas") or []))


def summary_table(summary: dict) -> Table:
    """End-of-run table of a :func:`core.metrics.final_summary` (the same numbers as summary.json)."""
    s = summary
    table = Table(title="run summary", title_justify="left", show_header=False, box=None, padding=(0, 2))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    total = _int(s["problems_total"]) if s["problems_total"] is not None else "?"
    session = s.get("session") or {}
    kept = session.get("kept_answers", 0) + session.get("kept_errors", 0)
    table.add_row("problems", f"{s['problems_answered']} answered, {_n(s['errors'], 'error')} (of {total})"
                  + (f"; {session['answers'] + session['errors']} this session, {kept} kept from before" if kept else ""))
    table.add_row("accuracy", _accuracy(s))
    table.add_row("tokens", f"{_int(s['generated_tokens'])} generated in {s['wall_s']:.1f} s "
                            f"({_rate(s['tokens_per_s'])} tok/s)" + (" this session" if kept else ""))
    table.add_row("PRM calls", f"{s['prm_calls']} ({_triggers(s['flushes_by_trigger'], ', ')})")
    table.add_row("PRM batches", f"{_rate(s['prm_mean_batch_tasks'])} tasks, {_rate(s['prm_mean_batch_tokens'])} "
                                 f"tokens ({_rate(s['prm_mean_batch_computed_tokens'])} computed) per call")
    table.add_row("PRM queue", f"{s['prm_queued_s']:.1f} s waited, summed over the steps scored")
    table.add_row("pruned", f"{_n(sum(s['pruned_by_rule'].values()), 'candidate')} lost selection "
                            f"({_rules(s['pruned_by_rule'])}; EP's rules: {s['pruned_ep']})")
    table.add_row("cancelled", f"{_n(sum(s['cancelled_by_rule'].values()), 'candidate')} never needed "
                               f"({_rules(s['cancelled_by_rule'])})")
    table.add_row("CD", f"{_int(s['cd_saved_tokens'])} tokens computed once for several candidates")
    if s.get("speculation_budget") is not None:
        table.add_row("budget", _speculation(s))
    busy = s["generation_s"] + s["verification_s"]
    table.add_row("time", f"generation {s['generation_s']:.1f} s ({_share(s['generation_s'], busy)}), "
                          f"verification {s['verification_s']:.1f} s ({_share(s['verification_s'], busy)})")
    table.add_row("peak KV", f"generator {_int(s['kv_blocks_peak'])}/{_int(s['kv_blocks_total'])} blocks, "
                             f"PRM {_int(s['prm_kv_blocks_peak'])}/{_int(s['prm_kv_blocks_total'])}; "
                             f"{_n(s['preemptions'], 'preemption')} (PRM {s['prm_preemptions']})")
    if s.get("peak_rss_bytes"):
        table.add_row("memory", f"peak resident {s['peak_rss_bytes'] / 2**30:.2f} GiB")
    if s.get("accuracy_weighted") is not None or s.get("accuracy_majority") is not None:
        table.add_row("selections", ", ".join(f"{rule} {_pct(s.get(f'accuracy_{rule}'))}"
                                               for rule in ("best", "weighted", "majority")))
    at_n = s.get("accuracy_at_n") or {}
    if len(at_n) > 1:  # each rule at each n is in summary.json; the row shows pred's curve
        table.add_row("accuracy@n", ", ".join(f"{n}: {_pct(v['accuracy'])}" for n, v in at_n.items())
                      + " (first n completions)")
    for r in s.get("replicas") or []:
        where = f", pid {r['pid']} on {r['node']}" if r.get("pid") else ""
        table.add_row(f"replica {r['replica']}",
                      f"{'lost; ' if r['status'] == 'lost' else ''}{_int(r['problems_answered'])} answered, "
                      f"{_int(r['generated_tokens'])} tokens ({_rate(r['tokens_per_s'])} tok/s), peak KV "
                      f"{_int(r['kv_blocks_peak'])}/{_int(r['kv_blocks_total'])}{where}")
    return table


# ---------------------------------------------------------------------- the display
class Dashboard:
    """Live figures of a `solve` run: a rich panel on a terminal, periodic log lines otherwise.

    Args:
        total: number of problems in the whole input, or None when unknown (stdin).
        counts: the whole run's records so far (``done``, ``errors``, ``graded``, ``correct``; a
            resumed run starts with the kept ones), as in :func:`core.metrics.snapshot`.
        enabled: False forces log lines even on a terminal (``--no-dashboard``).
        stream: where to draw (default stderr, so stdout stays clean for pipes).
        title: panel title.
        refresh_s: least seconds between two snapshots taken by the main loop (and redraws).
        log_every_s: seconds between two log lines when not drawing the panel.
        window_s: sliding window of the "now" token rate.
    """

    def __init__(self, total: int | None, counts: dict | None = None, enabled: bool = True, stream=None,
                 title: str = "specscale solve", refresh_s: float = 0.5, log_every_s: float = 10.0,
                 window_s: float = 8.0):
        self.console = Console(file=stream, stderr=stream is None)
        self.live = enabled and self.console.is_terminal
        self.total = total
        self.title = title
        self.refresh_s = refresh_s
        self.log_every_s = log_every_s
        self.rate = TokenRate(window_s)
        self.counts = dict(counts or {"done": 0, "errors": 0, "correct": 0, "graded": 0})
        self._next_sample = 0.0
        self._live: Live | None = None
        self._logger: threading.Thread | None = None
        self._stop = threading.Event()
        self._stats = None
        self._runtime = None
        self._pool = None  # a scaled-out run's core.distributed.pool.ReplicaPool, instead of stats/runtime
        # (snapshot, perf_counter time it was taken); replaced whole, so the drawing thread never
        # sees a half-updated one
        self._snap: tuple[dict, float] | None = None
        # torch's CPU thread count, set by the run's core.cpu_load.ThreadGovernor (None: not shown)
        self.threads: int | None = None

    def __enter__(self):
        if self.live:
            self._live = Live(get_renderable=self._renderable, console=self.console, auto_refresh=True,
                              refresh_per_second=1 / self.refresh_s, redirect_stdout=False, transient=False)
            self._live.start()
        else:
            self._logger = threading.Thread(target=self._log_loop, name="specscale-log", daemon=True)
            self._logger.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._live is not None:
            self._take_snapshot()
            self._live.refresh()
            self._live.stop()
        if self._logger is not None:
            self._logger.join(timeout=1.0)
            # the figures at the end, so a log always closes with the run's totals
            self._take_snapshot()
            snap = self._aged()
            if snap is not None:
                self.console.print(log_line(snap), highlight=False, soft_wrap=True)
        return False

    def attach(self, stats, runtime) -> None:
        """Start showing a run: its driver's RunStats and the runtime whose engines it uses."""
        self._stats, self._runtime = stats, runtime
        self._take_snapshot()

    def attach_pool(self, pool) -> None:
        """Start showing a scaled-out run: its :class:`core.distributed.pool.ReplicaPool` gives the
        figures (the replicas' summed up, and one row per replica)."""
        self._pool = pool
        self._take_snapshot()

    def poll(self) -> None:
        """Called often by a scaled-out run's main loop; takes a snapshot at most every ``refresh_s``."""
        if time.perf_counter() >= self._next_sample:
            self._take_snapshot()

    def advance(self, counts: dict) -> None:
        """A problem finished (answer or error record): ``counts`` as in :func:`core.metrics.snapshot`."""
        self.counts = dict(counts)
        self._next_sample = 0.0  # show the new count at the next update

    def snapshot(self, stats, runtime) -> dict:
        """The current figures (see :func:`core.metrics.snapshot`), with ``torch_threads`` when known."""
        snap = snapshot(stats, runtime.engine, runtime.verifier, self.counts, self.total, self.rate.rate())
        if self.threads is not None:
            snap["torch_threads"] = self.threads
        return snap

    def note(self, text: str) -> None:
        """Print ``note: text`` above the live panel (or between log lines)."""
        self.console.print(f"note: {text}", highlight=False, soft_wrap=True)

    def update(self, stats, runtime) -> None:
        """Called every driver iteration (main thread); takes a snapshot at most every ``refresh_s``."""
        self._stats, self._runtime = stats, runtime
        if time.perf_counter() >= self._next_sample:
            self._take_snapshot()

    def final_summary(self, config: dict) -> dict | None:
        """``OUT/summary.json`` content for the run so far (see :func:`core.metrics.final_summary`);
        None when no run was attached."""
        if self._pool is not None:
            return final_summary(self._pool.snapshot(self.counts, self.total, self.rate.rate()), config)
        if self._stats is None:
            return None
        return final_summary(self.snapshot(self._stats, self._runtime), config)

    def _take_snapshot(self) -> None:
        now = time.perf_counter()
        if self._pool is not None:
            self._next_sample = now + self.refresh_s
            self.rate.add(now, self._pool.generated_tokens)
            self._snap = (self._pool.snapshot(self.counts, self.total, self.rate.rate()), now)
            return
        if self._stats is None:
            return
        self._next_sample = now + self.refresh_s
        self.rate.add(now, self._stats.generated_tokens)
        self._snap = (self.snapshot(self._stats, self._runtime), now)

    def _aged(self) -> dict | None:
        """The last snapshot with its clock-dependent figures brought to now (drawing thread)."""
        if self._snap is None:
            return None
        snap, taken = self._snap
        now = time.perf_counter()
        aged = dict(snap)
        aged["wall_s"] = snap["wall_s"] + (now - taken)
        if snap["eta_s"] is not None:
            aged["eta_s"] = max(0.0, snap["eta_s"] - (now - taken))
        # no token arrived since the snapshot: the "now" rate decays over the window as it would
        aged["tokens_per_s_now"] = self.rate.rate_at(now)
        return aged

    def _width(self) -> int:
        return max(20, min(PANEL_WIDTH, self.console.width))

    def _renderable(self):
        snap = self._aged()
        if snap is None:
            return Text("starting...", style="dim")
        return render_panel(snap, self.title, self._width())

    def _log_loop(self) -> None:
        while not self._stop.wait(self.log_every_s):
            snap = self._aged()
            if snap is not None:
                self.console.print(log_line(snap), highlight=False, soft_wrap=True)

"""Progress display for `solve`: a rich live bar on a terminal, plain log lines otherwise."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class ProgressDisplay:
    """Shows problems done/total, output tokens/s, KV use and accuracy so far.

    Args:
        total: number of problems, or None when unknown (stdin).
        enabled: False forces plain periodic lines.
        stream: where to draw (stderr, so stdout stays clean for pipes).
    """

    LOG_EVERY_S = 10.0

    def __init__(self, total: int | None, enabled: bool = True, stream=None):
        self.console = Console(file=stream, stderr=stream is None)
        self.live = enabled and self.console.is_terminal
        self.total = total
        self.counts = {"done": 0, "errors": 0, "correct": 0, "graded": 0}
        self._last_log = time.perf_counter()
        self._progress = None
        self._task = None
        self._info = ""

    def __enter__(self):
        if self.live:
            self._progress = Progress(
                TextColumn("[bold]solving"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TimeRemainingColumn(), TextColumn("{task.fields[info]}"), console=self.console, refresh_per_second=4)
            self._progress.start()
            self._task = self._progress.add_task("solve", total=self.total, info="")
        return self

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.stop()
        return False

    def advance(self, counts: dict) -> None:
        """A problem finished (answer or error record)."""
        self.counts = dict(counts)
        if self._progress is not None:
            self._progress.update(self._task, completed=counts["done"] + counts["errors"])

    def update(self, stats, runtime) -> None:
        """Refresh throughput and KV figures (called every loop iteration)."""
        elapsed = max(stats.elapsed, 1e-9)
        eng = runtime.engine
        c = self.counts
        acc = f" acc {c['correct']}/{c['graded']}" if c["graded"] else ""
        ver = runtime.verifier
        self._info = (f"{stats.generated_tokens / elapsed:6.1f} tok/s  KV {eng.pool.num_used}/{eng.pool.num_blocks}"
                      f"  seqs {len(eng.scheduler.running)}  PRM queue {len(ver.queue)} "
                      f"({ver.queued_tokens} tok), {ver.stats.flushes} calls{acc}")
        if self._progress is not None:
            self._progress.update(self._task, info=self._info)
        elif time.perf_counter() - self._last_log >= self.LOG_EVERY_S:
            self._last_log = time.perf_counter()
            total = self.total if self.total is not None else "?"
            self.console.print(f"[{elapsed:7.1f}s] {c['done'] + c['errors']}/{total} problems  {self._info}",
                               highlight=False)

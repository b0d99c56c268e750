"""Ctrl-C and SIGTERM as one orderly stop of a `solve` run.

Batch schedulers and containers stop a job with SIGTERM, a person with Ctrl-C (SIGINT); both must
end the same way: admit nothing more, keep every record already written, write the summary,
print how to resume, exit with 128 + the signal number (130, 143) as shells expect.

The signal handler raises :class:`Interrupted` in the main thread at once, so a stop does not wait
for a minute-long PRM flush, except inside :meth:`StopSignals.critical` (writing one problem's
trace and answer line), where it is held until the block ends: a record is written whole or not
at all.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

SIGNAL_NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


class Interrupted(BaseException):
    """A stop signal arrived; ``signum`` says which, :attr:`exit_code` is 128 + ``signum``.

    A BaseException, as KeyboardInterrupt is: the signal may land inside any library call, and a
    library's ``except Exception`` (or our own guard that counts a failed grading as wrong) must
    let it pass, or the stop is lost and the run goes on.
    """

    def __init__(self, signum: int):
        super().__init__(SIGNAL_NAMES.get(signum, f"signal {signum}"))
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum)

    @property
    def name(self) -> str:
        return SIGNAL_NAMES.get(self.signum, f"signal {self.signum}")


class StopSignals:
    """Context manager that turns SIGINT and SIGTERM into :class:`Interrupted` while it is active.

    Outside the main thread (where Python cannot install handlers) it does nothing. The previous
    handlers come back on exit.
    """

    def __init__(self, signums: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)):
        self.signums = signums
        self._previous: dict[int, object] = {}
        self._depth = 0
        self._pending: int | None = None
        self._received: int | None = None

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in self.signums:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> bool:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
        return False

    def _handle(self, signum, frame) -> None:
        self._received = self._received or signum
        if self._depth:
            self._pending = self._pending or signum
            return
        raise Interrupted(signum)

    def check(self) -> None:
        """Raise :class:`Interrupted` if a stop signal arrived before.

        The handler raises where the signal lands; inside an object's finalizer (``__del__``, which
        libraries run during imports and model loads) Python prints the exception and drops it, and
        the stop would be lost. Calling this at the run's checkpoints raises it again.
        """
        if self._received is not None and not self._depth:
            raise Interrupted(self._received)

    @contextmanager
    def critical(self) -> Iterator[None]:
        """Hold stop signals while the block runs; one that arrived meanwhile is raised at its end."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        if not self._depth and self._pending is not None:
            signum, self._pending = self._pending, None
            raise Interrupted(signum)

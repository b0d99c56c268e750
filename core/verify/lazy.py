"""Lazy verification (LV, SpecScale paper section 4.3): when to flush the verification queue.

Verification tasks from all running problems wait in one queue so that the PRM sees large
batches. Every engine iteration the driver asks :meth:`LazyFlushRule.decide` whether to flush:

1. ``threshold``: the queued tokens to compute reach the threshold (default 2048, tuned per PRM
   by `specscale profile-threshold`), so the batch is big enough to run near peak throughput.
   Tokens the PRM's prefix cache already holds at submission (the path up to the parent's step)
   are not counted: a flush does not compute them, and counting them would flush small batches;
2. ``sibling-group``: some queued task completes its sibling group (every live child of one
   parent has finished its step): the search cannot select among them until they are scored;
3. ``deferral``: some queued task has been passed over more than ``max_deferrals`` times, which
   bounds the latency LV adds;
4. ``idle``: the generator has nothing to run, so waiting cannot fill the batch further.

When none holds, every queued task's deferral count goes up by one.
"""

from __future__ import annotations

from dataclasses import dataclass

FLUSH_TRIGGERS = ("threshold", "sibling-group", "deferral", "idle", "eager")


def queued_tokens(queue: list) -> int:
    """Tokens one flush of ``queue`` would compute (before dedup): each task's ``new_tokens``, or
    its whole input when that is unknown."""
    return sum(len(t.request.token_ids) if t.new_tokens is None else t.new_tokens for t in queue)


@dataclass
class LazyFlushRule:
    """Flush decision of the LV queue.

    threshold: queued input tokens that trigger a flush. max_deferrals: passes a task may wait.

    Raises:
        ValueError: threshold < 1 or max_deferrals < 0.
    """

    threshold: int = 2048
    max_deferrals: int = 6

    def __post_init__(self):
        if self.threshold < 1:
            raise ValueError(f"LV threshold must be >= 1 token, got {self.threshold}")
        if self.max_deferrals < 0:
            raise ValueError(f"LV max deferrals must be >= 0, got {self.max_deferrals}")

    def decide(self, queue: list, generator_idle: bool) -> str | None:
        """The trigger that fires for this queue now (see module docstring), or None to defer.

        ``queue`` holds :class:`core.verify.verifier.VerificationTask` objects; a None answer
        counts one deferral on each of them.
        """
        if not queue:
            return None
        if queued_tokens(queue) >= self.threshold:
            return "threshold"
        if any(t.group_complete for t in queue):
            return "sibling-group"
        if any(t.deferrals >= self.max_deferrals for t in queue):
            return "deferral"
        if generator_idle:
            return "idle"
        for t in queue:
            t.deferrals += 1
        return None

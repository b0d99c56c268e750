"""Continuous-batching scheduler: decode first, then chunked prefill, under a token budget.

Every engine step the scheduler picks, in priority order, the running sequences and as many
waiting ones as fit in ``max_num_batched_tokens`` and ``max_num_seqs``. A step never holds more
than ``max_num_seqs`` sequences, however they became running (admitted, forked or resumed with
their KV): the lowest-ranked running ones sit the step out. Running sequences get all their
pending tokens (one for decode, the rest of a prompt for a chunked prefill) up to the remaining
budget; prefills are chunked to whatever budget is left, so decodes never wait behind a long
prompt. When a sequence cannot get a KV block, the scheduler preempts, in one defined order on
both paths: first the paused sequences holding KV (idle, waiting for the search), lowest priority
and latest arrival first, then the lowest-ranked running ones. A preempted sequence loses its
blocks and is recomputed later (usually mostly from the prefix cache); the engine never fails for
lack of KV memory.

A speculation budget (``speculation_budget``, tokens per step) splits the sequences in two: the
non-speculative ones (priority <= 0) are scheduled first as if alone, and the speculative ones
(priority > 0: work the search may throw away) only fill the rest of the step up to the budget, so
speculation runs in rows that would otherwise stay idle and never slows the work that is sure to be
kept (see :mod:`core.engine.knee` for how the budget is measured).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from .block_pool import OutOfBlocks
from .kv_manager import KVManager
from .sequence import Sequence, SeqStatus


@dataclass
class SchedulerConfig:
    """Batch limits: sequences per step, packed tokens per step, and logits rows that prefill-only
    sequences read per step (None: no limit).

    Each row read is a ``[vocab]`` float tensor held until its scorer is done (200 KB for a 49k
    vocabulary, 600 KB for 152k); a PRM flush that read every step token of many paths at once
    would allocate hundreds of MB in one step. A prefill chunk is cut just before the read that
    would exceed ``max_num_read_rows``, and continues in the next step.
    """

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    max_num_read_rows: int | None = None


def _order(seq: Sequence):
    return (seq.priority, seq.arrival)


def _non_speculative(seq: Sequence) -> bool:
    return seq.priority <= 0


def _speculative(seq: Sequence) -> bool:
    return seq.priority > 0


@dataclass
class _Room:
    """What is left of one step: packed tokens, and logits rows prefill-only sequences may read
    (None: no limit)."""

    tokens: int
    reads: int | None


class Scheduler:
    """Picks each step's batch and handles preemption.

    Sequences live in exactly one place: ``waiting`` (needs admission), ``running`` (admitted),
    or ``paused`` (stopped at a step boundary; may still hold KV blocks).
    """

    def __init__(self, config: SchedulerConfig, kv: KVManager):
        if config.max_num_seqs < 1 or config.max_num_batched_tokens < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be >= 1")
        self.config = config
        self.kv = kv
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []
        self.paused: set[Sequence] = set()
        self.num_preemptions = 0
        # tokens per step that speculative sequences (priority > 0) may fill up to; None: no limit
        self.speculation_budget: int | None = None
        self.num_budget_bound_steps = 0  # steps in which the budget held speculative work back

    # ------------------------------------------------------------------ membership
    def add_waiting(self, seq: Sequence) -> None:
        seq.status = SeqStatus.WAITING
        self.waiting.append(seq)

    def add_running(self, seq: Sequence) -> None:
        seq.status = SeqStatus.RUNNING
        self.running.append(seq)

    def pause(self, seq: Sequence) -> None:
        self._remove(seq)
        seq.status = SeqStatus.PAUSED
        self.paused.add(seq)

    def remove(self, seq: Sequence) -> None:
        self._remove(seq)

    def _remove(self, seq: Sequence) -> None:
        if seq.status is SeqStatus.RUNNING and seq in self.running:
            self.running.remove(seq)
        elif seq.status is SeqStatus.WAITING and seq in self.waiting:
            self.waiting.remove(seq)
        else:
            self.paused.discard(seq)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    # ------------------------------------------------------------------ preemption
    def _preempt(self, seq: Sequence) -> None:
        """Free ``seq``'s blocks; it will be recomputed when it runs again."""
        self.kv.release(seq)
        seq.num_preemptions += 1
        self.num_preemptions += 1
        if seq.status is SeqStatus.RUNNING:
            self.running.remove(seq)
            self.add_waiting(seq)
        # a paused sequence stays paused; resume() sends it to the waiting queue

    def _paused_victim(self) -> Sequence | None:
        """The paused sequence holding KV that ranks lowest (priority, then arrival), or None."""
        held = [s for s in self.paused if s.block_table]
        return max(held, key=_order) if held else None

    def _victim(self, needy: Sequence) -> Sequence | None:
        """A paused sequence holding KV, else the lowest-priority running one ranked below ``needy``.

        None means ``needy`` itself ranks lowest and must be the one preempted (a low-priority
        sequence never evicts a higher-priority one).
        """
        paused = self._paused_victim()
        return paused if paused is not None else self._running_victim(needy)

    def _running_victim(self, needy: Sequence, lower_priority_only: bool = False) -> Sequence | None:
        """The lowest-ranked running sequence holding KV that ranks below ``needy`` (with
        ``lower_priority_only``, only one of a larger priority number: speculative work to a sure
        sequence), or None."""
        for seq in sorted(self.running, key=_order, reverse=True):
            if _order(seq) <= _order(needy) or (lower_priority_only and seq.priority <= needy.priority):
                break
            if seq.block_table:
                return seq
        return None

    # ------------------------------------------------------------------ scheduling
    def schedule(self) -> list[tuple[Sequence, int]]:
        """Choose this step's ``(sequence, num_tokens)`` pairs; allocates their KV blocks.

        Without a speculation budget every sequence competes in one rank order (running first, then
        waiting). With one, the non-speculative sequences (priority <= 0) are scheduled first, as if
        alone, and the speculative ones (priority > 0) only fill the step up to
        ``speculation_budget`` tokens: a step never holds more than the larger of the budget and the
        tokens non-speculative work needs by itself.
        """
        room = _Room(self.config.max_num_batched_tokens, self.config.max_num_read_rows)
        batch: list[tuple[Sequence, int]] = []
        self.running.sort(key=_order)
        cap = self.speculation_budget
        if cap is None:
            self._fill(batch, room, lambda s: True)
            return batch
        self._fill(batch, room, _non_speculative, evict_speculative=True)
        spare = min(room.tokens, max(0, cap - sum(n for _, n in batch)))
        budget_binds = spare < room.tokens  # the budget, not the step's own limit, caps speculation
        room.tokens = spare
        if spare:
            self._fill(batch, room, _speculative)
        if budget_binds and room.tokens == 0:
            scheduled = {id(seq) for seq, _ in batch}
            if any(_speculative(s) and id(s) not in scheduled for s in (*self.running, *self.waiting)):
                self.num_budget_bound_steps += 1
        return batch

    def _fill(self, batch: list[tuple[Sequence, int]], room: "_Room", select, evict_speculative: bool = False) -> None:
        """Add the running, then the waiting sequences that ``select`` takes, in rank order, while
        ``room`` and ``max_num_seqs`` allow. ``evict_speculative``: a waiting sequence short of KV
        blocks may also preempt running speculative sequences (they rank below it and are not in this
        step's batch yet)."""
        for seq in [s for s in self.running if select(s)]:
            if room.tokens == 0 or len(batch) >= self.config.max_num_seqs:
                break
            if seq.status is not SeqStatus.RUNNING:
                continue  # preempted earlier in this loop
            n = self._limit_reads(seq, min(seq.num_pending, room.tokens), room)
            if n == 0:
                continue
            if not self._grow_or_preempt(seq, n):
                continue
            self._take_reads(seq, n, room)
            batch.append((seq, n))
            room.tokens -= n

        self.waiting.sort(key=_order)  # with the sequences the loop above preempted
        queue = [s for s in self.waiting if select(s)]
        while queue and room.tokens > 0 and len(self.running) < self.config.max_num_seqs \
                and len(batch) < self.config.max_num_seqs:
            seq = queue[0]
            if not seq.block_table:
                self.kv.admit_from_prefix_cache(seq)
            n = self._limit_reads(seq, min(seq.num_pending, room.tokens), room)
            if n == 0:  # no read rows left this step: it waits, in order
                self.kv.release(seq)
                break
            try:
                self.kv.grow(seq, n)
            except OutOfBlocks:
                # Fresh work waits for blocks; work that was already admitted once may evict idle
                # paused sequences, else a search waiting on a preempted sibling could deadlock.
                victim = None
                if seq.num_preemptions or not self.running:
                    victim = self._paused_victim()
                if victim is None and evict_speculative:
                    victim = self._running_victim(seq, lower_priority_only=True)
                if victim is not None:
                    self._preempt(victim)
                    continue
                self.kv.release(seq)  # waiting sequences hold nothing
                break
            queue.pop(0)
            self.waiting.remove(seq)
            self.add_running(seq)
            self._take_reads(seq, n, room)
            batch.append((seq, n))
            room.tokens -= n

    @staticmethod
    def _reads_in(seq: Sequence, n: int) -> tuple[list[int], int, int]:
        """The unread read positions of ``seq`` and the index range of those in its next ``n`` tokens."""
        unread = seq.read_positions[len(seq.read_logits):]
        c = seq.num_computed
        return unread, bisect_left(unread, c), bisect_left(unread, c + n)

    def _limit_reads(self, seq: Sequence, n: int, room: "_Room") -> int:
        """``n`` cut so that a prefill-only ``seq`` reads at most ``room.reads`` rows (0: it sits out)."""
        if room.reads is None or not seq.prefill_only or n == 0:
            return n
        unread, lo, hi = self._reads_in(seq, n)
        if hi - lo <= room.reads:
            return n
        return unread[lo + room.reads] - seq.num_computed  # stop just before the first read over the limit

    def _take_reads(self, seq: Sequence, n: int, room: "_Room") -> None:
        if room.reads is not None and seq.prefill_only:
            _, lo, hi = self._reads_in(seq, n)
            room.reads -= hi - lo

    def _grow_or_preempt(self, seq: Sequence, n: int) -> bool:
        """Give ``seq`` the blocks for ``n`` more tokens, preempting lower-ranked sequences as needed.

        The batch is built in rank order and a victim always ranks below ``seq`` (or is paused), so
        no sequence already in this step's batch is ever preempted. Returns False when ``seq``
        itself had to give way (it ranks lowest).
        """
        while True:
            try:
                self.kv.grow(seq, n)
                return True
            except OutOfBlocks:
                victim = self._victim(seq)
                if victim is None:
                    self._preempt(seq)
                    return False
                self._preempt(victim)

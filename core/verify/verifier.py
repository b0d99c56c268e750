"""Runs step scoring as prefill-only batches on the scorer's own paged engine.

Verification tasks are queued with :meth:`Verifier.submit`; :meth:`Verifier.flush` prefills every
queued task in one continuous batch (one "PRM call"), with prefix caching, so scoring step t of a
path only computes the tokens new since its parent's scoring (plus a partial block).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from core.engine.engine import GenerationEngine

from .base import ScoreRequest, Scorer
from .lazy import queued_tokens


@dataclass
class VerificationTask:
    """One candidate step waiting for its score.

    owner: the hashable id of the candidate the step belongs to (the search uses its
        ``(problem key, node id)``); the verifier only compares it. request: the scorer's prefill.
    """

    owner: Any
    request: ScoreRequest
    submitted_at: float = field(default_factory=time.perf_counter)
    score: float | None = None
    group_complete: bool = False  # the last of its sibling group to finish its step (an LV trigger)
    deferrals: int = 0  # flush decisions that passed it over (LV)
    new_tokens: int | None = None  # input tokens not in the prefix cache at submission (None: all)


@dataclass
class VerifierStats:
    """Counters: flushes (PRM calls), tasks, prefilled tokens, seconds spent, tokens served by cache."""

    flushes: int = 0
    tasks: int = 0
    prefills: int = 0  # distinct inputs prefilled (identical tasks share one)
    input_tokens: int = 0
    computed_tokens: int = 0
    seconds: float = 0.0
    queued_seconds: float = 0.0  # summed over tasks: submission to flush
    by_trigger: dict = field(default_factory=dict)  # flushes per trigger


class Verifier:
    """Queue of verification tasks and the engine that scores them.

    Args:
        engine: a :class:`GenerationEngine` over the scorer model (used prefill-only).
        scorer: the adapter that builds inputs and reads scores.
    """

    def __init__(self, engine: GenerationEngine, scorer: Scorer):
        self.engine = engine
        self.scorer = scorer
        self.queue: list[VerificationTask] = []
        self.stats = VerifierStats()

    def submit(self, owner: Any, request: ScoreRequest, group_complete: bool = False) -> VerificationTask:
        """Queue one task; nothing runs until :meth:`flush`."""
        # with prefix caching a flush computes only what the cache lacks: LV's batch size counts that
        cached = self.engine.kv.cached_prefix_tokens(request.token_ids)
        task = VerificationTask(owner, request, group_complete=group_complete,
                                new_tokens=len(request.token_ids) - cached)
        self.queue.append(task)
        return task

    def discard(self, owner: Any) -> int:
        """Drop queued tasks of ``owner`` (a pruned or cancelled candidate); returns how many."""
        before = len(self.queue)
        if before:
            self.queue = [t for t in self.queue if t.owner != owner]
        return before - len(self.queue)

    @property
    def queued_tokens(self) -> int:
        return queued_tokens(self.queue)

    def _score(self, seq, group: list[VerificationTask]) -> None:
        """Score a completed prefill for every task of ``group`` and drop its logits rows."""
        value = self.scorer.score(group[0].request, seq.read_logits)
        seq.read_logits = []
        for t in group:
            t.score = value

    def flush(self, trigger: str = "eager") -> list[VerificationTask]:
        """Score every queued task in one batched prefill; returns them with ``score`` set.

        Tasks with identical inputs are prefilled once and share the score. ``trigger`` names why
        the flush happened (counted in ``stats.by_trigger``).
        """
        if not self.queue:
            return []
        t0 = time.perf_counter()
        tasks, self.queue = self.queue, []
        self.stats.by_trigger[trigger] = self.stats.by_trigger.get(trigger, 0) + 1
        self.stats.queued_seconds += sum(t0 - t.submitted_at for t in tasks)
        by_input: dict[tuple, list[VerificationTask]] = {}
        for t in tasks:
            key = (tuple(t.request.token_ids), tuple(t.request.read_positions))
            by_input.setdefault(key, []).append(t)
        seqs = []
        tokens_before = self.engine.total_tokens
        for group in by_input.values():
            req = group[0].request
            seqs.append((self.engine.add(req.token_ids, prefill_only=True, read_positions=req.read_positions), group))
            self.stats.input_tokens += len(req.token_ids)
            self.stats.prefills += 1
        # each input is scored as soon as its prefill completes, so its logits rows ([vocab] floats
        # each) are freed then rather than all held until the whole flush is done
        pending = {seq.seq_id: (seq, group) for seq, group in seqs}
        while self.engine.has_work():
            for seq_id in self.engine.step().prefilled:
                if seq_id in pending:
                    self._score(*pending.pop(seq_id))
        for seq, group in pending.values():
            self._score(seq, group)
        self.stats.flushes += 1
        self.stats.tasks += len(tasks)
        self.stats.computed_tokens += self.engine.total_tokens - tokens_before
        self.stats.seconds += time.perf_counter() - t0
        return tasks

"""The event loop: streams problems into one generator engine and one verifier.

Each iteration (docs/design.md, "Data flow"): admit problems up to ``max_concurrent`` -> one generator
step over all runnable sequences -> the step's events (:mod:`core.engine.events`) go to the search
that owns each candidate -> the verifier flushes queued tasks as the policy's queue rule says ->
scores go back the same way; the searches select, prune, expand or finish -> finished problems are
reported at once through ``on_result``.

The driver is the only place that knows which search owns which candidate: the engine and the
verifier name candidates by ``(problem key, node id)`` and hold no search objects, so a finished
run's engines and trees hold no reference cycles and are freed as soon as they are dropped.
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Sequence

from core.engine.engine import GenerationEngine, StepOutput
from core.io.problems import Problem, ProblemError
from core.verify.base import Scorer, chat_prompt_ids
from core.verify.verifier import VerificationTask, Verifier

from .beam_search import BeamSearch, CandidateId, PruneCounts
from .config import SearchConfig
from .policy import policy_for


# A stream may yield this for "no problem to hand out yet": a replica whose work comes from the run's
# driver process (core/distributed) goes on with the problems it has instead of blocking its engine
# until the next one arrives. When no problem is in flight the stream should wait a little before
# yielding it again, or the loop spins.
class _NotYet:
    def __repr__(self) -> str:
        return "NOT_YET"


NOT_YET = _NotYet()


class SearchStalled(RuntimeError):
    """Problems are in flight but neither the engine nor the verifier has work for them (a policy
    bug, never bad input); the message names the stuck problems and their candidates."""


@dataclass
class RunStats:
    """Live counters of one run (read by the dashboard, see :mod:`core.metrics`).

    generated_tokens: tokens sampled, one per logical candidate. cd_saved_tokens: of those, tokens
    computed once for several candidates (CD). prunes: candidates ended by each policy rule.
    in_flight: problem id -> admission time (``time.perf_counter()``) of the problems being searched.
    problem_times: seconds from admission to answer of each problem answered. max_in_flight: problems
    searched at once at most (``max_concurrent``). speculation_budget: the speculation budget in force
    (tokens per engine step, None: none). speculation_budget_source: ``measured`` or ``cached`` (the
    knee of :mod:`core.engine.knee`), ``set`` (given as a number) or ``off``.
    """

    started: float = field(default_factory=time.perf_counter)
    problems_done: int = 0
    problems_failed: int = 0
    generated_tokens: int = 0
    generation_seconds: float = 0.0
    engine_steps: int = 0
    cd_saved_tokens: int = 0
    prunes: PruneCounts = field(default_factory=PruneCounts)
    in_flight: dict[str, float] = field(default_factory=dict)
    problem_times: list[float] = field(default_factory=list)
    max_in_flight: int = 1
    speculation_budget: int | None = None
    speculation_budget_source: str = "off"

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started


def longest_token_chars(tokenizer) -> int:
    """The most characters one token of ``tokenizer`` can decode to (an upper bound).

    A vocabulary entry spells its token with at least as many characters as the token decodes to
    (byte-level BPE writes one character per byte; SentencePiece writes pieces or ``<0x..>``
    bytes), so the longest entry bounds the text one token can cover. 1 when the tokenizer has
    no vocabulary to read.
    """
    try:
        vocab = tokenizer.get_vocab()
    except (AttributeError, NotImplementedError):
        return 1 << 10
    return max((len(piece) for piece in vocab), default=1) or 1


class SearchDriver:
    """Runs one policy over a stream of problems on shared engines.

    Args:
        engine: generator engine. tokenizer: generator tokenizer. eos_token_ids: generator EOS ids.
        verifier/scorer: step scoring.
        config: search settings. policy: policy name (see :data:`core.search.policy.POLICIES`).
        max_concurrent: problems searched at once.
        on_result: called with ``(problem, result_dict, search)`` when a problem finishes.

    Raises:
        ValueError: an unknown policy, or ``max_concurrent < 1``.
        on_error: called with a :class:`ProblemError` for input that cannot be searched.
        on_iteration: called after every loop iteration with :class:`RunStats` (progress display).
        should_stop: polled every iteration; True stops admitting new problems.
    """

    def __init__(self, engine: GenerationEngine, tokenizer, eos_token_ids, verifier: Verifier, scorer: Scorer,
                 config: SearchConfig, policy: str = "non-spec", max_concurrent: int = 32,
                 on_result: Callable[[Problem, dict, BeamSearch], None] | None = None,
                 on_error: Callable[[ProblemError], None] | None = None,
                 on_iteration: Callable[[RunStats], None] | None = None,
                 should_stop: Callable[[], bool] | None = None, source: str = ""):
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent must be >= 1, got {max_concurrent}")
        self.engine = engine
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.verifier = verifier
        self.scorer = scorer
        self.config = config
        self.policy = policy_for(policy, config)  # raises ValueError for an unknown name
        # the speculation budget: "auto" is the generator's measured knee (cached per model and device)
        self.knee = None
        budget_source = "off" if self.policy.speculation_budget is None else "set"
        if self.policy.speculation_budget == "auto":
            from core.engine.knee import engine_knee

            notes = logging.getLogger("specscale.notes")
            self.knee = engine_knee(engine)
            budget_source = "cached" if self.knee.cached else "measured"
            if not self.knee.cached:
                notes.info("speculation budget: %d rows per step, the generator's batch-size knee, measured in %.1f s "
                           "(cached for this model and device; `specscale profile-knee` shows the curve)",
                           self.knee.knee, self.knee.seconds)
            self.policy = replace(self.policy, speculation_budget=self.knee.knee)
        engine.set_speculation_budget(self.policy.speculation_budget)
        self.max_concurrent = max_concurrent
        self.on_result = on_result or (lambda p, r, s: None)
        self.on_error = on_error or (lambda e: None)
        self.on_iteration = on_iteration or (lambda s: None)
        self.should_stop = should_stop or (lambda: False)
        self.source = source
        self.stats = RunStats(max_in_flight=max_concurrent, speculation_budget=self.policy.speculation_budget,
                              speculation_budget_source=budget_source)
        # problem key -> (problem, its search): the first half of every CandidateId routes here
        self.active: dict[int, tuple[Problem, BeamSearch]] = {}
        self._keys = itertools.count()
        # a problem longer than this cannot fit the context whatever its tokens (each token spells
        # at most this many characters), so it is refused before tokenizing megabytes of text
        self.max_problem_chars = engine.max_model_len * longest_token_chars(tokenizer)

    def _admit(self, problem: Problem) -> None:
        if len(problem.problem) > self.max_problem_chars:
            self._fail(problem, "problem", f"{len(problem.problem):,} characters cannot fit the model context "
                                           f"({self.engine.max_model_len} tokens); not tokenized")
            return
        try:
            prompt = chat_prompt_ids(self.tokenizer, problem.problem, self.config.system_prompt)
        except ValueError as exc:
            self._fail(problem, "problem", str(exc))
            return
        if len(prompt) >= self.engine.max_model_len:
            self._fail(problem, "problem", f"prompt of {len(prompt)} tokens does not fit the model context "
                                           f"({self.engine.max_model_len} tokens)")
            return
        key = next(self._keys)
        search = BeamSearch(key, problem.id, problem.problem, prompt, policy=self.policy, engine=self.engine,
                            verifier=self.verifier, scorer=self.scorer, config=self.config, tokenizer=self.tokenizer,
                            eos_token_ids=self.eos_token_ids, prune_counts=self.stats.prunes)
        self.active[key] = (problem, search)
        search.start()
        self.stats.in_flight[problem.id] = search.tree.t0

    def _fail(self, problem: Problem, fld: str, message: str) -> None:
        self.stats.problems_failed += 1
        self.on_error(ProblemError(problem.id, problem.line, fld, message, self.source))

    def _fail_unscorable(self) -> bool:
        """Give up the problems with a queued step whose PRM input outgrew the PRM context.

        The scorer's input (its own template, the problem and the path so far) can be longer than
        the generator's context allows the path to grow, e.g. with a PRM of shorter context; the
        PRM engine would refuse it and stop the whole run. Such a problem becomes an error record
        instead and the run goes on. Returns True when a problem was given up.
        """
        limit = self.verifier.engine.max_model_len
        failed = False
        for task in [t for t in self.verifier.queue if len(t.request.token_ids) > limit]:
            entry = self.active.pop(task.owner[0], None)
            if entry is None:
                continue  # its problem was given up for an earlier task of this queue
            problem, search = entry
            self.stats.in_flight.pop(problem.id, None)
            search.abort()
            failed = True
            self._fail(problem, "problem", f"a candidate path needs {len(task.request.token_ids)} tokens of PRM "
                                           f"input, more than the PRM context ({limit} tokens); lower --max-tokens "
                                           f"or --max-model-len, or use a PRM with a longer context")
        return failed

    # ------------------------------------------------------------------ routing
    def _search_of(self, cid: CandidateId) -> BeamSearch | None:
        entry = self.active.get(cid[0])
        return entry[1] if entry is not None else None

    def _route_step(self, out: StepOutput) -> None:
        """Hand the step's draws, fork and stop events to the searches owning their candidates."""
        for cid, drawn, deduplicated in out.draws:
            search = self._search_of(cid)
            if search is not None:
                search.sampled_tokens += drawn
                search.cd_saved_tokens += deduplicated
        for ev in out.forked:
            child = self.engine.sequence(ev.child)
            by_search: dict[int, list] = {}
            for cid in ev.candidates:
                by_search.setdefault(cid[0], []).append(cid)
            for key, cids in by_search.items():
                search = self._search_of(cids[0])
                if search is not None:
                    search.on_forked([search.node(c) for c in cids], child)
        for ev in out.stopped:
            seq = self.engine.sequence(ev.seq)
            for i, cid in enumerate(ev.candidates):
                search = self._search_of(cid)
                if search is not None:
                    search.on_stopped(search.node(cid), seq, first=i == 0)

    def _route_scores(self, tasks: list[VerificationTask]) -> None:
        """Hand one flush's scores to the searches owning the scored candidates, one call each."""
        by_search: dict[int, list] = {}
        for task in tasks:
            by_search.setdefault(task.owner[0], []).append(task)
        for key, group in by_search.items():
            search = self._search_of(group[0].owner)
            if search is not None:
                search.on_scored([(search.node(t.owner), t.score) for t in group])

    def _stall_report(self) -> str:
        parts = []
        for problem, search in list(self.active.values())[:4]:
            statuses = ", ".join(f"{n.path}:{n.status.value}" for n in search.frontier) or "empty frontier"
            parts.append(f"{problem.id} (depth frontier: {statuses}; {len(search.completed)} completed)")
        more = f" and {len(self.active) - 4} more" if len(self.active) > 4 else ""
        return (f"search stalled: {len(self.active)} problem(s) in flight but no sequence to run and no "
                f"verification queued: {'; '.join(parts)}{more}")

    def run(self, problems: Iterable[Problem | ProblemError], arrivals: Sequence[float] | None = None) -> RunStats:
        """Search every problem; returns the run's counters.

        Args:
            problems: the input stream; it may yield :data:`NOT_YET` when no problem is available
                yet (the loop goes on with the problems in flight and asks again next iteration).
            arrivals: optional arrival time of each item, in seconds after the call (non-decreasing):
                an item is not admitted before it arrives (Poisson-arrival benchmarks, paper §5.3).

        Raises:
            SearchStalled: problems are in flight with nothing to run or score (a policy bug).
            core.engine.engine.EngineStalled: the engine has work it cannot schedule.
        """
        it = iter(problems)
        exhausted = False
        t_run = time.perf_counter()
        pulled = 0
        while True:
            while not exhausted and len(self.active) < self.max_concurrent and not self.should_stop():
                if arrivals is not None and pulled < len(arrivals):
                    wait = t_run + arrivals[pulled] - time.perf_counter()
                    if wait > 0 and self.active:
                        break  # keep serving admitted problems until the next one arrives
                    if wait > 0:
                        time.sleep(wait)  # nothing to run: idle until the next arrival
                item = next(it, None)
                if item is NOT_YET:
                    break
                pulled += 1
                if item is None:
                    exhausted = True
                elif isinstance(item, ProblemError):
                    self.stats.problems_failed += 1
                    self.on_error(item)
                else:
                    self._admit(item)
            if not self.active:
                if exhausted or self.should_stop():
                    break
                continue
            progressed = False
            if self.engine.has_work():
                out = self.engine.step()  # raises EngineStalled rather than return empty-handed
                progressed = True
                self.stats.engine_steps += 1
                self.stats.generation_seconds += out.seconds
                self.stats.generated_tokens += out.num_sampled
                self.stats.cd_saved_tokens += out.num_deduplicated
                self._route_step(out)
            if self._fail_unscorable():
                progressed = True
            trigger = self._flush_trigger()
            if trigger is not None:
                progressed = True
                self._route_scores(self.verifier.flush(trigger))
            for key in [k for k, (_, search) in self.active.items() if search.done]:
                problem, search = self.active.pop(key)
                self.stats.problems_done += 1
                self.stats.problem_times.append(time.perf_counter() - self.stats.in_flight.pop(problem.id,
                                                                                               search.tree.t0))
                self.on_result(problem, search.result(), search)
            self.on_iteration(self.stats)
            if not progressed and self.active:
                raise SearchStalled(self._stall_report())
        return self.stats

    def _flush_trigger(self) -> str | None:
        """Why to flush the verification queue now, or None (eager policies flush whatever is queued)."""
        if not self.verifier.queue:
            return None
        if self.policy.lazy is None:
            return "eager"
        return self.policy.lazy.decide(self.verifier.queue, generator_idle=not self.engine.has_work())

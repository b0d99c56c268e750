"""The event loop: streams problems into one generator engine and one verifier.

Each iteration (docs/design.md, "Data flow"): admit problems up to ``max_concurrent`` -> one generator
step over all runnable sequences -> step-done events go to each problem's policy -> the verifier
flushes queued tasks -> scores go back to the policies, which select, prune, expand or finish ->
finished problems are reported at once through ``on_result``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from core.engine.engine import GenerationEngine
from core.io.problems import Problem, ProblemError
from core.verify.base import Scorer, chat_prompt_ids
from core.verify.lazy import LazyFlushRule
from core.verify.verifier import Verifier

from .beam_search import BeamSearch, FastTTSBeamSearch, NaiveSpecBeamSearch, PruneCounts, SpecScaleBeamSearch
from .config import SearchConfig

POLICIES = {"non-spec": BeamSearch, "naive-spec": NaiveSpecBeamSearch, "fasttts": FastTTSBeamSearch,
            "specscale": SpecScaleBeamSearch}


@dataclass
class RunStats:
    """Live counters of one run (read by the dashboard, see :mod:`core.metrics`).

    generated_tokens: tokens sampled, one per logical candidate. cd_saved_tokens: of those, tokens
    computed once for several candidates (CD). prunes: candidates ended by each policy rule.
    in_flight: problem id -> admission time (``time.perf_counter()``) of the problems being searched.
    problem_seconds: seconds from admission to answer, summed over the problems answered.
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
    problem_seconds: float = 0.0

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
        config: search settings. policy: policy name (see :data:`POLICIES`).
        max_concurrent: problems searched at once.
        on_result: called with ``(problem, result_dict, search)`` when a problem finishes.
        on_error: called with a :class:`ProblemError` for input that cannot be searched.
        on_iteration: called after every loop iteration with :class:`RunStats` (progress display).
        should_stop: polled every iteration; True stops admitting new problems.
    """

    def __init__(self, engine: GenerationEngine, tokenizer, eos_token_ids, verifier: Verifier, scorer: Scorer,
                 config: SearchConfig, policy: str = "non-spec", max_concurrent: int = 32,
                 on_result: Callable[[Problem, dict, Any], None] | None = None,
                 on_error: Callable[[ProblemError], None] | None = None,
                 on_iteration: Callable[[RunStats], None] | None = None,
                 should_stop: Callable[[], bool] | None = None, source: str = ""):
        if policy not in POLICIES:
            raise ValueError(f"unknown policy '{policy}'; choose one of {', '.join(POLICIES)}")
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent must be >= 1, got {max_concurrent}")
        self.engine = engine
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.verifier = verifier
        self.scorer = scorer
        self.config = config
        self.policy_cls = POLICIES[policy]
        # LV is a property of the run, not of one problem: one queue serves every problem
        lazy = policy == "specscale" and config.lazy_verification
        self.flush_rule = LazyFlushRule(config.lv_threshold, config.lv_max_deferrals) if lazy else None
        self.max_concurrent = max_concurrent
        self.on_result = on_result or (lambda p, r, s: None)
        self.on_error = on_error or (lambda e: None)
        self.on_iteration = on_iteration or (lambda s: None)
        self.should_stop = should_stop or (lambda: False)
        self.source = source
        self.stats = RunStats()
        self.active: list[tuple[Problem, Any]] = []
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
        search = self.policy_cls(problem.id, problem.problem, prompt, engine=self.engine, verifier=self.verifier,
                                 scorer=self.scorer, config=self.config, tokenizer=self.tokenizer,
                                 eos_token_ids=self.eos_token_ids, prune_counts=self.stats.prunes)
        search.start()
        self.active.append((problem, search))
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
            search = task.owner.search
            entry = next((e for e in self.active if e[1] is search), None)
            if entry is None:
                continue  # its problem was given up for an earlier task of this queue
            self.active.remove(entry)
            self.stats.in_flight.pop(entry[0].id, None)
            search.abort()
            failed = True
            self._fail(entry[0], "problem", f"a candidate path needs {len(task.request.token_ids)} tokens of PRM "
                                            f"input, more than the PRM context ({limit} tokens); lower --max-tokens "
                                            f"or --max-model-len, or use a PRM with a longer context")
        return failed

    def run(self, problems: Iterable[Problem | ProblemError], arrivals: Sequence[float] | None = None) -> RunStats:
        """Search every problem; returns the run's counters.

        Args:
            problems: the input stream.
            arrivals: optional arrival time of each item, in seconds after the call (non-decreasing):
                an item is not admitted before it arrives (Poisson-arrival benchmarks, paper §5.3).

        Raises:
            RuntimeError: the loop cannot make progress (a policy bug; never bad input).
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
                out = self.engine.step()
                progressed = True
                self.stats.engine_steps += 1
                self.stats.generation_seconds += out.seconds
                self.stats.generated_tokens += out.num_sampled
                self.stats.cd_saved_tokens += out.num_deduplicated
                for parent, child in out.forked:
                    child.tags[0].search.on_forked(child)
                for seq in out.stopped:
                    for node in list(seq.tags):
                        node.search.on_stopped(node, seq)
            if self._fail_unscorable():
                progressed = True
            trigger = self._flush_trigger()
            if trigger is not None:
                progressed = True
                by_search: dict[int, tuple[Any, list]] = {}
                for task in self.verifier.flush(trigger):
                    search = task.owner.search
                    by_search.setdefault(id(search), (search, []))[1].append((task.owner, task.score))
                for search, scored in by_search.values():
                    search.on_scored(scored)
            for entry in [e for e in self.active if e[1].done]:
                self.active.remove(entry)
                problem, search = entry
                self.stats.problems_done += 1
                self.stats.problem_seconds += time.perf_counter() - self.stats.in_flight.pop(problem.id,
                                                                                             search.tree.t0)
                self.on_result(problem, search.result(), search)
            self.on_iteration(self.stats)
            if not progressed and self.active:
                raise RuntimeError("search stalled: no sequence to run and no verification queued")
        return self.stats

    def _flush_trigger(self) -> str | None:
        """Why to flush the verification queue now, or None (eager policies flush whatever is queued)."""
        if not self.verifier.queue:
            return None
        if self.flush_rule is None:
            return "eager"
        return self.flush_rule.decide(self.verifier.queue, generator_idle=not self.engine.has_work())

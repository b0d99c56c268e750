"""The continuous-batching generation engine: sequences in, tokens and stop events out.

One engine instance owns one model, one KV cache and one scheduler. The search layer (or a
verifier) adds sequences, calls :meth:`GenerationEngine.step` in a loop, and reacts to the
returned :class:`StepOutput`, whose events (:mod:`core.engine.events`) name sequences and
candidates by id only: sequences that stopped at a step boundary are *paused* with their KV kept,
so the search can later :meth:`~GenerationEngine.resume` them (the next step continues from the
cached KV) or :meth:`~GenerationEngine.free` them. A step that can schedule nothing while work
remains raises :class:`EngineStalled` naming the stuck sequences, so no caller loop can spin.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from core.models.loader import attention_problems

from .block_pool import BlockPool, OutOfBlocks
from .events import CandidateId, Forked, Stopped
from .kv_cache import KVCache, KVLayout
from .kv_manager import KVManager
from .model_runner import ModelRunner, graphs_wanted
from .sampler import RowRequest, sample
from .scheduler import Scheduler, SchedulerConfig
from .sequence import SamplingParams, Sequence, SeqStatus, StopCriteria, StopReason
from .stopping import TokenPieces, check_stop


@dataclass
class EngineConfig:
    """Engine sizing.

    block_size: tokens per KV block.
    num_blocks: KV blocks; when None, derived from ``kv_cache_bytes``.
    kv_cache_bytes: KV pool size in bytes (default 2 GiB).
    max_num_seqs: running sequences per step.
    max_num_batched_tokens: packed tokens per step (decode tokens + prefill chunks).
    max_model_len: context limit in tokens; None uses the model's ``max_position_embeddings``.
    enable_prefix_caching: reuse full KV blocks across sequences with equal prefixes.
    kv_grow: the pool starts empty and grows on demand, ``num_blocks`` / ``kv_cache_bytes`` being
        its cap; on CPU its memory is reserved, not allocated, so a block costs memory from its
        first use (see :class:`~core.engine.block_pool.BlockPool` and :class:`KVCache`).
    kv_cache_share: a growing pool's share that unreferenced prefix-cached blocks may keep before
        it evicts them instead of growing.
    max_num_read_rows: logits rows prefill-only sequences read per step (each a ``[vocab]`` float
        tensor; see :class:`~core.engine.scheduler.SchedulerConfig`); None: no limit.
    attention_backend: ``auto``, ``torch`` or ``flashinfer`` (see :mod:`core.engine.backends`).
    enforce_eager: no CUDA graphs for decode steps (graphs are used with flashinfer on CUDA).
    """

    block_size: int = 16
    num_blocks: int | None = None
    kv_cache_bytes: int = 2 << 30
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    max_model_len: int | None = None
    enable_prefix_caching: bool = True
    kv_grow: bool = False
    kv_cache_share: float = 0.0
    max_num_read_rows: int | None = 256
    attention_backend: str = "auto"
    enforce_eager: bool = False


class EngineStalled(RuntimeError):
    """A step found work but could schedule none of it (a bug, or KV blocks held outside any
    sequence); the message names the stuck sequences and the pool's state."""


@dataclass
class StepOutput:
    """What one engine step did, by id (see :mod:`core.engine.events`).

    sampled: sequence id -> the tokens drawn for it this step, one per candidate it carried.
    stopped: sequences that stopped this step (now paused with their KV).
    forked: candidates that moved to a new sequence because they drew a different token than the
        others on theirs (or one per extra candidate when the sequence does not deduplicate).
    prefilled: ids of prefill-only sequences that completed (``read_logits`` filled, KV released).
    num_logit_rows: rows that went through the LM head (one per sampled sequence or read position).
    num_sampled: tokens drawn, one per logical candidate. num_deduplicated: of those, tokens that
        joined an equal token of another candidate on one sequence (CD): appended and computed
        once for several candidates.
    draws: per sampled sequence, ``(candidate id, tokens drawn, tokens deduplicated)``: the id is
        the first candidate the sequence carried when it drew (its caller's owner of all of them),
        so callers can share ``num_sampled``/``num_deduplicated`` out among their problems.
    """

    sampled: dict[int, list[int]] = field(default_factory=dict)
    stopped: list[Stopped] = field(default_factory=list)
    forked: list[Forked] = field(default_factory=list)
    prefilled: list[int] = field(default_factory=list)
    num_tokens: int = 0
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0
    num_logit_rows: int = 0
    num_sampled: int = 0
    num_deduplicated: int = 0
    draws: list[tuple[CandidateId, int, int]] = field(default_factory=list)
    seconds: float = 0.0


class GenerationEngine:
    """Paged-KV continuous-batching engine over a `transformers` causal LM.

    Args:
        model: the causal LM (its attention is switched to the engine's paged implementation).
        config: sizing, see :class:`EngineConfig`.
        tokenizer: used to decode pieces for step-delimiter detection (None: no delimiter matching).

    Raises:
        ValueError: the KV pool cannot hold one sequence of ``max_model_len`` tokens, or the model's
            attention uses a feature the paged backend does not implement
            (:func:`core.models.loader.attention_problems`; sliding windows are implemented).
    """

    def __init__(self, model, config: EngineConfig | None = None, tokenizer=None):
        config = config or EngineConfig()
        mc = model.config
        problems = attention_problems(model)
        if problems:
            raise ValueError(f"{type(model).__name__} cannot run on the paged engine: its attention uses "
                             f"{'; '.join(problems)}")
        self.model = model
        self.config = config
        self.tokenizer = tokenizer
        dtype = next(model.parameters()).dtype
        device = next(model.parameters()).device
        layout = KVLayout.from_config(mc, dtype)
        self.max_model_len = config.max_model_len or getattr(mc, "max_position_embeddings", 4096)
        num_blocks = config.num_blocks or max(1, config.kv_cache_bytes // (layout.bytes_per_token * config.block_size))
        min_blocks = -(-self.max_model_len // config.block_size) + 1
        if num_blocks < min_blocks:
            raise ValueError(
                f"KV pool of {num_blocks} blocks x {config.block_size} tokens cannot hold one sequence of "
                f"max_model_len={self.max_model_len} tokens (needs {min_blocks} blocks); "
                "raise the KV cache size or lower max_model_len")
        # one page no sequence owns, where CUDA-graph padding rows write and read
        scratch = 1 if graphs_wanted(config.attention_backend, device, config.enforce_eager, dtype) else 0
        self.cache = KVCache(layout, num_blocks, config.block_size, device, lazy=config.kv_grow, scratch_blocks=scratch)
        self.pool = BlockPool(0 if config.kv_grow else num_blocks, config.block_size, config.enable_prefix_caching,
                              max_blocks=num_blocks if config.kv_grow else None, cache_share=config.kv_cache_share)
        self.kv = KVManager(self.pool, self.cache)
        self.scheduler = Scheduler(SchedulerConfig(config.max_num_seqs, config.max_num_batched_tokens,
                                                   config.max_num_read_rows), self.kv)
        self.runner = ModelRunner(model, self.cache, config.attention_backend, enforce_eager=config.enforce_eager,
                                  max_num_seqs=config.max_num_seqs, max_model_len=self.max_model_len)
        self.pieces = TokenPieces(tokenizer, mc.vocab_size)
        self._arrival = itertools.count()
        self._live: dict[int, Sequence] = {}  # every sequence not yet freed, by id
        # running totals for metrics
        self.total_logit_rows = 0
        self.total_tokens = 0
        self.total_sampled = 0
        self.total_steps = 0

    # ------------------------------------------------------------------ requests
    def add(self, token_ids: list[int], *, sampling: SamplingParams | None = None, stop: StopCriteria | None = None,
            seeds: list[int] | None = None, candidates: list[CandidateId] | None = None, prefill_only: bool = False,
            read_positions: list[int] | None = None, dedup: bool = False, priority: int = 0) -> Sequence:
        """Queue a new sequence.

        Args:
            token_ids: the prompt, non-empty.
            sampling/stop: sampling and stop settings (defaults: temperature 0.8, "\\n\\n" steps).
            seeds/candidates: one seed and one caller id per logical candidate; default one seed 0.
            prefill_only: compute KV only, return the logits at ``read_positions``, never sample.
            dedup: candidates sharing this sequence stay together while they draw equal tokens.
            priority: lower runs first.

        Raises:
            ValueError: empty prompt, prompt longer than ``max_model_len``, token id out of range,
                a read position outside the prompt, or seeds and candidates of unequal length.
        """
        if not token_ids:
            raise ValueError("empty prompt")
        if len(token_ids) > self.max_model_len:
            raise ValueError(f"prompt of {len(token_ids)} tokens exceeds max_model_len={self.max_model_len}")
        vocab = self.model.config.vocab_size
        if min(token_ids) < 0 or max(token_ids) >= vocab:
            raise ValueError(f"token id out of range [0, {vocab})")
        seeds = list(seeds) if seeds is not None else [0]
        candidates = list(candidates) if candidates is not None else [None] * len(seeds)
        if len(seeds) != len(candidates):
            raise ValueError("seeds and candidates must have equal length")
        read_positions = sorted(set(read_positions or []))
        if read_positions and (read_positions[0] < 0 or read_positions[-1] >= len(token_ids)):
            raise ValueError("read position outside the prompt")
        seq = Sequence(
            token_ids=list(token_ids), sampling=sampling or SamplingParams(), stop=stop or StopCriteria(),
            seeds=seeds, candidates=candidates, prefill_only=prefill_only, read_positions=read_positions,
            dedup=dedup, priority=priority, arrival=next(self._arrival),
        )
        self._live[seq.seq_id] = seq
        self.scheduler.add_waiting(seq)
        return seq

    def sequence(self, seq_id: int) -> Sequence:
        """The live sequence with this id (as named by a step's events).

        Raises:
            KeyError: no live sequence has that id (it was freed).
        """
        return self._live[seq_id]

    def resume(self, seq: Sequence, seeds: list[int], candidates: list[CandidateId], stop: StopCriteria | None = None,
               priority: int | None = None) -> None:
        """Start the next step of a paused sequence for the given candidates.

        Raises:
            ValueError: the sequence is not paused, or its path already ended.
        """
        if seq.status is not SeqStatus.PAUSED:
            raise ValueError(f"sequence {seq.seq_id} is {seq.status.value}, not paused")
        if seq.stop_reason is not None and seq.stop_reason.ends_path:
            raise ValueError(f"sequence {seq.seq_id} ended ({seq.stop_reason.value}); it cannot resume")
        self.scheduler.remove(seq)
        seq.seeds, seq.candidates = list(seeds), list(candidates)
        if stop is not None:
            seq.stop = stop
        if priority is not None:
            seq.priority = priority
        seq.step_start = len(seq.token_ids)
        seq.stop_tail = ""
        seq.stop_pending = b""
        seq.step_has_text = False
        seq.stop_reason = None
        if seq.block_table:
            self.scheduler.add_running(seq)
        else:
            self.scheduler.add_waiting(seq)

    def fork(self, seq: Sequence, seeds: list[int] | None = None,
             candidates: list[CandidateId] | None = None) -> Sequence:
        """A new sequence with ``seq``'s tokens and computed KV (full blocks shared, partial copied).

        The child has the parent's status kind: paused children stay paused, others run. When no
        block is free for the copy, the child starts without KV (it is recomputed: a preemption).
        """
        child = Sequence(
            token_ids=list(seq.token_ids), sampling=seq.sampling, stop=seq.stop,
            seeds=list(seeds if seeds is not None else seq.seeds),
            candidates=list(candidates if candidates is not None else seq.candidates),
            dedup=seq.dedup, priority=seq.priority, arrival=seq.arrival, num_prompt_tokens=seq.num_prompt_tokens,
            step_start=seq.step_start, stop_tail=seq.stop_tail, stop_pending=seq.stop_pending,
            stop_reason=seq.stop_reason, step_has_text=seq.step_has_text,
        )
        self._live[child.seq_id] = child
        try:
            self.kv.fork(seq, child)
        except OutOfBlocks:
            child.num_preemptions = 1
            self.scheduler.num_preemptions += 1
        if seq.status is SeqStatus.PAUSED:
            self.scheduler.pause(child)
        elif child.block_table:
            self.scheduler.add_running(child)
        else:
            self.scheduler.add_waiting(child)
        return child

    def detach(self, seq: Sequence, candidate: CandidateId) -> bool:
        """Remove one logical candidate from ``seq``; free ``seq`` when none is left.

        Returns True when the sequence was freed.

        Raises:
            ValueError: ``candidate`` is not carried by ``seq``.
        """
        try:
            i = seq.candidates.index(candidate)
        except ValueError:
            raise ValueError(f"sequence {seq.seq_id} does not carry candidate {candidate!r}") from None
        del seq.candidates[i]
        del seq.seeds[i]
        if not seq.candidates:
            self.free(seq)
            return True
        return False

    def free(self, seq: Sequence) -> None:
        """Stop tracking ``seq`` and release its KV blocks (full blocks stay prefix-cached)."""
        if seq.status is SeqStatus.FINISHED:
            return
        self.scheduler.remove(seq)
        self.kv.release(seq)
        seq.status = SeqStatus.FINISHED
        self._live.pop(seq.seq_id, None)

    def set_priority(self, seq: Sequence, priority: int) -> None:
        """Rank ``seq`` at ``priority`` from the next step on (lower runs first; above 0 it counts as
        speculative work under a speculation budget)."""
        seq.priority = priority

    def set_speculation_budget(self, tokens: int | None) -> None:
        """Let speculative sequences (priority > 0) fill each step only up to ``tokens`` packed
        tokens, after the non-speculative ones (see :class:`~core.engine.scheduler.Scheduler`);
        None: no budget, every sequence in one rank order.

        Raises:
            ValueError: ``tokens < 1``.
        """
        if tokens is not None and tokens < 1:
            raise ValueError(f"speculation budget must be >= 1 token per step, got {tokens}")
        self.scheduler.speculation_budget = tokens

    def has_work(self) -> bool:
        """True while some sequence is waiting or running."""
        return self.scheduler.has_work()

    # ------------------------------------------------------------------ queries
    @property
    def num_running(self) -> int:
        """Sequences admitted and generating."""
        return len(self.scheduler.running)

    @property
    def num_waiting(self) -> int:
        """Sequences waiting for admission (new, resumed without KV, or preempted)."""
        return len(self.scheduler.waiting)

    @property
    def num_paused(self) -> int:
        """Sequences paused at a step boundary, waiting for their caller."""
        return len(self.scheduler.paused)

    @property
    def num_unfinished(self) -> int:
        """Sequences that still want compute: running or waiting (what a speculation cap counts)."""
        return self.num_running + self.num_waiting

    @property
    def num_running_candidates(self) -> int:
        """Logical candidates carried by running sequences (more than the sequences under CD)."""
        return sum(len(s.candidates) for s in self.scheduler.running)

    @property
    def num_live_candidates(self) -> int:
        """Logical candidates on every sequence not yet freed (running, waiting or paused)."""
        return sum(len(s.candidates) for s in self._live.values())

    @property
    def num_preemptions(self) -> int:
        """Sequences preempted for lack of KV blocks so far."""
        return self.scheduler.num_preemptions

    # ------------------------------------------------------------------ stepping
    def step(self) -> StepOutput:
        """Schedule, run one packed forward, sample, and apply stop conditions."""
        t0 = time.perf_counter()
        out = StepOutput()
        batch = self.scheduler.schedule()
        if not batch:
            if self.has_work():
                raise EngineStalled(self._stall_report())
            return out
        logit_rows: list[int] = []
        row_owner: list[tuple[Sequence, int]] = []  # (sequence, position whose logits the row holds)
        offset = 0
        for seq, n in batch:
            c = seq.num_computed
            if seq.prefill_only:
                # positions read before a preemption are not read again when they are recomputed
                for p in seq.read_positions[len(seq.read_logits):]:
                    if c <= p < c + n:
                        logit_rows.append(offset + p - c)
                        row_owner.append((seq, p))
            elif c + n == len(seq.token_ids):
                logit_rows.append(offset + n - 1)
                row_owner.append((seq, c + n - 1))
            offset += n
            if n == 1:
                out.num_decode_tokens += 1
            else:
                out.num_prefill_tokens += n
        out.num_tokens = offset
        out.num_logit_rows = len(logit_rows)
        logits = self.runner.forward(batch, logit_rows)
        for seq, n in batch:
            self.kv.mark_computed(seq, n)

        sample_idx: list[int] = []
        requests: list[RowRequest] = []
        for i, (seq, pos) in enumerate(row_owner):
            if seq.prefill_only:
                # a copy, not a view: the step's [rows, vocab] logits are freed once the step is over
                seq.read_logits.append(logits[i].clone())
            else:
                sample_idx.append(i)
                requests.append(RowRequest(seq.sampling.temperature, seq.sampling.top_p,
                                           [(s, pos + 1) for s in seq.seeds]))
        if requests:
            drawn = sample(logits[sample_idx], requests)
            for i, tokens in zip(sample_idx, drawn):
                self._apply_samples(row_owner[i][0], tokens, out)
        for seq, _ in batch:
            if seq.prefill_only and seq.num_computed == len(seq.token_ids):
                seq.stop_reason = StopReason.PREFILLED
                self.free(seq)
                out.prefilled.append(seq.seq_id)

        self.total_logit_rows += out.num_logit_rows
        self.total_tokens += out.num_tokens
        self.total_sampled += out.num_sampled
        self.total_steps += 1
        out.seconds = time.perf_counter() - t0
        return out

    def _stall_report(self) -> str:
        """Why nothing could be scheduled: the stuck sequences and what the pool holds."""
        pool = self.pool

        def describe(seq: Sequence) -> str:
            need = -(-(len(seq.token_ids)) // self.config.block_size) - len(seq.block_table)
            return (f"seq {seq.seq_id} ({seq.status.value}, {len(seq.token_ids)} tokens, {seq.num_computed} "
                    f"computed, needs {max(0, need)} more blocks)")

        stuck = [*self.scheduler.running, *self.scheduler.waiting]
        held = sum(len(s.block_table) for s in self.scheduler.paused)
        return (f"engine step scheduled nothing while {len(stuck)} sequence(s) wait: "
                f"{'; '.join(describe(s) for s in stuck[:8])}{' ...' if len(stuck) > 8 else ''}; KV pool: "
                f"{pool.num_free} of {pool.num_blocks} blocks free, {held} held by {self.num_paused} paused "
                f"sequence(s)")

    def _apply_samples(self, seq: Sequence, tokens: list[int], out: StepOutput) -> None:
        """Append drawn tokens; fork once per extra group of candidates; check stops."""
        out.num_sampled += len(tokens)
        out.sampled[seq.seq_id] = list(tokens)
        if len(tokens) == 1:
            groups = [(tokens[0], [0])]
        elif seq.dedup:
            by_token: dict[int, list[int]] = {}
            for j, t in enumerate(tokens):
                by_token.setdefault(t, []).append(j)
            groups = list(by_token.items())
        else:
            groups = [(t, [j]) for j, t in enumerate(tokens)]
        out.num_deduplicated += len(tokens) - len(groups)
        if seq.candidates:
            out.draws.append((seq.candidates[0], len(tokens), len(tokens) - len(groups)))
        seeds, candidates = seq.seeds, seq.candidates
        members = [seq]
        for token, idx in groups[1:]:
            child = self.fork(seq, [seeds[j] for j in idx], [candidates[j] for j in idx])
            out.forked.append(Forked(seq.seq_id, child.seq_id, tuple(child.candidates)))
            members.append(child)
        first_idx = groups[0][1]
        seq.seeds, seq.candidates = [seeds[j] for j in first_idx], [candidates[j] for j in first_idx]
        for member, (token, _) in zip(members, groups):
            member.token_ids.append(token)
            reason = check_stop(member, token, self.pieces, self.max_model_len)
            if reason is not None:
                member.stop_reason = reason
                self.scheduler.pause(member)
                out.stopped.append(Stopped(member.seq_id, tuple(member.candidates), reason, len(member.token_ids)))

    # ------------------------------------------------------------------ convenience
    def generate(self, prompts: list[list[int]], sampling: SamplingParams | None = None,
                 stop: StopCriteria | None = None, seeds: list[int] | None = None) -> list[Sequence]:
        """Run prompts to their first stop (a whole answer when ``stop.step_delimiter`` is None).

        Returns the sequences (paused, with ``token_ids`` and ``stop_reason``); the caller frees them.
        """
        seqs = [self.add(p, sampling=sampling, stop=stop, seeds=[seeds[i]] if seeds else None)
                for i, p in enumerate(prompts)]
        while self.has_work():
            self.step()
        return seqs

    def metrics(self) -> dict:
        """KV and throughput counters (blocks, preemptions, prefix-cache hit rate)."""
        return {
            "kv_blocks_total": self.pool.num_blocks,
            "kv_blocks_max": self.pool.max_blocks,
            "kv_blocks_used": self.pool.num_used,
            "kv_blocks_peak": self.pool.peak_used,
            "running": len(self.scheduler.running),
            "waiting": len(self.scheduler.waiting),
            "paused": len(self.scheduler.paused),
            "preemptions": self.scheduler.num_preemptions,
            "prefix_cache_hit_blocks": self.pool.hits,
            "prefix_cache_query_blocks": self.pool.queries,
            "logit_rows": self.total_logit_rows,
            "tokens": self.total_tokens,
            "steps": self.total_steps,
        }

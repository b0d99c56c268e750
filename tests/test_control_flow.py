"""The control flow of engine, verifier and driver: loops that cannot spin, limits that hold, no
reference cycles, and the policy rules that earlier tests let slip (each of these tests fails when
its rule is broken on purpose: EP one rank early, extra children to the worst parent, a CD split
mid-step, surplus and FastTTS-cap cancellation, forks without free blocks or of paused sequences)."""

from __future__ import annotations

import gc
import hashlib
import weakref
from dataclasses import replace

import pytest

from conftest import make_engine, make_runtime, random_prompts, run_search, run_to_end
from core.engine.engine import EngineStalled
from core.engine.sequence import SamplingParams, StopCriteria, StopReason
from core.io.problems import Problem
from core.search import policy as policies
from core.search.config import SearchConfig
from core.search.driver import SearchDriver, SearchStalled
from core.search.tree import NodeStatus

PROBLEMS = [Problem("p1", "What is 2 + 3?", "5", 1), Problem("p2", "Compute 7 * 6.", "42", 2),
            Problem("p3", "Is 9 prime?", "no", 3)]
BASE = dict(beam_size=4, beam_width=2, temperature=1.0, max_steps=4, step_delimiter="e", max_step_tokens=64,
            max_tokens=512, perfect_score=None)


def _run(loaded, policy="non-spec", runtime=None, problems=PROBLEMS, scores=None, **kw):
    """Search ``problems``; ``scores(path) -> float`` replaces the PRM's scores when given."""
    return run_search(loaded, problems, SearchConfig(**{**BASE, **kw}), policy, runtime, scores)


def spread(path: str) -> float:
    """A distinct, fixed score per tree path (no ties)."""
    return int.from_bytes(hashlib.sha256(path.encode()).digest()[:6], "big") / float(1 << 48)


def _answers(results):
    return {pid: [(c["text"], c["end_reason"]) for c in r["completions"]] for pid, r in results.items()}


# ---------------------------------------------------------------------- no reference cycles


def test_a_finished_run_is_freed_without_the_garbage_collector(tiny_chat):
    gc.collect()
    gc.disable()
    try:
        rt = make_runtime(tiny_chat)
        refs = {}

        def on_result(problem, result, search):
            refs.update({f"{problem.id} search": weakref.ref(search), f"{problem.id} tree": weakref.ref(search.tree),
                         f"{problem.id} node": weakref.ref(search.tree.nodes[-1])})

        driver = SearchDriver(rt.engine, tiny_chat.tokenizer, tiny_chat.eos_token_ids, rt.verifier, rt.scorer,
                              SearchConfig(**{**BASE, "dedup": True}), policy="specscale", max_concurrent=3,
                              on_result=on_result)
        driver.run(PROBLEMS)
        assert len(refs) == 9
        refs.update({"engine": weakref.ref(rt.engine), "prm engine": weakref.ref(rt.verifier.engine),
                     "verifier": weakref.ref(rt.verifier), "driver": weakref.ref(driver)})
        del driver, rt
        alive = [name for name, ref in refs.items() if ref() is not None]
        assert alive == [], f"kept alive only by reference cycles: {alive}"
    finally:
        gc.enable()


# ---------------------------------------------------------------------- loops that cannot spin


def test_engine_step_with_unschedulable_work_raises_at_once(tiny_llama):
    """KV blocks held outside any sequence (a leak): the step names the stuck sequence, no spin."""
    engine = make_engine(tiny_llama)
    engine.pool.allocate(engine.pool.num_free - 2)
    (p,) = random_prompts([40], seed=3)
    seq = engine.add(p)
    with pytest.raises(EngineStalled, match=rf"seq {seq.seq_id} \(waiting, 40 tokens, 0 computed, needs 10 more "
                                            r"blocks\); KV pool: 2 of 256 blocks free"):
        engine.step()
    with pytest.raises(EngineStalled):
        engine.generate([p])  # the convenience loop stops too


def test_verifier_flush_with_unschedulable_work_raises(tiny_loaded):
    rt = make_runtime(tiny_loaded)
    pool = rt.verifier.engine.pool
    pool.allocate(pool.num_free)
    rt.verifier.submit((0, 1), rt.scorer.request([1, 2, 3], [1, 2, 3, 4, 5]))
    with pytest.raises(EngineStalled):
        rt.verifier.flush()


def test_paused_sequences_give_way_to_a_sequence_that_needs_their_blocks(tiny_llama):
    """Paused sequences hold most of a small pool and nothing runs: the waiting sequence must evict
    them (the paused-eviction guard); without that the step raises instead of spinning."""
    engine = make_engine(tiny_llama, num_blocks=40, max_model_len=128)
    prompts = random_prompts([60, 60], seed=5)
    stop = StopCriteria(step_delimiter=None, max_tokens=2)
    held = [engine.add(p, sampling=SamplingParams(temperature=0), stop=stop) for p in prompts]
    run_to_end(engine)
    assert all(s.is_paused and s.block_table for s in held)
    (p,) = random_prompts([100], seed=6)
    fresh = engine.add(p, sampling=SamplingParams(temperature=0), stop=stop)
    run_to_end(engine, max_steps=50)
    assert fresh.stop_reason is StopReason.MAX_TOKENS
    # the victim order is defined: the latest-arrived paused sequence went first
    assert not held[1].block_table


def test_driver_with_a_policy_that_never_verifies_raises_instead_of_spinning(tiny_chat, monkeypatch):
    from core.search.beam_search import BeamSearch

    monkeypatch.setattr(BeamSearch, "_submit", lambda self, node: None)
    with pytest.raises(SearchStalled, match=r"search stalled: 3 problem\(s\) in flight .* p1 \(depth frontier: "
                                            r"0:finished, 1:finished"):
        _run(tiny_chat, problems=PROBLEMS)


# ---------------------------------------------------------------------- limits that hold


def _paused_after_one_step(engine, prompt, seeds, temperature):
    """A sequence (and the children it forked) after its first step, paused by hand mid-path (as the
    engine pauses at a step delimiter), so it can be resumed."""
    seq = engine.add(prompt, sampling=SamplingParams(temperature=temperature),
                     stop=StopCriteria(step_delimiter=None, max_tokens=64), seeds=seeds)
    out = engine.step()
    seqs = [seq] + [engine.sequence(ev.child) for ev in out.forked]
    for s in seqs:
        engine.scheduler.pause(s)
    return seqs


def test_max_num_seqs_holds_for_forked_and_resumed_sequences(tiny_llama, monkeypatch):
    engine = make_engine(tiny_llama, max_num_seqs=2)
    sizes = []
    real = engine.runner.forward
    monkeypatch.setattr(engine.runner, "forward", lambda batch, rows: (sizes.append(len(batch)), real(batch, rows))[1])
    (p,) = random_prompts([9], seed=7)
    engine.add(p, sampling=SamplingParams(temperature=1.0), stop=StopCriteria(step_delimiter=None, max_tokens=3),
               seeds=[1, 2, 3, 4, 5])
    out = engine.step()  # the first token forks four children, all running with their KV
    assert len(out.forked) == 4 and engine.num_running == 5
    run_to_end(engine)
    assert sizes[0] == 1 and max(sizes[1:]) == 2
    # sequences resumed with their KV go straight back to running: still two per step
    sizes.clear()
    paused = _paused_after_one_step(engine, random_prompts([9], seed=8)[0], [1, 2, 3, 4, 5], 1.0)
    assert len(paused) == 5 and all(s.is_paused and s.block_table for s in paused)
    stop = StopCriteria(step_delimiter=None, max_tokens=4)
    for s in paused:
        engine.resume(s, s.seeds, s.candidates, stop=stop)
    assert engine.num_running == 5
    run_to_end(engine)
    assert max(sizes[1:]) == 2 and sizes.count(2) >= 5


def test_fork_without_a_free_block_recomputes_the_child(tiny_llama):
    engine = make_engine(tiny_llama, num_blocks=40, max_model_len=128)
    (p,) = random_prompts([30], seed=8)  # with its first token: 7 full blocks and a partial one
    (parent,) = _paused_after_one_step(engine, p, [0], 0.0)
    leak = engine.pool.allocate(engine.pool.num_free)  # no block left for the partial block's copy
    child = engine.fork(parent, seeds=[0], candidates=["child"])
    assert child.is_paused and not child.block_table and child.num_preemptions == 1
    engine.pool.free(leak)
    stop = StopCriteria(step_delimiter=None, max_tokens=6)
    engine.resume(parent, [0], [None], stop=stop)
    engine.resume(child, [0], ["child"], stop=stop)
    run_to_end(engine)
    assert child.token_ids == parent.token_ids  # greedy: the recomputed child continues identically
    assert child.token_ids[:31] == parent.token_ids[:31] and len(child.token_ids) == 36


def test_forking_a_paused_sequence_shares_its_blocks_and_both_continue(tiny_llama):
    engine = make_engine(tiny_llama)
    (p,) = random_prompts([21], seed=9)
    (parent,) = _paused_after_one_step(engine, p, [1], 1.0)
    child = engine.fork(parent, seeds=[2], candidates=["c"])
    assert child.is_paused and child.block_table[:5] == parent.block_table[:5]
    assert engine.pool.ref_count[parent.block_table[0]] == 2
    stop = StopCriteria(step_delimiter=None, max_tokens=6)
    engine.resume(parent, [1], [None], stop=stop)
    engine.resume(child, [2], ["c"], stop=stop)
    run_to_end(engine)
    # each continues as a sequence started from the same 22 tokens with its own seed would
    ref = make_engine(tiny_llama)
    alone = [ref.add(parent.token_ids[:22], sampling=SamplingParams(temperature=1.0),
                     stop=StopCriteria(step_delimiter=None, max_tokens=5), seeds=[s]) for s in (1, 2)]
    run_to_end(ref)
    assert parent.token_ids == alone[0].token_ids and child.token_ids == alone[1].token_ids
    assert parent.token_ids != child.token_ids


# ---------------------------------------------------------------------- policy rules


def _frontiers(search):
    """depth -> the candidates that competed at that depth (children of selected parents that were
    not cancelled), in tree order."""
    out = {}
    for n in search.tree.nodes[1:]:
        if n.parent.status in (NodeStatus.SELECTED,) and n.status is not NodeStatus.CANCELLED:
            out.setdefault(n.depth, []).append(n)
    return out


def test_early_pruning_prunes_exactly_the_candidates_k_others_outrank(tiny_chat, monkeypatch):
    """With every score known before its depth is decided, EP must have pruned exactly the live
    candidates ranked k_max or worse, k_max = ceil(|depth| / M), and none of them may come back."""
    from core.search.beam_search import BeamSearch

    pruned = []
    real_prune = BeamSearch._prune
    monkeypatch.setattr(BeamSearch, "_prune", lambda self, node, rule: (pruned.append((node, rule)),
                                                                          real_prune(self, node, rule))[1])
    _, results, searches = _run(tiny_chat, "specscale", scores=spread, early_pruning=True, dedup=False,
                                lazy_verification=False, max_steps=3)
    checked = 0
    for search in searches.values():
        for depth, nodes in _frontiers(search).items():
            live = [n for n in nodes if n.score is not None and not search._ends(n)]
            k_max = -(-len(nodes) // search.config.beam_width)
            ranked = sorted(live, key=search._rank_key)
            expected = {n.path for n in ranked[k_max:]}
            assert {n.path for n in nodes if n.pruned_by == "ep"} == expected, (search.tree.problem_id, depth)
            checked += len(expected)
    assert checked > 0
    assert all(node.status is NodeStatus.PRUNED for node, _ in pruned)  # never selected again


def test_extra_children_go_to_the_best_parents(tiny_chat):
    """Steps end at the step token limit (completing their path) or at the delimiter, so completions
    make uneven splits; the better-ranked parent always gets at least as many children."""
    _, results, searches = _run(tiny_chat, "non-spec", scores=spread, max_step_tokens=3, max_steps=4,
                                beam_size=6, beam_width=3)
    uneven = 0
    for search in searches.values():
        for depth in range(1, search.config.max_steps):
            parents = sorted([n for n in search.tree.nodes if n.depth == depth and n.status is NodeStatus.SELECTED],
                             key=search._rank_key)
            counts = [len(p.children) for p in parents]
            assert counts == sorted(counts, reverse=True), (search.tree.problem_id, depth, counts)
            uneven += len(set(counts)) > 1
    assert uneven > 0  # the case this test is about happened


def test_cd_split_mid_step_gives_the_answers_of_separate_sequences(tiny_chat):
    """At a low temperature candidates sharing a sequence draw equal tokens for a while, then part:
    the engine forks them mid-step and the search must follow each to its own sequence."""
    kw = dict(temperature=0.02, lazy_verification=False, early_pruning=False, max_step_tokens=24)
    rt = make_runtime(tiny_chat)
    shared_before_split = []
    real_step = rt.engine.step

    def step():
        out = real_step()
        for ev in out.forked:
            parent = rt.engine.sequence(ev.parent)
            shared_before_split.append(len(parent.token_ids) - parent.step_start - 1)
        return out

    rt.engine.step = step
    _, with_cd, _ = _run(tiny_chat, "specscale", runtime=rt, dedup=True, **kw)
    _, without_cd, _ = _run(tiny_chat, "specscale", dedup=False, **kw)
    assert _answers(with_cd) == _answers(without_cd)
    assert max(shared_before_split) >= 2  # candidates parted after sharing tokens of their step
    # every candidate followed its own sequence to the end: nothing left running, paused or holding KV
    assert rt.engine.pool.num_used == 0 and rt.engine.num_paused == 0 and not rt.engine.has_work()
    assert rt.engine.total_logit_rows < sum(r["num_generated_tokens"] for r in without_cd.values())


def test_surplus_children_are_cancelled_and_answers_unchanged(tiny_chat):
    """A speculative parent expands into M children; once completions leave it fewer to make, the
    surplus ones are cancelled (rule surplus) and their KV freed."""
    kw = dict(scores=spread, max_step_tokens=3, beam_size=6, beam_width=3)
    _, base, _ = _run(tiny_chat, "non-spec", **kw)
    rt, spec, searches = _run(tiny_chat, "naive-spec", **kw)
    assert _answers(spec) == _answers(base)
    surplus = [n for s in searches.values() for n in s.tree.nodes if n.pruned_by == "surplus"]
    assert surplus and all(n.status is NodeStatus.CANCELLED for n in surplus)
    assert rt.engine.pool.num_used == 0 and rt.engine.num_paused == 0


def test_fasttts_cap_cancels_speculation_and_answers_unchanged(tiny_chat, monkeypatch):
    _, base, _ = _run(tiny_chat, "non-spec", scores=spread)
    monkeypatch.setitem(policies.POLICIES, "fasttts", replace(policies.FASTTTS, speculation_cap=4))
    rt, fast, searches = _run(tiny_chat, "fasttts", scores=spread)
    assert _answers(fast) == _answers(base)
    capped = [n for s in searches.values() for n in s.tree.nodes if n.pruned_by == "fasttts-cap"]
    assert capped and all(n.speculative and n.status is NodeStatus.CANCELLED for n in capped)
    assert rt.engine.pool.num_used == 0


def test_under_kv_pressure_every_batched_sequence_keeps_its_blocks(tiny_llama, monkeypatch):
    """Preemption picks victims ranked below the sequence being scheduled, so a sequence already
    placed in the step's batch never loses its KV blocks before the forward runs."""
    engine = make_engine(tiny_llama, num_blocks=40, max_model_len=128, max_num_batched_tokens=64)
    real = engine.runner.forward
    checked = []

    def forward(batch, rows):
        for seq, n in batch:
            assert len(seq.block_table) * engine.config.block_size >= seq.num_computed + n
            assert seq.status.value == "running"
        checked.append(len(batch))
        return real(batch, rows)

    monkeypatch.setattr(engine.runner, "forward", forward)
    prompts = random_prompts([30, 25, 35, 20, 28], seed=11)
    seqs = [engine.add(p, sampling=SamplingParams(temperature=0), stop=StopCriteria(step_delimiter=None, max_tokens=40),
                       priority=i % 2) for i, p in enumerate(prompts)]
    run_to_end(engine)
    assert engine.num_preemptions > 0 and len(checked) > 10
    assert all(s.stop_reason is StopReason.MAX_TOKENS for s in seqs)

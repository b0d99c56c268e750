"""Speculative policies against the non-spec baseline on a tiny random model (fixed seeds).

The decision rule is shared, so every policy must select the same candidates at every depth and
return the same answers as non-spec; what differs is how much work (forward rows, cancelled
speculation) it takes. The step delimiter "e" makes steps end within a few tokens.
"""

from __future__ import annotations

import pytest

from core.io.problems import Problem
from core.search.config import SearchConfig
from core.search.tree import NodeStatus
from conftest import make_runtime

PROBLEMS = [Problem("p1", "What is 2 + 3?", "5", 1), Problem("p2", "Compute 7 * 6.", "42", 2),
            Problem("p3", "Is 9 prime?", "no", 3)]
BASE = dict(beam_size=4, beam_width=2, temperature=1.0, max_steps=4, step_delimiter="e", max_step_tokens=64,
            max_tokens=512, perfect_score=None)


def selections(search):
    """Per depth, the sorted paths of the candidates the search kept (selected or completed)."""
    out = {}
    for n in search.tree.nodes[1:]:
        if n.status in (NodeStatus.SELECTED, NodeStatus.COMPLETED):
            out.setdefault(n.depth, []).append(n.path)
    return {d: sorted(v) for d, v in out.items()}


def answers(results):
    return {pid: [(c["text"], c["end_reason"]) for c in r["completions"]] for pid, r in results.items()}


def run_policy(model, policy, **kw):

    cfg = SearchConfig(**{**BASE, **kw})
    rt = make_runtime(model)
    from core.search.driver import SearchDriver

    results, searches = {}, {}
    driver = SearchDriver(rt.engine, model.tokenizer, model.eos_token_ids, rt.verifier, rt.scorer, cfg,
                          policy=policy, max_concurrent=3,
                          on_result=lambda p, r, s: (results.__setitem__(p.id, r), searches.__setitem__(p.id, s)))
    driver.run(PROBLEMS)
    return rt, results, searches


@pytest.fixture(scope="module")
def baseline(tiny_chat):
    return run_policy(tiny_chat, "non-spec")


@pytest.mark.parametrize("policy, kw", [
    ("naive-spec", {}),
    ("fasttts", {}),
    ("specscale", dict(early_pruning=True, dedup=False)),
    ("specscale", dict(early_pruning=False, dedup=True)),
    ("specscale", dict(early_pruning=True, dedup=True, lazy_verification=False)),
    ("specscale", dict(early_pruning=True, dedup=True, lazy_verification=True, lv_threshold=512)),
    # the speculation budget changes only when work runs: tightest budget, a middling one, none
    ("specscale", dict(speculation_budget=1)),
    ("specscale", dict(speculation_budget=6, lv_threshold=512)),
    ("specscale", dict(speculation_budget=None)),
    ("naive-spec", dict(speculation_budget=2)),
])
def test_same_selections_and_answers_as_non_spec(tiny_chat, baseline, policy, kw):
    _, base_results, base_searches = baseline
    rt, results, searches = run_policy(tiny_chat, policy, **kw)
    for pid in base_results:
        assert selections(searches[pid]) == selections(base_searches[pid])
        assert answers(results)[pid] == answers(base_results)[pid]
        for a, b in zip(results[pid]["completions"], base_results[pid]["completions"]):
            assert a["step_scores"] == pytest.approx(b["step_scores"], rel=1e-5)
    # every pruned or cancelled subtree gave its KV back
    assert rt.engine.pool.num_used == 0
    assert rt.verifier.engine.pool.num_used == 0
    assert not rt.engine.has_work() and not rt.engine.scheduler.paused


def test_speculation_cancels_losers_subtrees(tiny_chat):
    _, _, searches = run_policy(tiny_chat, "naive-spec")
    statuses = [n.status for s in searches.values() for n in s.tree.nodes[1:]]
    assert NodeStatus.CANCELLED in statuses
    for s in searches.values():
        for n in s.tree.nodes[1:]:
            if n.status is NodeStatus.PRUNED:
                assert all(c.status is NodeStatus.CANCELLED for c in n.children)
            if n.status is NodeStatus.CANCELLED:
                assert n.pruned_by in {"top-k", "surplus", "ep"}
                assert n.speculative


@pytest.mark.slow
def test_early_pruning_prunes_before_the_depth_is_decided(tiny_chat):
    _, _, searches = run_policy(tiny_chat, "specscale", early_pruning=True, dedup=False)
    ep = [n for s in searches.values() for n in s.tree.nodes[1:] if n.pruned_by == "ep"]
    assert ep, "EP never fired"
    # an EP-pruned candidate's speculation was cut short: fewer cancelled descendants than naive-spec
    _, _, naive = run_policy(tiny_chat, "naive-spec")
    count = lambda ss: sum(len(s.tree.nodes) for s in ss.values())  # noqa: E731
    assert count(searches) < count(naive)


@pytest.mark.slow
def test_dedup_shares_rows_when_samples_repeat(tiny_chat):
    # a low temperature makes many of the N draws from one row equal; no speculation budget, so both
    # runs schedule alike and even the steps cancelled mid-way match (with one, CD's fewer rows
    # leave room for speculation at other times)
    kw = dict(temperature=0.05, speculation_budget=None)
    rt_cd, res_cd, s_cd = run_policy(tiny_chat, "specscale", dedup=True, early_pruning=False, **kw)
    rt_no, res_no, s_no = run_policy(tiny_chat, "specscale", dedup=False, early_pruning=False, **kw)
    assert answers(res_cd) == answers(res_no)
    for pid in s_cd:
        a = [(n.path, n.text, n.status) for n in sorted(s_cd[pid].tree.nodes, key=lambda n: n.path)]
        b = [(n.path, n.text, n.status) for n in sorted(s_no[pid].tree.nodes, key=lambda n: n.path)]
        assert a == b
    assert rt_cd.engine.total_logit_rows < rt_no.engine.total_logit_rows
    assert max(n.potential for s in s_cd.values() for n in s.tree.nodes[1:]) > 1
    assert any(d["deduplicated"] for s in s_cd.values() for d in s.tree.to_dict()["nodes"])
    assert not any(d["deduplicated"] for s in s_no.values() for d in s.tree.to_dict()["nodes"])
    # identical finished candidates are prefilled once by the verifier
    assert rt_cd.verifier.stats.prefills < rt_cd.verifier.stats.tasks


def test_perfect_score_closes_the_depth(tiny_chat):
    """The first two depth-1 candidates scored get 1.0: with k = 2 the depth closes at once."""
    from core.search.driver import SearchDriver

    rt = make_runtime(tiny_chat)
    cfg = SearchConfig(**{**BASE, "perfect_score": 1.0, "max_steps": 2, "lazy_verification": False})
    original = rt.verifier.flush
    perfect: list[str] = []

    def flush(trigger="eager"):
        tasks = original(trigger)
        for t in tasks:
            _, search = driver.active[t.owner[0]]  # the driver routes (problem key, node id) ids
            node = search.node(t.owner)
            if node.depth == 1 and len(perfect) < 2:
                perfect.append(node.path)
            if node.depth == 1 and node.path in perfect:
                t.score = 1.0
        return tasks

    rt.verifier.flush = flush
    searches = {}
    driver = SearchDriver(rt.engine, tiny_chat.tokenizer, tiny_chat.eos_token_ids, rt.verifier, rt.scorer, cfg,
                          policy="specscale", max_concurrent=1,
                          on_result=lambda p, r, s: searches.__setitem__(p.id, s))
    driver.run(PROBLEMS[:1])
    depth1 = {n.path: n for n in searches["p1"].tree.nodes if n.depth == 1}
    assert len(perfect) == 2
    for path, node in depth1.items():
        if path in perfect:
            assert node.status is NodeStatus.SELECTED
        else:
            # closed while these were still generating: pruned unscored, KV freed
            assert node.status is NodeStatus.PRUNED and node.pruned_by == "perfect-score"
            assert node.score is None
    assert rt.engine.pool.num_used == 0


@pytest.mark.slow
def test_fasttts_speculation_is_kept_when_selected_and_verified_with_lookahead(tiny_chat):
    rt, _, searches = run_policy(tiny_chat, "fasttts")
    nodes = [n for s in searches.values() for n in s.tree.nodes[1:]]
    kept = [n for n in nodes if n.speculative and n.status in (NodeStatus.SELECTED, NodeStatus.COMPLETED)]
    assert kept, "no speculative extension was ever used"
    assert all(n.path.endswith(".0") for n in nodes if n.speculative)  # one extension per candidate
    # lookahead: some speculative steps were scored before their parent's depth was decided
    early = [n for n in nodes if n.speculative and n.t_scored is not None and n.parent.t_scored is not None
             and abs(n.t_scored - n.parent.t_scored) < 1e-3]
    assert early
    assert rt.engine.pool.num_used == 0


@pytest.mark.slow
def test_lazy_verification_batches_prm_calls(tiny_chat):
    rt_lv, _, _ = run_policy(tiny_chat, "specscale", lazy_verification=True, lv_threshold=100_000)
    rt_eager, _, _ = run_policy(tiny_chat, "specscale", lazy_verification=False)
    lv, eager = rt_lv.verifier.stats, rt_eager.verifier.stats
    # (task counts may differ: later scores let speculation run further before EP prunes it)
    assert lv.flushes < eager.flushes
    assert set(lv.by_trigger) <= {"sibling-group", "deferral", "idle"} and sum(lv.by_trigger.values()) == lv.flushes
    assert set(eager.by_trigger) == {"eager"}
    assert rt_lv.engine.pool.num_used == 0


def test_budget_holds_speculation_back_and_promotes_the_selected_children(tiny_chat, monkeypatch):
    from core.engine.engine import GenerationEngine

    promoted = []
    set_priority = GenerationEngine.set_priority
    monkeypatch.setattr(GenerationEngine, "set_priority",
                        lambda self, seq, p: (promoted.append((seq.priority, p)), set_priority(self, seq, p)))
    rt, results, searches = run_policy(tiny_chat, "specscale", speculation_budget=1)
    assert rt.engine.scheduler.num_budget_bound_steps > 0
    # speculative children ran at priority 1 and were raised to 0 when their parent was selected
    assert promoted and set(promoted) == {(1, 0)}
    kept = [n for s in searches.values() for n in s.tree.nodes[1:]
            if n.speculative and n.status in (NodeStatus.SELECTED, NodeStatus.COMPLETED)]
    assert kept
    # without a budget nothing is ranked apart
    promoted.clear()
    rt, _, _ = run_policy(tiny_chat, "specscale", speculation_budget=None)
    assert not promoted and rt.engine.scheduler.num_budget_bound_steps == 0

"""Search strategies on one engine (beam, best-of-N, DVTS) and the answer selection rules."""

from __future__ import annotations

import pytest

from conftest import run_search
from core.io.problems import Problem
from core.search.aggregation import select_answers
from core.search.config import SearchConfig
from core.search.tree import EndReason, NodeStatus
from test_control_flow import spread

PROBLEMS = [Problem("p1", "What is 2 + 3?", "5", 1), Problem("p2", "Compute 7 * 6.", "42", 2),
            Problem("p3", "Is 9 prime?", "no", 3)]
BASE = dict(beam_size=4, beam_width=2, temperature=1.0, max_steps=3, step_delimiter="e", max_step_tokens=6,
            max_tokens=512, perfect_score=None)


def run(loaded, strategy, policy="non-spec", problems=PROBLEMS, scores=None, **kw):
    return run_search(loaded, problems, SearchConfig(**{**BASE, "strategy": strategy, **kw}), policy, scores=scores)


def _texts(results):
    return {pid: [(c["text"], c["end_reason"], c["path_score"]) for c in r["completions"]]
            for pid, r in results.items()}


@pytest.mark.parametrize("strategy, policy", [("beam", "non-spec"), ("best-of-n", "non-spec"),
                                              ("best-of-n", "specscale"), ("dvts", "non-spec"),
                                              ("dvts", "naive-spec"), ("dvts", "specscale")])
def test_exactly_n_completions_with_honest_end_reasons_reproducible_and_batch_independent(tiny_chat, strategy,
                                                                                           policy):
    _, together, searches = run(tiny_chat, strategy, policy)
    for pid, r in together.items():
        assert len(r["completions"]) == 4 and r["strategy"] == strategy
        for c in r["completions"]:
            node = searches[pid].tree.nodes[c["node"]]
            reason = EndReason(c["end_reason"])
            if node.stop_reason.ends_path:  # EOS or a token limit ended the step
                assert reason in (EndReason.EOS, EndReason.LENGTH)
            else:  # it ended at the delimiter: only the step cap can have completed it
                assert reason is EndReason.STEP_CAP and c["num_steps"] == 3
    _, again, _ = run(tiny_chat, strategy, policy)
    assert _texts(again) == _texts(together)  # seeded: the same completions
    _, alone, _ = run(tiny_chat, strategy, policy, problems=PROBLEMS[1:2])
    assert _texts(alone)["p2"] == _texts(together)["p2"]  # not a function of what else is in the batch


def test_best_of_n_keeps_every_sample_to_its_end(tiny_chat):
    _, results, searches = run(tiny_chat, "best-of-n")
    for pid, search in searches.items():
        assert len(search.beams) == 4 and all(b.size == b.width == 1 for b in search.beams)
        # every node has at most one child: a sample never branches and is never pruned
        assert all(len(n.children) <= 1 for n in search.tree.nodes[1:])
        assert all(n.status in (NodeStatus.SELECTED, NodeStatus.COMPLETED) for n in search.tree.nodes[1:])
        assert {c["node"] for c in results[pid]["completions"]} == {
            n.node_id for n in search.tree.nodes if n.status is NodeStatus.COMPLETED}


def test_best_of_n_with_cd_shares_a_sequence_until_samples_differ(tiny_chat):
    kw = dict(temperature=0.02, max_step_tokens=24, lazy_verification=False)
    rt_cd, with_cd, _ = run(tiny_chat, "best-of-n", "specscale", dedup=True, **kw)
    rt_no, without_cd, _ = run(tiny_chat, "best-of-n", "specscale", dedup=False, **kw)
    assert _texts(with_cd) == _texts(without_cd)
    assert rt_cd.engine.total_logit_rows < rt_no.engine.total_logit_rows  # shared steps computed once
    assert rt_cd.engine.total_sampled == rt_no.engine.total_sampled  # one token per sample either way


def test_dvts_keeps_exactly_the_best_candidate_of_each_subtree_per_step(tiny_chat):
    """N=4, M=2: two subtrees of width 2. Per subtree and depth the one best-scored live candidate
    is kept and expanded into the children its subtree still needs; subtrees never mix."""
    _, results, searches = run(tiny_chat, "dvts", scores=spread, max_step_tokens=64)
    for pid, search in searches.items():
        assert [(b.size, b.width) for b in search.beams] == [(2, 2), (2, 2)]
        for node in search.tree.nodes[1:]:
            assert node.beam == (node.parent.beam if node.depth > 1 else int(node.path) // 2)
        for beam in search.beams:
            completed = 0
            for depth in range(1, search.config.max_steps + 1):
                competing = [n for n in search.tree.nodes[1:] if n.beam == beam.index and n.depth == depth
                             and n.status is not NodeStatus.CANCELLED
                             and (depth == 1 or n.parent.status is NodeStatus.SELECTED)]
                if not competing:
                    break
                live = sorted([n for n in competing if not search._ends(n)], key=search._rank_key)
                kept = [n for n in competing if n.status is NodeStatus.SELECTED]
                assert kept == live[:1], (pid, beam.index, depth)
                completed += sum(n.status is NodeStatus.COMPLETED for n in competing)
                if kept:
                    assert len(kept[0].children) == 2 - completed  # what the subtree still needs
            assert completed == 2
        assert len(results[pid]["completions"]) == 4


def test_policies_that_make_no_sense_for_a_strategy_are_refused(tiny_chat):
    for policy in ("naive-spec", "fasttts"):
        with pytest.raises(ValueError, match=f"--policy {policy} with --strategy best-of-n: best-of-n keeps every"):
            run(tiny_chat, "best-of-n", policy)


def test_selection_rules_pick_what_each_promises():
    # best path says 1; the summed path scores say 2 (0.8 + 0.85); most completions say 3
    answers = ["1", "2", "2.0", "3", "3", "3", None]
    scores = [0.9, 0.85, 0.8, 0.1, 0.1, 0.1, 0.05]
    picks = select_answers(answers, scores)
    assert picks["best"] == ("1",)
    assert picks["weighted-vote"] == ("2", pytest.approx(1.65))
    assert picks["majority"] == ("3", 3)
    # ties go to the group seen first, which holds the better path
    assert select_answers(["7", "8"], [0.5, 0.5])["majority"] == ("7", 1)
    assert select_answers([None, None], [0.5, 0.4]) == {"best": (None,), "weighted-vote": (None, 0.0),
                                                        "majority": (None, 0)}


@pytest.mark.parametrize("select", ["best", "weighted-vote", "majority"])
def test_pred_follows_the_chosen_selection_and_every_pick_is_recorded(tiny_chat, select):
    _, results, _ = run(tiny_chat, "beam", select=select)
    for r in results.values():
        picks = select_answers([c["answer"] for c in r["completions"]], [c["path_score"] for c in r["completions"]])
        assert (r["pred_best"], r["pred_weighted"], r["pred_majority"]) == (
            picks["best"][0], picks["weighted-vote"][0], picks["majority"][0])
        assert r["pred"] == {"best": r["pred_best"], "weighted-vote": r["pred_weighted"],
                             "majority": r["pred_majority"]}[select]

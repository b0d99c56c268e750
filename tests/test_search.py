"""Non-spec beam search on a tiny random Llama with the real SmolLM2 tokenizer.

The step delimiter is set to "e": on a random model about a third of the vocabulary contains it,
so steps end within a few tokens and the tree shape is fixed by N, M and the step cap alone.
"""

from __future__ import annotations

import math

import pytest
import torch

from conftest import make_runtime

from core.io.problems import Problem
from core.search.aggregation import aggregate, weighted_vote
from core.search.config import SearchConfig
from core.search.driver import SearchDriver
from core.search.tree import EndReason, NodeStatus


def run(loaded, problems, cfg, max_concurrent=4, runtime=None):
    rt = runtime or make_runtime(loaded)
    results, searches, errors = {}, {}, []

    def on_result(p, r, s):
        results[p.id] = r
        searches[p.id] = s

    driver = SearchDriver(rt.engine, loaded.tokenizer, loaded.eos_token_ids, rt.verifier, rt.scorer, cfg,
                          max_concurrent=max_concurrent, on_result=on_result, on_error=errors.append)
    driver.run(problems)
    return rt, results, searches, errors


PROBLEMS = [Problem("p1", "What is 2 + 3?", "5", 1), Problem("p2", "Compute 7 * 6.", "42", 2)]
CFG = dict(beam_size=4, beam_width=2, temperature=1.0, max_steps=3, step_delimiter="e", max_step_tokens=64,
           max_tokens=512)


def test_tree_shape_and_kv_freed(tiny_chat):
    rt, results, searches, errors = run(tiny_chat, PROBLEMS, SearchConfig(**CFG))
    assert not errors
    for pid in ("p1", "p2"):
        tree = searches[pid].tree
        by_depth = {}
        for n in tree.nodes[1:]:
            by_depth.setdefault(n.depth, []).append(n)
        assert {d: len(v) for d, v in by_depth.items()} == {1: 4, 2: 4, 3: 4}
        for d in (1, 2):
            assert sum(n.status is NodeStatus.SELECTED for n in by_depth[d]) == 2
            assert sum(n.status is NodeStatus.PRUNED for n in by_depth[d]) == 2
            assert all(len(n.children) == 2 for n in by_depth[d] if n.status is NodeStatus.SELECTED)
        assert all(n.status is NodeStatus.COMPLETED and n.end_reason is EndReason.STEP_CAP for n in by_depth[3])
        assert len(results[pid]["completions"]) == 4
        assert all(c["num_steps"] == 3 for c in results[pid]["completions"])
    assert rt.engine.pool.num_used == 0
    assert rt.verifier.engine.pool.num_used == 0
    # prompt prefilled once per problem; its N first-step candidates share it
    assert rt.verifier.stats.tasks == 2 * 12


def test_selection_is_top_k_by_path_score(tiny_chat):
    _, _, searches, _ = run(tiny_chat, PROBLEMS[:1], SearchConfig(**CFG))
    tree = searches["p1"].tree
    for depth in (1, 2):
        nodes = [n for n in tree.nodes[1:] if n.depth == depth]
        ranked = sorted(nodes, key=lambda n: -n.path_score)
        assert {n.node_id for n in ranked[:2]} == {n.node_id for n in nodes if n.status is NodeStatus.SELECTED}


@pytest.mark.parametrize("aggregation", ["last", "min", "prod", "mean"])
def test_scores_equal_plain_forward(tiny_chat, aggregation):
    """Every step score from the batched, prefix-cached verifier equals a plain HF forward."""
    _, _, searches, _ = run(tiny_chat, PROBLEMS[:1], SearchConfig(**CFG, aggregation=aggregation))
    search = searches["p1"]
    model = tiny_chat.model
    checked = 0
    for node in search.tree.nodes[1:]:
        if node.score is None:
            continue
        ids = torch.tensor([node.prefix_ids])
        with torch.no_grad():
            model.set_attn_implementation("sdpa")
            logits = model(ids).logits[0].float()
        start = len(node.parent.prefix_ids)
        logp = torch.log_softmax(logits[start - 1:-1], dim=-1)
        targets = ids[0, start:]
        expected = math.exp(logp.gather(1, targets[:, None]).mean().item())
        assert node.score == pytest.approx(expected, rel=1e-4, abs=1e-6)
        assert node.path_score == pytest.approx(aggregate(node.scores, aggregation))
        checked += 1
    assert checked == 12


def test_seeded_runs_identical_and_batch_independent(tiny_chat):
    cfg = SearchConfig(**CFG)
    _, alone, _, _ = run(tiny_chat, PROBLEMS[:1], cfg)
    _, again, _, _ = run(tiny_chat, PROBLEMS[:1], cfg)
    _, together, _, _ = run(tiny_chat, PROBLEMS, cfg, max_concurrent=2)
    assert alone["p1"] == again["p1"]
    assert alone["p1"]["completions"] == together["p1"]["completions"]
    _, other_seed, _, _ = run(tiny_chat, PROBLEMS[:1], SearchConfig(**{**CFG, "seed": 1}))
    assert other_seed["p1"]["completions"] != alone["p1"]["completions"]


def test_prompt_longer_than_context_is_an_error_record(tiny_chat):
    rt = make_runtime(tiny_chat, max_model_len=200)
    long = Problem("long", "add " * 400, None, 1)
    _, results, _, errors = run(tiny_chat, [long, PROBLEMS[0]], SearchConfig(**CFG), runtime=rt)
    assert [e.id for e in errors] == ["long"]
    assert "does not fit the model context" in errors[0].message
    assert list(results) == ["p1"]


def test_eos_and_length_paths_end_early(tiny_chat):
    # a step limit of 1 token with no delimiter match in most tokens: paths end by length at depth 1
    cfg = SearchConfig(**{**CFG, "step_delimiter": "\x00", "max_step_tokens": 1})
    _, results, searches, _ = run(tiny_chat, PROBLEMS[:1], cfg)
    comps = results["p1"]["completions"]
    assert len(comps) == 4
    assert all(c["end_reason"] == "length" and c["num_steps"] == 1 for c in comps)
    assert len(searches["p1"].tree.nodes) == 5


def test_aggregations_and_vote():
    s = [0.5, 0.8, 0.2]
    assert aggregate(s, "last") == 0.2
    assert aggregate(s, "min") == 0.2
    assert aggregate(s, "prod") == pytest.approx(0.08)
    assert aggregate(s, "mean") == pytest.approx(0.5)
    with pytest.raises(ValueError):
        aggregate(s, "max")
    assert weighted_vote(["1/2", "0.5", "3", None], [0.3, 0.3, 0.5, 0.9]) == ("1/2", pytest.approx(0.6))
    assert weighted_vote([None], [1.0]) == (None, 0.0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(beam_size=6, beam_width=4), "divisible"),
    (dict(beam_size=0), "N must be >= 1"),
    (dict(temperature=-1), "temperature"),
    (dict(aggregation="max"), "aggregation"),
])
def test_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SearchConfig(**kwargs)

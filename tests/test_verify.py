"""Scorers through the batched, prefix-cached verifier equal a plain forward of the full text."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import LlamaForCausalLM

from conftest import tiny_chat_config

from core.engine.engine import EngineConfig, GenerationEngine
from core.verify.likelihood import LikelihoodScorer
from core.verify.lm_judge import LMJudgeScorer
from core.verify.verifier import Verifier


@pytest.fixture(scope="module")
def judge_model(smollm2):
    torch.manual_seed(3)
    tok = smollm2.tokenizer
    cfg = tiny_chat_config(tok)
    return LlamaForCausalLM(cfg).eval(), tok


def plain_logits(model, ids):
    prev = model.config._attn_implementation
    model.set_attn_implementation("sdpa")
    try:
        with torch.inference_mode():
            return model(torch.tensor([ids])).logits[0].float()
    finally:
        model.set_attn_implementation(prev)


STEPS = [["First, 2 + 3 = 5.\n", "So the answer is \\boxed{5}."],
         ["We add the numbers.\n", "2 + 3 = 6.\n", "The answer is 6."]]


def score_paths(model, tok, scorer):
    """Score every step of two paths of two problems, depth by depth (one flush per depth)."""
    engine = GenerationEngine(model, EngineConfig(block_size=8, num_blocks=512, max_model_len=1024), tok)
    verifier = Verifier(engine, scorer)
    problems = ["What is 2 + 3?", "Add two and three."]
    prefixes = {(p, i): scorer.root_ids(prob, "Reason step by step.") for p, prob in enumerate(problems)
                for i in range(len(STEPS))}
    results = {}
    for depth in range(max(len(s) for s in STEPS)):
        for (p, i), prefix in list(prefixes.items()):
            if depth >= len(STEPS[i]):
                continue
            text = STEPS[i][depth]
            new_prefix = prefix + scorer.step_ids(text, tok.encode(text, add_special_tokens=False))
            verifier.submit((p, i, depth), scorer.request(prefix, new_prefix))
            prefixes[(p, i)] = new_prefix
        for task in verifier.flush():
            results[task.owner] = (task.score, task.request)
    return results, verifier


def test_likelihood_scores_equal_plain_forward(judge_model):
    model, tok = judge_model
    scorer = LikelihoodScorer(tok, share_generator_ids=True)
    results, verifier = score_paths(model, tok, scorer)
    assert len(results) == 2 * 5
    for (p, i, depth), (score, req) in results.items():
        logits = plain_logits(model, req.token_ids)
        logp = torch.log_softmax(logits, -1)
        vals = [logp[pos, req.token_ids[pos + 1]].item() for pos in req.read_positions]
        assert len(vals) == len(tok.encode(STEPS[i][depth], add_special_tokens=False))
        assert score == pytest.approx(math.exp(sum(vals) / len(vals)), rel=1e-5)
    # prefix caching: later depths compute only their new tokens (plus partial blocks)
    assert verifier.stats.computed_tokens < 0.6 * verifier.stats.input_tokens
    assert verifier.engine.pool.num_used == 0


def test_lm_judge_scores_equal_plain_forward(judge_model):
    model, tok = judge_model
    scorer = LMJudgeScorer(tok, share_generator_ids=False)
    results, verifier = score_paths(model, tok, scorer)
    for (p, i, depth), (score, req) in results.items():
        assert req.read_positions == [len(req.token_ids) - 1]
        row = plain_logits(model, req.token_ids)[-1]
        expected = torch.sigmoid(row[scorer.yes_id] - row[scorer.no_id]).item()
        assert score == pytest.approx(expected, rel=1e-5, abs=1e-7)
        text = tok.decode(req.token_ids)
        assert text.rstrip().endswith("assistant")
        assert "Is the last step of this solution correct?" in text
    assert verifier.stats.computed_tokens < verifier.stats.input_tokens


def test_identical_requests_are_prefilled_once(judge_model):
    model, tok = judge_model
    scorer = LikelihoodScorer(tok, share_generator_ids=True)
    engine = GenerationEngine(model, EngineConfig(block_size=8, num_blocks=256, max_model_len=1024), tok)
    verifier = Verifier(engine, scorer)
    root = scorer.root_ids("What is 1 + 1?", "")
    step = root + tok.encode("1 + 1 = 2.", add_special_tokens=False)
    for owner in ("a", "b", "c"):
        verifier.submit(owner, scorer.request(root, step))
    tasks = verifier.flush()
    assert len({t.score for t in tasks}) == 1
    assert verifier.stats.input_tokens == len(step)


def test_lm_judge_refuses_multi_token_answers(judge_model):
    _, tok = judge_model
    with pytest.raises(ValueError, match="single-token"):
        LMJudgeScorer(tok, yes="Absolutely certain", no="No")

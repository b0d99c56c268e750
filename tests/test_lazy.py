"""The LV flush rule on synthetic tasks: exactly which trigger fires when."""

from __future__ import annotations

import pytest

from core.verify.base import ScoreRequest
from core.verify.lazy import LazyFlushRule
from core.verify.verifier import VerificationTask


def task(tokens: int, group_complete: bool = False) -> VerificationTask:
    return VerificationTask(owner=None, request=ScoreRequest(list(range(tokens)), [tokens - 1]),
                            group_complete=group_complete)


def test_defers_and_counts_until_a_trigger():
    rule = LazyFlushRule(threshold=100, max_deferrals=2)
    queue = [task(30), task(30)]
    assert rule.decide(queue, generator_idle=False) is None
    assert [t.deferrals for t in queue] == [1, 1]
    queue.append(task(10))
    assert rule.decide(queue, generator_idle=False) is None
    assert [t.deferrals for t in queue] == [2, 2, 1]
    # the first two have now been passed over max_deferrals times
    assert rule.decide(queue, generator_idle=False) == "deferral"
    assert [t.deferrals for t in queue] == [2, 2, 1]  # a flush decision counts no deferral


def test_threshold_fires_at_exactly_the_token_count():
    rule = LazyFlushRule(threshold=100, max_deferrals=6)
    assert rule.decide([task(60), task(39)], generator_idle=False) is None
    assert rule.decide([task(60), task(40)], generator_idle=False) == "threshold"


def test_sibling_group_and_idle_and_precedence():
    rule = LazyFlushRule(threshold=100, max_deferrals=6)
    assert rule.decide([task(5), task(5, group_complete=True)], generator_idle=False) == "sibling-group"
    assert rule.decide([task(5)], generator_idle=True) == "idle"
    # the token threshold is checked first
    assert rule.decide([task(100, group_complete=True)], generator_idle=True) == "threshold"
    assert rule.decide([], generator_idle=True) is None


@pytest.mark.parametrize("kw", [dict(threshold=0), dict(max_deferrals=-1)])
def test_invalid_settings(kw):
    with pytest.raises(ValueError):
        LazyFlushRule(**kw)


class _LastLogitScorer:
    """Scores a request by its first read logit (enough to drive a flush)."""

    def score(self, req, logits):
        return float(logits[0][0])


def test_queued_tokens_count_only_what_the_prefix_cache_lacks(tiny_llama):
    from conftest import BLOCK_SIZE, make_engine
    from core.verify.lazy import queued_tokens
    from core.verify.verifier import Verifier

    verifier = Verifier(make_engine(tiny_llama), _LastLogitScorer())
    parent = list(range(10, 10 + 3 * BLOCK_SIZE + 2))  # 3 full blocks and 2 tokens
    child = parent + [7, 8, 9, 11, 12]
    first = verifier.submit("parent", ScoreRequest(parent, [len(parent) - 1]))
    assert first.new_tokens == len(parent)  # nothing cached yet
    verifier.flush()
    second = verifier.submit("child", ScoreRequest(child, [len(child) - 1]))
    # the parent's 3 full blocks are cached; its partial block and the new tokens are not
    assert second.new_tokens == len(child) - 3 * BLOCK_SIZE
    other = verifier.submit("other", ScoreRequest([5] * len(child), [len(child) - 1]))
    assert other.new_tokens == len(child)
    assert queued_tokens(verifier.queue) == second.new_tokens + other.new_tokens
    assert LazyFlushRule(threshold=second.new_tokens + other.new_tokens).decide(verifier.queue, False) == "threshold"
    assert LazyFlushRule(threshold=second.new_tokens + other.new_tokens + 1).decide(verifier.queue, False) is None

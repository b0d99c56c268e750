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

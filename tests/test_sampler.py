"""Sampler: per-(seed, position) uniforms, greedy, top-p and the empirical distribution."""

from __future__ import annotations

import pytest
import torch

from core.engine.sampler import RowRequest, candidate_seed, nucleus, sample, uniform


def test_uniform_deterministic_and_in_range():
    vals = [uniform(s, p) for s in (0, 1, 2**63, 2**64 - 1, 12345) for p in range(200)]
    assert vals == [uniform(s, p) for s in (0, 1, 2**63, 2**64 - 1, 12345) for p in range(200)]
    assert all(0.0 <= v < 1.0 for v in vals)
    assert len(set(vals)) == len(vals)
    assert uniform(7, 3) != uniform(7, 4) and uniform(7, 3) != uniform(8, 3)
    mean = sum(vals) / len(vals)
    assert abs(mean - 0.5) < 0.03


def test_temperature_zero_is_argmax():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 50, generator=g)
    rows = [RowRequest(0.0, 1.0, [(s, 10) for s in range(3)]) for _ in range(5)]
    out = sample(logits, rows)
    assert out == [[i] * 3 for i in logits.argmax(-1).tolist()]
    assert sample(logits[:0], []) == []


def test_one_hot_distribution_returns_that_token():
    logits = torch.full((2, 16), -1e4)
    logits[0, 11] = 0.0
    logits[1, 3] = 0.0
    rows = [RowRequest(1.0, 1.0, [(s, 5) for s in range(50)]), RowRequest(0.7, 0.9, [(s, 9) for s in range(50)])]
    out = sample(logits, rows)
    assert out == [[11] * 50, [3] * 50]


def test_small_top_p_returns_top_token():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 32, generator=g)
    rows = [RowRequest(1.5, 1e-3, [(s, 2) for s in range(100)]) for _ in range(3)]
    out = sample(logits, rows)
    assert out == [[t] * 100 for t in logits.argmax(-1).tolist()]


def test_top_p_excludes_tail():
    # probs 0.5, 0.3, 0.15, 0.05: top_p 0.7 keeps the first two tokens only (0.5 < 0.7 <= 0.8)
    probs = torch.tensor([0.15, 0.5, 0.05, 0.3])
    rows = [RowRequest(1.0, 0.7, [(s, 0) for s in range(2000)])]
    (out,) = sample(probs.log()[None], rows)
    assert set(out) == {1, 3}
    assert abs(out.count(1) / 2000 - 0.5 / 0.8) < 0.05


def test_empirical_frequencies_match_softmax():
    logits = torch.tensor([[1.0, 0.0, -0.5, 2.0]])
    for temp in (1.0, 0.5):
        probs = torch.softmax(logits[0] / temp, -1).tolist()
        (out,) = sample(logits, [RowRequest(temp, 1.0, [(s, 17) for s in range(2000)])])
        freqs = [out.count(t) / 2000 for t in range(4)]
        for f, p in zip(freqs, probs):
            assert abs(f - p) < 0.05, (temp, freqs, probs)


def test_draws_independent_of_row_order_and_batch():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(3, 40, generator=g)
    reqs = [RowRequest(0.9, 0.95, [(100 + r, 7), (200 + r, 7)]) for r in range(3)]
    together = sample(logits, reqs)
    alone = [sample(logits[r:r + 1], [reqs[r]])[0] for r in range(3)]
    reversed_ = sample(logits.flip(0), reqs[::-1])[::-1]
    assert together == alone == reversed_


def test_candidate_seed():
    s = candidate_seed(0, "p1", "0.1")
    assert s == candidate_seed(0, "p1", "0.1")
    assert 0 <= s < 2**64
    others = {candidate_seed(0, "p1", "0.2"), candidate_seed(0, "p2", "0.1"), candidate_seed(1, "p1", "0.1"),
              candidate_seed(0, "p1", "0.1.0"), candidate_seed(0, "p1", "01")}
    assert s not in others and len(others) == 5


# --- top-p at the exact boundary (issue 15, item 4) --------------------------------------------


def _draw(probs: list[float], top_p: float, n: int = 4000) -> list[int]:
    logits = torch.tensor(probs).log()[None]
    (out,) = sample(logits, [RowRequest(1.0, top_p, [(s, 3) for s in range(n)])])
    return out


def test_top_p_exact_boundary_keeps_the_smallest_set_reaching_it():
    # 0.5 + 0.3 reaches 0.8 exactly: the nucleus is the first two tokens, never the third
    out = _draw([0.5, 0.3, 0.1, 0.1], 0.8)
    assert set(out) == {0, 1}
    assert abs(out.count(0) / len(out) - 0.5 / 0.8) < 0.03


def test_top_p_boundary_on_float32_rounding():
    # float32 softmax of 0.6/0.3/0.1 sums the first two to 0.9000000060 of a total 1.0000000075:
    # relative to the total that is just below 0.9, yet the two reach 0.9 exactly
    assert set(_draw([0.6, 0.3, 0.1], 0.9)) == {0, 1}
    # ten equal tokens: three reach 0.3
    assert set(_draw([0.1] * 10, 0.3)) == {0, 1, 2}
    # the boundary at the first token: 0.5 alone reaches top_p 0.5
    assert set(_draw([0.5, 0.3, 0.2], 0.5)) == {0}
    # just past a boundary the next token joins
    assert set(_draw([0.5, 0.3, 0.1, 0.1], 0.8001)) == {0, 1, 2}


def test_top_p_one_keeps_every_token():
    probs = [0.5, 0.3, 0.1, 0.1]
    out = _draw(probs, 1.0)
    for t, p in enumerate(probs):
        assert abs(out.count(t) / len(out) - p) < 0.03


def test_tiny_top_p_is_greedy():
    assert set(_draw([0.2, 0.5, 0.3], 1e-12)) == {1}


def test_nucleus_returns_sorted_kept_mass_and_order():
    kept, order = nucleus(torch.tensor([0.1, 0.5, 0.1, 0.3]), 0.8)
    assert order.tolist() == [1, 3, 0, 2]  # ties in vocabulary order
    assert kept.tolist() == pytest.approx([0.5, 0.3, 0.0, 0.0])

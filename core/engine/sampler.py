"""Token sampling with one seeded random stream per logical candidate.

Each logical candidate owns a 64-bit seed (derived from the run seed, the problem id and its
tree path, see :func:`candidate_seed`). The uniform number used to draw the token at absolute
position ``pos`` is a pure function of ``(seed, pos)``, and the draw is an inverse-CDF lookup on
that row's distribution. So a candidate's tokens do not depend on which other sequences share
the batch, on the order of rows, or on whether it shares one logits row with other candidates
(computation deduplication): several candidates can draw from one row.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

_MASK64 = (1 << 64) - 1


def candidate_seed(run_seed: int, problem_id: str, path: str) -> int:
    """64-bit seed of one logical candidate: blake2b of ``run_seed|problem_id|path``.

    ``path`` is the candidate's position in the search tree (child indices joined by '.').
    """
    digest = hashlib.blake2b(f"{run_seed}|{problem_id}|{path}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def uniform(seed: int, pos: int) -> float:
    """Uniform float in [0, 1) from (seed, position) via splitmix64 (Steele et al., 2014)."""
    z = (seed + (pos + 1) * 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    z ^= z >> 31
    return (z >> 11) * (1.0 / (1 << 53))


# Mass within this distance of top_p counts as reaching it: float32 softmax values carry a relative
# error of ~1e-7, so a set whose exact mass is top_p (0.5 + 0.3 for top_p 0.8) may sum to just below it.
TOP_P_TOLERANCE = 1e-6


def nucleus(probs: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The top-p nucleus of one distribution: the smallest set of most likely tokens whose mass reaches ``top_p``.

    Token k of the descending order is kept iff the mass of the tokens before it is below ``top_p``
    (less :data:`TOP_P_TOLERANCE`); the first token is always kept. The mass before a token is an
    exclusive running sum in float64, not ``cumsum - p``, whose rounding can fall below ``top_p`` and
    admit one token too many (probabilities 0.5/0.3/0.1/0.1 at top_p 0.8 drew the third 11% of the
    time that way).

    Args:
        probs: float ``[V]`` probabilities (summing to ~1).
        top_p: nucleus mass in (0, 1].

    Returns:
        ``(kept, order)``: ``kept`` float ``[V]``, the probabilities in descending order with those
        outside the nucleus set to 0 (not renormalised); ``order`` int64 ``[V]``, the vocabulary id
        of each position. Ties keep vocabulary order (stable sort), so the nucleus is deterministic.
    """
    sorted_probs, order = torch.sort(probs, descending=True, stable=True)
    mass = torch.cumsum(sorted_probs.double(), dim=-1)
    before = torch.cat([mass.new_zeros(1), mass[:-1]])
    keep = before < top_p * mass[-1] - TOP_P_TOLERANCE
    keep[0] = True
    return torch.where(keep, sorted_probs, torch.zeros_like(sorted_probs)), order


@dataclass
class RowRequest:
    """Draws wanted from one logits row: ``(seed, pos)`` per logical candidate."""

    temperature: float
    top_p: float
    draws: list[tuple[int, int]]


def sample(logits: torch.Tensor, rows: list[RowRequest]) -> list[list[int]]:
    """Draw tokens for every row.

    Args:
        logits: float ``[R, V]`` (any float dtype; computed in float32).
        rows: ``R`` requests; temperature 0 means greedy (every draw gets the argmax).

    Returns:
        For each row, one token id per draw, in draw order.
    """
    out: list[list[int]] = []
    if not rows:
        return out
    logits = logits.float()
    greedy = logits.argmax(dim=-1).tolist()
    for r, req in enumerate(rows):
        if req.temperature == 0:
            out.append([greedy[r]] * len(req.draws))
            continue
        probs = torch.softmax(logits[r] / req.temperature, dim=-1)
        order = None
        if req.top_p < 1.0:
            probs, order = nucleus(probs, req.top_p)
        cdf = torch.cumsum(probs.double(), dim=-1)
        total = cdf[-1].item()
        u = torch.tensor([uniform(seed, pos) * total for seed, pos in req.draws], dtype=torch.float64)
        idx = torch.searchsorted(cdf, u, right=True).clamp_(max=cdf.numel() - 1)
        if order is not None:
            idx = order[idx]
        out.append(idx.tolist())
    return out

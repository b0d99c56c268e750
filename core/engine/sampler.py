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
    """The top-p nucleus of each distribution: the smallest set of most likely tokens whose mass reaches ``top_p``.

    Token k of the descending order is kept iff the mass of the tokens before it is below ``top_p``
    (less :data:`TOP_P_TOLERANCE`); the first token is always kept. The mass before a token is an
    exclusive running sum in float64, not ``cumsum - p``, whose rounding can fall below ``top_p`` and
    admit one token too many (probabilities 0.5/0.3/0.1/0.1 at top_p 0.8 drew the third 11% of the
    time that way).

    Args:
        probs: float ``[V]`` or ``[R, V]`` probabilities (each row summing to ~1).
        top_p: nucleus mass in (0, 1].

    Returns:
        ``(kept, order)``, shaped like ``probs``: ``kept`` float, the probabilities in descending order
        with those outside the nucleus set to 0 (not renormalised); ``order`` int64, the vocabulary id
        of each position. Ties keep vocabulary order (stable sort), so the nucleus is deterministic.
    """
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    mass = torch.cumsum(sorted_probs.double(), dim=-1)
    before = torch.cat([mass.new_zeros(mass.shape[:-1] + (1,)), mass[..., :-1]], dim=-1)
    keep = before < top_p * mass[..., -1:] - TOP_P_TOLERANCE
    keep[..., 0] = True
    return torch.where(keep, sorted_probs, torch.zeros_like(sorted_probs)), order


@dataclass
class RowRequest:
    """Draws wanted from one logits row: ``(seed, pos)`` per logical candidate."""

    temperature: float
    top_p: float
    draws: list[tuple[int, int]]


def _to_device(data: list, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A host list on ``device``; on CUDA through pinned memory, so the copy neither blocks the host
    nor waits for the device (a copy from pageable memory may)."""
    if device.type == "cpu":
        return torch.tensor(data, dtype=dtype, device=device)
    return torch.tensor(data, dtype=dtype, device="cpu", pin_memory=True).to(device, non_blocking=True)


def sample(logits: torch.Tensor, rows: list[RowRequest]) -> list[list[int]]:
    """Draw tokens for every row, reading the drawn ids back with one device-to-host copy.

    Rows of one ``(temperature, top_p)`` are drawn together: softmax of ``logits / temperature``,
    the top-p nucleus (:func:`nucleus`), the float64 running sum of the kept mass, and for each draw
    ``(seed, pos)`` the first token whose running sum exceeds ``uniform(seed, pos)`` times the kept
    mass (inverse CDF). Every operation works row by row, so a row's tokens are the same whatever
    rows share its call. The draws of all rows land in one ``[R, max draws]`` tensor that is read
    once (``tolist``), not one ``.item()`` per row: on a GPU each read waits for the device.

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
    device = logits.device
    width = max(len(req.draws) for req in rows)
    drawn = logits.argmax(dim=-1, keepdim=True).expand(len(rows), width).clone()  # greedy rows keep these
    by_setting: dict[tuple[float, float], list[int]] = {}
    for r, req in enumerate(rows):
        if req.temperature != 0 and req.draws:
            by_setting.setdefault((req.temperature, req.top_p), []).append(r)
    for (temperature, top_p), members in by_setting.items():
        index = _to_device(members, torch.long, device)
        probs = torch.softmax(logits.index_select(0, index) / temperature, dim=-1)
        order = None
        if top_p < 1.0:
            probs, order = nucleus(probs, top_p)
        cdf = torch.cumsum(probs.double(), dim=-1)
        # padding draws (rows with fewer draws than the widest) look up 0 and are dropped below
        uniforms = [[uniform(seed, pos) for seed, pos in rows[r].draws] + [0.0] * (width - len(rows[r].draws))
                    for r in members]
        u = _to_device(uniforms, torch.float64, device) * cdf[:, -1:]
        idx = torch.searchsorted(cdf, u, right=True).clamp_(max=cdf.shape[-1] - 1)
        if order is not None:
            idx = order.gather(1, idx)
        drawn.index_copy_(0, index, idx)
    host = drawn.tolist()  # the step's one device-to-host read of sampled ids
    return [host[r][:len(req.draws)] for r, req in enumerate(rows)]

"""The "likelihood" CPU scorer: a step's score is how plausible the scorer LM finds it.

score = exp(mean over the step's tokens of log p(token | everything before)), in [0, 1]: the
inverse perplexity of the step. Weak as a process reward but free of any training, and it runs on
the generator model itself on CPU (the embedded default preset).
"""

from __future__ import annotations

import math

import torch

from .base import ScoreRequest, Scorer, chat_prompt_ids


class LikelihoodScorer(Scorer):
    """Inverse perplexity of the step under a causal LM (see module docstring)."""

    name = "likelihood"

    def root_ids(self, problem: str, system_prompt: str) -> list[int]:
        return chat_prompt_ids(self.tokenizer, problem, system_prompt)

    def request(self, parent_prefix: list[int], prefix: list[int]) -> ScoreRequest:
        start = len(parent_prefix)
        # logits at position p predict token p + 1: read the rows just before each step token
        return ScoreRequest(list(prefix), list(range(start - 1, len(prefix) - 1)))

    def score(self, req: ScoreRequest, logits: list[torch.Tensor]) -> float:
        if not logits:
            return 0.0
        rows = torch.stack(logits).float()
        # on the logits' device: the engine may return CUDA rows, and gather needs both on one device
        targets = torch.tensor([req.token_ids[p + 1] for p in req.read_positions], device=rows.device)
        logp = torch.log_softmax(rows, dim=-1).gather(1, targets[:, None]).squeeze(1)
        return float(math.exp(logp.mean().item()))

"""The "lm-judge" CPU scorer: ask a chat LM whether the last step is correct.

score = P(yes) / (P(yes) + P(no)) from the next-token logits after the question, i.e.
sigmoid(logit_yes - logit_no) (docs/design.md, "Verifier and PRM formats"). The scorer input is
``[judge prefix + problem] [step 1] ... [step t] [question suffix]``: everything up to step t is
the node's ``prefix_ids`` and is shared with the node's children, so the prefix cache serves it.
"""

from __future__ import annotations

import torch

from .base import ScoreRequest, Scorer, encode_text

_SENTINEL = "\x00STEPS\x00"
JUDGE_SYSTEM = "You check math solutions step by step."
JUDGE_USER = ("Problem:\n{problem}\n\nSolution so far:\n" + _SENTINEL +
              "\n\nIs the last step of this solution correct? Answer Yes or No.")


class LMJudgeScorer(Scorer):
    """P(yes)/(P(yes)+P(no)) of a chat model asked about the last step (see module docstring).

    Raises:
        ValueError: the tokenizer has no chat template, or "Yes"/"No" are not single tokens.
    """

    name = "lm-judge"

    def __init__(self, tokenizer, share_generator_ids: bool = False, yes: str = "Yes", no: str = "No"):
        super().__init__(tokenizer, share_generator_ids)
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("lm-judge needs a chat model (its tokenizer has no chat template)")
        yes_ids, no_ids = encode_text(tokenizer, yes), encode_text(tokenizer, no)
        if len(yes_ids) != 1 or len(no_ids) != 1:
            raise ValueError(f"lm-judge needs single-token answers, got {yes!r}->{yes_ids}, {no!r}->{no_ids}")
        self.yes_id, self.no_id = yes_ids[0], no_ids[0]
        self._suffix: list[int] | None = None

    def _split_template(self, problem: str) -> tuple[str, str]:
        messages = [{"role": "system", "content": JUDGE_SYSTEM},
                    {"role": "user", "content": JUDGE_USER.format(problem=problem)}]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        head, tail = text.split(_SENTINEL)
        return head, tail

    def root_ids(self, problem: str, system_prompt: str) -> list[int]:
        head, tail = self._split_template(problem)
        if self._suffix is None:
            self._suffix = encode_text(self.tokenizer, tail)
        return encode_text(self.tokenizer, head)

    def request(self, parent_prefix: list[int], prefix: list[int]) -> ScoreRequest:
        ids = list(prefix) + self._suffix
        return ScoreRequest(ids, [len(ids) - 1])

    def score(self, req: ScoreRequest, logits: list[torch.Tensor]) -> float:
        row = logits[0].float()
        return float(torch.sigmoid(row[self.yes_id] - row[self.no_id]).item())

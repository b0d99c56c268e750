"""The "math-shepherd" scorer: Math-Shepherd PRM (``peiyi9979/math-shepherd-mistral-7b-prm``).

Format (model card; docs/design.md, "Verifier and PRM formats"): plain text, no chat: question + " " + the steps,
each followed by the step tag " ки" and joined by "\\n"; the tokenizer's own special tokens (BOS)
come first. The step score is softmax over the logits of the "+" and "-" tokens at the tag's
position, the "+" share. The card takes "+"/"-" as the ids of ``"+ -"``, i.e. the forms that follow
a space ("▁+", "▁-" for the Mistral tokenizer); they are taken here as tokenized after a space.

Layout (see :mod:`core.verify.prm_format`): root = special tokens + question; lead = " " for
step 1 and "\\n" for later steps; trail = " ки", read at the tag token.
"""

from __future__ import annotations

import torch

from .prm_format import (PROBE, StepFormat, encode_after, positive_share, single_token_id, tokenizer_name)

STEP_TAG = "ки"


class MathShepherdScorer(StepFormat):
    """Math-Shepherd step scores: the good-token share at each step tag.

    Args:
        step_tag/good/bad: the tag after each step and the tokens read there (card: "ки", "+", "-").

    Raises:
        ValueError: the tag is not one token after a space, or "+"/"-" are not single tokens.
    """

    name = "math-shepherd"

    def __init__(self, tokenizer, share_generator_ids: bool = False, step_tag: str = STEP_TAG,
                 good: str = "+", bad: str = "-"):
        super().__init__(tokenizer, share_generator_ids)
        trail = " " + step_tag
        trail_ids = encode_after(tokenizer, PROBE, trail)
        tags = [i for i, t in enumerate(trail_ids) if tokenizer.decode([t]).strip() == step_tag]
        if len(tags) != 1:
            raise ValueError(f"scorer '{self.name}' needs the step tag {step_tag!r} as one token, but the tokenizer "
                             f"of '{tokenizer_name(tokenizer)}' splits {trail!r} into {trail_ids}")
        self.good_id = single_token_id(tokenizer, " " + good, self.name, context=PROBE)
        self.bad_id = single_token_id(tokenizer, " " + bad, self.name, context=PROBE)
        self._special_prefix = self._leading_special_ids()
        self._set_layout(lead_first=" ", lead_next="\n", trail=trail, trail_ids=trail_ids, read_index=tags[0])

    def _leading_special_ids(self) -> list[int]:
        """Ids the tokenizer puts before a text when adding special tokens (BOS for Mistral/Llama)."""
        plain = self.tokenizer.encode(PROBE, add_special_tokens=False)
        full = self.tokenizer.encode(PROBE)
        for k in range(len(full) - len(plain) + 1):
            if full[k: k + len(plain)] == plain:
                return full[:k]
        return []

    def root_ids(self, problem: str, system_prompt: str) -> list[int]:
        return self._special_prefix + self.tokenizer.encode(problem.strip(), add_special_tokens=False)

    def score(self, req, logits: list[torch.Tensor]) -> float:
        return positive_share(logits[0], self.good_id, self.bad_id)

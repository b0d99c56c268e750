"""The "qwen-math-prm" scorer: Qwen2.5-Math-PRM (hub ``Qwen/Qwen2.5-Math-PRM-7B`` / ``-72B``).

Format (model card; docs/design.md, "Verifier and PRM formats"): a chat with the system turn
"Please reason step by step, and put your final answer within \\boxed{}.", the question as the
user turn, and an assistant turn holding the steps, each followed by ``<extra_0>``. The step
score is softmax over the model's 2-class head at that step's ``<extra_0>``, class 1. The head is
not the LM head: the PRM model must be loaded as :class:`core.models.prm_head.Qwen2ProcessRewardModel`
(the loader does so for a ``Qwen2ForProcessRewardModel`` checkpoint).

Layout (see :mod:`core.verify.prm_format`): root = chat up to the assistant turn's content,
lead = nothing (the template's newline after the assistant header for step 1), trail = ``<extra_0>``,
read at the trail. The system turn is the card's, not the search's generator prompt.
"""

from __future__ import annotations

import torch

from core.models.prm_head import CLASSIFIER_HEAD

from .prm_format import (StepFormat, find_marker, head_row, render_chat, require_chat_template,
                         single_token_id)

QWEN_PRM_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
STEP_TAG = "<extra_0>"
_PROBLEM, _STEPS = "\ue000", "\ue001"  # private-use markers located in the rendered template


class QwenMathPRMScorer(StepFormat):
    """Qwen2.5-Math-PRM step scores: P(class 1) of the 2-class head at each ``<extra_0>``.

    Raises:
        ValueError: the tokenizer has no chat template, or ``<extra_0>`` is not one token in it.
    """

    name = "qwen-math-prm"
    head = CLASSIFIER_HEAD

    def __init__(self, tokenizer, share_generator_ids: bool = False):
        super().__init__(tokenizer, share_generator_ids)
        require_chat_template(tokenizer, self.name)
        tag_id = single_token_id(tokenizer, STEP_TAG, self.name)
        _, lead_first = self._root_text(_PROBLEM)
        self._set_layout(lead_first=lead_first, lead_next="", trail=STEP_TAG, trail_ids=[tag_id], read_index=0)

    def _root_text(self, problem: str) -> tuple[str, str]:
        """(chat text up to the assistant content without trailing whitespace, that whitespace)."""
        messages = [{"role": "system", "content": QWEN_PRM_SYSTEM}, {"role": "user", "content": problem},
                    {"role": "assistant", "content": _STEPS}]
        text = render_chat(self.tokenizer, messages)
        head = text[: find_marker(text, _STEPS, self.name, self.tokenizer)]
        root = head.rstrip()
        return root, head[len(root):]

    def root_ids(self, problem: str, system_prompt: str) -> list[int]:
        root, _ = self._root_text(problem)
        return self.tokenizer.encode(root, add_special_tokens=False)

    def score(self, req, logits: list[torch.Tensor]) -> float:
        row = head_row(self, logits, 2, "the PRM's 2-class head",
                       "a causal LM? load a Qwen2ForProcessRewardModel checkpoint")
        return float(torch.softmax(row, dim=-1)[1].item())

"""The "token-classification" scorer: PRMs trained with TRL's ``PRMTrainer`` (e.g. the
Qwen2.5-Math-*-Instruct-PRM checkpoints), ``AutoModelForTokenClassification`` models with 2 labels.

Format (``PRMTrainer.tokenize_row`` in ``trl/experimental/prm/prm_trainer.py`` of
github.com/huggingface/trl): the tokenizer's BOS id when it has one, then the prompt's ids, then
for every step its ids (the step tokenized alone, no special tokens) followed by the ids of the
step separator (``PRMConfig.step_separator``, default ``"\\n"``); the label of a step sits on the
last token of ``step + separator``. The prompt follows BOS directly and the first step the prompt
directly: no chat template, nothing between them. The step score is the softmax over the two
labels at that token, label 1 ("the step is correct": TRL stores the step's boolean label as 0/1).

Layout: see :mod:`core.verify.separated_steps`. The question is stripped of surrounding whitespace.
"""

from __future__ import annotations

import torch

from core.models.prm_head import CLASSIFIER_HEAD

from .base import encode_text
from .prm_format import head_row
from .separated_steps import SeparatedSteps

#: ``PRMConfig.step_separator``'s default in TRL
STEP_SEPARATOR = "\n"


class TokenClassificationScorer(SeparatedSteps):
    """TRL-trained PRM step scores: P(label 1) of the 2-label head at the last token of each step's separator.

    Args:
        separator: the step separator the PRM was trained with (TRL's default ``"\\n"``).

    Raises:
        ValueError: the separator encodes to no tokens.
    """

    name = "token-classification"
    head = CLASSIFIER_HEAD

    def __init__(self, tokenizer, share_generator_ids: bool = False, separator: str = STEP_SEPARATOR):
        super().__init__(tokenizer, share_generator_ids)
        self._set_separator(separator, encode_text(tokenizer, separator))
        # TRL prepends BOS only when the tokenizer has one (Qwen2 tokenizers have none)
        self._bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []

    def root_ids(self, problem: str, system_prompt: str) -> list[int]:
        return self._bos + encode_text(self.tokenizer, problem.strip())

    def score(self, req, logits: list[torch.Tensor]) -> float:
        row = head_row(self, logits, 2, "a 2-label token-classification head",
                       "load a *ForTokenClassification checkpoint with num_labels 2")
        return float(torch.softmax(row, dim=-1)[1].item())

"""The "skywork-prm" scorer: Skywork-o1-Open-PRM (``Skywork/Skywork-o1-Open-PRM-Qwen-2.5-1.5B`` / ``-7B``).

Format (``model_utils/io_utils.py`` ``prepare_input`` of github.com/SkyworkAI/skywork-o1-prm-inference,
the code the model card points to): plain text, no chat template and no system prompt. The input
is the tokenizer's BOS token + the question + ``"\\n"``, then for every step its ids (the step
tokenized alone) followed by one step-separator token, the id of ``"\\n"`` (the card's
``step_token``). The step reward is the sigmoid of the value head at that separator (the model's
``return_probs=True``). The model must be loaded as :class:`core.models.prm_head.Qwen2ValueHeadPRM`
(the loader does so for a ``Qwen2ForPrmModel`` checkpoint).

Layout: see :mod:`core.verify.separated_steps` (one score per ``"\\n\\n"`` step of the search). The
question is stripped of surrounding whitespace, so a trailing newline in the input does not double
the card's ``"\\n"``.
"""

from __future__ import annotations

import torch

from core.models.prm_head import VALUE_HEAD

from .base import encode_text
from .prm_format import head_row, tokenizer_name
from .separated_steps import SeparatedSteps

STEP_TOKEN = "\n"


class SkyworkPRMScorer(SeparatedSteps):
    """Skywork PRM step scores: sigmoid of the value head at the separator after each step.

    Raises:
        ValueError: the tokenizer has no BOS token (the format starts with it), or ``"\\n"``
            encodes to no token.
    """

    name = "skywork-prm"
    head = VALUE_HEAD

    def __init__(self, tokenizer, share_generator_ids: bool = False):
        super().__init__(tokenizer, share_generator_ids)
        if tokenizer.bos_token is None:
            raise ValueError(f"scorer '{self.name}' starts the PRM input with the tokenizer's BOS token (Skywork's "
                             f"prepare_input), but the tokenizer of '{tokenizer_name(tokenizer)}' has none; use the "
                             "tokenizer shipped with the Skywork PRM")
        # the card takes the last id of the step token's encoding
        self._set_separator(STEP_TOKEN, encode_text(tokenizer, STEP_TOKEN)[-1:])

    def root_ids(self, problem: str, system_prompt: str) -> list[int]:
        # the BOS token as text, as the card writes it: the tokenizer turns it into its id
        return encode_text(self.tokenizer, self.tokenizer.bos_token + problem.strip() + STEP_TOKEN)

    def score(self, req, logits: list[torch.Tensor]) -> float:
        row = head_row(self, logits, 1, "the PRM's value head (one value per position)",
                       "load a Qwen2ForPrmModel (Skywork PRM) checkpoint")
        return float(torch.sigmoid(row[0]).item())

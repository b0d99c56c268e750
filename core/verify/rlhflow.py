"""The "rlhflow" scorer: RLHFlow Llama3.1-8B-PRM (``RLHFlow/Llama3.1-8B-PRM-Deepseek-Data``,
``-Mistral-Data``), a causal LM fine-tuned to answer "+" or "-" after each step.

Format (model card; docs/design.md, "Verifier and PRM formats"): a chat whose first user turn is question + " " +
step 1, every step followed by an assistant turn "+", later steps as new user turns. The step
score is P("+") from softmax over the logits of "+" and "-" at the position that predicts that
assistant "+" (the last token of the assistant header; the card reads position -3 of a
conversation ending in ``+<|eot_id|>``).

Layout (see :mod:`core.verify.prm_format`): root = chat up to the end of the question; lead =
" " for step 1 and the whitespace closing the user header for later steps; trail = end of the
user turn, the assistant turn "+" and the next user header; read at the token before that "+".
The turn texts come from the tokenizer's own chat template (rendered with marker contents), so
any chat template works; no system turn is added (the card has none).
"""

from __future__ import annotations

import torch

from .prm_format import (PROBE, StepFormat, encode_after, find_marker, positive_share, render_chat,
                         require_chat_template, single_token_id, text_between, tokenizer_name)

_Q, _S1, _S2, _A = "\ue000", "\ue001", "\ue002", "\ue003"  # private-use markers located in the rendered template


class RLHFlowScorer(StepFormat):
    """RLHFlow PRM step scores: P(good) over {good, bad} where the assistant turn answers.

    Args:
        good/bad: the assistant answers for a correct/wrong step (card: "+" and "-").

    Raises:
        ValueError: no chat template, "+"/"-" not single tokens, or a template that merges the
            assistant "+" with the header or rewrites message contents.
    """

    name = "rlhflow"

    def __init__(self, tokenizer, share_generator_ids: bool = False, good: str = "+", bad: str = "-"):
        super().__init__(tokenizer, share_generator_ids)
        require_chat_template(tokenizer, self.name)
        self.good, self.good_id = good, single_token_id(tokenizer, good, self.name)
        self.bad_id = single_token_id(tokenizer, bad, self.name)
        between = text_between(self._render(_Q, good), _S1, _S2, self.name, tokenizer)
        if text_between(self._render(_Q, good), _Q, _S1, self.name, tokenizer) != " ":
            raise ValueError(f"scorer '{self.name}': the chat template of '{tokenizer_name(tokenizer)}' changes "
                             "the space between the question and the first step")
        marked = text_between(self._render(_Q, _A), _S1, _S2, self.name, tokenizer)
        if marked.count(_A) != 1 or marked.replace(_A, good) != between:
            raise ValueError(f"scorer '{self.name}': the chat template of '{tokenizer_name(tokenizer)}' does not "
                             "keep the assistant turn as given")
        trail = between.rstrip()
        trail_ids = encode_after(tokenizer, PROBE, trail)
        header_ids = encode_after(tokenizer, PROBE, marked[: marked.index(_A)])
        n = len(header_ids)
        if not n or trail_ids[:n] != header_ids or len(trail_ids) <= n or trail_ids[n] != self.good_id:
            raise ValueError(f"scorer '{self.name}': with the tokenizer of '{tokenizer_name(tokenizer)}' the "
                             f"assistant answer {good!r} is not a token of its own after the assistant header")
        self._set_layout(lead_first=" ", lead_next=between[len(trail):], trail=trail, trail_ids=trail_ids,
                         read_index=n - 1)

    def _render(self, problem: str, answer: str) -> str:
        """Two steps of the card's conversation with marker texts (steps ``_S1``, ``_S2``)."""
        return render_chat(self.tokenizer, [
            {"role": "user", "content": problem + " " + _S1}, {"role": "assistant", "content": answer},
            {"role": "user", "content": _S2}, {"role": "assistant", "content": answer}])

    def root_ids(self, problem: str, system_prompt: str) -> list[int]:
        text = self._render(problem.strip(), self.good)
        # the root ends with the question; the " " before step 1 is step 1's lead
        root = text[: find_marker(text, _S1, self.name, self.tokenizer)][:-1]
        return self.tokenizer.encode(root, add_special_tokens=False)

    def score(self, req, logits: list[torch.Tensor]) -> float:
        return positive_share(logits[0], self.good_id, self.bad_id)

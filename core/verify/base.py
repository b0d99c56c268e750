"""The scorer interface: how a PRM (or a CPU stand-in) builds its input ids and reads a step score.

A scorer never runs a model itself; the :class:`core.verify.verifier.Verifier` runs all scoring
as prefill-only sequences on the scorer's own paged engine (prefix-cached), and hands each
scorer the logits rows it asked for.

Input ids are built incrementally per tree node: a node's ``prefix_ids`` are its parent's
``prefix_ids`` plus the ids of the node's step, never a re-tokenization of the whole text.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch


@dataclass
class ScoreRequest:
    """What to prefill for one step's score.

    token_ids: the scorer's full input for this step.
    read_positions: positions whose logits the scorer needs (sorted, unique).
    """

    token_ids: list[int]
    read_positions: list[int]


class Scorer(ABC):
    """Builds scorer inputs for tree nodes and turns logits into step scores in [0, 1].

    Args:
        tokenizer: the scorer model's tokenizer.
        share_generator_ids: True when generator and scorer use the same tokenizer, so a step's
            generator token ids are reused without decode/re-encode.
    """

    name: str = "scorer"
    #: which output of the PRM model the scores are read from: "lm" (a causal LM's vocabulary
    #: logits), "classifier" (a token-classification head) or "value" (a one-scalar value head);
    #: see core.models.prm_head
    head: str = "lm"

    def __init__(self, tokenizer, share_generator_ids: bool = False):
        self.tokenizer = tokenizer
        self.share_generator_ids = share_generator_ids

    @abstractmethod
    def root_ids(self, problem: str, system_prompt: str) -> list[int]:
        """Ids of the scorer input before the first step (a node's ``prefix_ids`` start here)."""

    def step_ids(self, step_text: str, generator_ids: list[int], first_step: bool = False) -> list[int]:
        """Ids that one step adds to its parent's ``prefix_ids`` (reused from the generator when shared).

        ``first_step`` is True for a depth-1 step (its parent is the root): some PRM formats join
        the first step to the question differently from later steps. Adapters may add separator
        or turn ids around the step; a node's ``prefix_ids`` stay a prefix of its children's.
        """
        if self.share_generator_ids:
            return list(generator_ids)
        return self.tokenizer.encode(step_text, add_special_tokens=False)

    @abstractmethod
    def request(self, parent_prefix: list[int], prefix: list[int]) -> ScoreRequest:
        """The prefill for a node whose ``prefix_ids`` are ``prefix`` (its parent's: ``parent_prefix``)."""

    @abstractmethod
    def score(self, req: ScoreRequest, logits: list[torch.Tensor]) -> float:
        """Step score from the logits rows at ``req.read_positions`` (each ``[vocab]``, float)."""


def encode_text(tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` with no special tokens added (the text carries its own)."""
    return tokenizer.encode(text, add_special_tokens=False)


def chat_prompt_ids(tokenizer, problem: str, system_prompt: str | None) -> list[int]:
    """Ids of a chat prompt (system + user problem) ending with the assistant header.

    Raises:
        ValueError: the tokenizer has no chat template.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the model's tokenizer has no chat template; use a chat/instruct model")
    messages = ([{"role": "system", "content": system_prompt}] if system_prompt else [])
    messages.append({"role": "user", "content": problem})
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return encode_text(tokenizer, text)

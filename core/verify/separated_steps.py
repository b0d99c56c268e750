"""Shared layout of the PRM formats that tokenize every step on its own: ``root (step separator)*``.

Skywork-o1-Open-PRM and the PRMs trained with TRL's ``PRMTrainer`` build their input as the
question's ids followed, per step, by the step's ids (the step tokenized alone) and the ids of a
step separator; the score of a step is read at the last separator token after it. No chat template
is involved and nothing joins a step to the text before it, so a node's ``prefix_ids`` are its
parent's plus ``step + separator``, and the parent's input is a prefix of every child's (the PRM's
prefix cache serves it).

Steps are stripped of surrounding whitespace and special tokens (the search's step delimiter
``"\\n\\n"`` and EOS): one step of the search is one step of the format, scored once. (The
published wiring of Skywork's PRM in search-and-learn splits a ``"\\n\\n"``-delimited solution on
``"\\n"`` and so scores the empty piece between the two newlines as a step of its own; here it is not.)
"""

from __future__ import annotations

from .base import ScoreRequest, Scorer, encode_text
from .prm_format import tokenizer_name, trim_generator_ids


class SeparatedSteps(Scorer):
    """A scorer whose input is ``root (step separator)*``, one score read at each separator's last token.

    Subclasses call :meth:`_set_separator` in ``__init__`` and implement ``root_ids`` and ``score``.
    With ``share_generator_ids`` a step's generator ids are reused, trimmed of the delimiter and EOS;
    where a token at either end mixes text and whitespace (``".\\n\\n"`` is one token in many
    vocabularies) the step's stripped text is encoded instead.
    """

    def _set_separator(self, separator: str, separator_ids: list[int]) -> None:
        """Fix the ids appended after every step (``separator`` as text, for error messages).

        Raises:
            ValueError: the separator encodes to no tokens (names the scorer and tokenizer).
        """
        if not separator_ids:
            raise ValueError(f"scorer '{self.name}': the step separator {separator!r} encodes to no tokens with the "
                             f"tokenizer of '{tokenizer_name(self.tokenizer)}'")
        self._separator_ids = list(separator_ids)

    def step_ids(self, step_text: str, generator_ids: list[int], first_step: bool = False) -> list[int]:
        if self.share_generator_ids:
            trimmed = trim_generator_ids(self.tokenizer, generator_ids)
            if trimmed is not None:
                return trimmed + self._separator_ids
        return encode_text(self.tokenizer, step_text.strip()) + self._separator_ids

    def request(self, parent_prefix: list[int], prefix: list[int]) -> ScoreRequest:
        return ScoreRequest(list(prefix), [len(prefix) - 1])

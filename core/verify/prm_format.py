"""Shared layout of the trained-PRM input formats: ``root (lead step trail)*``, one score per trail.

Every public PRM format (docs/design.md, "Verifier and PRM formats") puts the steps of a path one after another, each
preceded by a *lead* (text joining it to what came before) and followed by a *trail* (a step tag
or chat-turn tokens) holding the token whose output row gives the step's score. A node's
``prefix_ids`` therefore end with its step's trail, and its children append ``lead + step + trail``:
the parent's input is a prefix of every child's, so the PRM's prefix cache serves it.

Steps are stripped of surrounding whitespace (the step delimiter ``"\\n\\n"`` is not part of a step
in these formats: the model cards split solutions on it) and of special tokens such as EOS.
Whitespace at the end of a trail belongs to the next lead, because tokenizers merge it with what
follows (``"\\n\\nFirst"`` is not ``"\\n\\n" + "First"`` for every tokenizer).
"""

from __future__ import annotations

import torch

from .base import ScoreRequest, Scorer

# A word standing in for "some text" before a lead or a trail when tokenizing in context. What the
# text before a separator is does not change how the separator is tokenized in these formats: they
# start with a space, a newline or a special token, all token boundaries for BPE and SentencePiece.
PROBE = "x"


def tokenizer_name(tokenizer) -> str:
    """The model folder or hub name a tokenizer came from (for error messages)."""
    return getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__


def encode_after(tokenizer, context: str, text: str) -> list[int]:
    """Ids that ``text`` adds when tokenized in one string right after ``context``.

    A piece tokenized alone can differ from the same piece inside the full text: SentencePiece
    marks a string's first word as word-initial, and byte-level BPE merges a space with the word
    after it. Tokenizing ``context + text`` and dropping the context's ids gives the ids the PRM
    saw in training; when the context's ids are not a prefix of the joint ids (a merge across the
    boundary), ``text`` is tokenized alone. Special-token strings in either are parsed as such.
    """
    ctx = tokenizer.encode(context, add_special_tokens=False)
    joint = tokenizer.encode(context + text, add_special_tokens=False)
    if joint[: len(ctx)] == ctx:
        return joint[len(ctx):]
    return tokenizer.encode(text, add_special_tokens=False)


def trim_generator_ids(tokenizer, ids: list[int]) -> list[int] | None:
    """Generator ids of a step without leading/trailing whitespace-only or special tokens (EOS).

    Returns None when a token at either end mixes text with whitespace on the trimmed side
    (``".\\n\\n"`` is one token in some vocabularies): the caller then re-encodes the stripped text.
    """
    special = set(tokenizer.all_special_ids)

    def blank(i: int) -> bool:
        return i in special or not tokenizer.decode([i]).strip()

    lo, hi = 0, len(ids)
    while lo < hi and blank(ids[lo]):
        lo += 1
    while hi > lo and blank(ids[hi - 1]):
        hi -= 1
    kept = list(ids[lo:hi])
    if kept:
        first, last = tokenizer.decode(kept[:1]), tokenizer.decode(kept[-1:])
        if first != first.lstrip() or last != last.rstrip():
            return None
    return kept


def require_chat_template(tokenizer, scorer: str) -> None:
    """Raises ValueError when the PRM tokenizer has no chat template (the format is a chat)."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"scorer '{scorer}' needs a chat template, but the tokenizer of "
                         f"'{tokenizer_name(tokenizer)}' has none")


def single_token_id(tokenizer, text: str, scorer: str, context: str = "") -> int:
    """The one id of ``text`` tokenized after ``context``.

    Raises:
        ValueError: ``text`` is not a single token in this tokenizer (names tokenizer and text).
    """
    ids = encode_after(tokenizer, context, text) if context else tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        raise ValueError(f"scorer '{scorer}' needs {text!r} to be a single token, but the tokenizer of "
                         f"'{tokenizer_name(tokenizer)}' splits it into {len(ids)} tokens {ids}")
    return ids[0]


def render_chat(tokenizer, messages: list[dict]) -> str:
    """The chat template applied to a finished conversation (no generation prompt), as text."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)


def _template_error(scorer: str, tokenizer) -> ValueError:
    return ValueError(f"scorer '{scorer}': the chat template of '{tokenizer_name(tokenizer)}' does not keep "
                      "message contents as given, so the PRM input cannot be built step by step")


def find_marker(text: str, marker: str, scorer: str, tokenizer) -> int:
    """Index of the unique ``marker`` in a rendered chat template.

    Raises:
        ValueError: the marker is missing or repeated (the template rewrites message contents).
    """
    if text.count(marker) != 1:
        raise _template_error(scorer, tokenizer)
    return text.index(marker)


def text_between(text: str, start: str, end: str, scorer: str, tokenizer) -> str:
    """The text between the unique markers ``start`` and ``end`` of a rendered template.

    Raises:
        ValueError: a marker is missing, repeated or out of order.
    """
    i, j = find_marker(text, start, scorer, tokenizer) + len(start), find_marker(text, end, scorer, tokenizer)
    if i > j:
        raise _template_error(scorer, tokenizer)
    return text[i:j]


def head_row(scorer, logits: list[torch.Tensor], width: int, head: str, fix: str) -> torch.Tensor:
    """The one row a head-reading scorer reads, as float32 ``[width]``.

    Args:
        scorer: the scorer (its ``name`` and ``tokenizer`` name the model in the error).
        logits: the request's read rows (one). width: values the head gives per position.
        head/fix: what the scorer needs and what to load instead, for the error.

    Raises:
        ValueError: the model returned another number of values per position (a causal LM's
            vocabulary logits, say): the wrong kind of checkpoint for this scorer.
    """
    row = logits[0].float()
    if row.shape[-1] != width:
        raise ValueError(f"scorer '{scorer.name}' needs {head}, but the model of '{tokenizer_name(scorer.tokenizer)}' "
                         f"returned {row.shape[-1]} values per position; {fix}")
    return row


def positive_share(row: torch.Tensor, good: int, bad: int) -> float:
    """softmax over the two logits ``row[good], row[bad]``, the ``good`` share: sigmoid of the gap."""
    row = row.float()
    return float(torch.sigmoid(row[good] - row[bad]).item())


class StepFormat(Scorer):
    """A scorer whose input is ``root (lead step trail)*`` with one score read per trail.

    Subclasses call :meth:`_set_layout` in ``__init__`` and implement ``root_ids`` and ``score``.
    With ``share_generator_ids`` a step's generator ids are reused (trimmed of the delimiter and
    EOS) unless its lead ends with a space, which joins the step's first word in one token
    (``" First"``): that step is re-encoded from its text.
    """

    def _set_layout(self, lead_first: str, lead_next: str, trail: str, trail_ids: list[int], read_index: int):
        """Fix the format: leads before depth-1 and later steps, the trail text, its ids and read row.

        ``read_index`` indexes ``trail_ids``: the row read for the step's score.
        """
        self._lead = {True: lead_first, False: lead_next}
        self._context = {True: PROBE, False: PROBE + trail}
        self._lead_ids = {first: encode_after(self.tokenizer, self._context[first], lead)
                          for first, lead in self._lead.items()}
        self._trail_ids = list(trail_ids)
        self._read_back = len(trail_ids) - read_index

    def step_ids(self, step_text: str, generator_ids: list[int], first_step: bool = False) -> list[int]:
        lead = self._lead[first_step]
        if self.share_generator_ids and not lead.endswith(" "):
            trimmed = trim_generator_ids(self.tokenizer, generator_ids)
            if trimmed is not None:
                return self._lead_ids[first_step] + trimmed + self._trail_ids
        return encode_after(self.tokenizer, self._context[first_step], lead + step_text.strip()) + self._trail_ids

    def request(self, parent_prefix: list[int], prefix: list[int]) -> ScoreRequest:
        return ScoreRequest(list(prefix), [len(prefix) - self._read_back])

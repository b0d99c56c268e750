"""Stop conditions checked after every sampled token: step delimiter, EOS and length limits."""

from __future__ import annotations

import weakref

from .sequence import Sequence, StopReason

_PIECE_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class TokenPieces:
    """Decoded text of every vocabulary entry on its own, for delimiter detection.

    Byte-level BPE pieces that are partial UTF-8 decode to replacement characters on their own;
    that is harmless here because step delimiters are ASCII (whole bytes are whole characters).

    Args:
        tokenizer: a `transformers` tokenizer; ``None`` gives empty pieces (no delimiter can match,
            used by tests on token ids only).
        vocab_size: rows of the model's LM head (may exceed the tokenizer's size).
    """

    def __init__(self, tokenizer, vocab_size: int):
        self.vocab_size = vocab_size
        if tokenizer is None:
            self.pieces = [""] * vocab_size
            return
        n = min(len(tokenizer), vocab_size)
        # decoding the whole vocabulary takes ~1 s for 50k entries: once per tokenizer is enough
        try:
            pieces = _PIECE_CACHE.get(tokenizer)
        except TypeError:
            pieces = None
        if pieces is None or len(pieces) < n:
            pieces = tokenizer.batch_decode([[i] for i in range(n)], skip_special_tokens=True,
                                            clean_up_tokenization_spaces=False)
            try:
                _PIECE_CACHE[tokenizer] = pieces
            except TypeError:
                pass
        self.pieces = pieces[:n] + [""] * (vocab_size - n)

    def __getitem__(self, token_id: int) -> str:
        return self.pieces[token_id]


def check_stop(seq: Sequence, token: int, pieces: TokenPieces, max_model_len: int) -> StopReason | None:
    """Update ``seq``'s delimiter tail with the newly appended ``token`` and say whether it stops.

    Order of precedence: EOS, the path limits (context, total tokens), delimiter, then the step
    limit. So a step that ends exactly at its step-token limit with a delimiter still counts as a
    complete step, but a delimiter on the path's last allowed token ends the path (a DELIMITER stop
    would let the search resume a path that has no tokens left).
    """
    stop = seq.stop
    if token in stop.eos_token_ids and not stop.ignore_eos:
        return StopReason.EOS
    if len(seq.token_ids) >= max_model_len:
        return StopReason.CONTEXT
    if seq.num_generated >= stop.max_tokens:
        return StopReason.MAX_TOKENS
    delim = stop.step_delimiter
    if delim:
        piece = pieces[token]
        text = seq.stop_tail + piece
        at = text.find(delim)
        # A delimiter ends a step only if the step then has some non-blank text: leading blank lines
        # belong to the step (else a model that writes "\n" between lines makes empty steps).
        if at >= 0 and (seq.step_has_text or text[:at + len(delim)].strip()):
            return StopReason.DELIMITER
        seq.step_has_text = seq.step_has_text or bool(piece.strip())
        seq.stop_tail = text[-(len(delim) - 1):] if len(delim) > 1 else ""
    if len(seq.token_ids) - seq.step_start >= stop.max_step_tokens:
        return StopReason.STEP_TOKENS
    return None

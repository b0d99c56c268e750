"""Stop conditions checked after every sampled token: step delimiter, EOS and length limits.

The step delimiter is matched on the *text* of the step, decoded incrementally from the raw bytes of
each token. Byte-level BPE vocabularies (GPT-2 style: SmolLM2, Qwen2, Llama 3) and SentencePiece
byte fallback split characters outside ASCII into tokens of partial UTF-8 (``∎`` is two SmolLM2
tokens, ``步骤`` five); each such token decodes alone to U+FFFD, so matching token by token on
decoded pieces never finds ``∎``, ``Шаг``, ``；`` or an emoji. Here each sequence keeps the bytes
of a character not yet complete (``Sequence.stop_pending``) and the last ``len(delimiter) - 1``
characters of decoded text (``Sequence.stop_tail``), so a token costs a decode of its own few
bytes, never of the whole step.
"""

from __future__ import annotations

import codecs
import json
import re
import weakref

from .sequence import Sequence, StopReason

_PIECE_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_SP_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
_SP_SPACE = "\u2581"  # SentencePiece's word-boundary mark, a space in the text


def _decoder_types(tokenizer) -> set[str]:
    """Types of the fast tokenizer's decoder and of every decoder nested in it (empty when unknown)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return set()
    try:
        spec = json.loads(backend.to_str()).get("decoder")
    except (AttributeError, TypeError, ValueError):
        return set()
    found: set[str] = set()
    todo = [spec]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            if "type" in node:
                found.add(node["type"])
            todo.extend(node.get("decoders") or [])
    return found


def token_bytes(tokenizer, n: int) -> list[bytes]:
    """The raw UTF-8 bytes each of the first ``n`` token ids stands for in decoded text.

    Byte-level vocabularies (a ``ByteLevel`` decoder) map each token's characters back to bytes with
    `transformers`' GPT-2 byte table; SentencePiece vocabularies read ``<0xHH>`` byte-fallback tokens
    as that byte and ``▁`` as a space (which decoding a token on its own would drop). A token whose
    mapped bytes disagree with the tokenizer's own decoding of it (an added token stored as plain
    text, an unknown scheme) takes the UTF-8 of that decoding instead. Special tokens give ``b""``,
    as they do with ``skip_special_tokens``.

    Args:
        tokenizer: a `transformers` tokenizer.
        n: how many ids, from 0 (at most ``len(tokenizer)``).

    Returns:
        ``n`` byte strings; partial UTF-8 where a token holds part of a character.
    """
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    ids = list(range(n))
    decoded = tokenizer.batch_decode([[i] for i in ids], skip_special_tokens=True,
                                     clean_up_tokenization_spaces=False)
    names = tokenizer.convert_ids_to_tokens(ids)
    kinds = _decoder_types(tokenizer)
    byte_level = "ByteLevel" in kinds
    sentencepiece = bool(kinds & {"Metaspace", "ByteFallback", "Replace"}) or (
        not kinds and any(isinstance(t, str) and t.startswith(_SP_SPACE) for t in names[:1000]))
    byte_of = {ch: b for b, ch in bytes_to_unicode().items()}
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    out: list[bytes] = []
    for i, text, name in zip(ids, decoded, names):
        # a token may decode to "" alone and still be text in context (SentencePiece's lone "▁")
        if i in special or not isinstance(name, str):
            out.append(b"")
            continue
        raw = None
        if byte_level and all(ch in byte_of for ch in name):
            raw = bytes(byte_of[ch] for ch in name)
        elif sentencepiece:
            m = _SP_BYTE.match(name)
            raw = bytes([int(m.group(1), 16)]) if m else name.replace(_SP_SPACE, " ").encode()
        if raw is not None:
            as_text = raw.decode("utf-8", errors="replace")
            # partial UTF-8 decodes to U+FFFD on both sides; a SentencePiece token decoded alone
            # loses its leading space, which the mapped bytes keep
            if as_text == text or as_text.lstrip(" ") == text.lstrip(" ") or "\ufffd" in text:
                out.append(raw)
                continue
        out.append(text.encode())
    return out


class TokenPieces:
    """The raw bytes of every vocabulary entry (see :func:`token_bytes`), for delimiter detection.

    Args:
        tokenizer: a `transformers` tokenizer; ``None`` gives empty pieces (no delimiter can match,
            used by tests on token ids only; they set pieces with ``pieces[id] = "text"``).
        vocab_size: rows of the model's LM head (may exceed the tokenizer's size).
    """

    def __init__(self, tokenizer, vocab_size: int):
        self.vocab_size = vocab_size
        if tokenizer is None:
            self.pieces: list[bytes] = [b""] * vocab_size
            return
        n = min(len(tokenizer), vocab_size)
        # decoding the whole vocabulary takes ~1 s for 50k entries: once per tokenizer is enough
        try:
            pieces = _PIECE_CACHE.get(tokenizer)
        except TypeError:
            pieces = None
        if pieces is None or len(pieces) < n:
            pieces = token_bytes(tokenizer, n)
            try:
                _PIECE_CACHE[tokenizer] = pieces
            except TypeError:
                pass
        self.pieces = pieces[:n] + [b""] * (vocab_size - n)

    def __getitem__(self, token_id: int) -> bytes:
        return self.pieces[token_id]

    def __setitem__(self, token_id: int, text: str | bytes) -> None:
        self.pieces[token_id] = text.encode() if isinstance(text, str) else bytes(text)


def decode_complete(data: bytes) -> tuple[str, bytes]:
    """Split ``data`` into the text of its complete UTF-8 characters and the bytes of a trailing partial one.

    Invalid bytes become U+FFFD (they can never complete a character); only a valid but unfinished
    sequence at the end is held back.

    Returns:
        ``(text, pending)``: ``pending`` is at most 3 bytes, to be prefixed to the next token's bytes.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = decoder.decode(data, final=False)
    return text, decoder.getstate()[0]


def check_stop(seq: Sequence, token: int, pieces: TokenPieces, max_model_len: int) -> StopReason | None:
    """Update ``seq``'s delimiter state with the newly appended ``token`` and say whether it stops.

    Order of precedence: EOS, the path limits (context, total tokens), delimiter, then the step
    limit. So a step that ends exactly at its step-token limit with a delimiter still counts as a
    complete step, but a delimiter on the path's last allowed token ends the path (a DELIMITER stop
    would let the search resume a path that has no tokens left).

    The delimiter is found in the decoded text of the step: ``seq.stop_pending`` (bytes of an
    unfinished character) plus this token's bytes are decoded, and the complete characters are
    searched together with ``seq.stop_tail`` (the step's last ``len(delimiter) - 1`` characters), so
    delimiters spanning tokens (``"\\n" + "\\n"``, ``"##" + " Step"``) or split inside a character
    (``∎``, ``步骤``) are found at the token that completes them.
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
        new_text, seq.stop_pending = decode_complete(seq.stop_pending + pieces[token])
        text = seq.stop_tail + new_text
        at = text.find(delim)
        # A delimiter ends a step only if the step then has some non-blank text: leading blank lines
        # belong to the step (else a model that writes "\n" between lines makes empty steps).
        if at >= 0 and (seq.step_has_text or text[:at + len(delim)].strip()):
            return StopReason.DELIMITER
        seq.step_has_text = seq.step_has_text or bool(new_text.strip())
        seq.stop_tail = text[-(len(delim) - 1):] if len(delim) > 1 else ""
    if len(seq.token_ids) - seq.step_start >= stop.max_step_tokens:
        return StopReason.STEP_TOKENS
    return None

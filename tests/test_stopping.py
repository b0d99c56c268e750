"""Step delimiters matched on decoded text, with the SmolLM2 tokenizer (issue 15, item 3).

SmolLM2's byte-level BPE splits characters outside ASCII into tokens that hold partial UTF-8, each
decoding alone to U+FFFD. The expected stop position comes from the tokenizer itself: the first
token whose prefix decodes to text containing the delimiter.
"""

from __future__ import annotations

import pytest

from core.engine.engine import EngineConfig, GenerationEngine
from core.engine.sequence import SamplingParams, Sequence, StopCriteria, StopReason
from core.engine.stopping import TokenPieces, check_stop, decode_complete, token_bytes


@pytest.fixture(scope="module")
def tok(smollm2):
    return smollm2.tokenizer


@pytest.fixture(scope="module")
def pieces(tok):
    return TokenPieces(tok, len(tok))


def feed(seq: Sequence, ids: list[int], pieces) -> list:
    reasons = []
    for t in ids:
        seq.token_ids.append(t)
        reasons.append(check_stop(seq, t, pieces, 10_000))
    return reasons


def first_stop(ids: list[int], delim: str, pieces) -> tuple[int | None, StopReason | None]:
    seq = Sequence(token_ids=[1], sampling=SamplingParams(), stop=StopCriteria(step_delimiter=delim))
    for i, r in enumerate(feed(seq, ids, pieces)):
        if r is not None:
            return i, r
    return None, None


def expected_stop(tok, ids: list[int], delim: str) -> int:
    """Index of the first token whose prefix decodes to text containing ``delim`` (the reference)."""
    for i in range(len(ids)):
        if delim in tok.decode(ids[:i + 1]):
            return i
    raise AssertionError(f"{delim!r} not in the text")


@pytest.mark.parametrize("delim", ["∎", "Шаг", "步骤", "；", "🙂"])
def test_non_ascii_delimiter_split_into_partial_utf8_tokens(tok, pieces, delim):
    mark = tok.encode(delim, add_special_tokens=False)
    # the delimiter really is split inside a character: some of its tokens decode alone to U+FFFD
    assert len(mark) > 1 and any("\ufffd" in tok.decode([i]) for i in mark)
    ids = (tok.encode("First we add 2 and 3 to get 5 ", add_special_tokens=False) + mark
           + tok.encode(" then we double it", add_special_tokens=False))
    at = expected_stop(tok, ids, delim)
    assert first_stop(ids, delim, pieces) == (at, StopReason.DELIMITER)
    # the same delimiter inside one text, tokenized as the model would write it
    ids = tok.encode(f"First we add 2 and 3 to get 5{delim} then we double it", add_special_tokens=False)
    assert first_stop(ids, delim, pieces) == (expected_stop(tok, ids, delim), StopReason.DELIMITER)


@pytest.mark.parametrize("parts, delim", [
    (["Step one.", "\n", "\n", "Step two."], "\n\n"),  # "\n" + "\n": two tokens
    (["Add the numbers.\n", "##", " Step", " 2: double it"], "## Step"),
    (["Шаг 1: сложим.", "\n", "\n", "Шаг 2"], "\n\n"),
    (["Сначала сложим.", " Шаг", " 2"], "Шаг"),  # Cyrillic, partial pieces, after text
])
def test_delimiter_spanning_tokens(tok, pieces, parts, delim):
    ids = [i for part in parts for i in tok.encode(part, add_special_tokens=False)]
    at = expected_stop(tok, ids, delim)
    assert first_stop(ids, delim, pieces) == (at, StopReason.DELIMITER)


def test_no_false_stop_without_the_delimiter(tok, pieces):
    ids = tok.encode("Шаг за шагом: 步骤 ∎ 🙂 no semicolon here", add_special_tokens=False)
    assert first_stop(ids, "；", pieces) == (None, None)
    assert first_stop(ids, "\n", pieces) == (None, None)


def test_token_bytes_agree_with_the_tokenizer(tok, pieces):
    raw = token_bytes(tok, len(tok))
    # every token that decodes to whole characters maps to exactly those characters' bytes
    for i, text in enumerate(tok.batch_decode([[i] for i in range(len(tok))], skip_special_tokens=True,
                                              clean_up_tokenization_spaces=False)):
        if "\ufffd" not in text:
            assert raw[i] == text.encode(), i
    for special in tok.all_special_ids:
        assert raw[special] == b""
    text = "Шаг 1: 步骤 ∎ ；🙂 done"
    ids = tok.encode(text, add_special_tokens=False)
    assert b"".join(pieces[i] for i in ids).decode() == text


def test_decode_complete_holds_back_a_partial_character():
    data = "a∎".encode()
    assert decode_complete(data[:2]) == ("a", data[1:2])
    assert decode_complete(data) == ("a∎", b"")
    assert decode_complete(b"\xff" + data[1:3]) == ("\ufffd", data[1:3])


def test_fork_and_resume_carry_the_partial_character(tiny_loaded):
    """A fork between the two tokens of ``∎`` still stops at the second; resume starts clean."""
    tok = tiny_loaded.tokenizer
    engine = GenerationEngine(tiny_loaded.model, EngineConfig(block_size=4, num_blocks=80, max_model_len=256), tok)
    a, b = tok.encode("∎", add_special_tokens=False)
    text = tok.encode("so we get", add_special_tokens=False)
    seq = engine.add([1, 2, 3], stop=StopCriteria(step_delimiter="∎"))
    assert feed(seq, text + [a], engine.pieces) == [None] * (len(text) + 1)
    assert seq.stop_pending
    child = engine.fork(seq)
    assert feed(child, [b], engine.pieces) == [StopReason.DELIMITER]
    assert feed(seq, [b], engine.pieces) == [StopReason.DELIMITER]
    # whatever is pending when a step pauses (a token may end with part of a character after the
    # delimiter), the next step starts clean: the second token alone is an invalid byte there
    assert feed(seq, text + [a], engine.pieces) == [None] * (len(text) + 1)
    engine.scheduler.pause(seq)
    engine.resume(seq, seq.seeds, seq.candidates)
    assert seq.stop_pending == b"" and seq.stop_tail == "" and not seq.step_has_text
    assert feed(seq, [b], engine.pieces) == [None]
    assert feed(seq, [a, b], engine.pieces) == [None, StopReason.DELIMITER]


def sentencepiece_tokenizer():
    """A tiny SentencePiece-style tokenizer: ``▁`` for spaces, byte fallback, the Llama-2 decoder
    (which drops the leading space of a lone ``▁Step`` and decodes a lone ``▁`` to nothing)."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece in ["▁", *"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789#.:,", "▁S", "▁St"]:
        vocab.setdefault(piece, len(vocab))
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[("▁", "S"), ("▁S", "t")], byte_fallback=True,
                              unk_token="<unk>", fuse_unk=True))
    tk.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                    decoders.Strip(" ", 1, 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


@pytest.mark.parametrize("delim", ["## Step", " Step", "∎", "\n\n"])
def test_sentencepiece_byte_fallback_and_spaces(delim):
    sp = sentencepiece_tokenizer()
    pieces = TokenPieces(sp, len(sp))
    text = "Add it.\n\n## Step 2 ∎ done"
    ids = sp.encode(text, add_special_tokens=False)
    assert b"".join(pieces[i] for i in ids).decode() == " " + text  # the prepended "▁" included
    assert first_stop(ids, delim, pieces) == (expected_stop(sp, ids, delim), StopReason.DELIMITER)
    assert pieces[sp.eos_token_id] == b""

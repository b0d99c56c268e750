"""Sliding-window attention in the paged engine against `transformers` (issue 15, item 5), and the
refusal of attention features the engine does not implement."""

from __future__ import annotations

import pytest
import torch

from conftest import TINY, _tiny, free_all, greedy, hf_greedy, hf_logits, make_engine, random_prompts, run_to_end
from core.engine.attention import AttentionMetadata, DecodeInputs, paged_attention
from core.engine.decode_groups import build_decode_groups
from core.engine.engine import EngineConfig, GenerationEngine
from core.engine.kv_cache import KVCache, KVLayout
from core.engine.sequence import SamplingParams, StopCriteria
from core.models.loader import ModelLoadError, attention_problems, check_attention

WINDOW = 8


@pytest.fixture(scope="module")
def tiny_mistral():
    """A Mistral with an 8-token window, set the Mistral way: ``sliding_window`` without a flag."""
    from transformers import MistralConfig, MistralForCausalLM

    model = _tiny(lambda **kw: MistralConfig(sliding_window=WINDOW, **kw), MistralForCausalLM, seed=3)
    assert model.config.sliding_window == WINDOW and not getattr(model.config, "use_sliding_window", False)
    return model


@pytest.fixture(scope="module")
def tiny_qwen2_mixed():
    """A Qwen2 whose layer 0 attends fully and layer 1 through a 6-token window."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    model = _tiny(lambda **kw: Qwen2Config(use_sliding_window=True, sliding_window=6, max_window_layers=1, **kw),
                  Qwen2ForCausalLM, seed=4)
    assert model.config.layer_types == ["full_attention", "sliding_attention"]
    return model


@pytest.fixture(params=["mistral", "qwen2_mixed"])
def windowed(request):
    return request.getfixturevalue(f"tiny_{request.param}")


def test_forty_token_prompt_greedy_matches_transformers(tiny_mistral):
    (prompt,) = random_prompts([40], seed=5)
    k = 24
    ref = hf_greedy(tiny_mistral, prompt, k)
    engine = make_engine(tiny_mistral)
    (seq,) = engine.generate([prompt], *greedy(k))
    assert seq.token_ids[40:] == ref
    # the window matters here: full attention gives other tokens
    from transformers import LlamaConfig, LlamaForCausalLM

    full = LlamaForCausalLM(LlamaConfig(**TINY)).eval()
    full.load_state_dict(tiny_mistral.state_dict())
    assert hf_greedy(full, prompt, k) != ref


def test_chunked_prefill_prefix_cache_and_decode_match_transformers(windowed):
    """Prefill in chunks (keys from cached blocks), a second prompt sharing a cached prefix, and
    decode of several rows at once: every logits row equals the plain forward's."""
    shared = random_prompts([30], seed=6)[0]
    prompts = [shared + [5, 6, 7], shared + [9] * 12, random_prompts([21], seed=7)[0]]
    engine = make_engine(windowed, max_num_batched_tokens=10)
    k = 12
    first = engine.generate(prompts[:1], *greedy(k))
    rest = engine.generate(prompts[1:], *greedy(k))
    assert engine.pool.hits > 0  # the second prompt reused cached blocks of the first
    for seq in first + rest:
        ids = seq.token_ids
        n = len(ids) - k
        assert ids[n:] == hf_greedy(windowed, ids[:n], k)
    free_all(engine, first + rest)


def test_prefill_only_logits_match_transformers(windowed):
    (p,) = random_prompts([37], seed=8)
    engine = make_engine(windowed, max_num_batched_tokens=9)
    pre = engine.add(p, prefill_only=True, read_positions=list(range(37)))
    run_to_end(engine)
    torch.testing.assert_close(torch.stack(pre.read_logits), hf_logits(windowed, p), atol=1e-4, rtol=0)


def test_forked_candidates_sample_like_transformers(tiny_mistral):
    """Three seeded candidates on one prompt fork into sequences sharing the prompt's blocks, so
    decode rows are grouped over shared blocks under the window. Each token equals the draw the
    sampler makes, with the same seed and position, from transformers' logits of its prefix."""
    from core.engine.sampler import RowRequest, sample

    (p,) = random_prompts([26], seed=9)
    engine = make_engine(tiny_mistral)
    seq = engine.add(p, sampling=SamplingParams(temperature=1.0), stop=StopCriteria(step_delimiter=None, max_tokens=14),
                     seeds=[1, 2, 3], candidates=["a", "b", "c"])
    outs = run_to_end(engine)
    seqs = [seq] + [engine.sequence(ev.child) for o in outs for ev in o.forked]
    assert len(seqs) == 3 and all(len(s.seeds) == 1 for s in seqs)
    assert len({tuple(s.token_ids) for s in seqs}) == 3
    for s in seqs:
        logits = hf_logits(tiny_mistral, s.token_ids)
        for pos in range(len(p), len(s.token_ids)):
            (drawn,) = sample(logits[pos - 1:pos], [RowRequest(1.0, 1.0, [(s.seeds[0], pos)])])
            assert s.token_ids[pos] == drawn[0], (s.seeds, pos)


def test_windowed_decode_reads_only_blocks_inside_the_window():
    bs = 4
    tables = [[0, 1, 2, 3, 4, 5], [0, 1, 2, 6]]
    lengths = [23, 14]  # windows of 8: positions 15..22 (blocks 3-5) and 6..13 (blocks 1-3)
    plan = build_decode_groups([0, 1], tables, lengths, bs, 1, "cpu", window=8)
    assert set(plan.blocks.tolist()) == {1, 2, 3, 4, 5, 6}
    full = build_decode_groups([0, 1], tables, lengths, bs, 1, "cpu")
    assert 0 in full.blocks.tolist()
    # attention through the plan equals attention over exactly the last 8 positions of each row
    torch.manual_seed(0)
    cache = KVCache(KVLayout(1, 1, 4, torch.float32), 8, bs)
    cache.data.normal_()
    q = torch.randn(1, 1, 2, 4)
    k_new, v_new = torch.randn(1, 1, 2, 4), torch.randn(1, 1, 2, 4)
    slots = torch.tensor([5 * bs + 2, 6 * bs + 1])
    meta = AttentionMetadata(kv=cache, slot_mapping=slots, num_tokens=2,
                             decode_inputs=DecodeInputs([0, 1], tables, lengths, bs, 1, "cpu"),
                             gather=lambda n: (torch.empty(n, bs, 1, 4), torch.empty(n, bs, 1, 4)))
    out, _ = paged_attention(type("M", (), {"layer_idx": 0}), q, k_new, v_new, None, scaling=0.5,
                             sliding_window=8, specscale_meta=meta)
    k_pages, v_pages = cache.layer(0)
    for row, (table, length) in enumerate(zip(tables, lengths)):
        keys = k_pages[table].reshape(-1, 4)[length - 8:length]
        values = v_pages[table].reshape(-1, 4)[length - 8:length]
        expected = ((q[0, 0, row] @ keys.T) * 0.5).softmax(-1) @ values
        torch.testing.assert_close(out[0, row, 0], expected, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------- features that are refused
def _refused(config_cls, model_cls, **overrides):
    torch.manual_seed(0)
    kw = dict(TINY)
    kw.update(overrides)
    return model_cls(config_cls(**kw)).eval()


def test_softcapping_and_gemma2_are_refused():
    from transformers import Gemma2Config, Gemma2ForCausalLM

    model = _refused(Gemma2Config, Gemma2ForCausalLM, head_dim=16, attn_logit_softcapping=50.0)
    assert any("soft-capping" in p for p in attention_problems(model))
    with pytest.raises(ModelLoadError, match="soft-capping"):
        check_attention(model, "tiny-gemma2")
    with pytest.raises(ValueError, match="soft-capping"):
        GenerationEngine(model, EngineConfig(block_size=4, num_blocks=80, max_model_len=128))


def test_attention_sinks_are_refused():
    from transformers import GptOssConfig, GptOssForCausalLM

    model = _refused(GptOssConfig, GptOssForCausalLM, head_dim=16, num_local_experts=2, num_experts_per_tok=1,
                     layer_types=["sliding_attention", "full_attention"], sliding_window=8)
    with pytest.raises(ModelLoadError, match="attention sinks"):
        check_attention(model)


def test_other_layer_types_and_chunked_attention_are_refused(tiny_llama):
    config = tiny_llama.config
    saved = dict(config.to_dict())
    try:
        config.layer_types = ["full_attention", "chunked_attention"]
        assert attention_problems(tiny_llama) == ["layer types chunked_attention (only full_attention, sliding_attention)"]
        config.layer_types = None
        config.attention_chunk_size = 16
        assert attention_problems(tiny_llama) == ["chunked attention (attention_chunk_size=16)"]
        config.attention_chunk_size = None
        config.alibi = True
        assert attention_problems(tiny_llama) == ["ALiBi position biases"]
        config.alibi = False
        config.use_bidirectional_attention = True
        assert attention_problems(tiny_llama) == ["bidirectional attention"]
    finally:
        for key in ("layer_types", "attention_chunk_size", "alibi", "use_bidirectional_attention"):
            if key in saved:
                setattr(config, key, saved[key])
            elif hasattr(config, key):
                delattr(config, key)
    assert attention_problems(tiny_llama) == []


def test_bloom_alibi_is_refused():
    from transformers import BloomConfig, BloomForCausalLM

    model = BloomForCausalLM(BloomConfig(vocab_size=128, hidden_size=32, n_layer=1, n_head=4)).eval()
    problems = attention_problems(model)
    assert "ALiBi position biases" in problems


def test_plain_and_windowed_models_are_accepted(tiny_llama, tiny_qwen2, tiny_mistral, tiny_qwen2_mixed):
    for model in (tiny_llama, tiny_qwen2, tiny_mistral, tiny_qwen2_mixed):
        assert attention_problems(model) == []

"""core.bench.engine_bench on tiny random models: FLOPs and bytes from the model's real shapes, the
token counts of the engine, `generate` and MFU runs, and `bench engine`'s flag checks."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from conftest import TINY
from core.bench import engine_bench as eb
from specscale_cli.main import cli

LINEAR = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "gate_proj.weight", "up_proj.weight",
          "down_proj.weight", "lm_head.weight")


def _llama(**overrides):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**{**TINY, **overrides})).eval()


def test_decode_flops_are_twice_the_linear_weights_plus_attention_over_the_context():
    model = _llama()
    linear = sum(p.numel() for name, p in model.named_parameters() if name.endswith(LINEAR))
    cfg = model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    for context in (0, 1, 37):
        attention = cfg.num_hidden_layers * 2 * 2 * cfg.num_attention_heads * head_dim * context
        assert eb.decode_flops_per_token(cfg, context) == 2 * linear + attention


def test_model_bytes_count_weights_sharing_storage_once():
    """Tied weights read once per step: two parameters over one storage count once."""
    untied, shared = _llama(tie_word_embeddings=False), _llama(tie_word_embeddings=False)
    shared.lm_head.weight = torch.nn.Parameter(shared.model.embed_tokens.weight.data)
    assert len(list(shared.parameters())) == len(list(untied.parameters()))  # torch lists both
    every = sum(p.numel() for p in untied.parameters())
    embedding = TINY["vocab_size"] * TINY["hidden_size"]
    assert eb.model_bytes(untied) == 4 * every
    assert eb.model_bytes(shared) == 4 * (every - embedding)
    assert eb.model_bytes(untied.to(torch.bfloat16)) == 2 * every


def test_requests_and_cases():
    reqs = eb.random_requests(50, (5, 9), (2, 6), 128, seed=3)
    assert reqs == eb.random_requests(50, (5, 9), (2, 6), 128, seed=3)
    assert {len(p) for p, _ in reqs} == set(range(5, 10)) and {o for _, o in reqs} == set(range(2, 7))
    assert all(100 <= t < 128 for p, _ in reqs for t in p)
    assert eb.parse_cases("mixed, equal") == ("equal", "mixed")
    assert eb.parse_cases("") == () and eb.parse_cases("mixed") == ("mixed",)
    with pytest.raises(ValueError, match=r"unknown case\(s\) a, b; use equal, mixed"):
        eb.parse_cases("b,equal,a")


def test_engine_generate_and_mfu_runs_count_the_tokens_they_compute():
    model = _llama()
    reqs = eb.random_requests(3, (5, 9), (2, 6), TINY["vocab_size"], seed=0)
    outputs = [o for _, o in reqs]
    eng = eb.run_engine(model, None, reqs, max_num_batched_tokens=64)
    assert eng["output_tokens"] == sum(outputs)
    # every prompt fits one step's 64 tokens: one prefill step (its first token) and a decode step per token after
    assert eng["steps"] == max(outputs)
    assert (eng["attention_backend"], eng["graph_replays"]) == ("torch", 0)

    model.set_attn_implementation("sdpa")
    hf = eb.run_hf_generate(model, reqs, batch_size=2, pad_id=0)
    # a static batch runs to its longest output
    assert hf["output_tokens"] == sum(outputs)
    assert hf["computed_tokens"] == 2 * max(outputs[:2]) + outputs[2]

    mfu = eb.decode_mfu(model, None, batch=2, context=8, peak=1e9, cfg=eb.EngineBenchConfig(model="tiny"))
    assert (mfu["decode_batch"], mfu["context_tokens"], mfu["decode_tokens"]) == (2, 8, 2 * eb.MFU_STEPS)
    # at a peak of 1 GFLOP/s the MFU is the achieved GFLOP/s (each rounded on its own)
    assert mfu["peak_gflops"] == 1.0 and mfu["mfu"] == pytest.approx(mfu["achieved_gflops"], abs=0.006)


def test_bench_engine_refuses_an_unknown_case_before_loading_the_model():
    res = CliRunner().invoke(cli, ["bench", "engine", "--cases", "equal,fast", "--model", "/no/such/model"])
    assert res.exit_code == 2
    assert "Invalid value for --cases: unknown case(s) fast; use equal, mixed" in res.output

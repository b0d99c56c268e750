"""Every tensor the hot path creates names its device (issue 24: mix-ups a CPU run cannot show).

A tensor made with no ``device=`` lands on torch's default device: the CPU on a CPU run, so a
target-id tensor built that way beside CUDA logits works on every CPU test and fails on the first
GPU run. Here the engine, verifier, sampler and search run on CPU models inside
:func:`strict_devices`, where a tensor made without naming its device raises at once (and the
default device is ``meta``, so anything else made without a device holds no data). Each run is
compared with the same run outside it, so the check also asserts that nothing changed.

Host metadata (block tables, masks built on the host) names ``device="cpu"`` on purpose.
"""

from __future__ import annotations

import contextlib
import copy
import traceback

import pytest
import torch
from torch.overrides import TorchFunctionMode
from transformers import AddedToken, LlamaForCausalLM

from conftest import TINY, _tiny, make_engine, make_runtime, random_prompts, run_search, tiny_chat_config

from core.engine.engine import EngineConfig, GenerationEngine
from core.engine.sequence import SamplingParams, StopCriteria
from core.io.problems import Problem
from core.search.config import SearchConfig
from core.solver import SCORERS
from core.verify.verifier import Verifier


# factory functions whose result lands on the default device unless given ``device=``
FACTORIES = frozenset({torch.tensor, torch.arange, torch.empty, torch.zeros, torch.ones, torch.full, torch.rand,
                       torch.randn, torch.randint, torch.randperm, torch.eye, torch.linspace, torch.logspace,
                       torch.empty_strided, torch.scalar_tensor, torch.tril_indices, torch.triu_indices})


class DeviceNotNamed(AssertionError):
    """A factory function was called without ``device=`` inside :func:`strict_devices`."""


class _RequireDevice(TorchFunctionMode):
    """Raises :class:`DeviceNotNamed` at the call of a factory function that names no device.

    ``torch.as_tensor`` counts only for non-tensor data (a tensor keeps its own device).
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        unnamed = kwargs.get("device") is None
        if unnamed and (func in FACTORIES or (func is torch.as_tensor and not isinstance(args[0], torch.Tensor))):
            caller = traceback.extract_stack(limit=2)[0]
            raise DeviceNotNamed(f"torch.{func.__name__} without device= at {caller.filename}:{caller.lineno}: "
                                 f"{caller.line}")
        return func(*args, **kwargs)


@contextlib.contextmanager
def strict_devices():
    """Inside the block a tensor made without naming its device fails loudly.

    Two nets: every factory call without ``device=`` raises :class:`DeviceNotNamed` at once, naming
    the line; and the default device is ``meta``, so a tensor made some other way without a device
    (a library's C++ path) holds no data, and reading it raises. Meta alone is not enough: torch
    returns garbage, not an error, for a CPU ``gather`` with a meta index.
    """
    torch.set_default_device("meta")
    try:
        with _RequireDevice():
            yield
    finally:
        torch.set_default_device(None)


def test_strict_devices_catches_a_tensor_made_without_a_device():
    logits = torch.randn(3, 5)
    with strict_devices():
        with pytest.raises(DeviceNotNamed, match=r"torch.tensor without device= at .*test_device_hygiene.py"):
            torch.tensor([[1], [2], [0]])
        with pytest.raises(DeviceNotNamed, match="torch.arange"):
            torch.arange(4)
        index = torch.tensor([[1], [2], [0]], device=logits.device)
        assert logits.gather(1, index)[:, 0].tolist() == [logits[0, 1].item(), logits[1, 2].item(), logits[2, 0].item()]
        with pytest.raises(NotImplementedError):  # the meta net: a meta tensor's values cannot be read
            torch.empty_like(torch.empty(2, device="meta")).tolist()
    assert torch.tensor([1]).device.type == "cpu"  # the default is restored


# ---------------------------------------------------------------------- engine
def _mistral():
    from transformers import MistralConfig, MistralForCausalLM

    return _tiny(lambda **kw: MistralConfig(sliding_window=8, **kw), MistralForCausalLM, seed=3)


def _qwen2_mixed():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return _tiny(lambda **kw: Qwen2Config(use_sliding_window=True, sliding_window=6, max_window_layers=1, **kw),
                 Qwen2ForCausalLM, seed=4)


def _llama():
    from transformers import LlamaConfig

    return _tiny(LlamaConfig, LlamaForCausalLM, seed=0)


MODELS = {"llama": _llama, "mistral-window": _mistral, "qwen2-mixed-window": _qwen2_mixed}


def _prompts():
    shared = random_prompts([12], seed=11)[0]
    return [shared, shared + [3, 4, 5, 6, 7], *random_prompts([5, 21], seed=12)]


def _engine_run(model, prompts, engine=None):
    """Greedy and sampled rows, shared prefixes (prefix-cache hits: a prefill span with cached
    context), prompts longer than the step's token budget (chunked prefill), forks (decode rows
    sharing blocks); returns every sequence's tokens."""
    engine = engine or make_engine(model, max_num_batched_tokens=16)
    shared = prompts[0]
    greedy = engine.generate(prompts[:2], SamplingParams(temperature=0), StopCriteria(None, max_tokens=12))
    sampled = engine.generate(prompts[2:], SamplingParams(temperature=0.8, top_p=0.9),
                              StopCriteria(None, max_tokens=12))
    parent = engine.add(shared + [9], sampling=SamplingParams(temperature=1.0), stop=StopCriteria(None, max_tokens=10),
                        seeds=[3])
    while len(parent.token_ids) < len(shared) + 5:
        engine.step()
    children = [engine.fork(parent, seeds=[seed]) for seed in (7, 8)]
    while engine.has_work():
        engine.step()
    forked = [s.token_ids for s in (parent, *children)]
    return [s.token_ids for s in greedy + sampled] + forked, engine


@pytest.mark.parametrize("name", list(MODELS))
def test_engine_names_every_device(name):
    model = MODELS[name]()
    prompts = _prompts()
    expected, _ = _engine_run(model, prompts)
    with strict_devices():
        got, engine = _engine_run(model, prompts)
    assert got == expected
    assert engine.num_unfinished == 0


def _graph_engine(model):
    """The FlashInfer backend's path with the torch stand-ins of its kernels, decode steps replaying
    stand-in CUDA graphs (as tests/test_attention_backends.py builds it)."""
    from core.engine.kv_cache import KVCache
    from core.engine.model_runner import ModelRunner

    def capture(fn, pool=None):
        output = fn()
        return (lambda: output.copy_(fn())), output

    engine = make_engine(model, attention_backend="flashinfer-reference", max_num_batched_tokens=16, max_num_seqs=8)
    cache = KVCache(engine.cache.layout, engine.cache.num_blocks, engine.cache.block_size, scratch_blocks=1)
    engine.cache = engine.kv.cache = cache
    engine.runner = ModelRunner(model, cache, "flashinfer-reference", max_num_seqs=8,
                                max_model_len=engine.max_model_len, graph_capture=capture)
    return engine


@pytest.mark.parametrize("name", ["llama", "qwen2-mixed-window"])
def test_flashinfer_path_and_graph_replays_name_every_device(name):
    model = MODELS[name]()
    prompts = _prompts()
    expected, _ = _engine_run(model, prompts)
    with strict_devices():
        engine = _graph_engine(model)
        got, _ = _engine_run(model, prompts, engine)
    assert got == expected
    assert engine.runner.graphs.replays > 0


# ---------------------------------------------------------------------- verifier, every scorer
def _with_tokens(tok, tokens, special=False):
    tok = copy.deepcopy(tok)
    tok.add_tokens([AddedToken(t, special=special) for t in tokens], special_tokens=special)
    return tok


def _scorer_models(smollm2):
    """A tiny random model and tokenizer of the shape each scorer reads (keys: every scorer)."""
    from transformers import Qwen2Config

    from core.models.prm_head import Qwen2ProcessRewardModel

    base = smollm2.tokenizer
    torch.manual_seed(21)
    lm = LlamaForCausalLM(tiny_chat_config(base, initializer_range=0.1)).eval()
    qwen_tok = _with_tokens(base, ["<extra_0>"], special=True)
    torch.manual_seed(22)
    qwen = Qwen2ProcessRewardModel(Qwen2Config(
        vocab_size=len(qwen_tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=1024, initializer_range=0.1)).eval()
    shepherd_tok = _with_tokens(base, ["ки"])
    torch.manual_seed(23)
    shepherd = LlamaForCausalLM(tiny_chat_config(shepherd_tok, initializer_range=0.1)).eval()
    from test_prm_skywork_trl import tiny_skywork, tiny_token_classifier

    return {"likelihood": (lm, base), "lm-judge": (lm, base), "rlhflow": (lm, base),
            "qwen-math-prm": (qwen, qwen_tok), "math-shepherd": (shepherd, shepherd_tok),
            "skywork-prm": (tiny_skywork(len(base)), base),
            "token-classification": (tiny_token_classifier("Qwen2ForTokenClassification", len(base)), base)}


STEP_TEXTS = ["We add 2 and 3.\n\n", "2 + 3 = 5.\n\n", "The answer is \\boxed{5}."]


def _verify(model, tok, scorer_cls):
    """Scores of a three-step path and a sibling, flushed in two PRM calls (the second hits the cache)."""
    scorer = scorer_cls(tok)
    engine = GenerationEngine(model, EngineConfig(block_size=4, num_blocks=512, max_model_len=1024), tok)
    verifier = Verifier(engine, scorer)
    root = scorer.root_ids("What is 2 + 3?", "A system prompt.")
    prefixes, scores = [root], []
    for depth, text in enumerate(STEP_TEXTS):
        ids = tok.encode(text, add_special_tokens=False)
        prefixes.append(prefixes[-1] + scorer.step_ids(text, ids, first_step=depth == 0))
        verifier.submit(("p", depth), scorer.request(prefixes[-2], prefixes[-1]))
        if depth != 1:  # steps 0 and 1 share a flush
            scores += [t.score for t in verifier.flush()]
    return scores


def test_every_scorer_is_covered(smollm2):
    assert set(_scorer_models(smollm2)) == set(SCORERS)


@pytest.mark.parametrize("scorer", sorted(SCORERS))
def test_verifier_names_every_device(smollm2, scorer):
    model, tok = _scorer_models(smollm2)[scorer]
    expected = _verify(model, tok, SCORERS[scorer])
    assert len(expected) == len(STEP_TEXTS)
    with strict_devices():
        got = _verify(model, tok, SCORERS[scorer])
    assert got == expected


# ---------------------------------------------------------------------- a whole search
PROBLEMS = [Problem("p1", "What is 2 + 3?", "5", 1), Problem("p2", "Compute 7 * 6.", "42", 2)]


@pytest.mark.parametrize("policy", ["non-spec", "specscale", "fasttts"])
def test_search_names_every_device(tiny_chat, policy):
    # lv_threshold small enough that lazy verification both defers and flushes
    cfg = SearchConfig(beam_size=4, beam_width=2, temperature=1.0, max_steps=3, step_delimiter="e",
                       max_step_tokens=16, max_tokens=128, lv_threshold=64)

    def completions():
        _, results, _ = run_search(tiny_chat, PROBLEMS, cfg, policy, runtime=make_runtime(tiny_chat))
        return {pid: [(c["text"], c["path_score"]) for c in r["completions"]] for pid, r in results.items()}

    expected = completions()
    assert all(len(v) == 4 for v in expected.values())
    with strict_devices():
        got = completions()
    assert got == expected


def test_tiny_config_has_no_special_tokens():
    # the engine tests above rely on no EOS stopping a random model early
    assert TINY["eos_token_id"] is None

"""Engine throughput against `transformers` generate, decode MFU and the weights-read bound
(``specscale bench engine``).

All figures come from one process, one set of weights and the same random requests:

* throughput: output tokens/s of the paged engine (continuous batching, greedy, EOS ignored) and
  of ``model.generate`` in static batches (left padded, ``min_new_tokens`` = ``max_new_tokens``
  so every row computes its full length), for an equal-length and a mixed-length case;
* MFU: model FLOPs of the decode tokens (:func:`decode_flops_per_token`) per second, over the
  device's measured matmul peak (:func:`matmul_peak`), at a decode batch of ``requests``;
* weights-read bound: a decode step reads every weight once, so at batch 1 its time is at least
  weight bytes / memory bandwidth (:func:`model_bytes`, :func:`memory_bandwidth`); the result gives
  the measured step time at batch 1 and at ``requests`` as multiples of that bound.

torch is imported inside the functions, as the rest of the command line expects.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable

CASES = ("equal", "mixed")
# decode steps timed per MFU measurement (after prefill and two warm-up steps)
MFU_STEPS = 16


@dataclass(frozen=True)
class EngineBenchConfig:
    """What one ``bench engine`` run measures (lengths in tokens).

    model: the model's spec, recorded in the result as given.
    requests: requests per throughput case, and the decode batch of the MFU measurement.
    equal_prompt / equal_output: prompt and output length of every request of the equal case.
    mixed_prompt / mixed_output: inclusive ``(low, high)`` ranges the mixed case draws lengths from.
    hf_batch_size: static batch size of ``generate``.
    max_num_batched_tokens: engine tokens per step (prefill chunks and decode rows together).
    mfu_context: cached tokens per sequence before the timed decode steps of the MFU measurement.
    seed: seed of the random prompts and lengths (each case draws from its own generator).
    cases: the throughput cases to run, a subset of :data:`CASES` (run in that order).
    attention_backend: engine attention kernels (``auto``, ``torch``, ``flashinfer``).
    enforce_eager: engine without CUDA graphs.
    """

    model: str
    requests: int = 64
    equal_prompt: int = 128
    equal_output: int = 128
    mixed_prompt: tuple[int, int] = (30, 600)
    mixed_output: tuple[int, int] = (16, 256)
    hf_batch_size: int = 64
    max_num_batched_tokens: int = 2048
    mfu_context: int = 200
    seed: int = 0
    cases: tuple[str, ...] = CASES
    attention_backend: str = "auto"
    enforce_eager: bool = False


def parse_cases(text: str) -> tuple[str, ...]:
    """The throughput cases named in a comma-separated list (empty: none, MFU only), in
    :data:`CASES` order.

    Raises:
        ValueError: a name that is not a case; the message lists the unknown ones.
    """
    wanted = [c.strip() for c in text.split(",") if c.strip()]
    unknown = set(wanted) - set(CASES)
    if unknown:
        raise ValueError(f"unknown case(s) {', '.join(sorted(unknown))}; use {', '.join(CASES)}")
    return tuple(c for c in CASES if c in wanted)


def random_requests(n: int, prompt_range: tuple[int, int], output_range: tuple[int, int], vocab: int,
                    seed: int) -> list[tuple[list[int], int]]:
    """``n`` requests ``(prompt ids, output length)``: lengths uniform in the inclusive ranges, ids
    uniform in ``[100, vocab)`` (clear of the special tokens low ids often are)."""
    rng = random.Random(seed)
    reqs = []
    for _ in range(n):
        p = rng.randint(*prompt_range)
        o = rng.randint(*output_range)
        reqs.append(([rng.randrange(100, vocab) for _ in range(p)], o))
    return reqs


def _sync(device) -> None:
    from core.engine.model_runner import synchronize

    synchronize(device)


def graph_counts(engine) -> dict:
    """Which attention backend ran and how many decode steps replayed a CUDA graph."""
    graphs = engine.runner.graphs
    return {"attention_backend": engine.runner.backend_name, "graph_replays": graphs.replays if graphs else 0}


def run_engine(model, tokenizer, reqs, max_num_batched_tokens: int, backend: str = "auto",
               enforce_eager: bool = False) -> dict:
    """Every request of ``reqs`` through one paged engine at once, greedy, to its full output length.

    The KV pool holds every request at once (no preemption): 1.1 x their tokens, at least 2 GiB.

    Returns:
        ``seconds`` (wall time from the first request added to the last step), ``output_tokens``, ``tokens_per_s``,
        ``steps`` and :func:`graph_counts`.
    """
    from core.engine.engine import EngineConfig, GenerationEngine
    from core.engine.kv_cache import KVLayout
    from core.engine.sequence import SamplingParams, StopCriteria

    longest = max(len(p) + o for p, o in reqs)
    # room for every request at once (a 7B model's KV is 56 KiB a token: 2 GiB would preempt), at least 2 GiB
    per_token = KVLayout.from_config(model.config, next(model.parameters()).dtype).bytes_per_token
    kv_bytes = max(2 << 30, int(1.1 * per_token * sum(len(p) + o + 16 for p, o in reqs)))
    engine = GenerationEngine(model, EngineConfig(max_num_seqs=len(reqs), max_num_batched_tokens=max_num_batched_tokens,
                                                  max_model_len=longest + 16, kv_cache_bytes=kv_bytes,
                                                  attention_backend=backend, enforce_eager=enforce_eager), tokenizer)
    greedy = SamplingParams(temperature=0)
    t0 = time.perf_counter()
    for prompt, out_len in reqs:
        engine.add(prompt, sampling=greedy,
                   stop=StopCriteria(step_delimiter=None, max_tokens=out_len, max_step_tokens=out_len, ignore_eos=True))
    while engine.has_work():
        engine.step()
    seconds = time.perf_counter() - t0
    tokens = sum(o for _, o in reqs)
    return {"seconds": round(seconds, 3), "output_tokens": tokens, "tokens_per_s": round(tokens / seconds, 2),
            "steps": engine.total_steps, **graph_counts(engine)}


def run_hf_generate(model, reqs, batch_size: int, pad_id: int) -> dict:
    """``reqs`` through ``model.generate`` in static batches of ``batch_size``, greedy, left padded
    with ``pad_id``; a batch runs to its longest output (``computed_tokens`` counts those rows).

    Returns:
        ``seconds``, ``output_tokens`` (the requested lengths), ``tokens_per_s`` and ``computed_tokens``.
    """
    import torch

    device = next(model.parameters()).device
    tokens = sum(o for _, o in reqs)
    t0 = time.perf_counter()
    computed = 0
    for i in range(0, len(reqs), batch_size):
        chunk = reqs[i:i + batch_size]
        width = max(len(p) for p, _ in chunk)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, (p, _) in enumerate(chunk):  # left padding, as generate expects for decoder-only models
            ids[r, width - len(p):] = torch.tensor(p)
            mask[r, width - len(p):] = 1
        new = max(o for _, o in chunk)
        with torch.inference_mode():
            model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=new,
                           min_new_tokens=new, do_sample=False, pad_token_id=pad_id)
        computed += new * len(chunk)
    _sync(device)
    seconds = time.perf_counter() - t0
    return {"seconds": round(seconds, 3), "output_tokens": tokens, "tokens_per_s": round(tokens / seconds, 2),
            "computed_tokens": computed}


def matmul_peak(seconds: float = 2.0, device="cpu", dtype=None) -> float:
    """Measured matmul FLOP/s of the device (best of repeated square matmuls): fp32 1024-2048 on a
    CPU, the model's dtype and 4096-8192 on CUDA (smaller ones do not fill a data-center GPU)."""
    import torch

    cuda = torch.device(device).type == "cuda"
    dtype = dtype if cuda and dtype is not None else torch.float32
    best = 0.0
    for n in ((4096, 8192) if cuda else (1024, 2048)):
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        torch.mm(a, b)
        _sync(device)
        reps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds / 2:
            torch.mm(a, b)
            reps += 1
            if cuda and reps % 8 == 0:
                _sync(device)
        _sync(device)
        best = max(best, 2 * n ** 3 * reps / (time.perf_counter() - t0))
    return best


def memory_bandwidth(device, seconds: float = 1.0) -> float:
    """Measured memory bandwidth in bytes/s: best rate of copying a large buffer (read + write;
    1 GiB on CUDA, 256 MiB on a CPU)."""
    import torch

    n = (1 << 30 if torch.device(device).type == "cuda" else 1 << 28) // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    _sync(device)
    best, t_end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        t0 = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        best = max(best, 2 * 4 * n / (time.perf_counter() - t0))
    return best


def model_bytes(model) -> int:
    """Bytes of the model's weights (each tied tensor once): what a decode step reads at least."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def decode_flops_per_token(config, context: int) -> float:
    """Model FLOPs of one decode token over ``context`` cached tokens: 2 x (q, k, v, o projections,
    gated MLP and LM head weights) + attention (QK^T and PV: 2 x 2 x heads x head_dim x context per
    layer). Norms, rotary embeddings and biases are left out (well under 1% at these sizes)."""
    h = config.hidden_size
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", heads) or heads
    hd = getattr(config, "head_dim", None) or h // heads
    inter = config.intermediate_size
    per_layer = h * heads * hd + 2 * h * kv * hd + heads * hd * h + 3 * h * inter
    linear = config.num_hidden_layers * per_layer + h * config.vocab_size
    attention = config.num_hidden_layers * 2 * 2 * heads * hd * context
    return 2 * linear + attention


def decode_mfu(model, tokenizer, batch: int, context: int, peak: float, cfg: EngineBenchConfig) -> dict:
    """Decode MFU of the engine: ``batch`` sequences of ``context`` random tokens are prefilled,
    two decode steps warm up (one-off kernel set-up at a new batch shape), then the remaining
    decode steps (:data:`MFU_STEPS` in all) are timed; FLOPs from :func:`decode_flops_per_token` at
    the mean context, over ``peak`` (FLOP/s). Backend and eager mode from ``cfg``.

    Returns:
        ``decode_batch``, ``context_tokens``, ``decode_tokens``, ``seconds``, ``step_ms``,
        ``achieved_gflops``, ``peak_gflops``, ``mfu`` (achieved / peak) and :func:`graph_counts`.
    """
    from core.engine.engine import EngineConfig, GenerationEngine
    from core.engine.sequence import SamplingParams, StopCriteria

    steps = MFU_STEPS
    engine = GenerationEngine(model, EngineConfig(max_num_seqs=batch, max_num_batched_tokens=4096,
                                                  max_model_len=context + steps + 16,
                                                  attention_backend=cfg.attention_backend,
                                                  enforce_eager=cfg.enforce_eager), tokenizer)
    rng = random.Random(1)
    stop = StopCriteria(step_delimiter=None, max_tokens=steps + 3, max_step_tokens=steps + 3, ignore_eos=True)
    for _ in range(batch):
        engine.add([rng.randrange(100, model.config.vocab_size) for _ in range(context)],
                   sampling=SamplingParams(temperature=0), stop=stop)
    while any(s.num_computed < len(s.token_ids) - 1 or not s.num_computed for s in engine.scheduler.running) \
            or engine.scheduler.waiting:
        engine.step()  # prefill everything first
    for _ in range(2):
        engine.step()  # first decode steps at a new batch shape pay one-off kernel set-up
    t0 = time.perf_counter()
    n = 0
    while engine.has_work():
        out = engine.step()
        n += out.num_decode_tokens
    seconds = time.perf_counter() - t0
    flops = n * decode_flops_per_token(model.config, context + steps // 2)
    achieved = flops / seconds
    return {"decode_batch": batch, "context_tokens": context, "decode_tokens": n, "seconds": round(seconds, 3),
            "step_ms": round(1000 * seconds / max(1, n / batch), 2), "achieved_gflops": round(achieved / 1e9, 2),
            "peak_gflops": round(peak / 1e9, 2), "mfu": round(achieved / peak, 3), **graph_counts(engine)}


def run_engine_bench(model, tokenizer, cfg: EngineBenchConfig,
                     on_case: Callable[[str, dict], None] | None = None) -> dict:
    """The whole ``bench engine`` measurement on a loaded model (``transformers`` causal LM on its
    device, in its dtype) and its tokenizer.

    Per case of ``cfg.cases``: ``generate`` then the engine on the same requests (the model's
    attention implementation is restored before each ``generate``: the engine switches it to its
    paged one); ``on_case(name, figures)`` is called after each. Then the matmul peak, decode MFU
    at batch ``cfg.requests``, the memory bandwidth and the decode step at batch 1.

    Returns:
        ``model``, ``threads`` (torch's CPU threads), ``requests``, ``device``, ``dtype``,
        ``device_name``; per case ``{engine, hf_generate, ratio_vs_hf}``; ``mfu`` (see
        :func:`decode_mfu`); ``weights_bound``: ``model_bytes``, ``bandwidth_gb_s``, ``bound_ms``
        and the step times at batch 1 and at ``requests`` with their ratios to the bound.
    """
    import torch

    vocab = model.config.vocab_size
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    cases = {
        "equal": random_requests(cfg.requests, (cfg.equal_prompt, cfg.equal_prompt),
                                 (cfg.equal_output, cfg.equal_output), vocab, cfg.seed),
        "mixed": random_requests(cfg.requests, cfg.mixed_prompt, cfg.mixed_output, vocab, cfg.seed),
    }
    params = next(model.parameters())
    result = {"model": cfg.model, "threads": torch.get_num_threads(), "requests": cfg.requests,
              "device": str(params.device), "dtype": str(params.dtype).removeprefix("torch."),
              "device_name": torch.cuda.get_device_name(params.device) if params.device.type == "cuda" else "cpu"}
    original_impl = model.config._attn_implementation
    for name in cfg.cases:
        reqs = cases[name]
        model.set_attn_implementation(original_impl)
        hf = run_hf_generate(model, reqs, cfg.hf_batch_size, pad)
        eng = run_engine(model, tokenizer, reqs, cfg.max_num_batched_tokens, cfg.attention_backend, cfg.enforce_eager)
        result[name] = {"engine": eng, "hf_generate": hf,
                        "ratio_vs_hf": round(eng["tokens_per_s"] / hf["tokens_per_s"], 3)}
        if on_case is not None:
            on_case(name, result[name])
    peak = matmul_peak(device=params.device, dtype=params.dtype)
    result["mfu"] = decode_mfu(model, tokenizer, cfg.requests, cfg.mfu_context, peak, cfg)
    # a decode step reads every weight once: at batch 1 its time is bounded below by weight bytes /
    # memory bandwidth (the goal: within 2x of it on a GPU)
    bandwidth = memory_bandwidth(params.device)
    weights = model_bytes(model)
    bound_ms = 1000 * weights / bandwidth
    single = decode_mfu(model, tokenizer, 1, cfg.mfu_context, peak, cfg)
    result["weights_bound"] = {
        "model_bytes": weights, "bandwidth_gb_s": round(bandwidth / 1e9, 1), "bound_ms": round(bound_ms, 3),
        "step_ms_batch1": single["step_ms"], "ratio_batch1": round(single["step_ms"] / bound_ms, 2),
        "step_ms_batch": result["mfu"]["step_ms"], "ratio_batch": round(result["mfu"]["step_ms"] / bound_ms, 2)}
    return result

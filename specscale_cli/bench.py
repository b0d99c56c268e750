"""`specscale bench engine`: engine throughput against `transformers` `generate`, side by side."""

from __future__ import annotations

import json
import random
import time

import click

from .options import model_and_search_options


@click.group()
def bench():
    """Benchmarks that print ratios measured side by side in one run."""


def _requests(n: int, prompt_range: tuple[int, int], output_range: tuple[int, int], vocab: int, seed: int):
    rng = random.Random(seed)
    reqs = []
    for _ in range(n):
        p = rng.randint(*prompt_range)
        o = rng.randint(*output_range)
        reqs.append(([rng.randrange(100, vocab) for _ in range(p)], o))
    return reqs


def _run_engine(model, tokenizer, reqs, max_num_batched_tokens: int) -> dict:
    from core.engine.engine import EngineConfig, GenerationEngine
    from core.engine.sequence import SamplingParams, StopCriteria

    longest = max(len(p) + o for p, o in reqs)
    engine = GenerationEngine(model, EngineConfig(max_num_seqs=len(reqs), max_num_batched_tokens=max_num_batched_tokens,
                                                  max_model_len=longest + 16,
                                                  kv_cache_bytes=2 << 30), tokenizer)
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
            "steps": engine.total_steps}


def _run_hf(model, reqs, batch_size: int, pad_id: int) -> dict:
    import torch

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
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                           do_sample=False, pad_token_id=pad_id)
        computed += new * len(chunk)
    seconds = time.perf_counter() - t0
    return {"seconds": round(seconds, 3), "output_tokens": tokens, "tokens_per_s": round(tokens / seconds, 2),
            "computed_tokens": computed}


def _matmul_peak(seconds: float = 2.0) -> float:
    """Measured fp32 matmul FLOP/s of this machine (best of repeated 1024-2048 square matmuls)."""
    import torch

    best = 0.0
    for n in (1024, 2048):
        a, b = torch.randn(n, n), torch.randn(n, n)
        torch.mm(a, b)
        reps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds / 2:
            torch.mm(a, b)
            reps += 1
        best = max(best, 2 * n ** 3 * reps / (time.perf_counter() - t0))
    return best


def _decode_flops_per_token(config, context: int) -> float:
    """Model FLOPs of one decode token: 2 x (linear-layer weights incl. LM head) + attention over context."""
    h = config.hidden_size
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", heads) or heads
    hd = getattr(config, "head_dim", None) or h // heads
    inter = config.intermediate_size
    per_layer = h * heads * hd + 2 * h * kv * hd + heads * hd * h + 3 * h * inter
    linear = config.num_hidden_layers * per_layer + h * config.vocab_size
    attention = config.num_hidden_layers * 2 * 2 * heads * hd * context
    return 2 * linear + attention


def _mfu(model, tokenizer, batch: int, context: int, steps: int, peak: float) -> dict:
    from core.engine.engine import EngineConfig, GenerationEngine
    from core.engine.sequence import SamplingParams, StopCriteria

    engine = GenerationEngine(model, EngineConfig(max_num_seqs=batch, max_num_batched_tokens=4096,
                                                  max_model_len=context + steps + 16), tokenizer)
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
    flops = n * _decode_flops_per_token(model.config, context + steps // 2)
    achieved = flops / seconds
    return {"decode_batch": batch, "context_tokens": context, "decode_tokens": n, "seconds": round(seconds, 3),
            "step_ms": round(1000 * seconds / max(1, n / batch), 1), "achieved_gflops": round(achieved / 1e9, 2),
            "peak_gflops": round(peak / 1e9, 2), "mfu": round(achieved / peak, 3)}


@bench.command("engine")
@click.option("--model", "model_spec", default="smollm2-135m-instruct", show_default=True, help="Model spec.")
@click.option("--requests", "num_requests", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--equal-prompt", type=int, default=128, show_default=True, help="Prompt tokens, equal-length case.")
@click.option("--equal-output", type=int, default=128, show_default=True, help="Output tokens, equal-length case.")
@click.option("--mixed-prompt", type=(int, int), default=(30, 600), show_default=True, help="Prompt range, mixed case.")
@click.option("--mixed-output", type=(int, int), default=(16, 256), show_default=True, help="Output range, mixed case.")
@click.option("--hf-batch-size", type=click.IntRange(min=1), default=64, show_default=True,
              help="Static batch size for transformers generate.")
@click.option("--max-num-batched-tokens", type=click.IntRange(min=1), default=2048, show_default=True)
@click.option("--mfu-context", type=int, default=200, show_default=True, help="Cached tokens per sequence for MFU.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--cases", default="equal,mixed", show_default=True,
              help="Throughput cases to run (comma-separated; empty for MFU only).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (last line).")
def bench_engine(model_spec, num_requests, equal_prompt, equal_output, mixed_prompt, mixed_output, hf_batch_size,
                 max_num_batched_tokens, mfu_context, seed, cases, as_json):
    """Output tokens/s of the engine vs `transformers` generate (static batches), same run, same weights."""
    import torch

    from core.models.loader import load_model

    loaded = load_model(model_spec)
    model, tok = loaded.model, loaded.tokenizer
    vocab = model.config.vocab_size
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    wanted = [c.strip() for c in cases.split(",") if c.strip()]
    unknown = set(wanted) - {"equal", "mixed"}
    if unknown:
        raise click.BadParameter(f"unknown case(s) {', '.join(sorted(unknown))}; use equal, mixed", param_hint="--cases")
    cases = {
        "equal": _requests(num_requests, (equal_prompt, equal_prompt), (equal_output, equal_output), vocab, seed),
        "mixed": _requests(num_requests, mixed_prompt, mixed_output, vocab, seed),
    }
    cases = {name: reqs for name, reqs in cases.items() if name in wanted}
    result = {"model": model_spec, "threads": torch.get_num_threads(), "requests": num_requests}
    original_impl = model.config._attn_implementation
    for name, reqs in cases.items():
        model.set_attn_implementation(original_impl)
        hf = _run_hf(model, reqs, hf_batch_size, pad)
        eng = _run_engine(model, tok, reqs, max_num_batched_tokens)
        result[name] = {"engine": eng, "hf_generate": hf,
                        "ratio_vs_hf": round(eng["tokens_per_s"] / hf["tokens_per_s"], 3)}
        if not as_json:
            click.echo(f"{name}: engine {eng['tokens_per_s']} tok/s, HF generate {hf['tokens_per_s']} tok/s, "
                       f"ratio {result[name]['ratio_vs_hf']}", err=True)
    peak = _matmul_peak()
    result["mfu"] = _mfu(model, tok, num_requests, mfu_context, 16, peak)
    if not as_json:
        click.echo(f"mfu at decode batch {num_requests}: {result['mfu']['mfu']}", err=True)
    click.echo(json.dumps(result, indent=None if as_json else 2))


POLICY_SPECS = {
    "non-spec": ("non-spec", {}),
    "naive-spec": ("naive-spec", {}),
    "fasttts": ("fasttts", {}),
    "specscale:ep": ("specscale", {"early_pruning": True, "dedup": False, "lazy_verification": False}),
    "specscale:cd": ("specscale", {"early_pruning": False, "dedup": True, "lazy_verification": False}),
    "specscale:ep+cd": ("specscale", {"early_pruning": True, "dedup": True, "lazy_verification": False}),
    "specscale:ep+cd+lv": ("specscale", {"early_pruning": True, "dedup": True, "lazy_verification": True}),
}


def run_policy_once(runtime, problems, search_cfg, policy: str, max_concurrent: int) -> dict:
    """Run one policy over ``problems`` on an already-loaded runtime; returns its counters.

    Engines are fresh per policy (same weights), so KV pools and prefix caches start empty.
    """
    from core.grading.equivalence import answers_equivalent
    from core.search.driver import SearchDriver
    from core.solver import build_runtime

    rt = build_runtime(runtime.settings, generator=runtime.generator, prm=runtime.prm)
    correct = 0
    nodes = {"pruned": 0, "cancelled": 0, "speculative": 0}

    def on_result(problem, result, search):
        nonlocal correct
        correct += int(problem.answer is not None and answers_equivalent(result["pred"], problem.answer))
        for n in search.tree.nodes[1:]:
            nodes["pruned"] += n.status.value == "pruned"
            nodes["cancelled"] += n.status.value == "cancelled"
            nodes["speculative"] += n.speculative

    t0 = time.perf_counter()
    driver = SearchDriver(rt.engine, rt.generator.tokenizer, rt.generator.eos_token_ids, rt.verifier, rt.scorer,
                          search_cfg, policy=policy, max_concurrent=max_concurrent, on_result=on_result)
    stats = driver.run(problems)
    seconds = time.perf_counter() - t0
    v = rt.verifier.stats
    return {
        "seconds": round(seconds, 2),
        "generated_tokens": stats.generated_tokens,
        "tokens_per_s": round(stats.generated_tokens / seconds, 2),
        "forward_rows": rt.engine.total_forward_rows,
        "engine_steps": rt.engine.total_steps,
        "prm_calls": v.flushes,
        "prm_calls_by_trigger": dict(v.by_trigger),
        "prm_tasks": v.tasks,
        "prm_prefills": v.prefills,
        "prm_computed_tokens": v.computed_tokens,
        "generation_s": round(stats.generation_seconds, 2),
        "verification_s": round(v.seconds, 2),
        "accuracy": round(correct / max(1, len(problems)), 3),
        "preemptions": rt.engine.scheduler.num_preemptions,
        **nodes,
    }


@bench.command("search")
@click.option("--dataset", type=click.Path(exists=True, dir_okay=False), default="examples/math500_sample.jsonl",
              show_default=True, help="JSONL problems.")
@click.option("--limit", type=click.IntRange(min=1), default=16, show_default=True)
@click.option("--policies", default="non-spec,naive-spec,fasttts,specscale:ep,specscale:ep+cd", show_default=True,
              help=f"Comma-separated, from: {', '.join(POLICY_SPECS)}.")
@click.option("--max-concurrent", type=click.IntRange(min=1), default=16, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (last line).")
@model_and_search_options(with_policy=False)
def bench_search(dataset, limit, policies, max_concurrent, as_json, **opts):
    """Every policy on the same problems, models loaded once, one process: throughput and work counters."""
    from core.io.problems import Problem, read_problems
    from core.solver import build_runtime

    from .options import build_settings

    settings, search_cfg, _ = build_settings(opts)
    names = [p.strip() for p in policies.split(",") if p.strip()]
    unknown = [p for p in names if p not in POLICY_SPECS]
    if unknown:
        raise click.BadParameter(f"unknown policy {', '.join(unknown)}", param_hint="--policies")
    problems = [p for p in read_problems(dataset) if isinstance(p, Problem)][:limit]
    runtime = build_runtime(settings)
    out = {"dataset": dataset, "problems": len(problems), "beam_size": search_cfg.beam_size,
           "beam_width": search_cfg.beam_width, "policies": {}}
    import dataclasses

    for name in names:
        policy, overrides = POLICY_SPECS[name]
        cfg = dataclasses.replace(search_cfg, **overrides)
        res = run_policy_once(runtime, problems, cfg, policy, max_concurrent)
        out["policies"][name] = res
        if not as_json:
            click.echo(f"{name:>16}: {res['tokens_per_s']:7.2f} tok/s  {res['generated_tokens']:6d} tokens  "
                       f"{res['forward_rows']:6d} rows  {res['prm_calls']:4d} PRM calls  acc {res['accuracy']}",
                       err=True)
    base = out["policies"].get("non-spec")
    if base:
        for res in out["policies"].values():
            res["ratio_vs_nonspec"] = round(res["tokens_per_s"] / base["tokens_per_s"], 3)
    click.echo(json.dumps(out, indent=None if as_json else 2))

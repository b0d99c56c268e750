"""`specscale bench`: engine throughput against `transformers` `generate`, and search policies side by side."""

from __future__ import annotations

import dataclasses
import random
import time

import click
import orjson

from core.settings import ATTENTION_BACKENDS, attention_backend_problem

from .options import THREADS_HELP, model_and_search_options, settle_threads


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


def _run_engine(model, tokenizer, reqs, max_num_batched_tokens: int, backend: str = "auto",
                enforce_eager: bool = False) -> dict:
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
            "steps": engine.total_steps, **_graph_counts(engine)}


def _graph_counts(engine) -> dict:
    """Which attention backend ran and how many decode steps replayed a CUDA graph."""
    graphs = engine.runner.graphs
    return {"attention_backend": engine.runner.backend_name, "graph_replays": graphs.replays if graphs else 0}


def _sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _run_hf(model, reqs, batch_size: int, pad_id: int) -> dict:
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


def _matmul_peak(seconds: float = 2.0, device="cpu", dtype=None) -> float:
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


def _memory_bandwidth(device, seconds: float = 1.0) -> float:
    """Measured memory bandwidth in bytes/s: best rate of copying a large buffer (read + write)."""
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


def _model_bytes(model) -> int:
    """Bytes of the model's weights (each tied tensor once): what a decode step reads at least."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


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


def _mfu(model, tokenizer, batch: int, context: int, steps: int, peak: float, backend: str = "auto",
         enforce_eager: bool = False) -> dict:
    from core.engine.engine import EngineConfig, GenerationEngine
    from core.engine.sequence import SamplingParams, StopCriteria

    engine = GenerationEngine(model, EngineConfig(max_num_seqs=batch, max_num_batched_tokens=4096,
                                                  max_model_len=context + steps + 16, attention_backend=backend,
                                                  enforce_eager=enforce_eager), tokenizer)
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
            "step_ms": round(1000 * seconds / max(1, n / batch), 2), "achieved_gflops": round(achieved / 1e9, 2),
            "peak_gflops": round(peak / 1e9, 2), "mfu": round(achieved / peak, 3), **_graph_counts(engine)}


@bench.command("engine")
@click.option("--model", "model_spec", default="smollm2-135m-instruct", show_default=True,
              help="Model to measure: embedded name, HF folder, hub name or .gguf file.")
@click.option("--requests", "num_requests", type=click.IntRange(min=1), default=64, show_default=True,
              help="Requests per throughput case, and the decode batch of the MFU measurement.")
@click.option("--equal-prompt", type=int, default=128, show_default=True, help="Prompt tokens, equal-length case.")
@click.option("--equal-output", type=int, default=128, show_default=True, help="Output tokens, equal-length case.")
@click.option("--mixed-prompt", type=(int, int), default=(30, 600), show_default=True, help="Prompt range, mixed case.")
@click.option("--mixed-output", type=(int, int), default=(16, 256), show_default=True, help="Output range, mixed case.")
@click.option("--hf-batch-size", type=click.IntRange(min=1), default=64, show_default=True,
              help="Static batch size for transformers generate.")
@click.option("--max-num-batched-tokens", type=click.IntRange(min=1), default=2048, show_default=True,
              help="Engine: tokens per step (prefill chunks and decode rows together).")
@click.option("--mfu-context", type=int, default=200, show_default=True, help="Cached tokens per sequence for MFU.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random prompts and lengths.")
@click.option("--cases", default="equal,mixed", show_default=True,
              help="Throughput cases to run (comma-separated; empty for MFU only).")
@click.option("--device", default="cpu", show_default=True, help="cpu or cuda[:i].")
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default=None,
              help="Weights dtype (default: float32 on CPU, bfloat16 on CUDA).")
@click.option("--attention-backend", type=click.Choice(ATTENTION_BACKENDS), default="auto", show_default=True,
              help="Engine attention kernels (auto: flashinfer on CUDA when installed, torch otherwise).")
@click.option("--enforce-eager", is_flag=True, help="Engine: no CUDA graphs for decode steps.")
@click.option("--threads", type=click.IntRange(min=1), default=None, help=THREADS_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (last line).")
def bench_engine(model_spec, num_requests, equal_prompt, equal_output, mixed_prompt, mixed_output, hf_batch_size,
                 max_num_batched_tokens, mfu_context, seed, cases, device, dtype, attention_backend, enforce_eager,
                 threads, as_json):
    """Output tokens/s of the engine vs `transformers` generate (static batches), same run, same weights.

    Also the decode MFU at batch --requests, and the weights-read bound of a decode step (weight
    bytes / measured memory bandwidth) against the measured step time at batch 1 and at --requests.
    """
    from .options import check_device

    check_device(device)
    problem = attention_backend_problem(attention_backend, device, dtype)
    if problem:
        raise click.UsageError(f"--attention-backend {attention_backend}: {problem}")
    import torch

    from core.models.loader import load_model

    settle_threads(threads, device)
    loaded = load_model(model_spec, dtype, device)
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
    params = next(model.parameters())
    result = {"model": model_spec, "threads": torch.get_num_threads(), "requests": num_requests,
              "device": str(params.device), "dtype": str(params.dtype).removeprefix("torch."),
              "device_name": torch.cuda.get_device_name(params.device) if params.device.type == "cuda" else "cpu"}
    original_impl = model.config._attn_implementation
    for name, reqs in cases.items():
        model.set_attn_implementation(original_impl)
        hf = _run_hf(model, reqs, hf_batch_size, pad)
        eng = _run_engine(model, tok, reqs, max_num_batched_tokens, attention_backend, enforce_eager)
        result[name] = {"engine": eng, "hf_generate": hf,
                        "ratio_vs_hf": round(eng["tokens_per_s"] / hf["tokens_per_s"], 3)}
        if not as_json:
            click.echo(f"{name}: engine {eng['tokens_per_s']} tok/s, HF generate {hf['tokens_per_s']} tok/s, "
                       f"ratio {result[name]['ratio_vs_hf']}", err=True)
    peak = _matmul_peak(device=params.device, dtype=params.dtype)
    result["mfu"] = _mfu(model, tok, num_requests, mfu_context, 16, peak, attention_backend, enforce_eager)
    # a decode step reads every weight once: at batch 1 its time is bounded below by weight bytes /
    # memory bandwidth (the goal: within 2x of it on a GPU)
    bandwidth = _memory_bandwidth(params.device)
    weights = _model_bytes(model)
    bound_ms = 1000 * weights / bandwidth
    single = _mfu(model, tok, 1, mfu_context, 16, peak, attention_backend, enforce_eager)
    result["weights_bound"] = {
        "model_bytes": weights, "bandwidth_gb_s": round(bandwidth / 1e9, 1), "bound_ms": round(bound_ms, 3),
        "step_ms_batch1": single["step_ms"], "ratio_batch1": round(single["step_ms"] / bound_ms, 2),
        "step_ms_batch": result["mfu"]["step_ms"], "ratio_batch": round(result["mfu"]["step_ms"] / bound_ms, 2)}
    if not as_json:
        click.echo(f"mfu at decode batch {num_requests}: {result['mfu']['mfu']}", err=True)
        wb = result["weights_bound"]
        click.echo(f"decode step {wb['step_ms_batch1']} ms at batch 1 = {wb['ratio_batch1']}x the weights-read "
                   f"bound ({wb['bound_ms']} ms)", err=True)
    click.echo(orjson.dumps(result, option=0 if as_json else orjson.OPT_INDENT_2).decode())


def _parse_rates(text: str) -> list[float]:
    try:
        rates = [float(r) for r in text.split(",") if r.strip()]
    except ValueError as exc:
        raise click.BadParameter(f"'{text}' is not a comma-separated list of numbers", param_hint="--request-rates") from exc
    if any(r <= 0 for r in rates):
        raise click.BadParameter("request rates must be > 0 problems/s", param_hint="--request-rates")
    return rates


@bench.command("search")
@click.option("--problems", "problems_file", type=click.Path(exists=True, dir_okay=False),
              default="examples/math500_sample.jsonl", show_default=True, help="JSONL problems (id, problem, answer).")
@click.option("--limit", type=click.IntRange(min=1), default=16, show_default=True, help="First K problems.")
@click.option("--policies", default="non-spec,naive-spec,fasttts,specscale:ep,specscale:ep+cd,specscale:ep+cd+lv",
              show_default=True, help="Comma-separated policy specs (specscale:ep, :cd, :lv and '+' combinations).")
@click.option("--max-concurrent", type=click.IntRange(min=1), default=16, show_default=True,
              help="Problems searched at once.")
@click.option("--request-rates", default="", help="Poisson arrival rates in problems/s for latency runs, e.g. 0.05,0.1.")
@click.option("--arrival-seed", type=int, default=0, show_default=True, help="Seed of the arrival process.")
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True,
              help="Throughput runs per policy, in rounds; figures are the median run, ratios the median "
                   "same-round ratio.")
@click.option("--beam-sizes", default="", metavar="N1,N2,...",
              help="Beam-size study instead of the comparison: normalized latency and peak KV blocks of every "
                   "policy at each beam size N (e.g. 4,8,16,32; M as set).")
@click.option("--concurrency", default="", metavar="C1,C2,...",
              help="Concurrency study instead of the comparison: output tokens/s of every policy with at most C "
                   "problems in flight, for each C (e.g. 16,32,64,128; give --limit >= the largest C).")
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False), default="runs/bench-search",
              show_default=True, help="Folder for results.json, the CSV files and the PNG plots.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (last line).")
@model_and_search_options(with_policy=False)
def bench_search(problems_file, limit, policies, max_concurrent, request_rates, arrival_seed, repeats, beam_sizes,
                 concurrency, out_dir, as_json, **opts):
    """Every policy on the same problems, models loaded once, in one process (paper §5.2-§5.4).

    For each policy: a throughput run (all problems issued at once; --repeats rounds of them),
    then one latency run per request rate (Poisson arrivals). Prints a table and writes
    OUT/results.json, OUT/results.csv, OUT/throughput.png, OUT/time_breakdown.png and
    OUT/latency.png. With --beam-sizes and/or --concurrency it runs those studies instead and
    writes OUT/results.json, OUT/beam_sizes.csv + beam_sizes.png, OUT/concurrency.csv +
    concurrency.png (paper §5.5-§5.6).
    """
    from .bench_report import report_console

    from core.bench.search_bench import (parse_policies, run_beam_size_study, run_benchmark,
                                         run_concurrency_study)
    from core.io.durable import write_atomically

    from .bench_report import (results_table, study_table, write_csv, write_plots, write_study_csv,
                               write_study_plot)
    from .options import build_settings

    settings, search_cfg, _ = build_settings(opts)
    try:
        names = parse_policies(policies)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--policies") from exc
    rates = _parse_rates(request_rates)
    sizes = _parse_counts(beam_sizes, "--beam-sizes")
    levels = _parse_counts(concurrency, "--concurrency")
    for n in sizes:
        if n % search_cfg.beam_width:
            raise click.BadParameter(f"beam size {n} is not divisible by the beam width M={search_cfg.beam_width}",
                                     param_hint="--beam-sizes")
    if levels and limit < max(levels):
        raise click.BadParameter(f"--limit {limit} problems cannot keep {max(levels)} in flight; give --limit "
                                 f">= {max(levels)}", param_hint="--concurrency")
    out, problems = output_and_problems(out_dir, problems_file, limit)
    models = _load_models(settings)
    console = report_console()

    def on_run(name, rate, res):
        what = "all at once" if rate is None else f"{rate}/s arrivals"
        console.log(f"{name} ({what}): {res['wall_s']:.1f} s, {res['throughput']:.1f} out tok/s, "
                    f"{res['goodput']:.1f} goodput tok/s, {res['prm_calls']} PRM calls, "
                    f"norm latency {1000 * res['normalized_latency_s_per_token']:.1f} ms/tok")

    header = {"problems_file": problems_file, "problems": len(problems), "beam_size": search_cfg.beam_size,
              "beam_width": search_cfg.beam_width, "max_concurrent": max_concurrent, "generator": settings.generator,
              "prm": settings.prm, "scorer": settings.scorer, "search": dataclasses.asdict(search_cfg)}
    if sizes or levels:
        result = dict(header)
        written = [out / "results.json"]
        if sizes:
            result["beam_size_study"] = run_beam_size_study(models, settings, problems, search_cfg, names, sizes,
                                                            max_concurrent, on_run)
            console.print(study_table(result["beam_size_study"], "beam size N", [
                ("norm. latency ms/tok", "normalized_latency_s_per_token", 1000), ("peak KV blocks", "peak_kv_blocks", 1),
                ("latency vs non-spec", "normalized_latency_vs_nonspec", 1)]))
            written += [write_study_csv(out / "beam_sizes.csv", result["beam_size_study"], "beam_size"),
                        write_study_plot(out / "beam_sizes.png", result["beam_size_study"], "beam size N",
                                         [("normalized_latency_s_per_token", "normalized latency (ms / answer token)",
                                           1000), ("peak_kv_blocks", "peak KV blocks", 1)])]
        if levels:
            result["concurrency_study"] = run_concurrency_study(models, settings, problems, search_cfg, names, levels,
                                                                on_run)
            console.print(study_table(result["concurrency_study"], "problems in flight", [
                ("out tok/s", "throughput", 1), ("vs non-spec", "ratio_vs_nonspec", 1)]))
            written += [write_study_csv(out / "concurrency.csv", result["concurrency_study"], "concurrency"),
                        write_study_plot(out / "concurrency.png", result["concurrency_study"], "problems in flight",
                                         [("throughput", "output tokens / s", 1)])]
        write_atomically(out / "results.json", orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
        console.print("wrote " + ", ".join(str(p) for p in written))
        if as_json:
            click.echo(orjson.dumps(result).decode())
        return
    result = run_benchmark(models, settings, problems, search_cfg, names, max_concurrent, rates, arrival_seed, on_run,
                           repeats=repeats)
    result = {"problems_file": problems_file, "problems": len(problems), "beam_size": search_cfg.beam_size,
              "beam_width": search_cfg.beam_width, "max_concurrent": max_concurrent, "request_rates": rates, "repeats": repeats,
              "generator": settings.generator, "prm": settings.prm, "scorer": settings.scorer,
              "search": dataclasses.asdict(search_cfg), **result}
    rate_keys = [str(r) for r in rates]
    console.print(results_table(result["policies"], rate_keys))
    write_atomically(out / "results.json", orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    write_csv(out / "results.csv", result["policies"], rate_keys)
    plots = write_plots(out, result["policies"], rate_keys)
    console.print(f"wrote {out / 'results.json'}, {out / 'results.csv'}, " + ", ".join(str(p) for p in plots))
    if as_json:
        click.echo(orjson.dumps(result).decode())


@bench.command("strategies")
@click.option("--problems", "problems_file", type=click.Path(exists=True, dir_okay=False),
              default="examples/gsm8k_sample.jsonl", show_default=True, help="JSONL problems with gold answers.")
@click.option("--limit", type=click.IntRange(min=1), default=32, show_default=True, help="First K problems.")
@click.option("--sizes", default="4,16", show_default=True, metavar="N1,N2,...",
              help="Beam sizes N at which best-of-N, beam search and DVTS run (greedy runs once, N=1).")
@click.option("--policy", type=click.Choice(["non-spec", "specscale"]), default="specscale", show_default=True,
              help="How every strategy runs (the answers do not depend on it, the time does).")
@click.option("--max-concurrent", type=click.IntRange(min=1), default=16, show_default=True,
              help="Problems searched at once.")
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False), default="runs/bench-strategies",
              show_default=True, help="Folder for results.json, results.csv and accuracy_vs_tokens.png.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (last line).")
@model_and_search_options(with_policy=False)
def bench_strategies(problems_file, limit, sizes, policy, max_concurrent, out_dir, as_json, **opts):
    """Accuracy, generated tokens and wall time of greedy (N=1), best-of-N, beam search and DVTS at each N,
    on the same problems with the models loaded once; plots accuracy against generated tokens.

    Every strategy uses the preset's search settings (M, step limits, temperature; greedy runs at
    temperature 0) and --select for its answer; every selection's accuracy is reported too.
    Best-of-N runs once, at the largest N: a smaller N is the first N samples of that run (what a
    run at that N would sample); beam search and DVTS run at every N.
    """
    from .bench_report import report_console

    from core.bench.strategies_bench import run_strategies, strategy_config, strategy_points
    from core.io.durable import write_atomically

    from .bench_report import strategies_table, write_strategies_csv, write_strategies_plot
    from .options import build_settings

    settings, search_cfg, _ = build_settings(opts)
    ns = _parse_counts(sizes, "--sizes")
    try:
        for strategy, n in strategy_points(ns):
            strategy_config(search_cfg, strategy, n)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--sizes") from exc
    out, problems = output_and_problems(out_dir, problems_file, limit)
    models = _load_models(settings)
    console = report_console()

    finished: list[dict] = []

    def results(rows: list[dict]) -> dict:
        return {"problems_file": problems_file, "problems": len(problems), "policy": policy,
                "select": search_cfg.select, "generator": settings.generator, "prm": settings.prm,
                "scorer": settings.scorer, "search": dataclasses.asdict(search_cfg),
                "complete": len(rows) == len(strategy_points(ns)), "runs": rows}

    def write_results(rows: list[dict]) -> list:
        write_atomically(out / "results.json", orjson.dumps(results(rows), option=orjson.OPT_INDENT_2) + b"\n")
        return [out / "results.json", write_strategies_csv(out / "results.csv", rows)]

    def on_run(row):
        took = (f"from the first {row['n']} samples of the N={row['subset_of']} run" if row["subset_of"]
                else f"{row['wall_s']:.1f} s")
        console.log(f"{row['strategy']} N={row['n']}: accuracy {row['accuracy']}, {row['generated_tokens']} tokens, "
                    f"{took}")
        # an hour-long sweep stopped part-way keeps the runs it finished ("complete": false)
        finished.append(row)
        write_results(finished)

    rows = run_strategies(models, settings, problems, search_cfg, policy, ns, max_concurrent, on_run)
    result = results(rows)
    console.print(strategies_table(rows))
    written = [*write_results(rows), write_strategies_plot(out / "accuracy_vs_tokens.png", rows)]
    console.print("wrote " + ", ".join(str(p) for p in written))
    if as_json:
        click.echo(orjson.dumps(result).decode())


def output_and_problems(out_dir, problems_file, limit: int):
    """The bench's output folder (created) and the first ``limit`` valid problems of ``problems_file``.

    Raises:
        click.UsageError: the folder cannot be created, or the file has no valid problem.
    """
    from pathlib import Path

    from core.io.problems import Problem, read_problems

    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.UsageError(f"cannot create output folder {out}: {exc}") from exc
    problems = [p for p in read_problems(problems_file) if isinstance(p, Problem)][:limit]
    if not problems:
        raise click.UsageError(f"{problems_file}: no valid problems")
    return out, problems


def _load_models(settings):
    """Generator and PRM of ``settings``; a model that cannot be loaded is a usage error (exit 2)."""
    from core.models.loader import ModelLoadError
    from core.solver import load_models

    # fixed for the whole benchmark: runs compared side by side get the same threads
    settle_threads(settings.threads, settings.device)
    try:
        return load_models(settings)
    except (ModelLoadError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc


def _parse_counts(text: str, flag: str) -> list[int]:
    """Positive whole numbers from a comma-separated flag value, in order, without repeats."""
    try:
        values = list(dict.fromkeys(int(v) for v in text.split(",") if v.strip()))
    except ValueError as exc:
        raise click.BadParameter(f"expected whole numbers separated by commas, got {text!r}", param_hint=flag) from exc
    if any(v < 1 for v in values):
        raise click.BadParameter("values must be >= 1", param_hint=flag)
    return values


def _register_verifier():
    from .bench_verifier import bench_verifier

    bench.add_command(bench_verifier)


_register_verifier()


def _register_scale():
    from .bench_scale import bench_scale

    bench.add_command(bench_scale)


_register_scale()

"""`specscale bench engine`: engine throughput against `transformers` generate (core.bench.engine_bench)."""

from __future__ import annotations

import click
import orjson

from core.settings import ATTENTION_BACKENDS, attention_backend_problem

from .options import THREADS_HELP, check_device, settle_threads


@click.command("engine")
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
def bench_engine(**flags):
    """Output tokens/s of the engine vs `transformers` generate (static batches), same run, same weights.

    Also the decode MFU at batch --requests, and the weights-read bound of a decode step (weight
    bytes / measured memory bandwidth) against the measured step time at batch 1 and at --requests.
    """
    from core.bench.engine_bench import EngineBenchConfig, parse_cases, run_engine_bench

    device, dtype, backend, as_json = flags["device"], flags["dtype"], flags["attention_backend"], flags["as_json"]
    check_device(device)
    problem = attention_backend_problem(backend, device, dtype)
    if problem:
        raise click.UsageError(f"--attention-backend {backend}: {problem}")
    try:
        cases = parse_cases(flags["cases"])
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--cases") from exc
    cfg = EngineBenchConfig(
        model=flags["model_spec"], requests=flags["num_requests"], equal_prompt=flags["equal_prompt"],
        equal_output=flags["equal_output"], mixed_prompt=flags["mixed_prompt"], mixed_output=flags["mixed_output"],
        hf_batch_size=flags["hf_batch_size"], max_num_batched_tokens=flags["max_num_batched_tokens"],
        mfu_context=flags["mfu_context"], seed=flags["seed"], cases=cases, attention_backend=backend,
        enforce_eager=flags["enforce_eager"])
    from core.models.loader import load_model

    settle_threads(flags["threads"], device)
    loaded = load_model(cfg.model, dtype, device)

    def on_case(name, figures):
        if not as_json:
            click.echo(f"{name}: engine {figures['engine']['tokens_per_s']} tok/s, HF generate "
                       f"{figures['hf_generate']['tokens_per_s']} tok/s, ratio {figures['ratio_vs_hf']}", err=True)

    result = run_engine_bench(loaded.model, loaded.tokenizer, cfg, on_case)
    if not as_json:
        click.echo(f"mfu at decode batch {cfg.requests}: {result['mfu']['mfu']}", err=True)
        wb = result["weights_bound"]
        click.echo(f"decode step {wb['step_ms_batch1']} ms at batch 1 = {wb['ratio_batch1']}x the weights-read "
                   f"bound ({wb['bound_ms']} ms)", err=True)
    click.echo(orjson.dumps(result, option=0 if as_json else orjson.OPT_INDENT_2).decode())

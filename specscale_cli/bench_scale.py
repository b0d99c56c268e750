"""`specscale bench scale`: problems/s and output tokens/s for 1, 2, ... workers on the same problems
(core.bench.scale_bench), as a table and results.json."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
import orjson

from .options import model_and_search_options

SAMPLE_GSM8K = Path(__file__).resolve().parent.parent / "examples" / "gsm8k_sample.jsonl"


def _table(result: dict):
    from rich.table import Table

    table = Table(title=f"Scale-out on the same {result['problems']} problems ({result['cpus']} CPU cores here)")
    for name in ("workers", "threads each", "load s", "wall s", "problems/s", "out tok/s", "vs 1 worker",
                 "same records"):
        table.add_column(name, justify="right")
    for r in result["runs"]:
        same = {True: "yes", False: "NO", None: "-"}[r["same_records_as_one_worker"]]
        if r["same_records_as_one_worker"] is False and r["same_answers_as_one_worker"]:
            same = "scores differ"  # the last digit of some fp32 scores (batches of another shape)
        table.add_row(str(r["workers"]), str(r["threads_per_worker"] or "-"),
                      f"{r['load_s']:.1f}" if r["load_s"] is not None else "-", f"{r['wall_s']:.1f}",
                      f"{r['problems_per_s']:.3f}", f"{r['tokens_per_s']:.1f}",
                      f"{r['vs_one_worker']:.2f}" if r["vs_one_worker"] is not None else "-", same)
    return table


@click.command("scale")
@click.option("--workers", "worker_counts", default="1,2", show_default=True, metavar="K1,K2,...",
              help="Worker counts to measure, in this order; 1 runs in this process, more on Ray replicas.")
@click.option("--problems", "problems_file", type=click.Path(exists=True, dir_okay=False), default=str(SAMPLE_GSM8K),
              show_default="examples/gsm8k_sample.jsonl", help="JSONL problems (id, problem, answer).")
@click.option("--limit", type=click.IntRange(min=1), default=8, show_default=True, help="First K problems.")
@click.option("--max-concurrent", type=click.IntRange(min=1), default=8, show_default=True,
              help="Problems searched at once by each worker.")
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True,
              help="Rounds of every worker count; a count's figures come from its median run.")
@click.option("--ray-address", default=None, metavar="ADDR",
              help="Join the Ray cluster at ADDR for the counts > 1 instead of starting one here.")
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False), default="runs/bench-scale",
              show_default=True, help="Folder for results.json.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (last line of stdout).")
@model_and_search_options
def bench_scale(worker_counts, problems_file, limit, max_concurrent, repeats, ray_address, out_dir, as_json, **opts):
    """Problems/s and output tokens/s of `solve --workers K` for each K, on the same problems, in one run.

    K = 1 searches in this process with every core; K > 1 on K Ray replicas (one GPU each with
    --device cuda, else the cores split between them). Model loading is timed apart and not
    counted. Each row gives its ratio to the 1-worker run and whether its records are the same.
    """
    from core.distributed import RAY_INSTALL_HINT, ReplicaFailed, ReplicasLost, ray_missing
    from core.io.durable import write_atomically

    from .bench_args import output_and_problems, parse_counts
    from .bench_report import report_console
    from .options import build_settings

    settings, search_cfg, policy = build_settings(opts)
    counts = parse_counts(worker_counts, "--workers")
    if not counts:
        raise click.BadParameter("give at least one worker count", param_hint="--workers")
    if max(counts) > 1 and ray_missing():
        raise click.UsageError(f"--workers {max(counts)} runs replicas on Ray, which is not installed: "
                               f"{RAY_INSTALL_HINT}")
    out, problems = output_and_problems(out_dir, problems_file, limit)
    console = report_console()

    def on_run(row):
        console.log(f"{row['workers']} worker(s): {row['wall_s']:.1f} s, {row['problems_per_s']:.3f} problems/s, "
                    f"{row['tokens_per_s']:.1f} out tok/s (loading {row['load_s'] or 0:.1f} s)")

    from core.bench.scale_bench import run_scale_benchmark
    from core.models.loader import ModelLoadError

    try:
        result = run_scale_benchmark(settings, search_cfg, policy, problems, counts, max_concurrent,
                                     ray_address=ray_address, repeats=repeats, on_run=on_run)
    except (ModelLoadError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc
    except (ReplicasLost, ReplicaFailed) as exc:
        raise click.ClickException(str(exc)) from exc
    result = {"problems_file": problems_file, "problems": len(problems), "policy": policy,
              "max_concurrent": max_concurrent, "repeats": repeats, "device": settings.device,
              "generator": settings.generator, "prm": settings.prm, "scorer": settings.scorer,
              "search": dataclasses.asdict(search_cfg), **result}
    console.print(_table(result))
    write_atomically(out / "results.json", orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    console.print(f"wrote {out / 'results.json'}")
    if as_json:
        click.echo(orjson.dumps(result).decode())

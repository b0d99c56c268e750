"""`specscale bench strategies`: greedy, best-of-N, beam search and DVTS at each N
(core.bench.strategies_bench), as a table, results.json, results.csv and a plot."""

from __future__ import annotations

import dataclasses

import click
import orjson

from .bench_args import load_models, output_and_problems, parse_counts
from .options import build_settings, model_and_search_options


@click.command("strategies")
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
    from core.bench.reports import write_strategies_csv, write_strategies_plot
    from core.bench.strategies_bench import run_strategies, strategy_config, strategy_points
    from core.io.durable import write_atomically

    from .bench_report import report_console, strategies_table

    settings, search_cfg, _ = build_settings(opts)
    ns = parse_counts(sizes, "--sizes")
    try:
        for strategy, n in strategy_points(ns):
            strategy_config(search_cfg, strategy, n)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--sizes") from exc
    out, problems = output_and_problems(out_dir, problems_file, limit)
    models = load_models(settings)
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

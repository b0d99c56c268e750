"""`specscale bench search`: every policy on the same problems (core.bench.search_bench), as a table,
results.json, CSV files and plots."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import click
import orjson

from core.io.problems import Problem
from core.search.config import SearchConfig
from core.settings import ModelSettings

from .bench_args import load_models, output_and_problems, parse_counts, parse_rates
from .options import build_settings, model_and_search_options


@dataclass(frozen=True)
class SearchBenchPlan:
    """One `bench search` run as its flags decided it, checked before any model loads.

    problems_file: the JSONL file the problems come from (recorded as given).
    problems: its first ``--limit`` valid problems, in file order.
    out: folder of results.json, the CSV files and the PNG plots (created).
    settings: models, dtype, device and engine sizing.
    search: N, M, step limits, sampling, strategy and selection.
    policies: policy specs to compare, in order (``non-spec``, ``specscale:ep+cd``, ...).
    max_concurrent: problems searched at once.
    rates: Poisson arrival rates of the latency runs, problems/s (empty: throughput runs only).
    arrival_seed: seed of the arrival process.
    repeats: throughput runs per policy, in rounds.
    beam_sizes: beam sizes N of the beam-size study (each divisible by M; empty: no study).
    concurrency: problems in flight of the concurrency study (each <= the problems; empty: no study).
    as_json: print the result as one JSON line at the end.
    """

    problems_file: str
    problems: tuple[Problem, ...]
    out: Path
    settings: ModelSettings
    search: SearchConfig
    policies: tuple[str, ...]
    max_concurrent: int
    rates: tuple[float, ...]
    arrival_seed: int
    repeats: int
    beam_sizes: tuple[int, ...]
    concurrency: tuple[int, ...]
    as_json: bool

    @property
    def studies(self) -> bool:
        """True when the run is a beam-size and/or concurrency study instead of the comparison."""
        return bool(self.beam_sizes or self.concurrency)

    def header(self) -> dict:
        """The leading fields of results.json: what was run, on which models and settings."""
        head = {"problems_file": self.problems_file, "problems": len(self.problems),
                "beam_size": self.search.beam_size, "beam_width": self.search.beam_width,
                "max_concurrent": self.max_concurrent}
        head["repeats"] = self.repeats
        if not self.studies:
            head["request_rates"] = list(self.rates)
        return {**head, "generator": self.settings.generator, "prm": self.settings.prm,
                "scorer": self.settings.scorer, "search": dataclasses.asdict(self.search)}


def plan_search_bench(flags: dict) -> SearchBenchPlan:
    """Check the flags of `bench search` and read its problems into a :class:`SearchBenchPlan`.

    Raises:
        click.UsageError / click.BadParameter: an unknown policy, a bad list, a beam size M does not
            divide, fewer problems than the largest concurrency, an output folder that cannot be
            made, a file without valid problems (the flag or file is named).
    """
    from core.bench.search_bench import parse_policies

    opts = dict(flags)
    own = {key: opts.pop(key) for key in ("problems_file", "limit", "policies", "max_concurrent", "request_rates",
                                          "arrival_seed", "repeats", "beam_sizes", "concurrency", "out_dir",
                                          "as_json")}
    settings, search_cfg, _ = build_settings(opts)
    try:
        names = parse_policies(own["policies"])
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--policies") from exc
    rates = parse_rates(own["request_rates"])
    sizes = parse_counts(own["beam_sizes"], "--beam-sizes")
    levels = parse_counts(own["concurrency"], "--concurrency")
    for n in sizes:
        if n % search_cfg.beam_width:
            raise click.BadParameter(f"beam size {n} is not divisible by the beam width M={search_cfg.beam_width}",
                                     param_hint="--beam-sizes")
    limit = own["limit"]
    if levels and limit < max(levels):
        raise click.BadParameter(f"--limit {limit} problems cannot keep {max(levels)} in flight; give --limit "
                                 f">= {max(levels)}", param_hint="--concurrency")
    out, problems = output_and_problems(own["out_dir"], own["problems_file"], limit)
    return SearchBenchPlan(problems_file=own["problems_file"], problems=tuple(problems), out=out, settings=settings,
                           search=search_cfg, policies=tuple(names), max_concurrent=own["max_concurrent"],
                           rates=tuple(rates), arrival_seed=own["arrival_seed"], repeats=own["repeats"],
                           beam_sizes=tuple(sizes), concurrency=tuple(levels), as_json=own["as_json"])


@click.command("search")
@click.option("--problems", "problems_file", type=click.Path(exists=True, dir_okay=False),
              default="examples/math500_sample.jsonl", show_default=True, help="JSONL problems (id, problem, answer).")
@click.option("--limit", type=click.IntRange(min=1), default=16, show_default=True, help="First K problems.")
@click.option("--policies", default="non-spec,naive-spec,fasttts,specscale:ep,specscale:ep+cd,specscale:ep+cd+lv",
              show_default=True, help="Comma-separated policy specs (specscale:ep, :cd, :lv and '+' combinations); a speculative one "
                   "may end in @off, @auto or @ROWS for its speculation budget (specscale:ep+cd+lv@off: none).")
@click.option("--max-concurrent", type=click.IntRange(min=1), default=16, show_default=True,
              help="Problems searched at once.")
@click.option("--request-rates", default="", help="Poisson arrival rates in problems/s for latency runs, e.g. 0.05,0.1.")
@click.option("--arrival-seed", type=int, default=0, show_default=True, help="Seed of the arrival process.")
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True,
              help="Runs per policy (and per study point), in rounds; figures are the median run, ratios the "
                   "median same-round ratio.")
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
def bench_search(**flags):
    """Every policy on the same problems, models loaded once, in one process (paper §5.2-§5.4).

    For each policy: a throughput run (all problems issued at once; --repeats rounds of them),
    then one latency run per request rate (Poisson arrivals). Prints a table and writes
    OUT/results.json, OUT/results.csv, OUT/throughput.png, OUT/time_breakdown.png and
    OUT/latency.png. With --beam-sizes and/or --concurrency it runs those studies instead and
    writes OUT/results.json, OUT/beam_sizes.csv + beam_sizes.png, OUT/concurrency.csv +
    concurrency.png (paper §5.5-§5.6).
    """
    from .bench_report import report_console

    plan = plan_search_bench(flags)
    models = load_models(plan.settings)
    console = report_console()

    def on_run(name, rate, res):
        what = "all at once" if rate is None else f"{rate}/s arrivals"
        console.log(f"{name} ({what}): {res['wall_s']:.1f} s, {res['throughput']:.1f} out tok/s, "
                    f"{res['goodput']:.1f} goodput tok/s, {res['prm_calls']} PRM calls, "
                    f"norm latency {1000 * res['normalized_latency_s_per_token']:.1f} ms/tok")

    result = (_studies if plan.studies else _comparison)(plan, models, console, on_run)
    if plan.as_json:
        click.echo(orjson.dumps(result).decode())


def _studies(plan: SearchBenchPlan, models, console, on_run) -> dict:
    """The beam-size and/or concurrency study: tables printed, results.json and each study's CSV and plot."""
    from core.bench.reports import write_study_csv, write_study_plot
    from core.bench.search_bench import run_beam_size_study, run_concurrency_study
    from core.io.durable import write_atomically

    from .bench_report import study_table

    out, problems = plan.out, list(plan.problems)
    result = plan.header()
    written = [out / "results.json"]
    if plan.beam_sizes:
        result["beam_size_study"] = run_beam_size_study(models, plan.settings, problems, plan.search,
                                                        list(plan.policies), list(plan.beam_sizes),
                                                        plan.max_concurrent, on_run, repeats=plan.repeats)
        console.print(study_table(result["beam_size_study"], "beam size N", [
            ("norm. latency ms/tok", "normalized_latency_s_per_token", 1000), ("peak KV blocks", "peak_kv_blocks", 1),
            ("latency vs non-spec", "normalized_latency_vs_nonspec", 1), ("goodput", "goodput", 1),
            ("goodput vs non-spec", "goodput_ratio_vs_nonspec", 1)]))
        written += [write_study_csv(out / "beam_sizes.csv", result["beam_size_study"], "beam_size"),
                    write_study_plot(out / "beam_sizes.png", result["beam_size_study"], "beam size N",
                                     [("normalized_latency_s_per_token", "normalized latency (ms / answer token)",
                                       1000), ("peak_kv_blocks", "peak KV blocks", 1)])]
    if plan.concurrency:
        result["concurrency_study"] = run_concurrency_study(models, plan.settings, problems, plan.search,
                                                            list(plan.policies), list(plan.concurrency), on_run,
                                                            repeats=plan.repeats)
        console.print(study_table(result["concurrency_study"], "problems in flight", [
            ("out tok/s", "throughput", 1), ("vs non-spec", "ratio_vs_nonspec", 1), ("goodput", "goodput", 1),
            ("goodput vs non-spec", "goodput_ratio_vs_nonspec", 1)]))
        written += [write_study_csv(out / "concurrency.csv", result["concurrency_study"], "concurrency"),
                    write_study_plot(out / "concurrency.png", result["concurrency_study"], "problems in flight",
                                     [("throughput", "output tokens / s", 1),
                                      ("goodput", "answer tokens / s (goodput)", 1)])]
    write_atomically(out / "results.json", orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    console.print("wrote " + ", ".join(str(p) for p in written))
    return result


def _comparison(plan: SearchBenchPlan, models, console, on_run) -> dict:
    """The policies side by side: the table printed, results.json, results.csv and the plots."""
    from core.bench.reports import write_csv, write_plots
    from core.bench.search_bench import run_benchmark
    from core.io.durable import write_atomically

    from .bench_report import results_table

    out = plan.out
    figures = run_benchmark(models, plan.settings, list(plan.problems), plan.search, list(plan.policies),
                            plan.max_concurrent, list(plan.rates), plan.arrival_seed, on_run, repeats=plan.repeats)
    result = {**plan.header(), **figures}
    rate_keys = [str(r) for r in plan.rates]
    console.print(results_table(result["policies"], rate_keys))
    write_atomically(out / "results.json", orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    write_csv(out / "results.csv", result["policies"], rate_keys)
    plots = write_plots(out, result["policies"], rate_keys)
    console.print(f"wrote {out / 'results.json'}, {out / 'results.csv'}, " + ", ".join(str(p) for p in plots))
    return result

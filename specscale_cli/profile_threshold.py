"""`specscale profile-threshold`: PRM throughput vs batch size, and the LV threshold it suggests."""

from __future__ import annotations

from pathlib import Path

import click
import orjson

from .bench_args import output_folder, store_in_preset
from .options import build_settings, prm_options, settle_threads

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NEAR_BEST = 0.95  # a threshold is "good enough" within 5% of the best measured throughput


def _default_problem_files() -> list[Path]:
    files = sorted(EXAMPLES.glob("*.jsonl"))
    if not files:
        raise click.UsageError(f"no example problems in {EXAMPLES}; pass --problems FILE (JSONL with 'solution')")
    return files


def _table(points, best: float, recommended: int):
    from rich.table import Table

    table = Table(title="PRM verification throughput (prefix caching off)")
    for name in ("batch tokens", "tokens", "tasks", "seconds", "tokens/s", "% of best"):
        table.add_column(name, justify="right")
    for p in points:
        mark = " *" if p.target_tokens == recommended else ""
        table.add_row(f"{p.target_tokens}{mark}", str(p.tokens), str(p.tasks), f"{p.seconds:.3f}",
                      f"{p.tokens_per_s:.0f}", f"{100 * p.tokens_per_s / best:.1f}")
    return table


def _plot(points, recommended: int, best: float, path: Path, title: str) -> None:
    """Throughput against batch tokens (log2 x axis), the 95% line and the pick marked."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.2))
    FigureCanvasAgg(fig)  # Agg canvas: files only, no display needed
    ax = fig.add_subplot()
    xs = [p.target_tokens for p in points]
    ax.plot(xs, [p.tokens_per_s for p in points], marker="o", label="median input tokens/s")
    ax.axhline(NEAR_BEST * best, color="grey", linestyle="--", linewidth=1, label=f"{NEAR_BEST:.0%} of best")
    ax.axvline(recommended, color="tab:red", linestyle=":", label=f"recommended threshold {recommended}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs], rotation=45)
    ax.set_xlabel("verification batch (input tokens)")
    ax.set_ylabel("tokens/s")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


@click.command("profile-threshold")
@click.option("--problems", "problem_files", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="JSONL problems with a 'solution' field (repeatable). Default: examples/*.jsonl.")
@click.option("--min-batch-tokens", "min_tokens", type=click.IntRange(min=1), default=128, show_default=True,
              help="Smallest PRM batch (input tokens); sizes double up to --max-batch-tokens.")
@click.option("--max-batch-tokens", "max_tokens", type=click.IntRange(min=1), default=8192, show_default=True,
              help="Largest PRM batch (input tokens).")
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True,
              help="Timed flushes per batch size (after one warm-up flush); the median counts.")
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False), default="runs/profile-threshold",
              show_default=True, help="Folder for profile.json and throughput.png.")
@click.option("--write", "write_preset", default=None, metavar="PRESET",
              help="Store the recommendation as lv_threshold in this preset's [search] table (name or .toml path).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (last line of stdout).")
@prm_options
def profile_threshold(problem_files, min_tokens, max_tokens, repeats, out_dir, write_preset, as_json, **opts):
    """Measure PRM verification throughput for batches of MIN..MAX input tokens; recommend an LV threshold.

    Builds real verification requests (step t of reference solutions, scored after steps 1..t-1,
    through the chosen scorer), warms up with one flush, runs each batch size --repeats times timed on
    the PRM's own engine with prefix caching disabled (every input token is computed), and
    recommends the smallest batch within 95% of the best throughput as `lv_threshold`
    (paper section 4.3). Writes OUT/profile.json and OUT/throughput.png.
    """
    import dataclasses

    from core.cpu_load import torch_threads
    from core.io.durable import write_atomically
    from core.models.loader import ModelLoadError, load_model
    from core.solver import build_verifier
    from core.verify.profile import batch_sizes, profile_throughput, recommend_threshold, verification_requests
    from core.verify.reference import read_solved_problems

    from .bench_report import report_console

    preset = opts.get("preset")
    settings, search_cfg, _ = build_settings(opts)
    try:
        sizes = batch_sizes(min_tokens, max_tokens)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    files = [Path(f) for f in problem_files] or _default_problem_files()
    try:
        problems = read_solved_problems(files)
    except (OSError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc
    out = output_folder(out_dir)

    console = report_console(stderr=as_json)
    console.print(f"loading {settings.prm} ({settings.scorer} scorer)...")
    # every input token must be computed, or cached prefixes would make small batches look fast
    settings = dataclasses.replace(settings, enable_prefix_caching=False)
    settle_threads(settings.threads, settings.device)
    try:
        prm = load_model(settings.prm, settings.dtype, settings.device)
        verifier = build_verifier(settings, prm)
        requests = verification_requests(verifier, problems, search_cfg.system_prompt, search_cfg.step_delimiter)
        points = profile_throughput(
            verifier, requests, sizes, repeats,
            on_point=lambda p: console.print(f"  {p.target_tokens:>6} tokens: {p.tokens_per_s:8.0f} tokens/s"))
    except (ModelLoadError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc

    best = max(p.tokens_per_s for p in points)
    recommended = recommend_threshold(points, NEAR_BEST)
    console.print(_table(points, best, recommended))
    threads = torch_threads()
    title = f"{settings.prm} / {settings.scorer} on {settings.device}, {threads} threads"
    plot_path, json_path = out / "throughput.png", out / "profile.json"
    _plot(points, recommended, best, plot_path, title)
    result = {
        "prm": settings.prm, "scorer": settings.scorer, "device": settings.device,
        "dtype": str(next(prm.model.parameters()).dtype).removeprefix("torch."),
        "threads": threads, "prefix_caching": False,
        "max_num_batched_tokens": settings.max_num_batched_tokens, "repeats": repeats, "warmup": 1,
        "problems": len(problems), "requests_available": len(requests),
        "points": [dict(p.to_dict(), pct_of_best=round(100 * p.tokens_per_s / best, 1)) for p in points],
        "best_tokens_per_s": best, "near_best_fraction": NEAR_BEST, "recommended_threshold": recommended,
        "plot": str(plot_path), "json": str(json_path), "wrote_preset": None,
    }
    if write_preset:
        result["wrote_preset"] = store_in_preset(write_preset, "lv_threshold", recommended)
    write_atomically(json_path, orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    console.print(f"recommended lv_threshold: {recommended} tokens (smallest batch within "
                  f"{NEAR_BEST:.0%} of the best, {best:.0f} tokens/s); wrote {json_path}, {plot_path}"
                  + (f"; set in {result['wrote_preset']}" if result["wrote_preset"] else "")
                  + ("" if write_preset else f" (store it with --write {preset or 'PRESET'})"))
    if as_json:
        click.echo(orjson.dumps(result).decode())

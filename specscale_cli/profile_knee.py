"""`specscale profile-knee`: generator decode step time against batch rows, and the speculation budget."""

from __future__ import annotations

from pathlib import Path

import click
import orjson

from .bench_args import output_folder, store_in_preset
from .options import build_settings, generator_options, settle_threads


def _table(profile):
    from rich.table import Table

    table = Table(title="generator decode steps against batch rows")
    for name in ("rows", "step ms", "rows/s", "gain per doubling"):
        table.add_column(name, justify="right")
    points = profile.points
    for i, p in enumerate(points):
        gain = _gain(p, points[i + 1]) if i + 1 < len(points) else None
        table.add_row(f"{p.rows}{' *' if p.rows == profile.knee else ''}", f"{1000 * p.seconds:.1f}",
                      f"{p.rows_per_s:.0f}", "-" if gain is None else f"{100 * gain:+.0f}%")
    return table


def _gain(lo, hi) -> float:
    """rows/s gained from ``lo`` to ``hi`` per doubling of the rows (as ``core.engine.knee.find_knee`` reads it)."""
    import math

    return (hi.rows_per_s / lo.rows_per_s) ** (1 / math.log2(hi.rows / lo.rows)) - 1


def _plot(profile, path: Path, title: str) -> None:
    """Decode rows/s and step time against rows (log2 x axis), the knee marked."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.2))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    xs = [p.rows for p in profile.points]
    ax.plot(xs, [p.rows_per_s for p in profile.points], marker="o", label="decode tokens/s")
    ax.axvline(profile.knee, color="tab:red", linestyle=":", label=f"knee: {profile.knee} rows")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs], rotation=45)
    ax.set_xlabel("rows per decode step")
    ax.set_ylabel("tokens/s")
    ax.set_ylim(bottom=0)
    right = ax.twinx()
    right.plot(xs, [1000 * p.seconds for p in profile.points], color="grey", linestyle="--", marker=".",
               label="step time")
    right.set_ylabel("step ms")
    right.set_ylim(bottom=0)
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    lines = ax.get_legend_handles_labels()
    more = right.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


@click.command("profile-knee")
@click.option("--max-rows", type=click.IntRange(min=1), default=None,
              help="Largest batch measured (rows double from 1 up to it). Default: --max-num-seqs.")
@click.option("--context", type=click.IntRange(min=1), default=256, show_default=True,
              help="Tokens cached per row before the timed steps.")
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True,
              help="Timed decode steps per row count (after one warm-up step); the median counts.")
@click.option("--min-gain", type=click.FloatRange(min=0.0, max=1.0, min_open=True, max_open=True), default=0.25,
              show_default=True,
              help="The knee is the first batch whose doubling gains less than this share of tokens/s.")
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False), default="runs/profile-knee",
              show_default=True, help="Folder for knee.json and knee.png.")
@click.option("--write", "write_preset", default=None, metavar="PRESET",
              help="Store the knee as speculation_budget in this preset's [search] table (name or .toml path).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (last line of stdout).")
@generator_options
def profile_knee(max_rows, context, repeats, min_gain, out_dir, write_preset, as_json, **opts):
    """Measure the generator's decode step time at 1, 2, 4, ... rows and find the batch-size knee.

    The knee is where more rows stop being cheap: the first row count whose doubling raises decode
    tokens/s by less than --min-gain (25%). `solve` and `bench` with --speculation-budget auto (the
    default of naive-spec and specscale) let speculative children fill each step only up to it, after
    the work that is sure to be kept. Rows share one random prompt of --context tokens through the
    prefix cache; each count gets a warm-up step and --repeats timed steps on a separate small engine.
    The whole curve is measured and stored in the cache `solve` reads ($SPECSCALE_KNEE_CACHE, default
    $SPECSCALE_CACHE/knee), so the next run uses this measurement. Writes OUT/knee.json and OUT/knee.png.
    """
    from core.bench.knee_bench import profile_generator
    from core.cpu_load import torch_threads
    from core.io.durable import write_atomically
    from core.models.loader import ModelLoadError

    from .bench_report import report_console

    preset = opts.get("preset")
    settings, _, _ = build_settings(opts)
    out = output_folder(out_dir)
    console = report_console(stderr=as_json)
    console.print(f"loading {settings.generator}...")
    settle_threads(settings.threads, settings.device)
    try:
        profile, dtype, rows, cached_at = profile_generator(
            settings, max_rows, context, min_gain, repeats, on_point=lambda p: console.print(
                f"  {p.rows:>5} rows: {1000 * p.seconds:8.1f} ms per step, {p.rows_per_s:8.0f} tokens/s"))
    except (ModelLoadError, ValueError, RuntimeError) as exc:
        raise click.UsageError(str(exc)) from exc

    console.print(_table(profile))
    threads = torch_threads()
    title = f"{settings.generator} on {settings.device}, {dtype}, {threads} threads"
    plot_path, json_path = out / "knee.png", out / "knee.json"
    _plot(profile, plot_path, title)
    result = {"generator": settings.generator, "device": settings.device, "threads": threads, "context": context,
              "repeats": repeats, "max_rows": rows, **profile.to_dict(), "speculation_budget": profile.knee,
              "cache": str(cached_at), "plot": str(plot_path),
              "json": str(json_path), "wrote_preset": None}
    if write_preset:
        result["wrote_preset"] = store_in_preset(write_preset, "speculation_budget", profile.knee)
    write_atomically(json_path, orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    saturated = profile.knee < profile.points[-1].rows
    found = (f"knee: {profile.knee} rows per step (the first batch whose doubling gains less than {min_gain:.0%} "
             f"tokens/s)" if saturated else
             f"knee: none up to {profile.knee} rows (every doubling gained at least {min_gain:.0%} tokens/s), so the "
             f"budget is {profile.knee} rows")
    console.print(f"{found}; measured in {profile.seconds:.1f} s and cached for solve's --speculation-budget auto; "
                  f"wrote {json_path}, {plot_path}"
                  + (f"; set in {result['wrote_preset']}" if result["wrote_preset"] else ""))
    if as_json:
        click.echo(orjson.dumps(result).decode())

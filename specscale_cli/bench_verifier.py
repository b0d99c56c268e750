"""`specscale bench verifier`: how well each scorer separates correct steps from one-number slips
(core.bench.verifier_bench), as a table."""

from __future__ import annotations

from pathlib import Path

import click
import orjson

from .options import build_settings, prm_options, settle_threads

SAMPLE_GSM8K = Path(__file__).resolve().parent.parent / "examples" / "gsm8k_sample.jsonl"


def _table(results: dict):
    from rich.table import Table

    table = Table(title="Scorer quality: correct step vs the same step with one number changed")
    for name in ("scorer", "pairs", "AUROC", "pairwise acc.", "mean correct", "mean wrong", "seconds"):
        table.add_column(name, justify="right" if name != "scorer" else "left")
    for name, r in results.items():
        table.add_row(name, str(r["pairs"]), f"{r['auroc']:.3f}", f"{r['pairwise_accuracy']:.3f}",
                      f"{r['mean_correct']:.3f}", f"{r['mean_wrong']:.3f}", f"{r['seconds']:.1f}")
    return table


@click.command("verifier")
@click.option("--problems", "problems_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="JSONL with 'problem' and a reference 'solution' (GSM8K style, e.g. the GSM8K test set). "
                   "Default: examples/gsm8k_sample.jsonl (10 problems).")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True,
              help="Problems to take (in file order); each numbered solution step gives one pair.")
@click.option("--scorers", default="likelihood,lm-judge", show_default=True, help="Comma-separated scorers to compare.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the number changes.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (last line of stdout).")
@prm_options(with_scorer=False)
def bench_verifier(problems_file, limit, scorers, seed, as_json, **opts):
    """AUROC and pairwise accuracy of each scorer on correct/wrong step pairs from reference solutions.

    Each solution line with a number is a correct step; its wrong twin changes one number. Both are
    scored after the same correct prefix through the PRM's verifier, as the search scores steps.
    """
    from core.bench.verifier_bench import best_scorer, compare_scorers
    from core.models.loader import ModelLoadError, load_model
    from core.verify.quality import build_pairs
    from core.settings import SCORER_NAMES
    from core.verify.reference import read_solved_problems

    from .bench_report import report_console

    settings, search_cfg, _ = build_settings(opts)
    names = [s.strip() for s in scorers.split(",") if s.strip()]
    unknown = [s for s in names if s not in SCORER_NAMES]
    if not names or unknown:
        raise click.BadParameter(f"unknown scorer(s) {', '.join(unknown) or '(none given)'}; choose from "
                                 f"{', '.join(SCORER_NAMES)}", param_hint="--scorers")
    path = Path(problems_file) if problems_file else SAMPLE_GSM8K
    try:
        problems = read_solved_problems([path], limit)
    except (OSError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc
    pairs = build_pairs(problems, seed)
    if not pairs:
        raise click.UsageError(f"{path}: no solution step with a number in the first {limit} problems")

    console = report_console(stderr=as_json)
    console.print(f"{len(pairs)} pairs from {len(problems)} problems of {path}; loading {settings.prm}...")
    settle_threads(settings.threads, settings.device)

    def on_scorer(name, r):
        console.print(f"  {name}: AUROC {r['auroc']:.3f}, pairwise {r['pairwise_accuracy']:.3f} ({r['seconds']:.1f} s)")

    try:
        prm = load_model(settings.prm, settings.dtype, settings.device)
        results = compare_scorers(settings, prm, names, pairs, search_cfg, on_scorer)
    except (ModelLoadError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc
    console.print(_table(results))
    best = best_scorer(results)
    result = {"problems_file": str(path), "problems": len(problems), "pairs": len(pairs), "seed": seed,
              "prm": settings.prm, "step_delimiter": search_cfg.step_delimiter, "scorers": results,
              "best_scorer": best}
    if as_json:
        click.echo(orjson.dumps(result).decode())

"""Files of the `specscale bench search` and `bench strategies` reports: CSV tables and PNG plots.

The columns are shared with the tables the command line prints (``specscale_cli/bench_report.py``):
each entry says a column's title, the result field it shows and its format. Plots are drawn with
matplotlib's Agg backend (files only, no display).
"""

from __future__ import annotations

import csv
from pathlib import Path

# (column title, result key or dotted path, format)
COLUMNS = [
    ("policy", None, "{}"),
    ("wall s", "wall_s", "{:.1f}"),
    ("out tok/s", "throughput", "{:.1f}"),
    ("vs non-spec", "ratio_vs_nonspec", "{:.2f}x"),
    ("goodput tok/s", "goodput", "{:.1f}"),
    ("goodput vs non-spec", "goodput_ratio_vs_nonspec", "{:.2f}x"),
    ("gen s", "time_breakdown_s.generation", "{:.1f}"),
    ("verify s", "time_breakdown_s.verification", "{:.1f}"),
    ("other s", "time_breakdown_s.other", "{:.1f}"),
    ("mean paths", "mean_concurrent_candidates", "{:.1f}"),
    ("PRM calls", "prm_calls", "{}"),
    ("PRM batch tok", "mean_prm_batch_tokens", "{:.0f}"),
    ("step wait s", "mean_step_wait_s", "{:.2f}"),
    ("peak KV", "peak_kv_blocks", "{}"),
    ("acc", "accuracy", "{:.3f}"),
    ("acc Δ", "accuracy_delta_vs_nonspec", "{:+.3f}"),
]


def get_field(res: dict, key: str):
    """``res[a][b]`` for the dotted ``key`` ``"a.b"``; None where a part is missing."""
    value = res
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def write_csv(path: Path, results: dict, rates: list[str]) -> None:
    """One row per policy with every table column plus latency per rate (seconds, tokens)."""
    keys = [k for _, k, _ in COLUMNS if k]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["policy", *keys, "output_tokens", "answer_tokens", "prm_tasks", "pruned", "cancelled",
                    *[f"normalized_latency_s_per_token@{r}" for r in rates],
                    *[f"mean_latency_s@{r}" for r in rates]])
        for name, res in results.items():
            w.writerow([name, *[get_field(res, k) for k in keys], res["output_tokens"], res["answer_tokens"],
                        res["prm_tasks"], res["pruned"], res["cancelled"],
                        *[res["latency"][r]["normalized_latency_s_per_token"] for r in rates],
                        *[res["latency"][r]["mean_latency_s"] for r in rates]])


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_plots(out_dir: Path, results: dict, rates: list[str]) -> list[Path]:
    """PNG plots: throughput bars, time breakdown (stacked), normalized latency vs request rate.

    Returns:
        The paths written (the latency plot only when rates were run).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    written = []

    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(names)), 4))
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], [results[n]["throughput"] for n in names], 0.4, label="output tokens/s")
    ax.bar([i + 0.2 for i in x], [results[n]["goodput"] for n in names], 0.4, label="goodput (answer tokens/s)")
    ax.set_xticks(list(x), names, rotation=20, ha="right")
    ax.set_ylabel("tokens / s")
    ax.set_title("Throughput, all problems issued at once")
    ax.legend()
    written.append(_save(fig, out_dir / "throughput.png"))

    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(names)), 4))
    bottom = [0.0] * len(names)
    for part in ("generation", "verification", "other"):
        values = [results[n]["time_breakdown_s"][part] for n in names]
        ax.bar(names, values, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_ylabel("seconds")
    ax.set_title("Time breakdown")
    ax.tick_params(axis="x", rotation=20)
    ax.legend()
    written.append(_save(fig, out_dir / "time_breakdown.png"))

    if rates:
        fig, ax = plt.subplots(figsize=(6, 4))
        xs = [float(r) for r in rates]
        for n in names:
            ax.plot(xs, [1000 * results[n]["latency"][r]["normalized_latency_s_per_token"] for r in rates],
                    marker="o", label=n)
        ax.set_xlabel("request rate (problems / s)")
        ax.set_ylabel("normalized latency (ms / answer token)")
        ax.set_title("Latency under Poisson arrivals")
        ax.legend()
        written.append(_save(fig, out_dir / "latency.png"))
    return written


def write_study_csv(path: Path, study: dict, axis: str) -> Path:
    """One CSV row per (sweep value, policy) with every metric of the study."""
    keys = sorted({k for row in study.values() for res in row.values() for k in res})
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow([axis, "policy", *keys])
        for value, row in study.items():
            for name, res in row.items():
                w.writerow([value, name, *[res.get(k) for k in keys]])
    return path


def write_study_plot(path: Path, study: dict, axis: str, panels: list[tuple[str, str, float]]) -> Path:
    """One panel per ``(result key, y label, scale)``: the metric against the sweep value, a line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [int(v) for v in study]
    policies = list(next(iter(study.values())))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for ax, (key, label, scale) in zip(axes[0], panels):
        for name in policies:
            ax.plot(xs, [study[str(x)][name][key] * scale for x in xs], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_xlabel(axis)
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


STRATEGY_COLUMNS = [("strategy", "strategy", "{}"), ("N", "n", "{}"), ("M", "beam_width", "{}"),
                    ("accuracy", "accuracy", "{:.3f}"), ("acc best", "accuracy_best", "{:.3f}"),
                    ("acc weighted", "accuracy_weighted", "{:.3f}"), ("acc majority", "accuracy_majority", "{:.3f}"),
                    ("tokens", "generated_tokens", "{}"), ("tokens/problem", "tokens_per_problem", "{:.0f}"),
                    ("wall s", "wall_s", "{:.1f}"), ("subset of N", "subset_of", "{}")]


def write_strategies_csv(path: Path, rows: list[dict]) -> Path:
    """One CSV row per strategy run, the table's columns."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow([key for _, key, _ in STRATEGY_COLUMNS])
        for row in rows:
            w.writerow([row.get(key) for _, key, _ in STRATEGY_COLUMNS])
    return path


def write_strategies_plot(path: Path, rows: list[dict]) -> Path:
    """Accuracy against generated tokens per problem: a line per strategy through its N, greedy a point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        pts = [r for r in rows if r["strategy"] == strategy]
        ax.plot([r["tokens_per_problem"] for r in pts], [r["accuracy"] or 0.0 for r in pts], marker="o",
                label=strategy)
        for r in pts:
            ax.annotate(f"N={r['n']}", (r["tokens_per_problem"], r["accuracy"] or 0.0), fontsize=7,
                        xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("generated tokens per problem")
    ax.set_ylabel("accuracy")
    ax.set_title("Accuracy against test-time compute")
    ax.legend()
    return _save(fig, path)

"""`specscale solve`: run PRM-guided beam search on every problem of a JSONL file."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import click

from .options import model_and_search_options, build_settings
from .progress import ProgressDisplay

EXIT_OK, EXIT_SOME_ERRORS, EXIT_WRITE_FAILED = 0, 1, 3


def _count_lines(path: str) -> int | None:
    if path == "-":
        return None
    try:
        with open(path, "rb") as fh:
            return sum(1 for line in fh if line.strip())
    except OSError:
        return None


@click.command()
@click.argument("problems", type=str)
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Output folder (answers.jsonl, traces/). Default: runs/<input file name>.")
@click.option("--max-concurrent", type=click.IntRange(min=1), default=32, show_default=True,
              help="Problems searched at once.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N problems.")
@click.option("--traces/--no-traces", default=True, show_default=True, help="Write traces/<id>.json per problem.")
@click.option("--no-progress", is_flag=True, help="Plain log lines instead of the live progress display.")
@click.option("--overwrite", is_flag=True, help="Replace the answers and traces of an earlier run in OUT.")
@model_and_search_options
def solve(problems, out_dir, max_concurrent, limit, traces, no_progress, overwrite, **opts):
    """Solve every problem in PROBLEMS (JSONL with id/problem/answer fields; '-' reads stdin).

    Writes OUT/answers.jsonl (one record per problem, as soon as it finishes) and
    OUT/traces/<id>.json (the whole search tree). Exit code 0 when every problem got an answer
    record, 1 when some became error records, 2 for usage errors, 3 when OUT cannot be written
    during the run (disk full).
    """
    from core.grading.equivalence import answers_equivalent
    from core.io.problems import read_problems
    from core.io.writers import AnswerWriter, write_trace
    from core.models.loader import ModelLoadError
    from core.search.driver import SearchDriver
    from core.solver import build_runtime

    settings, search_cfg, policy = build_settings(opts)
    if problems != "-" and Path(problems).is_dir():
        raise click.BadParameter(f"{problems} is a directory, not a JSONL file", param_hint="PROBLEMS")
    if problems != "-" and not Path(problems).is_file():
        raise click.BadParameter(f"no such file: {problems}", param_hint="PROBLEMS")
    out = Path(out_dir) if out_dir else Path("runs") / (Path(problems).stem if problems != "-" else "stdin")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise click.UsageError(f"output folder {out} is not writable: {exc}") from exc
    answers_path = out / "answers.jsonl"
    if answers_path.is_file() and answers_path.stat().st_size:
        if not overwrite:
            raise click.UsageError(f"{answers_path} already holds answers of an earlier run; choose another -o "
                                   f"or pass --overwrite to replace them")
        answers_path.unlink()
        shutil.rmtree(out / "traces", ignore_errors=True)

    click.echo(f"loading {settings.generator} (generator) and {settings.prm} ({settings.scorer} scorer)...", err=True)
    try:
        runtime = build_runtime(settings)
    except (ModelLoadError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc

    total = _count_lines(problems)
    if limit is not None and total is not None:
        total = min(total, limit)
    source = "<stdin>" if problems == "-" else problems
    stream = read_problems(problems)
    if limit is not None:
        stream = (p for i, p in zip(range(limit), stream))

    tokenizer = runtime.generator.tokenizer
    counts = {"done": 0, "errors": 0, "correct": 0, "graded": 0}
    started = time.perf_counter()
    problem_started: dict[str, float] = {}

    with AnswerWriter(out) as writer, ProgressDisplay(total, enabled=not no_progress, stream=sys.stderr) as progress:

        def on_result(problem, result, search):
            gold = problem.answer
            record = {"id": problem.id, "gold": gold, "pred": result["pred"]}
            if gold is not None:
                record["correct"] = answers_equivalent(result["pred"], gold)
                record["vote_correct"] = answers_equivalent(result["vote_pred"], gold)
                counts["graded"] += 1
                counts["correct"] += int(record["correct"])
            record.update(result)
            record["policy"] = search.policy
            record["time_s"] = round(time.perf_counter() - search.tree.t0, 3)
            writer.write(record)
            counts["done"] += 1
            if traces:
                trace = search.tree.to_dict()
                trace["policy"] = search.policy
                write_trace(out, problem.id, trace)
            progress.advance(counts)

        def on_error(err):
            writer.write({"id": err.id, "line": err.line, "error": {"field": err.field, "message": err.message,
                                                                    "where": err.describe()}})
            click.echo(f"error: {err.describe()}", err=True)
            counts["errors"] += 1
            progress.advance(counts)

        driver = SearchDriver(runtime.engine, tokenizer, runtime.generator.eos_token_ids, runtime.verifier,
                              runtime.scorer, search_cfg, policy=policy, max_concurrent=max_concurrent,
                              on_result=on_result, on_error=on_error, source=source,
                              on_iteration=lambda stats: progress.update(stats, runtime))
        try:
            stats = driver.run(stream)
        except OSError as exc:
            # the disk filled up (or OUT vanished): what was written so far is complete and kept
            click.echo(f"error: cannot write to {out}: {exc.strerror or exc}; {counts['done']} answers and "
                       f"{counts['errors']} error records were written before this", err=True)
            sys.exit(EXIT_WRITE_FAILED)

    elapsed = time.perf_counter() - started
    tps = stats.generated_tokens / elapsed if elapsed > 0 else 0.0
    acc = f"{counts['correct']}/{counts['graded']}" if counts["graded"] else "n/a"
    click.echo(
        f"done: {counts['done']} answered, {counts['errors']} errors, accuracy {acc}, "
        f"{stats.generated_tokens} tokens in {elapsed:.1f}s ({tps:.1f} tok/s), "
        f"{runtime.verifier.stats.flushes} PRM calls "
        f"({', '.join(f'{k} {v}' for k, v in sorted(runtime.verifier.stats.by_trigger.items())) or 'none'}) "
        f"-> {out / 'answers.jsonl'}", err=True)
    sys.exit(EXIT_SOME_ERRORS if counts["errors"] else EXIT_OK)

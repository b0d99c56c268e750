"""`specscale solve`: run PRM-guided beam search on every problem of a JSONL file or dataset."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from .options import model_and_search_options, build_settings
from .dashboard import Dashboard, summary_table
from .inputs import input_options, open_input
from .run_dir import prepare_output, rerun_command, run_config

# 130 = 128 + SIGINT, what shells report for a command stopped by Ctrl-C
EXIT_OK, EXIT_SOME_ERRORS, EXIT_WRITE_FAILED, EXIT_INTERRUPTED = 0, 1, 3, 130


@click.command()
@click.argument("problems", type=str, required=False)
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Output folder (answers.jsonl, traces/, run.json). Default: runs/<input name>.")
@click.option("--max-concurrent", type=click.IntRange(min=1), default=32, show_default=True,
              help="Problems searched at once.")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="Only the first N problems (with --dataset --shuffle: N rows drawn at random).")
@click.option("--traces/--no-traces", default=True, show_default=True, help="Write traces/<id>.json per problem.")
@click.option("--no-dashboard", is_flag=True, help="Plain log lines every 10 s instead of the live dashboard.")
@click.option("--no-progress", is_flag=True, hidden=True, help="Old name of --no-dashboard.")
@click.option("--overwrite", is_flag=True, help="Replace the answers and traces of an earlier run in OUT.")
@click.option("--resume", is_flag=True,
              help="Go on with the run in OUT: solve only the problems without a record in OUT/answers.jsonl "
                   "(the settings must match OUT/run.json).")
@click.option("--force", is_flag=True, help="With --resume: resume even when the settings differ from OUT/run.json.")
@input_options
@model_and_search_options
def solve(problems, out_dir, max_concurrent, limit, traces, no_dashboard, no_progress, overwrite, resume, force,
          dataset, dataset_config, split, shuffle, problem_field, answer_field, id_field, **opts):
    """Solve every problem in PROBLEMS (JSONL with id/problem/answer fields; '-' reads stdin) or --dataset.

    Writes OUT/answers.jsonl (one record per problem, as soon as it finishes) and
    OUT/traces/<id>.json (the whole search tree); at the end OUT/summary.json (run totals and the
    config used). A live dashboard shows progress on a terminal. Exit code 0 when every problem got an answer
    record, 1 when some became error records, 2 for usage errors, 3 when OUT cannot be written
    during the run (disk full), 130 when stopped by Ctrl-C (rerun with --resume to go on).
    """
    from core.grading.equivalence import answers_equivalent
    from core.io.resume import SkipCounts, skip_done, write_run_config
    from core.io.writers import AnswerWriter, write_summary, write_trace
    from core.metrics import final_summary, snapshot
    from core.models.loader import ModelLoadError
    from core.search.driver import SearchDriver
    from core.solver import build_runtime

    settings, search_cfg, policy = build_settings(opts)
    problem_input = open_input(problems, dataset, dataset_config, split, shuffle, search_cfg.seed, limit,
                               problem_field, answer_field, id_field)
    source = problem_input.source
    out = Path(out_dir) if out_dir else Path("runs") / problem_input.label
    ctx = click.get_current_context()
    run_cfg = run_config(settings, search_cfg, policy, problem_input.config,
                         {"problems": source, "limit": limit, "max_concurrent": max_concurrent, "traces": traces,
                          "command": rerun_command(ctx, out, extra=())})
    done = prepare_output(out, overwrite, resume, force, run_cfg)
    if done.truncated_bytes:
        click.echo(f"resume: cut a torn last line ({done.truncated_bytes} bytes) off {out / 'answers.jsonl'}; "
                   f"its problem is solved again", err=True)
    if done.unreadable:
        click.echo(f"resume: ignored unreadable lines {', '.join(map(str, done.unreadable))} of "
                   f"{out / 'answers.jsonl'}", err=True)

    total = problem_input.total
    if len(done) and total is not None:
        # the input is read once more to count what is left (cheap next to the search)
        kept = SkipCounts()
        total = sum(1 for _ in skip_done(problem_input.open(), done, kept))
        if total == 0:
            click.echo(f"resume: every problem of {source} already has a record in {out / 'answers.jsonl'} "
                       f"({kept.answers} answers, {kept.errors} error records); nothing to do", err=True)
            sys.exit(EXIT_SOME_ERRORS if kept.errors else EXIT_OK)

    click.echo(f"loading {settings.generator} (generator) and {settings.prm} ({settings.scorer} scorer)...", err=True)
    try:
        runtime = build_runtime(settings)
    except (ModelLoadError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc
    except KeyboardInterrupt:
        click.echo("interrupted while loading models; nothing was solved", err=True)
        sys.exit(EXIT_INTERRUPTED)
    try:
        # written once the models load, so a run that never started leaves no settings to compare
        write_run_config(out, run_cfg)
    except OSError as exc:
        raise click.UsageError(f"cannot write {out / 'run.json'}: {exc.strerror or exc}") from exc

    skipped = SkipCounts()
    stream = skip_done(problem_input.open(), done, skipped) if len(done) else problem_input.open()

    tokenizer = runtime.generator.tokenizer
    counts = {"done": 0, "errors": 0, "correct": 0, "graded": 0}
    problem_started: dict[str, float] = {}

    dashboard = Dashboard(total, enabled=not (no_dashboard or no_progress), stream=sys.stderr,
                          title=f"specscale solve · {source} · {policy}")
    with AnswerWriter(out) as writer, dashboard as progress:

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
            if traces:
                trace = search.tree.to_dict()
                trace["policy"] = search.policy
                write_trace(out, problem.id, trace)
            # the answer line comes last: once it is on disk the problem is done, trace included
            # (--resume skips it); a run stopped before it leaves a trace that the rerun replaces
            writer.write(record)
            counts["done"] += 1
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
        interrupted = False
        try:
            stats = driver.run(stream)
        except KeyboardInterrupt:
            # Ctrl-C: admit nothing more; problems in flight are dropped (their records were never
            # started), every record already written is whole; the writer closes on leaving `with`
            interrupted = True
        except OSError as exc:
            # the disk filled up (or OUT vanished): what was written so far is complete and kept
            click.echo(f"error: cannot write to {out}: {exc.strerror or exc}; {counts['done']} answers and "
                       f"{counts['errors']} error records were written before this", err=True)
            sys.exit(EXIT_WRITE_FAILED)

    if interrupted:
        hint = rerun_command(ctx, out)
        if source == "<stdin>":
            hint += "   (with the same input on stdin)"
        click.echo(f"interrupted: {counts['done']} answers and {counts['errors']} error records of this run are in "
                   f"{out / 'answers.jsonl'}; problems still in flight were not written. "
                   f"To go on: {hint}", err=True)
        sys.exit(EXIT_INTERRUPTED)
    if len(done):
        click.echo(f"resume: {skipped.answers} answers and {skipped.errors} error records were already in "
                   f"{out / 'answers.jsonl'} and were kept", err=True)

    # the config part is run.json's content: the settings that decided the answers, as used
    summary = final_summary(snapshot(stats, runtime.engine, runtime.verifier, counts, total), run_cfg)
    progress.console.print(summary_table(summary))
    try:
        write_summary(out, summary)
    except OSError as exc:
        click.echo(f"error: cannot write {out / 'summary.json'}: {exc.strerror or exc}", err=True)
        sys.exit(EXIT_WRITE_FAILED)
    click.echo(f"answers -> {out / 'answers.jsonl'}, summary -> {out / 'summary.json'}", err=True)
    sys.exit(EXIT_SOME_ERRORS if counts["errors"] or skipped.errors else EXIT_OK)

"""`specscale solve`: run PRM-guided beam search on every problem of a JSONL file or dataset.

The order of work is what makes mistakes cheap: flags, preset, models named, the input's first
records and the output folder are all checked before torch is imported or a model loads, so a
usage error answers in well under a second (exit 2). Then the models load, ``run.json`` is
written and the search runs; every answer record is on disk as soon as its problem finishes.
A run ends in one of these ways, each with ``summary.json`` written for what was done:

- 0 every problem got an answer record; 1 some became error records;
- 3 the output folder could not be written (disk full, I/O error): what was written is complete;
- 130 / 143 Ctrl-C / SIGTERM: no more problems admitted, problems in flight dropped;
- 4 (``--workers`` > 1) every replica was lost (its process killed, its node gone).
Exit 3, 4, 130 and 143 print the command that resumes the run.

With ``--workers K`` > 1 the search runs on K replicas, Ray actors (core/distributed); this process
still alone reads the input and writes OUT, so all of the above holds unchanged.
"""

from __future__ import annotations

import os
import signal
import sys
from contextlib import ExitStack
from pathlib import Path

import click

from .dashboard import Dashboard, summary_table
from .inputs import input_options, open_input
from .options import build_settings, model_and_search_options, settle_threads
from .run_dir import rerun_command, run_config
from .signals import Interrupted, StopSignals

EXIT_OK, EXIT_SOME_ERRORS, EXIT_USAGE, EXIT_WRITE_FAILED, EXIT_REPLICAS_LOST = 0, 1, 2, 3, 4


@click.command()
@click.argument("problems", type=str, required=False)
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Output folder (answers.jsonl, traces/, run.json, summary.json). Default: runs/<input name>.")
@click.option("--max-concurrent", type=click.IntRange(min=1), default=32, show_default=True,
              help="Problems searched at once.")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="Only the first N problems (with --dataset --shuffle: N rows drawn at random).")
@click.option("--traces/--no-traces", default=True, show_default=True, help="Write traces/<id>.json per problem.")
@click.option("--no-dashboard", is_flag=True, help="Plain log lines every 10 s instead of the live dashboard.")
@click.option("--no-progress", is_flag=True, hidden=True, help="Old name of --no-dashboard.")
@click.option("--overwrite", is_flag=True, help="Replace the answers, traces and summary of an earlier run in OUT "
              "(a note says what was removed; files of your own in OUT/traces stay).")
@click.option("--resume", is_flag=True,
              help="Go on with the run in OUT: solve only the problems without a record in OUT/answers.jsonl "
                   "(the settings must match OUT/run.json).")
@click.option("--force", is_flag=True,
              help="With --resume: resume even when OUT/run.json is unreadable or records other settings "
                   "(run.json is rewritten from this run's settings).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Engine replicas, each a Ray actor with its own models (needs specscale[ray]): one GPU each "
                   "with --device cuda, else a share of the CPU cores. 1 runs in this process.")
@click.option("--ray-address", default=None, metavar="ADDR",
              help="With --workers > 1: join the Ray cluster at ADDR ('auto', host:port, ray://...) instead of "
                   "starting one on this machine.")
@input_options
@model_and_search_options
def solve(problems, out_dir, max_concurrent, limit, traces, no_dashboard, no_progress, overwrite, resume, force,
          workers, ray_address, dataset, dataset_config, split, shuffle, problem_field, answer_field, id_field,
          **opts):
    """Solve every problem in PROBLEMS (JSONL with id/problem/answer fields; '-' reads stdin) or --dataset.

    Writes OUT/answers.jsonl (one record per problem, as soon as it finishes) and
    OUT/traces/<id>.json (the whole search tree); at the end OUT/summary.json (run totals and the
    config used). A live dashboard shows progress on a terminal. Exit code 0 when every problem got
    an answer record, 1 when some became error records, 2 for usage errors, 3 when OUT cannot be
    written during the run (disk full), 4 when every replica of a --workers run was lost, 130/143
    when stopped by Ctrl-C/SIGTERM (rerun with --resume to go on).
    """
    from core.io.output_folder import (OutputFolderError, prepare_output, refuse_earlier_answers,
                                       refuse_other_settings)
    from core.models.specs import ModelSpecError, check_model_spec

    settings, search_cfg, policy = build_settings(opts)
    _check_workers(workers, ray_address)
    if out_dir:  # before the input is read: a table input loads `datasets`, which takes a second
        try:
            refuse_earlier_answers(Path(out_dir), overwrite, resume)
            refuse_other_settings(Path(out_dir), run_config(settings, search_cfg, policy, {}, {}), resume, force)
        except OutputFolderError as exc:
            raise click.UsageError(str(exc)) from exc
    problem_input = open_input(problems, dataset, dataset_config, split, shuffle, search_cfg.seed, limit,
                               problem_field, answer_field, id_field)
    try:
        check_model_spec(settings.generator, "--generator")
        if settings.prm != settings.generator:
            check_model_spec(settings.prm, "--prm")
    except ModelSpecError as exc:
        raise click.UsageError(str(exc)) from exc
    out = Path(out_dir) if out_dir else Path("runs") / problem_input.label
    ctx = click.get_current_context()
    command = rerun_command(ctx, out, extra=())
    run_cfg = run_config(settings, search_cfg, policy, problem_input.config,
                         {"problems": problem_input.source, "limit": limit, "max_concurrent": max_concurrent,
                          "traces": traces, "workers": workers, "ray_address": ray_address, "command": command})
    try:
        prepared = prepare_output(out, run_cfg, overwrite=overwrite, resume=resume, force=force, traces=traces,
                                  command=command)
    except OutputFolderError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        # cleanup: a --workers run's Ray session and replicas, stopped before the lock is let go
        with StopSignals() as signals, ExitStack() as cleanup:
            code = _run(ctx, prepared, problem_input, settings, search_cfg, policy, run_cfg, max_concurrent, traces,
                        not (no_dashboard or no_progress), signals, workers, ray_address, cleanup)
    finally:
        prepared.close()
    sys.exit(code)


def _check_workers(workers: int, ray_address: str | None) -> None:
    """Usage errors of --workers/--ray-address, found without importing Ray."""
    from core.distributed import RAY_INSTALL_HINT, ray_missing

    if ray_address is not None and workers == 1:
        raise click.UsageError("--ray-address needs --workers 2 or more (--workers 1 runs in this process)")
    if workers > 1 and ray_missing():
        raise click.UsageError(f"--workers {workers} runs replicas on Ray, which is not installed: {RAY_INSTALL_HINT}")


def _run(ctx, prepared, problem_input, settings, search_cfg, policy, run_cfg, max_concurrent, traces, dashboard_on,
         signals, workers=1, ray_address=None, cleanup=None) -> int:
    """Everything after the checks: load, write run.json, search, summarise. Returns the exit code."""
    from core.distributed import ReplicasLost
    from core.io.durable import OutputWriteError
    from core.io.output_folder import OutputFolderError, check_used_context
    from core.io.resume import RUN_FILENAME, SkipCounts, skip_done, write_run_config
    from core.io.writers import ANSWERS_FILENAME, SUMMARY_FILENAME
    from core.search.config import PICK_FIELDS

    out, done = prepared.out, prepared.done
    answers_path = out / ANSWERS_FILENAME
    for note in prepared.notes:
        click.echo(f"note: {note}", err=True)
    _report_repairs(done, answers_path)
    source = problem_input.source
    total = problem_input.total
    if len(done):
        left = None
        if total is not None:
            # the input is read once more to count what is left (cheap next to the search)
            left = sum(1 for _ in skip_done(problem_input.open(), done, SkipCounts()))
        click.echo(f"resume: keeping the {_n(done.answers, 'answer')} and {_n(done.errors, 'error record')} already "
                   f"in {answers_path}; "
                   + (f"{_n(left, 'problem')} of {total} left to solve" if left is not None else
                      "solving the problems of the input that have none"), err=True)
        if left == 0:
            click.echo(f"resume: nothing to do: every problem of {source} has a record", err=True)
            return EXIT_SOME_ERRORS if done.errors else EXIT_OK

    runtime = pool = governor = None
    try:
        # replicas of a --workers run split the cores between them (core.distributed.pool); torch
        # is imported here, so a Ctrl-C during its import is a stop while loading too
        governor = settle_threads(settings.threads, settings.device) if workers == 1 else None
        click.echo(f"loading {settings.generator} (generator) and {settings.prm} ({settings.scorer} scorer)"
                   + (f" in {workers} replicas" if workers > 1 else "") + "...", err=True)
        if workers > 1:
            pool = _start_pool(settings, search_cfg, policy, workers, ray_address, max_concurrent, traces, source,
                               cleanup)
            first = pool.infos[pool.live[0]]
            max_len, prm_max_len = first["max_model_len"], first["prm_max_model_len"]
        else:
            runtime = _load(settings)
            max_len, prm_max_len = runtime.engine.max_model_len, runtime.verifier.engine.max_model_len
        signals.check()  # a stop that a library's finalizer swallowed while loading
    except click.UsageError:
        prepared.discard()  # a run that never started leaves no empty folder behind
        raise
    except Interrupted as stop:
        prepared.discard()
        click.echo(f"{stop.name} while loading models; nothing was solved", err=True)
        return stop.exit_code
    except ReplicasLost as exc:
        prepared.discard()
        click.echo(f"error: {exc}; nothing was solved", err=True)
        return EXIT_REPLICAS_LOST
    try:
        check_used_context(prepared, max_len)
    except OutputFolderError as exc:
        if pool is not None:
            pool.close()
        raise click.UsageError(str(exc)) from exc
    run_cfg["models"]["max_model_len"] = max_len
    run_cfg["info"]["prm_max_model_len"] = prm_max_len
    try:
        # written once the models load, so a run that never started leaves no settings to compare
        write_run_config(out, run_cfg)
    except OutputWriteError as exc:
        click.echo(f"error: {exc}; nothing was solved", err=True)
        return EXIT_WRITE_FAILED

    skipped = SkipCounts()
    stream = skip_done(problem_input.open(), done, skipped) if len(done) else problem_input.open()
    # the whole run's figures: records an earlier run wrote and this one kept count too
    counts = {"done": done.answers, "errors": done.errors, "correct": done.correct, "graded": done.graded,
              **{f"correct_{rule}": done.correct_by.get(rule, 0) for rule in PICK_FIELDS}, **done.at_n}
    here = {"done": 0, "errors": 0}
    dashboard = Dashboard(total, counts=counts, enabled=dashboard_on, stream=sys.stderr,
                          title=f"specscale solve · {source} · {policy}")
    stopped: Interrupted | None = None
    write_error: OutputWriteError | None = None
    lost: Exception | None = None
    with dashboard as progress:
        try:
            _search(runtime, pool, search_cfg, policy, max_concurrent, traces, out, source, stream, counts, here,
                    progress, signals, governor)
        except Interrupted as stop:
            stopped = stop
        except OutputWriteError as exc:
            write_error = exc
        except ReplicasLost as exc:
            lost = exc
    # the config part is run.json's content: the settings that decided the answers, as used
    summary = dashboard.final_summary(run_cfg)
    if summary is not None:
        # problem counts and accuracy are the whole run's; time, tokens, PRM and engine figures
        # are this process's: say how the records split between the two
        summary["session"] = {"answers": here["done"], "errors": here["errors"], "kept_answers": done.answers,
                              "kept_errors": done.errors}
    if summary is not None and write_error is None:
        dashboard.console.print(summary_table(summary))

    if summary is not None:
        try:
            from core.io.writers import write_summary

            with signals.critical():
                write_summary(out, summary)
        except OutputWriteError as exc:
            write_error = write_error or exc
        except Interrupted:
            pass  # a second signal while the summary was written: the answers are complete anyway
    written = f"{_n(here['done'], 'answer')} and {_n(here['errors'], 'error record')} of this run are in {answers_path}"
    if write_error is not None:
        click.echo(f"error: {write_error}; {written} and complete. Free space in {out}, then go on with: "
                   f"{rerun_command(ctx, out)}", err=True)
        return EXIT_WRITE_FAILED
    if lost is not None:
        click.echo(f"error: {lost}; {written}; summary -> {out / SUMMARY_FILENAME}. To go on: "
                   f"{rerun_command(ctx, out)}", err=True)
        return EXIT_REPLICAS_LOST
    if stopped is not None:
        hint = rerun_command(ctx, out)
        if source == "<stdin>":
            hint += "   (with the same input on stdin)"
        click.echo(f"{'interrupted' if stopped.signum == signal.SIGINT else 'stopped by ' + stopped.name}: {written}; problems "
                   f"still in flight were not written; summary -> {out / SUMMARY_FILENAME}. To go on: {hint}",
                   err=True)
        return stopped.exit_code
    click.echo(f"answers -> {answers_path}, summary -> {out / SUMMARY_FILENAME}, settings -> {out / RUN_FILENAME}",
               err=True)
    return EXIT_SOME_ERRORS if counts["errors"] else EXIT_OK


def _load(settings):
    """Import the engine and load the models; a model that cannot be loaded is a usage error."""
    from core.models.loader import ModelLoadError
    from core.solver import build_runtime

    try:
        return build_runtime(settings)
    except (ModelLoadError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc


def _start_pool(settings, search_cfg, policy, workers, ray_address, max_concurrent, traces, source, cleanup):
    """Connect to Ray and start ``workers`` replicas (their stop is registered on ``cleanup``);
    a model that cannot be loaded, too few GPUs or an unreachable cluster is a usage error."""
    from core.distributed.pool import RaySession, ReplicaPool

    try:
        session = cleanup.enter_context(RaySession(ray_address, settings.device))
    except Interrupted:
        raise
    except Exception as exc:  # noqa: BLE001 - Ray raises several kinds for a cluster it cannot reach
        where = f"the Ray cluster at {ray_address}" if ray_address else "a local Ray cluster"
        # Ray sends its token only where RAY_AUTH_MODE=token asks it to (never by default to an address)
        hint = ("; a cluster with token authentication needs RAY_AUTH_MODE=token and its token (RAY_AUTH_TOKEN or "
                "~/.ray/auth_token)" if ray_address and "RAY_AUTH_MODE" not in os.environ else "")
        raise click.UsageError(f"cannot start or join {where}: {str(exc).strip().splitlines()[0]}{hint}") from exc
    pool = ReplicaPool(session, settings, search_cfg, policy, workers, max_concurrent, traces=traces, source=source,
                       log=lambda line: click.echo(f"note: {line}", err=True))
    cleanup.callback(pool.close)
    try:
        infos = pool.start()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    ready = ", ".join(f"replica {i['replica']} pid {i['pid']} on {i['node']} ({i['device']}"
                      + (f", {i['threads']} thread{'s' if i['threads'] != 1 else ''}" if i.get("threads") else "")
                      + ")" for i in infos if i["status"] == "running")
    click.echo(f"{len(pool.live)} replicas ready: {ready}", err=True)
    return pool


def _search(runtime, pool, search_cfg, policy, max_concurrent, traces, out, source, stream, counts, here, progress,
            signals, governor=None):
    """Search ``stream`` in this process (``runtime``) or on the replicas of ``pool``, writing each
    record as its problem finishes."""
    from core.io.writers import AnswerWriter, write_trace
    from core.search.records import answer_record, count_record, error_record, problem_trace

    with AnswerWriter(out) as writer:

        def write_answer(record, trace):
            # one problem's files are written whole: a stop signal waits for the end of this block
            with signals.critical():
                if trace is not None:
                    write_trace(out, record["id"], trace)
                # the answer line comes last: once it is on disk the problem is done, trace included
                # (--resume skips it); a run stopped before it leaves a trace that the rerun replaces
                writer.write(record)
                count_record(counts, record)
                here["done"] += 1
                # inside the block: a stop held until its end must find the summary's counts updated
                progress.advance(counts)

        def write_error(record):
            with signals.critical():
                writer.write(record)
                counts["errors"] += 1
                here["errors"] += 1
                progress.advance(counts)
            click.echo(f"error: {record['error']['where']}", err=True)

        if pool is not None:
            progress.attach_pool(pool)
            def poll():
                signals.check()
                progress.poll()

            pool.run(stream, write_answer, write_error, on_poll=poll)
            return None

        def on_result(problem, result, search):
            write_answer(answer_record(problem, result, search), problem_trace(search) if traces else None)

        from core.search.driver import SearchDriver

        driver = SearchDriver(runtime.engine, runtime.generator.tokenizer, runtime.generator.eos_token_ids,
                              runtime.verifier, runtime.scorer, search_cfg, policy=policy,
                              max_concurrent=max_concurrent, on_result=on_result,
                              on_error=lambda err: write_error(error_record(err)), source=source,
                              on_iteration=lambda stats: _iteration(stats, runtime, progress, governor, signals))
        progress.attach(driver.stats, runtime)
        return driver.run(stream)


def _iteration(stats, runtime, progress, governor, signals) -> None:
    """After every driver iteration (main thread): a stop lost inside a library is raised again, the
    thread count follows the load, the dashboard takes its snapshot."""
    signals.check()
    if governor is not None:
        note = governor.tick()
        if note:
            progress.note(note)
        progress.threads = governor.threads
    progress.update(stats, runtime)


def _report_repairs(done, answers_path: Path) -> None:
    if done.truncated_bytes:
        click.echo(f"resume: cut a torn last line ({done.truncated_bytes} bytes) off {answers_path}; its problem is "
                   f"solved again", err=True)
    if done.unreadable:
        where = f"; they are kept in {done.removed_to}" if done.removed_to else ""
        click.echo(f"resume: removed unreadable lines {', '.join(map(str, done.unreadable))} (torn fragments of an "
                   f"interrupted write) from {answers_path}{where}", err=True)


def _n(count: int, word: str) -> str:
    """``1 answer``, ``2 answers``."""
    return f"{count} {word}{'' if count == 1 else 's'}"

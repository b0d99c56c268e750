"""`specscale solve`: run PRM-guided beam search on every problem of a JSONL file or dataset.

The order of work is what makes mistakes cheap: flags, preset, models named, the input's first
records and the output folder are all checked before torch is imported or a model loads, so a
usage error answers in well under a second (exit 2); what they decide is one
:class:`~specscale_cli.run_plan.RunPlan`, which the rest of the run reads. Then the models load,
``run.json`` is written and the search runs; every answer record is on disk as soon as its problem finishes.
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
from dataclasses import dataclass
from pathlib import Path

import click

from .dashboard import Dashboard, summary_table
from .inputs import input_options
from .options import model_and_search_options, settle_threads
from .run_plan import RunPlan, plan_run
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
def solve(**flags):
    """Solve every problem in PROBLEMS (JSONL with id/problem/answer fields; '-' reads stdin) or --dataset.

    Writes OUT/answers.jsonl (one record per problem, as soon as it finishes) and
    OUT/traces/<id>.json (the whole search tree); at the end OUT/summary.json (run totals and the
    config used). A live dashboard shows progress on a terminal. Exit code 0 when every problem got
    an answer record, 1 when some became error records, 2 for usage errors, 3 when OUT cannot be
    written during the run (disk full), 4 when every replica of a --workers run was lost, 130/143
    when stopped by Ctrl-C/SIGTERM (rerun with --resume to go on).
    """
    from core.io.output_folder import OutputFolderError, prepare_output

    plan = plan_run(click.get_current_context(), flags)
    try:
        prepared = prepare_output(plan.out, plan.run_config, plan.folder, traces=plan.traces, command=plan.command)
    except OutputFolderError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        # cleanup: a --workers run's Ray session and replicas, stopped before the lock is let go
        with StopSignals() as signals, ExitStack() as cleanup:
            code = _run(plan, prepared, signals, cleanup)
    finally:
        prepared.close()
    sys.exit(code)


@dataclass
class _Engines:
    """What a run searches with once its models are loaded: this process's ``runtime``
    (:class:`core.solver.Runtime`, with the CPU thread ``governor``, None off the CPU) or the
    replicas' ``pool`` (:class:`core.distributed.pool.ReplicaPool`), and the context limits in
    tokens that the generator and PRM engines use."""

    runtime: object | None
    pool: object | None
    governor: object | None
    max_len: int
    prm_max_len: int


@dataclass
class _Tally:
    """Record counts of a run: ``counts`` for the whole run (records an earlier run wrote and this
    one kept included: the dashboard's and summary's figures), ``done`` and ``errors`` for the
    answer and error records this process wrote."""

    counts: dict
    done: int = 0
    errors: int = 0

    @classmethod
    def kept(cls, done) -> _Tally:
        """A tally that starts from the records of ``done`` (:class:`core.io.resume.DoneRecords`)."""
        from core.search.config import PICK_FIELDS

        return cls({"done": done.answers, "errors": done.errors, "correct": done.correct, "graded": done.graded,
                    **{f"correct_{rule}": done.correct_by.get(rule, 0) for rule in PICK_FIELDS}, **done.at_n})


def _run(plan: RunPlan, prepared, signals: StopSignals, cleanup: ExitStack) -> int:
    """Everything after the checks: load, write run.json, search, summarise. Returns the exit code."""
    from core.distributed import ReplicasLost
    from core.io.durable import OutputWriteError
    from core.io.output_folder import OutputFolderError, check_used_context
    from core.io.resume import RUN_FILENAME, SkipCounts, skip_done, write_run_config
    from core.io.writers import ANSWERS_FILENAME, SUMMARY_FILENAME

    out, done = plan.out, prepared.done
    answers_path = out / ANSWERS_FILENAME
    for note in prepared.notes:
        click.echo(f"note: {note}", err=True)
    _report_repairs(done, answers_path)
    source = plan.input.source
    if len(done):
        left = None
        if plan.input.total is not None:
            # the input is read once more to count what is left (cheap next to the search)
            skipped = SkipCounts()
            left = sum(1 for _ in skip_done(plan.input.open(), done, skipped))
            _report_changed(skipped, source)
        click.echo(f"resume: keeping the {_n(done.answers, 'answer')} and {_n(done.errors, 'error record')} already "
                   f"in {answers_path}; "
                   + (f"{_n(left, 'problem')} of {plan.input.total} left to solve" if left is not None else
                      "solving the problems of the input that have none"), err=True)
        if left == 0:
            click.echo(f"resume: nothing to do: every problem of {source} has a record", err=True)
            return EXIT_SOME_ERRORS if done.errors else EXIT_OK

    try:
        engines = _start(plan, signals, cleanup)
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
        check_used_context(prepared, engines.max_len)
    except OutputFolderError as exc:
        if engines.pool is not None:
            engines.pool.close()
        raise click.UsageError(str(exc)) from exc
    run_cfg = _as_used(plan.run_config, prepared, engines)
    try:
        # written once the models load, so a run that never started leaves no settings to compare
        write_run_config(out, run_cfg)
    except OutputWriteError as exc:
        click.echo(f"error: {exc}; nothing was solved", err=True)
        return EXIT_WRITE_FAILED

    streamed = SkipCounts()
    stream = skip_done(plan.input.open(), done, streamed) if len(done) else plan.input.open()
    # the whole run's figures: records an earlier run wrote and this one kept count too
    tally = _Tally.kept(done)
    dashboard = Dashboard(plan.input.total, counts=tally.counts, enabled=plan.dashboard, stream=sys.stderr,
                          title=f"specscale solve · {source} · {plan.policy}")
    stopped: Interrupted | None = None
    write_error: OutputWriteError | None = None
    lost: Exception | None = None
    with dashboard as progress:
        try:
            _search(plan, engines, stream, tally, progress, signals)
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
        summary["session"] = {"answers": tally.done, "errors": tally.errors, "kept_answers": done.answers,
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
    if plan.input.total is None:
        _report_changed(streamed, source)  # a stream (stdin, a hub dataset) is read once: known only now
    written = f"{_n(tally.done, 'answer')} and {_n(tally.errors, 'error record')} of this run are in {answers_path}"
    if write_error is not None:
        click.echo(f"error: {write_error}; {written} and complete. Free space in {out}, then go on with: "
                   f"{plan.resume_command}", err=True)
        return EXIT_WRITE_FAILED
    if lost is not None:
        click.echo(f"error: {lost}; {written}; summary -> {out / SUMMARY_FILENAME}. To go on: "
                   f"{plan.resume_command}", err=True)
        return EXIT_REPLICAS_LOST
    if stopped is not None:
        hint = plan.resume_command
        if source == "<stdin>":
            hint += "   (with the same input on stdin)"
        click.echo(f"{'interrupted' if stopped.signum == signal.SIGINT else 'stopped by ' + stopped.name}: {written}; problems "
                   f"still in flight were not written; summary -> {out / SUMMARY_FILENAME}. To go on: {hint}",
                   err=True)
        return stopped.exit_code
    click.echo(f"answers -> {answers_path}, summary -> {out / SUMMARY_FILENAME}, settings -> {out / RUN_FILENAME}",
               err=True)
    return EXIT_SOME_ERRORS if tally.counts["errors"] else EXIT_OK


def _start(plan: RunPlan, signals: StopSignals, cleanup: ExitStack) -> _Engines:
    """Load the models in this process, or start the replicas of a --workers run.

    Raises:
        click.UsageError: a model that cannot be loaded, too few GPUs, an unreachable cluster.
        Interrupted: a stop while loading. ReplicasLost: every replica died while loading.
    """
    settings = plan.settings
    # replicas of a --workers run split the cores between them (core.distributed.pool); torch
    # is imported here, so a Ctrl-C during its import is a stop while loading too
    governor = settle_threads(settings.threads, settings.device) if plan.workers == 1 else None
    click.echo(f"loading {settings.generator} (generator) and {settings.prm} ({settings.scorer} scorer)"
               + (f" in {plan.workers} replicas" if plan.workers > 1 else "") + "...", err=True)
    if plan.workers > 1:
        pool = _start_pool(plan, cleanup)
        first = pool.infos[pool.live[0]]
        engines = _Engines(None, pool, None, first["max_model_len"], first["prm_max_model_len"])
    else:
        runtime = _load(settings)
        engines = _Engines(runtime, None, governor, runtime.engine.max_model_len,
                           runtime.verifier.engine.max_model_len)
    signals.check()  # a stop that a library's finalizer swallowed while loading
    return engines


def _as_used(planned: dict, prepared, engines: _Engines) -> dict:
    """run.json as this run writes it: the planned content, the earlier settings a --force resume
    went over (``info.forced_over``), and the context limits the engines use."""
    import copy

    from core.io.resume import INFO_KEY

    run_cfg = copy.deepcopy(planned)
    if prepared.forced_over is not None:
        run_cfg[INFO_KEY]["forced_over"] = prepared.forced_over
    run_cfg["models"]["max_model_len"] = engines.max_len
    run_cfg[INFO_KEY]["prm_max_model_len"] = engines.prm_max_len
    return run_cfg


def _load(settings):
    """Import the engine and load the models; a model that cannot be loaded is a usage error."""
    from core.models.loader import ModelLoadError
    from core.solver import build_runtime

    try:
        return build_runtime(settings)
    except (ModelLoadError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc


def _start_pool(plan: RunPlan, cleanup: ExitStack):
    """Connect to Ray and start the plan's replicas (their stop is registered on ``cleanup``);
    a model that cannot be loaded, too few GPUs or an unreachable cluster is a usage error."""
    from core.distributed.pool import RaySession, ReplicaPool

    ray_address = plan.ray_address
    try:
        session = cleanup.enter_context(RaySession(ray_address, plan.settings.device))
    except Interrupted:
        raise
    except Exception as exc:  # noqa: BLE001 - Ray raises several kinds for a cluster it cannot reach
        where = f"the Ray cluster at {ray_address}" if ray_address else "a local Ray cluster"
        # Ray sends its token only where RAY_AUTH_MODE=token asks it to (never by default to an address)
        hint = ("; a cluster with token authentication needs RAY_AUTH_MODE=token and its token (RAY_AUTH_TOKEN or "
                "~/.ray/auth_token)" if ray_address and "RAY_AUTH_MODE" not in os.environ else "")
        raise click.UsageError(f"cannot start or join {where}: {str(exc).strip().splitlines()[0]}{hint}") from exc
    pool = ReplicaPool(session, plan.settings, plan.search, plan.policy, plan.workers, plan.max_concurrent,
                       traces=plan.traces, source=plan.input.source,
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


def _search(plan: RunPlan, engines: _Engines, stream, tally: _Tally, progress, signals: StopSignals):
    """Search ``stream`` in this process (``engines.runtime``) or on the replicas of
    ``engines.pool``, writing each record as its problem finishes and counting it in ``tally``."""
    from core.io.writers import TRACES_DIRNAME, AnswerWriter, write_trace
    from core.search.records import answer_record, count_record, error_record, problem_trace

    out, counts = plan.out, tally.counts
    with AnswerWriter(out) as writer:

        def write_answer(record, trace):
            # one problem's files are written whole: a stop signal waits for the end of this block
            with signals.critical():
                if trace is not None:
                    # the record names its tree, for `specscale trace OUT/<this>` (relative: OUT may move)
                    record["trace"] = f"{TRACES_DIRNAME}/{write_trace(out, record['id'], trace).name}"
                # the answer line comes last: once it is on disk the problem is done, trace included
                # (--resume skips it); a run stopped before it leaves a trace that the rerun replaces
                writer.write(record)
                count_record(counts, record)
                tally.done += 1
                # inside the block: a stop held until its end must find the summary's counts updated
                progress.advance(counts)

        def write_error(record):
            with signals.critical():
                writer.write(record)
                counts["errors"] += 1
                tally.errors += 1
                progress.advance(counts)
            click.echo(f"error: {record['error']['where']}", err=True)

        if engines.pool is not None:
            progress.attach_pool(engines.pool)
            def poll():
                signals.check()
                progress.poll()

            engines.pool.run(stream, write_answer, write_error, on_poll=poll)
            return None

        def on_result(problem, result, search):
            write_answer(answer_record(problem, result, search), problem_trace(search) if plan.traces else None)

        from core.search.driver import SearchDriver

        runtime = engines.runtime
        driver = SearchDriver(runtime.engine, runtime.generator.tokenizer, runtime.generator.eos_token_ids,
                              runtime.verifier, runtime.scorer, plan.search, policy=plan.policy,
                              max_concurrent=plan.max_concurrent, on_result=on_result,
                              on_error=lambda err: write_error(error_record(err)), source=plan.input.source,
                              on_iteration=lambda stats: _iteration(stats, runtime, progress, engines.governor,
                                                                    signals))
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


def _report_changed(skipped, source: str) -> None:
    """Warn about answered problems whose statement in the input changed since their record was written,
    and about lines with an error record that now read as valid problems."""
    def named(items) -> str:
        some = ", ".join(f"{pid!r} (line {line})" for pid, line in items[:5])
        return some + (f" and {len(items) - 5} more" if len(items) > 5 else "")

    if skipped.changed:
        click.echo(f"warning: {_n(len(skipped.changed), 'problem')} of {source} changed since their answers were "
                   f"written: {named(skipped.changed)}; their earlier records are kept (pass --overwrite, or "
                   f"another -o, to solve them again)", err=True)
    if skipped.fixed:
        click.echo(f"warning: {_n(len(skipped.fixed), 'line')} of {source} with an error record now read as valid "
                   f"problems: {named(skipped.fixed)}; they are not retried (a line never gets two records): solve "
                   f"them into another -o, e.g. with --limit or a file holding only those lines", err=True)


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

"""One `solve` run as its flags decide it: :class:`RunPlan`, built by :func:`plan_run` from the flags
and checked before torch is imported or a model loads (every usage error is found here, in well
under a second)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from core.io.output_folder import FolderMode
from core.search.config import SearchConfig
from core.settings import ModelSettings

from .inputs import InputChoice, ProblemInput, open_input
from .options import build_settings
from .run_dir import rerun_command, run_config

# solve's own flags; the others are the preset, model and search flags of build_settings
_INPUT_FLAGS = ("problems", "dataset", "dataset_config", "split", "shuffle", "problem_field", "answer_field",
                "id_field", "limit")
_RUN_FLAGS = ("out_dir", "max_concurrent", "traces", "no_dashboard", "no_progress", "overwrite", "resume", "force",
              "workers", "ray_address")


@dataclass(frozen=True)
class RunPlan:
    """Everything that decides what one `solve` run does, fixed before it starts.

    input: the opened input: its name in messages (``source``), the problem count (``total``; None
        for stdin) and a reader of its problems (``open``, --limit applied).
    out: the output folder (-o; default ``runs/<input name>``).
    settings: generator, PRM, scorer, dtype, device and engine sizing (preset and flags merged).
    search: beam size N, beam width M, step and token limits, sampling, strategy, selection, seed.
    policy: the search policy (``non-spec``, ``naive-spec``, ``fasttts``, ``specscale``).
    run_config: the content of ``OUT/run.json`` as planned (compared on --resume); the file written
        adds the context limits the engines use, known once the models load. Not changed after
        planning.
    folder: what to do with an earlier run in ``out`` (--overwrite, --resume, --force).
    max_concurrent: problems searched at once (by each replica with ``workers`` > 1).
    traces: write ``OUT/traces/<id>.json`` per problem.
    dashboard: the live panel on a terminal; False: a log line every 10 s (--no-dashboard).
    workers: engine replicas; 1 searches in this process, more on Ray actors.
    ray_address: the Ray cluster the replicas join; None starts one on this machine.
    command: the command line that repeats this run (noted in the folder's lock and run.json).
    resume_command: the command line that goes on with this run (printed when it stops early).
    """

    input: ProblemInput
    out: Path
    settings: ModelSettings
    search: SearchConfig
    policy: str
    run_config: dict
    folder: FolderMode
    max_concurrent: int
    traces: bool
    dashboard: bool
    workers: int
    ray_address: str | None
    command: str
    resume_command: str


def plan_run(ctx: click.Context, flags: dict) -> RunPlan:
    """Check `solve`'s flags, open its input and plan the run (``flags``: the command's parameters).

    The order keeps failures cheap: settings and worker flags first, then what an earlier run in
    OUT says (before the input is read: a table input loads `datasets`, about a second), the input,
    and the model names (checked without torch).

    Raises:
        click.UsageError: any flag, preset, input, output folder or model name at fault, named.
    """
    from core.io.output_folder import OutputFolderError, refuse_earlier_answers, refuse_other_settings
    from core.models.specs import ModelSpecError, check_model_spec

    opts = dict(flags)
    run = {key: opts.pop(key) for key in _RUN_FLAGS}
    choice = {key: opts.pop(key) for key in _INPUT_FLAGS}
    settings, search_cfg, policy = build_settings(opts)
    check_workers(run["workers"], run["ray_address"])
    folder = FolderMode(overwrite=run["overwrite"], resume=run["resume"], force=run["force"])
    if run["out_dir"]:  # before the input is read: a table input loads `datasets`, which takes a second
        try:
            refuse_earlier_answers(Path(run["out_dir"]), folder.overwrite, folder.resume)
            refuse_other_settings(Path(run["out_dir"]), run_config(settings, search_cfg, policy, {}, {}),
                                  folder.resume, folder.force)
        except OutputFolderError as exc:
            raise click.UsageError(str(exc)) from exc
    problem_input = open_input(InputChoice(seed=search_cfg.seed, **choice))
    try:
        check_model_spec(settings.generator, "--generator")
        if settings.prm != settings.generator:
            check_model_spec(settings.prm, "--prm")
    except ModelSpecError as exc:
        raise click.UsageError(str(exc)) from exc
    out = Path(run["out_dir"]) if run["out_dir"] else Path("runs") / problem_input.label
    command = rerun_command(ctx, out, extra=())
    info = {"problems": problem_input.source, "limit": choice["limit"], "max_concurrent": run["max_concurrent"],
            "traces": run["traces"], "workers": run["workers"], "ray_address": run["ray_address"],
            "command": command}
    return RunPlan(input=problem_input, out=out, settings=settings, search=search_cfg, policy=policy,
                   run_config=run_config(settings, search_cfg, policy, problem_input.config, info), folder=folder,
                   max_concurrent=run["max_concurrent"], traces=run["traces"],
                   dashboard=not (run["no_dashboard"] or run["no_progress"]), workers=run["workers"],
                   ray_address=run["ray_address"], command=command, resume_command=rerun_command(ctx, out))


def check_workers(workers: int, ray_address: str | None) -> None:
    """Usage errors of --workers/--ray-address, found without importing Ray.

    Raises:
        click.UsageError: --ray-address with one worker, or more workers without Ray installed.
    """
    from core.distributed import RAY_INSTALL_HINT, ray_missing

    if ray_address is not None and workers == 1:
        raise click.UsageError("--ray-address needs --workers 2 or more (--workers 1 runs in this process)")
    if workers > 1 and ray_missing():
        raise click.UsageError(f"--workers {workers} runs replicas on Ray, which is not installed: {RAY_INSTALL_HINT}")

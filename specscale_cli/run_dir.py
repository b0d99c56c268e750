"""The output folder of `solve`: refuse, replace or resume an earlier run; its run.json; the resume hint."""

from __future__ import annotations

import shlex
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import click
from click.core import ParameterSource

from core.io.resume import (INFO_KEY, RUN_FILENAME, DoneRecords, ResumeError, config_differences,
                            read_run_config, scan_answers)
from core.io.writers import ANSWERS_FILENAME, TRACES_DIRNAME

# ModelSettings fields that size or place the engines but do not change what is generated; a
# resumed run may change them (e.g. a smaller KV pool, another GPU), so they are not compared.
_ENGINE_FIELDS = ("device", "block_size", "gen_kv_bytes", "prm_kv_bytes", "max_num_seqs",
                  "max_num_batched_tokens", "enable_prefix_caching")
# solve options that say where and how to run, not what is solved; left out of the resume hint
_NOT_REPEATED = ("out_dir", "overwrite", "resume", "force")


def _model_spec(spec: str) -> str:
    """A local model path as an absolute path, so ``./m`` and ``/abs/m`` compare equal; hub and
    embedded names unchanged."""
    path = Path(spec).expanduser()
    return str(path.resolve()) if path.exists() else spec


def run_config(settings, search_cfg, policy: str, input_config: dict, info: dict) -> dict:
    """The content of ``OUT/run.json``: everything that decides the answers, plus an ``info`` part.

    Compared on ``--resume`` (see :func:`core.io.resume.config_differences`): the models and every
    other :class:`core.solver.ModelSettings` field except engine sizing and device, the whole
    :class:`core.search.config.SearchConfig`, the policy, and the input fields and dataset choice.
    Not compared (``info``): the input file path, ``--limit``, ``--max-concurrent``, traces, engine
    sizing and device, the start time and command.
    """
    models = asdict(settings)
    engine = {k: models.pop(k) for k in _ENGINE_FIELDS if k in models}
    for key in ("generator", "prm"):
        if isinstance(models.get(key), str):
            models[key] = _model_spec(models[key])
    return {"version": 1, "policy": policy, "models": models, "search": asdict(search_cfg), "input": input_config,
            INFO_KEY: {"engine": engine, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **info}}


def prepare_output(out: Path, overwrite: bool, resume: bool, force: bool, config: dict) -> DoneRecords:
    """Make ``out`` ready for a run and return the records a resumed run must skip.

    Without ``resume`` an ``answers.jsonl`` with content is refused (``overwrite`` deletes it and
    the traces instead). With ``resume`` the run settings must match ``OUT/run.json`` (``force``
    skips the check) and the existing records are scanned, a torn last line cut off.

    Raises:
        click.UsageError: conflicting flags, an unwritable folder, answers present without
            ``--resume``/``--overwrite``, settings that differ from ``run.json`` (or no
            ``run.json`` next to answers) without ``--force``.
    """
    if resume and overwrite:
        raise click.UsageError("--resume keeps the answers in OUT and --overwrite deletes them: pass one of them")
    if force and not resume:
        raise click.UsageError("--force works with --resume (it resumes a run made with other settings)")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise click.UsageError(f"output folder {out} is not writable: {exc.strerror or exc}") from exc
    answers = out / ANSWERS_FILENAME
    has_answers = answers.is_file() and answers.stat().st_size > 0
    if overwrite:
        for stale in (answers, out / RUN_FILENAME):
            if stale.exists():
                stale.unlink()
        shutil.rmtree(out / TRACES_DIRNAME, ignore_errors=True)
        return DoneRecords()
    if not resume:
        if has_answers:
            raise click.UsageError(f"{answers} already holds answers of an earlier run; pass --resume to solve only "
                                   f"the problems it lacks, --overwrite to replace it, or choose another -o")
        return DoneRecords()
    try:
        previous = read_run_config(out)
    except ResumeError as exc:
        raise click.UsageError(f"{exc}; pass --force to resume anyway (run.json is then rewritten)") from exc
    if previous is None and has_answers and not force:
        raise click.UsageError(f"{out / RUN_FILENAME} is missing, so the settings behind {answers} cannot be "
                               f"checked; pass --force to resume anyway")
    diffs = config_differences(previous, config) if previous is not None else []
    if diffs and not force:
        raise click.UsageError(f"{out / RUN_FILENAME} records other settings than this run "
                               f"({'; '.join(diffs)}); rerun with the same settings, or pass --force "
                               f"to resume anyway")
    if diffs:
        # run.json gets this run's settings; keep those the earlier answers were made with
        config[INFO_KEY]["forced_over"] = {k: v for k, v in previous.items() if k != INFO_KEY}
    try:
        return scan_answers(answers)
    except OSError as exc:
        raise click.UsageError(f"{answers}: cannot be read: {exc.strerror or exc}") from exc


def _long_flag(param: click.Option, on: bool = True) -> str:
    opts = param.opts if on else param.secondary_opts
    return max(opts, key=len)


def rerun_command(ctx: click.Context, out: Path, extra: tuple[str, ...] = ("--resume",)) -> str:
    """The command line that repeats this `solve` run into ``out``, followed by ``extra``.

    Built from the parameters given on the command line (not from ``sys.argv``, which is not
    the command when `solve` runs inside another program), each with its long flag.
    """
    parts = ["specscale", ctx.info_name or "solve"]
    flags = []
    for param in ctx.command.params:
        name = param.name
        if name in _NOT_REPEATED or ctx.get_parameter_source(name) is not ParameterSource.COMMANDLINE:
            continue
        value = ctx.params.get(name)
        if isinstance(param, click.Argument):
            parts.append(str(value))
        elif isinstance(param, click.Option) and param.is_flag:
            if param.secondary_opts:
                flags.append(_long_flag(param, on=bool(value)))
            elif value:
                flags.append(_long_flag(param))
        elif isinstance(param, click.Option) and value is not None:
            flags += [_long_flag(param), str(value)]
    return shlex.join(parts + flags + ["-o", str(out), *extra])

"""What `solve` records about a run: its run.json content and the command that repeats or resumes it."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

import click
from click.core import ParameterSource

from core.io.resume import INFO_KEY

# ModelSettings fields that size or place the engines but do not change what is generated; a
# resumed run may change them (e.g. a smaller KV pool, another GPU), so they are not compared.
_ENGINE_FIELDS = ("device", "block_size", "gen_kv_bytes", "prm_kv_bytes", "max_num_seqs",
                  "max_num_batched_tokens", "enable_prefix_caching", "threads")
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


def program_name() -> list[str]:
    """The words that started this program, for a command the user can paste.

    ``.venv/bin/specscale`` when that is what was typed; ``specscale`` when it is the one on PATH
    (or the program is not the installed script, e.g. inside a test); ``python -m specscale_cli``
    for a module run.
    """
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
    name = os.path.basename(argv0)
    if name in ("specscale", "specscale.exe"):
        on_path = shutil.which("specscale")
        if on_path and os.path.realpath(on_path) == os.path.realpath(argv0):
            return ["specscale"]
        return [argv0]
    if name == "__main__.py" and os.path.basename(os.path.dirname(argv0)) == "specscale_cli":
        return [sys.executable, "-m", "specscale_cli"]
    return ["specscale"]


def _long_flag(param: click.Option, on: bool = True) -> str:
    opts = param.opts if on else param.secondary_opts
    return max(opts, key=len)


def rerun_command(ctx: click.Context, out: Path, extra: tuple[str, ...] = ("--resume",)) -> str:
    """The command line that repeats this `solve` run into ``out``, followed by ``extra``.

    Built from the parameters given on the command line (not from ``sys.argv``, which is not
    the command when `solve` runs inside another program), each with its long flag, after the
    program as it was started (see :func:`program_name`).
    """
    parts = [*program_name(), ctx.info_name or "solve"]
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

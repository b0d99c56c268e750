"""What the measuring commands (`specscale bench ...`, `profile-threshold`, `profile-knee`) share: list
flags, the problems and output folder, the models, storing a measured setting in a preset."""

from __future__ import annotations

from pathlib import Path

import click

from .options import settle_threads


def parse_counts(text: str, flag: str) -> list[int]:
    """Positive whole numbers from a comma-separated flag value, in order, without repeats.

    Raises:
        click.BadParameter: a value that is not a whole number, or one below 1 (names ``flag``).
    """
    try:
        values = list(dict.fromkeys(int(v) for v in text.split(",") if v.strip()))
    except ValueError as exc:
        raise click.BadParameter(f"expected whole numbers separated by commas, got {text!r}", param_hint=flag) from exc
    if any(v < 1 for v in values):
        raise click.BadParameter("values must be >= 1", param_hint=flag)
    return values


def parse_rates(text: str) -> list[float]:
    """Request rates in problems/s from ``--request-rates`` (comma-separated; empty: none).

    Raises:
        click.BadParameter: a value that is not a number, or one that is not > 0.
    """
    try:
        rates = [float(r) for r in text.split(",") if r.strip()]
    except ValueError as exc:
        raise click.BadParameter(f"'{text}' is not a comma-separated list of numbers", param_hint="--request-rates") from exc
    if any(r <= 0 for r in rates):
        raise click.BadParameter("request rates must be > 0 problems/s", param_hint="--request-rates")
    return rates


def output_folder(out_dir) -> Path:
    """``out_dir`` as a path, created with its parents if missing.

    Raises:
        click.UsageError: the folder cannot be created (the message names it).
    """
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.UsageError(f"cannot create output folder {out}: {exc}") from exc
    return out


def store_in_preset(preset: str, key: str, value) -> str:
    """Store ``key = value`` in ``preset``'s ``[search]`` table (``--write``); returns the file written.

    Raises:
        click.UsageError: an unknown preset, a value the field refuses, or a file that cannot be
            read or written (see :func:`core.preset_edit.set_search_field`).
    """
    from core.presets import PresetError
    from core.preset_edit import set_search_field

    try:
        return str(set_search_field(preset, key, value))
    except (PresetError, OSError) as exc:
        raise click.UsageError(f"--write: {exc}") from exc


def output_and_problems(out_dir, problems_file, limit: int):
    """The bench's output folder (created) and the first ``limit`` valid problems of ``problems_file``.

    Raises:
        click.UsageError: the folder cannot be created, or the file has no valid problem.
    """
    from core.io.problems import Problem, read_problems

    out = output_folder(out_dir)
    problems = [p for p in read_problems(problems_file) if isinstance(p, Problem)][:limit]
    if not problems:
        raise click.UsageError(f"{problems_file}: no valid problems")
    return out, problems


def load_models(settings):
    """Generator and PRM of ``settings`` (:func:`core.solver.load_models`), with torch's threads
    settled first.

    Raises:
        click.UsageError: a model that cannot be loaded (exit 2).
    """
    from core.models.loader import ModelLoadError
    from core.solver import load_models as load

    # fixed for the whole benchmark: runs compared side by side get the same threads
    settle_threads(settings.threads, settings.device)
    try:
        return load(settings)
    except (ModelLoadError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc

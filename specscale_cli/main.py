"""The `specscale` command line."""

from __future__ import annotations

import logging
import os
import sys

import click

from .cache_cmd import cache
from .presets_cmd import presets
from .profile_knee import profile_knee
from .profile_threshold import profile_threshold
from .solve import solve
from .trace import trace


def _show_usage_error(self: click.UsageError, file=None) -> None:
    """A usage error as one ``Error:`` line, without click's usage block and help hint around it
    (the message names the flag, file or field at fault; ``--help`` is one flag away)."""
    click.echo(f"Error: {self.format_message()}", file=file, err=file is None)


class _Commands(click.Group):
    """The `specscale` group; click's own exit handling, with usage errors shown by
    :func:`_show_usage_error` while a command line is handled."""

    def main(self, *args, **kwargs):
        shown = click.UsageError.show
        click.UsageError.show = _show_usage_error
        try:
            return super().main(*args, **kwargs)
        finally:
            click.UsageError.show = shown


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="specscale", prog_name="specscale")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def cli(verbose):
    """SpecScale: PRM-guided (speculative) beam search for LLM math reasoning on one engine."""
    from core.cpu_load import start_program_watch

    # first: its window, up to the model load, tells how busy the cores are with other work
    start_program_watch()
    level = logging.WARNING - 10 * verbose
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    # routine one-time steps (a model converted and cached) are notes, not warnings
    notes = logging.getLogger("specscale.notes")
    if not notes.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("note: %(message)s"))
        notes.addHandler(handler)
    notes.setLevel(logging.INFO)
    notes.propagate = False
    # transformers' per-tensor progress bars and advisory warnings drown the run's own output; set
    # through the environment, which transformers reads when it is imported, because importing it
    # here would cost every command (and every usage error) most of a second
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if not sys.stderr.isatty():
        # tqdm bars that transformers draws on its own (GGUF de-quantizing) are \r fragments in a log
        os.environ.setdefault("TQDM_DISABLE", "1")


cli.add_command(solve)
cli.add_command(trace)
cli.add_command(profile_threshold)
cli.add_command(profile_knee)
cli.add_command(presets)
cli.add_command(cache)


def _register_bench():
    from .bench import bench

    cli.add_command(bench)


_register_bench()

if __name__ == "__main__":
    cli()

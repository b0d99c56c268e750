"""The `specscale` command line."""

from __future__ import annotations

import logging
import os

import click

from .cache_cmd import cache
from .presets_cmd import presets
from .profile_threshold import profile_threshold
from .solve import solve
from .trace import trace


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="specscale", prog_name="specscale")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def cli(verbose):
    """SpecScale: PRM-guided (speculative) beam search for LLM math reasoning on one engine."""
    level = logging.WARNING - 10 * verbose
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    # transformers' per-tensor progress bars and advisory warnings drown the run's own output; set
    # through the environment, which transformers reads when it is imported, because importing it
    # here would cost every command (and every usage error) most of a second
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


cli.add_command(solve)
cli.add_command(trace)
cli.add_command(profile_threshold)
cli.add_command(presets)
cli.add_command(cache)


def _register_bench():
    from .bench import bench

    cli.add_command(bench)


_register_bench()

if __name__ == "__main__":
    cli()

"""The `specscale` command line."""

from __future__ import annotations

import logging
import os

import click

from .presets_cmd import presets
from .profile_threshold import profile_threshold
from .solve import solve
from .trace import trace


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def cli(verbose):
    """SpecScale: PRM-guided (speculative) beam search for LLM math reasoning on one engine."""
    level = logging.WARNING - 10 * verbose
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    # transformers' per-tensor progress bars drown the run's own output
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:
        pass


cli.add_command(solve)
cli.add_command(trace)
cli.add_command(profile_threshold)
cli.add_command(presets)


def _register_bench():
    from .bench import bench

    cli.add_command(bench)


_register_bench()

if __name__ == "__main__":
    cli()

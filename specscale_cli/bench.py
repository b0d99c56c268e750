"""`specscale bench`: the group of benchmark commands, one file each (bench_engine.py, bench_search.py,
bench_strategies.py, bench_verifier.py, bench_scale.py); what they measure is in core/bench/."""

from __future__ import annotations

import click

from .bench_engine import bench_engine
from .bench_scale import bench_scale
from .bench_search import bench_search
from .bench_strategies import bench_strategies
from .bench_verifier import bench_verifier


@click.group()
def bench():
    """Benchmarks that print ratios measured side by side in one run."""


for _command in (bench_engine, bench_search, bench_strategies, bench_verifier, bench_scale):
    bench.add_command(_command)

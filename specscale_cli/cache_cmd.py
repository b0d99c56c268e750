"""`specscale cache`: list and clear the de-quantized model copies (see :mod:`core.models.cache`)."""

from __future__ import annotations

import sys
import time

import click
import orjson

from .dashboard import _n


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 28 else f"{n / (1 << 20):.1f} MiB"


@click.group("cache", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
@click.pass_context
def cache(ctx, as_json):
    """List the de-quantized GGUF models cached under $SPECSCALE_CACHE (default ~/.cache/specscale).

    The first load of a GGUF model (the embedded SmolLM2 among them) saves its de-quantized weights
    there, one copy per model; `specscale cache clear` removes them (the next load makes them again).
    """
    if ctx.invoked_subcommand is not None:
        return
    from core.models.cache import cache_root, list_cache

    entries = list_cache()
    if as_json:
        rows = [{"path": str(e.path), "size_bytes": e.size_bytes, "last_used": e.last_used, "complete": e.complete}
                for e in entries]
        sys.stdout.buffer.write(orjson.dumps({"root": str(cache_root()), "models": rows}, option=orjson.OPT_INDENT_2)
                                + b"\n")
        return
    if not entries:
        click.echo(f"no cached models in {cache_root()}")
        return
    click.echo(f"cached models in {cache_root()}:")
    for e in entries:
        state = "" if e.complete else "  (incomplete: left by an interrupted write; `cache clear` removes it)"
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_used))
        click.echo(f"  {e.path.name}  {_gib(e.size_bytes)}  last used {used}{state}")
    click.echo(f"total {_gib(sum(e.size_bytes for e in entries))}")


@cache.command("clear")
@click.argument("match", required=False)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
def clear(match, yes):
    """Remove the cached copies (only those whose name contains MATCH, when given)."""
    from core.models.cache import cache_root, clear_cache, list_cache

    entries = [e for e in list_cache() if match is None or match in e.path.name]
    if not entries:
        what = f"no cached model's name contains {match!r}" if match is not None else "nothing to remove"
        click.echo(f"{what} in {cache_root()}")
        return
    total = _gib(sum(e.size_bytes for e in entries))
    if not yes:
        if not _can_ask():
            # nobody to answer the question: say how to go on, before asking it
            raise click.UsageError(f"nothing removed: no terminal to confirm on; pass -y to remove the "
                                   f"{_n(len(entries), 'cached model')} ({total}) without a question")
        if not click.confirm(f"remove {_n(len(entries), 'cached model')}, {total}?", default=False):
            raise click.Abort()
    removed = clear_cache(match)
    click.echo(f"removed {_n(len(removed), 'cached model')}, {_gib(sum(e.size_bytes for e in removed))}")


def _can_ask() -> bool:
    """Whether a person can answer a question on stdin (a terminal)."""
    return sys.stdin.isatty()

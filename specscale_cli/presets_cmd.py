"""`specscale presets`: list the shipped presets, or show every resolved setting of one."""

from __future__ import annotations

import dataclasses
import sys
import textwrap

import click
import orjson

_GIB = 1 << 30
# columns the table needs to show every column without breaking names; narrower gets blocks
WIDE_TABLE = 120


@click.command("presets")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def presets(name, as_json):
    """List the available presets, or show all settings of preset NAME (a name or a .toml path).

    A preset names a generator-PRM pair and search settings; use it with `solve --preset NAME`,
    and override any field with the matching flag (e.g. `--preset qwen2.5-7b-math-prm -n 16`).
    """
    from core.presets import PresetError, available_presets, read_preset

    if name is not None:
        try:
            preset = read_preset(name)
        except PresetError as exc:
            raise click.UsageError(str(exc)) from exc
        _show_one(preset, as_json)
        return
    rows = []
    for preset_name in available_presets():
        try:
            rows.append(_summary(read_preset(preset_name)))
        except PresetError as exc:
            # one broken file should not hide the others; say what is wrong with it instead
            rows.append({"name": preset_name, "error": str(exc)})
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        _print_list(rows)


def _summary(preset) -> dict:
    models, search = preset.resolve()
    return {"name": preset.name, "generator": models.generator, "prm": models.prm, "scorer": models.scorer,
            "device": models.device, "dtype": models.dtype, "beam_size": search.beam_size,
            "beam_width": search.beam_width, "description": preset.description, "path": str(preset.path),
            "memory": memory(models, search)}


def memory(models, search) -> dict:
    """GiB the pair needs on the device (weights of both + KV; see :mod:`core.models.footprint`), the
    smallest card it fits (``fits_gb``, GPU presets only), or ``error`` for a model of unknown shape."""
    from core.models.footprint import SCORER_HEADS, gib, pair_footprint

    try:
        fp = pair_footprint(models.generator, models.prm, SCORER_HEADS.get(models.scorer, "lm"), search.beam_size,
                            models.max_model_len, models.dtype, models.device, models.gen_kv_bytes, models.prm_kv_bytes)
    except KeyError as exc:
        return {"error": exc.args[0]}
    pools = fp.generator_kv_pool is not None or fp.prm_kv_pool is not None
    return {"weights_gib": {"generator": gib(fp.generator_weights), "prm": gib(fp.prm_weights)},
            "kv_gib": {"generator": gib(fp.generator_kv_needed), "prm": gib(fp.prm_kv_needed)},
            "kv_pools_gib": ({"generator": gib(fp.generator_kv_pool) if fp.generator_kv_pool is not None else None,
                              "prm": gib(fp.prm_kv_pool) if fp.prm_kv_pool is not None else None} if pools else None),
            "context_tokens": fp.context_tokens, "total_gib": gib(fp.total),
            "fits_gb": fp.fits() if str(models.device).startswith("cuda") else None}


def _memory_text(mem: dict, n: int, short: bool = False) -> str:
    """``7.5 GiB · 12 GB`` (short) or the breakdown behind it."""
    if "error" in mem:
        return "?" if short else f"unknown: {mem['error']}"
    fits = f"{mem['fits_gb']} GB" if mem["fits_gb"] else ("CPU" if mem["fits_gb"] is None else "-")
    if short:
        return f"{mem['total_gib']:g} GiB · {fits}"
    w, kv, pools = mem["weights_gib"], mem["kv_gib"], mem["kv_pools_gib"]
    text = (f"{mem['total_gib']:g} GiB: weights {w['generator']:g} + {w['prm']:g} GiB (generator + PRM), KV for "
            f"one problem's {n} paths of {mem['context_tokens']} tokens {kv['generator']:g} + {kv['prm']:g} GiB")
    if pools:
        text += " (fixed pools: " + " + ".join(f"{v:g}" if v is not None else "sized to the work"
                                               for v in (pools["generator"], pools["prm"])) + " GiB)"
    return text + (f"; smallest card it fits: {mem['fits_gb']} GB" if mem["fits_gb"] else "")


def _print_list(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    from rich.markup import escape

    console = Console()
    if console.width < WIDE_TABLE:
        _print_narrow(console, rows)
        return
    table = Table(title="Presets (use: specscale solve --preset NAME; details: specscale presets NAME)")
    for column in ("name", "generator", "PRM", "scorer", "device", "N/M", "GPU memory"):
        table.add_column(column, no_wrap=column in ("name", "device", "N/M", "GPU memory"), overflow="fold")
    table.add_column("description", ratio=1, overflow="fold")
    for row in rows:
        if "error" not in row:
            table.add_row(row["name"], row["generator"], row["prm"], row["scorer"], row["device"],
                          f"{row['beam_size']}/{row['beam_width']}", _memory_text(row["memory"], row["beam_size"], True),
                          row["description"])
    table.caption = ("GPU memory: weights of both models + KV for one problem's N full-length paths (fixed pools "
                     "where a preset sets them), and the smallest card that holds it with 10% (at least 1.5 GiB) "
                     "to spare")
    console.print(table)
    for row in rows:
        if "error" in row:
            console.print(f"[red]invalid preset {row['name']}:[/red] {escape(row['error'])}", soft_wrap=True)


def _print_narrow(console, rows: list[dict]) -> None:
    """One block of lines per preset, for terminals too narrow for the table (under 120 columns)."""
    from rich.markup import escape
    from rich.text import Text

    console.print("Presets (use: specscale solve --preset NAME; details: specscale presets NAME)", style="italic")
    for row in rows:
        console.print()
        if "error" in row:
            console.print(f"[red]invalid preset {row['name']}:[/red] {escape(row['error'])}")
            continue
        console.print(Text.assemble((row["name"], "bold cyan"), f"  {row['device']} · N/M "
                                    f"{row['beam_size']}/{row['beam_width']} · scorer {row['scorer']}"))
        console.print(f"  generator  {escape(row['generator'])}")
        console.print(f"  PRM        {escape(row['prm'])}")
        console.print(Text(textwrap.fill(_memory_text(row["memory"], row["beam_size"]), width=max(console.width - 1, 20),
                                         initial_indent="  memory     ", subsequent_indent=" " * 13)), soft_wrap=True)
        if row["description"]:
            # wrapped here, at words and with the block's indent, so no line carries rich's padding
            wrapped = textwrap.fill(row["description"], width=max(console.width - 1, 20), initial_indent="  ",
                                    subsequent_indent="  ")
            console.print(Text(wrapped, style="dim"), soft_wrap=True)


def _show_one(preset, as_json: bool) -> None:
    """All fields of ModelSettings and SearchConfig as this preset resolves them, marked when the file sets them."""
    models, search = preset.resolve()
    resolved = {"models": dataclasses.asdict(models), "search": dataclasses.asdict(search)}
    set_in_file = {"models": set(preset.models), "search": set(preset.search)}
    mem = memory(models, search)
    if as_json:
        doc = {"name": preset.name, "path": str(preset.path), "description": preset.description, **resolved,
               "set_in_preset": {table: sorted(keys) for table, keys in set_in_file.items()}, "memory": mem}
        sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
        return

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    console.print(f"[bold]{preset.name}[/bold]  {preset.path}")
    if preset.description:
        console.print(preset.description)
    console.print(f"memory: {escape(_memory_text(mem, search.beam_size))}", soft_wrap=True)
    table = Table(caption="from: preset = set in the file, default = the field's default; flags override both")
    for column in ("table", "field", "value", "from"):
        table.add_column(column, overflow="fold")
    for table_name, values in resolved.items():
        for field, value in values.items():
            source = "preset" if field in set_in_file[table_name] else "[dim]default[/dim]"
            table.add_row(table_name, field, _show_value(field, value), source)
    console.print(table)


def _show_value(field: str, value) -> str:
    from rich.markup import escape

    if field.endswith("_kv_bytes"):
        # None: the pool is sized to the work (grows on demand on CPU)
        return "sized to the work" if value is None else f"{value} ({value / _GIB:g} GiB)"
    if field == "threads" and value is None:
        return "the cores left free"  # chosen from the load as the run starts (core.cpu_load)
    if isinstance(value, str):
        # quoted, with line breaks and tabs spelled as typed in TOML, so "\n\n" and spaces show;
        # escape keeps [..] in a prompt from reading as rich markup
        value = '"' + value.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r") + '"'
    return escape(str(value))

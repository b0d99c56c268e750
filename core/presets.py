"""Presets: TOML files naming a generator-PRM pair and search settings (``presets/*.toml``).

A preset has optional top-level ``description`` and two tables, ``[models]`` (fields of
:class:`core.solver.ModelSettings`, with ``gen_kv_gb``/``prm_kv_gb`` in GiB) and ``[search]``
(fields of :class:`core.search.config.SearchConfig`). Command-line flags override preset fields.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

from core.search.config import SearchConfig
from core.solver import ModelSettings

PRESET_DIR = Path(__file__).resolve().parent.parent / "presets"
DEFAULT_PRESET = "smollm2-cpu"
_GIB = 1 << 30


class PresetError(Exception):
    """An unknown preset, unreadable TOML, or an unknown field; the message names file and field."""


def available_presets() -> dict[str, Path]:
    """Preset name -> file, from the project's ``presets/`` folder."""
    return {p.stem: p for p in sorted(PRESET_DIR.glob("*.toml"))}


def find_preset(name_or_path: str) -> Path:
    """Resolve a preset name or a path to a TOML file.

    Raises:
        PresetError: nothing of that name or path exists.
    """
    path = Path(name_or_path).expanduser()
    if path.suffix == ".toml" and path.is_file():
        return path
    presets = available_presets()
    if name_or_path in presets:
        return presets[name_or_path]
    raise PresetError(f"unknown preset '{name_or_path}'; available: {', '.join(presets) or 'none'} (or a .toml path)")


def load_preset(name_or_path: str) -> tuple[dict, dict]:
    """Read a preset's ``[models]`` and ``[search]`` tables, checked against the known fields.

    Raises:
        PresetError: see :func:`find_preset`; invalid TOML; an unknown table or field.
    """
    path = find_preset(name_or_path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PresetError(f"{path}: invalid TOML: {exc}") from exc
    models = dict(data.pop("models", {}))
    search = dict(data.pop("search", {}))
    data.pop("description", None)
    if data:
        raise PresetError(f"{path}: unknown table or key(s): {', '.join(data)}")
    for gb_key, bytes_key in (("gen_kv_gb", "gen_kv_bytes"), ("prm_kv_gb", "prm_kv_bytes")):
        if gb_key in models:
            models[bytes_key] = int(float(models.pop(gb_key)) * _GIB)
    _check_fields(path, "models", models, ModelSettings)
    _check_fields(path, "search", search, SearchConfig)
    return models, search


def _check_fields(path: Path, table: str, values: dict, cls) -> None:
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise PresetError(f"{path}: [{table}] unknown field(s): {', '.join(unknown)}")

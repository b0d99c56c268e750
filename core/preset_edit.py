"""Edits one field of a preset file in place, keeping its comments and formatting.

Used by `specscale profile-threshold --write` to store a measured ``lv_threshold``. The file goes
through tomlkit (a style-preserving TOML parser), so every other line stays byte for byte.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from core.presets import PresetError, find_preset
from core.search.config import SearchConfig


def set_search_field(name_or_path: str, key: str, value) -> Path:
    """Store ``key = value`` in a preset's ``[search]`` table (created if missing); returns the file.

    Args:
        name_or_path: a preset name (``presets/<name>.toml``) or a ``.toml`` path.
        key: a :class:`SearchConfig` field. value: a value that field accepts.

    Raises:
        PresetError: unknown preset (see :func:`core.presets.find_preset`), invalid TOML, an unknown
            field or a value :class:`SearchConfig` refuses, or a ``search`` key that is not a table.
        OSError: the file cannot be read or written.
    """
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    path = find_preset(name_or_path)
    if key not in {f.name for f in dataclasses.fields(SearchConfig)}:
        raise PresetError(f"{path}: [search] {key}: unknown field")
    try:
        SearchConfig(**{key: value})
    except (TypeError, ValueError) as exc:
        raise PresetError(f"{path}: [search] {key}: {exc}") from exc
    try:
        doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    except (TOMLKitError, UnicodeDecodeError) as exc:
        raise PresetError(f"{path}: invalid TOML: {exc}") from exc
    if "search" not in doc:
        doc.add("search", tomlkit.table())
    elif not isinstance(doc["search"], dict):
        raise PresetError(f"{path}: search: must be a table")
    doc["search"][key] = value
    path.write_text(tomlkit.dumps(doc), encoding="utf-8")
    return path

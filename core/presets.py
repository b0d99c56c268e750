"""Presets: TOML files naming a generator-PRM pair and search settings (``presets/*.toml``).

A preset has an optional top-level ``description`` and two tables, ``[models]`` (fields of
:class:`core.settings.ModelSettings`, with ``gen_kv_gb``/``prm_kv_gb`` in GiB instead of the byte
fields) and ``[search]`` (fields of :class:`core.search.config.SearchConfig`). Fields left out take
the dataclass defaults; command-line flags override preset fields.

``presets/`` sits next to the ``core`` package both in the checkout and in an installed copy
(pyproject ships it as package data), so :data:`PRESET_DIR` is found the same way in both.
"""

from __future__ import annotations

import re
import tomllib
import types
import typing
from dataclasses import dataclass
from pathlib import Path

from core.search.config import SearchConfig
from core.settings import ATTENTION_BACKENDS, DTYPE_NAMES, GIB, SCORER_NAMES, ModelSettings

PRESET_DIR = Path(__file__).resolve().parent.parent / "presets"
DEFAULT_PRESET = "smollm2-cpu"
_GB_FIELDS = {"gen_kv_gb": "gen_kv_bytes", "prm_kv_gb": "prm_kv_bytes"}
_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


class PresetError(Exception):
    """An unknown preset, unreadable TOML, or a bad field; the message names file, line and field."""


@dataclass
class Preset:
    """One preset as read from its file.

    models/search hold only the fields the file sets (byte fields already converted from GiB);
    :meth:`resolve` fills in the defaults.
    """

    name: str
    path: Path
    description: str
    models: dict
    search: dict

    def resolve(self) -> tuple[ModelSettings, SearchConfig]:
        """The full settings this preset stands for (preset fields over dataclass defaults)."""
        return ModelSettings(**self.models), SearchConfig(**self.search)


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


def read_preset(name_or_path: str) -> Preset:
    """Read and check a preset: known tables and fields, value types, and values the settings accept.

    Raises:
        PresetError: see :func:`find_preset`; invalid TOML; an unknown table or field; a value of the
            wrong type; a value :class:`ModelSettings`/:class:`SearchConfig` refuse (e.g. N not
            divisible by M) or a scorer not in :data:`core.settings.SCORER_NAMES`.
    """
    path = find_preset(name_or_path)
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PresetError(f"{path}: invalid TOML: {exc}") from exc
    except OSError as exc:
        raise PresetError(f"{path}: cannot read: {exc.strerror}") from exc

    def fail(table: str | None, key: str | None, message: str) -> PresetError:
        line = _line_of(text, table, key) if key else None
        where = f"{path}:{line}" if line else str(path)
        field = (f"[{table}] " if table else "") + (f"{key}: " if key else "")
        return PresetError(f"{where}: {field}{message}")

    description = data.pop("description", "")
    if not isinstance(description, str):
        raise fail(None, "description", "must be a string")
    models, search = data.pop("models", {}), data.pop("search", {})
    if data:
        raise fail(None, None, f"unknown table or key(s): {', '.join(data)} (expected description, [models], [search])")
    for table, values in (("models", models), ("search", search)):
        if not isinstance(values, dict):
            raise fail(None, table, "must be a table")
    models = dict(models)
    gib_sizes = {key: models.pop(key) for key in _GB_FIELDS if key in models}
    _check_table(models, ModelSettings, "models", fail, extra_known=tuple(_GB_FIELDS))
    _check_table(search, SearchConfig, "search", fail)
    for gb_key, gib in gib_sizes.items():
        bytes_key = _GB_FIELDS[gb_key]
        if bytes_key in models:
            raise fail("models", gb_key, f"set either {gb_key} or {bytes_key}, not both")
        if isinstance(gib, bool) or not isinstance(gib, (int, float)) or gib <= 0:
            raise fail("models", gb_key, f"must be a positive number of GiB, got {gib!r}")
        models[bytes_key] = int(gib * GIB)
    for key, message in model_settings_problems(models):
        raise fail("models", key, message)
    _check_search_values(search, fail)
    return Preset(path.stem, path, description, models, dict(search))


def load_preset(name_or_path: str) -> tuple[dict, dict]:
    """A preset's ``[models]`` and ``[search]`` fields (only those it sets), checked.

    Raises:
        PresetError: see :func:`read_preset`.
    """
    preset = read_preset(name_or_path)
    return preset.models, preset.search


def model_settings_problems(models: dict) -> list[tuple[str, str]]:
    """(field, message) for each value of ``models`` that no run could use; empty when all are fine.

    Checked here rather than at model loading so a bad preset or flag fails before minutes of
    loading: the scorer must be one of :data:`core.settings.SCORER_NAMES`, the dtype one the loader knows,
    the device ``cpu`` or ``cuda[:i]``, sizes positive.
    """
    problems = []
    if "scorer" in models and models["scorer"] not in SCORER_NAMES:
        problems.append(("scorer", f"unknown scorer '{models['scorer']}'; choose one of {', '.join(SCORER_NAMES)}"))
    if "attention_backend" in models and models["attention_backend"] not in ATTENTION_BACKENDS:
        problems.append(("attention_backend", f"unknown attention backend '{models['attention_backend']}'; choose one "
                                              f"of {', '.join(ATTENTION_BACKENDS)}"))
    if models.get("dtype") not in (None, "auto", *DTYPE_NAMES):
        problems.append(("dtype", f"unknown dtype '{models['dtype']}'; choose one of auto, {', '.join(DTYPE_NAMES)}"))
    if "device" in models and not _DEVICE.match(models["device"]):
        problems.append(("device", f"unknown device '{models['device']}'; use cpu or cuda[:index]"))
    for key in ("generator", "prm"):
        if key in models and not models[key].strip():
            problems.append((key, "must name a model"))
    for key, low in (("block_size", 1), ("max_num_seqs", 1), ("max_num_batched_tokens", 1), ("max_model_len", 2),
                     ("gen_kv_bytes", 1), ("prm_kv_bytes", 1), ("threads", 1)):
        if models.get(key) is not None and models[key] < low:
            problems.append((key, f"must be >= {low}, got {models[key]}"))
    return problems


def _check_table(values: dict, cls, table: str, fail, extra_known: tuple[str, ...] = ()) -> None:
    """Unknown fields and wrong value types (TOML has no null, so a field is never set to None)."""
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(values) - set(hints))
    if unknown:
        raise fail(table, unknown[0], f"unknown field; known fields: {', '.join(sorted((*hints, *extra_known)))}")
    for key, value in values.items():
        allowed = _allowed_types(hints[key])
        if isinstance(value, bool) and bool not in allowed or not isinstance(value, allowed):
            names = " or ".join(t.__name__ for t in allowed)
            raise fail(table, key, f"expected {names}, got {type(value).__name__} {value!r}")


def _allowed_types(hint) -> tuple[type, ...]:
    union = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    allowed = tuple(a for a in (typing.get_args(hint) if union else (hint,)) if a is not type(None))
    return allowed + (int,) if float in allowed else allowed  # TOML writes 1.0 and 1 alike for a float field


def _check_search_values(search: dict, fail) -> None:
    """SearchConfig's own checks, blamed on the field that trips them alone (else on the table)."""
    try:
        SearchConfig(**search)
    except ValueError as exc:
        for key in search:
            try:
                SearchConfig(**{key: search[key]})
            except ValueError:
                raise fail("search", key, str(exc)) from exc
        raise fail("search", None, str(exc)) from exc


def _line_of(text: str, table: str | None, key: str) -> int | None:
    """1-based line where ``key`` is set inside ``[table]`` (top level when None), or None."""
    current = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        header = re.match(r"^\[\s*([A-Za-z0-9_-]+)\s*\]", stripped)
        if header:
            current = header.group(1)
        elif current == table and re.match(rf"^{re.escape(key)}\s*=", stripped):
            return number
    return None


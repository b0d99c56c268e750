"""Problems from a dataset loaded with the `datasets` library (``solve --dataset``).

A local ``.json``/``.jsonl``/``.parquet`` file is loaded by the builder its extension names, a
local folder by whatever data files it holds, anything else as a Hugging Face Hub dataset name
(``openai/gsm8k`` with ``--dataset-config main``). Every row then goes through the same checks as
a JSONL line (:func:`core.io.problems.parse_record`), so a bad row becomes a
:class:`~core.io.problems.ProblemError` and the run goes on; what cannot be loaded at all raises
:class:`DatasetError` with a one-line message before any model is touched.

Rows are numbered from 1 in the split's own order, before shuffling; that number is the ``line``
of error records and the made-up id ``row-<N>`` of rows without an id, so both stay the same
whatever ``--shuffle``/``--limit`` pick.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, Sequence

from .problems import DEFAULT_PROBLEM_FIELDS, Problem, ProblemError, parse_record

# builder of the `datasets` library for each local data-file extension
DATA_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}
# split used when none is asked for and the dataset has several (benchmarks are scored on test)
DEFAULT_SPLIT = "test"
_MAX_MESSAGE = 300


class DatasetError(Exception):
    """A dataset that cannot be loaded or used; the message is one line naming the dataset."""


def _one_line(exc: BaseException) -> str:
    """The most telling message of a `datasets` failure, on one line.

    `datasets` wraps reader failures (bad JSON, a truncated parquet file) in a generic
    ``DatasetGenerationError``; the cause says what is actually wrong.
    """
    inner = exc
    while inner.__cause__ is not None and inner.__cause__ is not inner:
        inner = inner.__cause__
    text = " ".join(str(inner).split()) or type(inner).__name__
    return text if len(text) <= _MAX_MESSAGE else text[:_MAX_MESSAGE - 3] + "..."


def _hub_offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("HF_DATASETS_OFFLINE", "") in ("1", "ON", "YES", "TRUE")


def _load(name_or_path: str, config: str | None):
    """Load every split of a local file, local folder or hub dataset as a ``DatasetDict``.

    Raises:
        DatasetError: no such file, unknown extension, empty file, unreadable data, an unknown hub
            name, or a hub name that is not cached while ``HF_HUB_OFFLINE=1``.
    """
    import datasets

    datasets.disable_progress_bars()
    path = Path(name_or_path).expanduser()
    if path.exists():
        if path.is_file():
            builder = DATA_FILE_BUILDERS.get(path.suffix.lower())
            if builder is None:
                raise DatasetError(f"{name_or_path}: unknown data file type '{path.suffix}'; "
                                   f"use {', '.join(DATA_FILE_BUILDERS)} (or pass a JSONL file as PROBLEMS)")
            if path.stat().st_size == 0:
                raise DatasetError(f"{name_or_path}: no problems (the file is empty)")
            args, kwargs = (builder,), {"data_files": str(path)}
        else:
            args, kwargs = (str(path),), {}
        where = "local data"
    elif path.suffix.lower() in DATA_FILE_BUILDERS or name_or_path.startswith((".", "/", "~")):
        raise DatasetError(f"{name_or_path}: no such file")
    else:
        args, kwargs = (name_or_path,), {}
        where = "hub"
        if not _hub_offline():
            from core.models.specs import hub_unreachable

            # `datasets` retries a hub it cannot reach for half a minute, logging every retry
            problem = hub_unreachable(name_or_path, "dataset")
            if problem:
                raise DatasetError(f"{name_or_path}: the Hugging Face hub cannot be reached ({problem}); pass a local "
                                   f".jsonl/.json/.parquet file, or set HF_HUB_OFFLINE=1 to use a copy in the local "
                                   f"Hugging Face cache")
    if config is not None:
        kwargs["name"] = config
    # `datasets` logs reader failures with their traceback; our DatasetError says it in one line
    verbosity = datasets.logging.get_verbosity()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    try:
        return datasets.load_dataset(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - `datasets` raises a dozen unrelated types
        message = _one_line(exc)
        if where == "hub" and _hub_offline():
            raise DatasetError(f"{name_or_path}: not in the local Hugging Face cache and HF_HUB_OFFLINE=1 "
                               f"forbids downloading it ({message}); unset HF_HUB_OFFLINE on a machine with "
                               f"network, or pass a local .jsonl/.json/.parquet file") from exc
        if where == "local data" and "corresponds to no data" in message:
            # `datasets`' words for a table with a header and no row
            raise DatasetError(f"{name_or_path}: no problems (the file has no data rows)") from exc
        if "config name is missing" in message.lower():
            message += " (choose one with --dataset-config)"
        if where == "local data" and path.suffix.lower() == ".jsonl":
            message += " (pass the file as PROBLEMS instead of --dataset to get one error record per bad line)"
        raise DatasetError(f"{name_or_path}: cannot be loaded as a dataset: {message}") from exc
    finally:
        datasets.logging.set_verbosity(verbosity)


def _pick_split(dataset_dict, name: str, split: str | None):
    splits = list(dataset_dict)
    if split is not None:
        if split not in dataset_dict:
            raise DatasetError(f"{name}: no split '{split}'; it has {', '.join(splits)} (choose with --split)")
        return split
    if len(splits) == 1:
        return splits[0]
    if DEFAULT_SPLIT in dataset_dict:
        return DEFAULT_SPLIT
    raise DatasetError(f"{name}: several splits ({', '.join(splits)}) and none is '{DEFAULT_SPLIT}'; "
                       f"choose one with --split")


class DatasetRows:
    """The chosen rows of one split, as problems; iterable any number of times, lazily converted.

    Attributes:
        source: display name ``<name>[<split>]`` used in error messages.
        split: the split read.
        indices: 0-based row indices in the split, in visiting order.
    """

    def __init__(self, ds, indices: list[int], source: str, split: str, problem_fields: tuple[str, ...],
                 answer_field: str, id_field: str) -> None:
        self._ds = ds.select(indices)
        self.indices = indices
        self.source = source
        self.split = split
        self._fields = (problem_fields, answer_field, id_field)

    def __len__(self) -> int:
        return len(self.indices)

    def __iter__(self) -> Iterator[Problem | ProblemError]:
        problem_fields, answer_field, id_field = self._fields
        seen: dict[str, int] = {}
        for index, row in zip(self.indices, self._ds):
            yield parse_record(row, index + 1, self.source, problem_fields, answer_field, id_field, seen,
                               id_prefix="row")


def local_columns(path: Path) -> list[str] | None:
    """Column names of a local ``.csv``, ``.parquet`` or JSON Lines file, read without `datasets`.

    `datasets` takes one to two seconds to import; a file that lacks the problem column is a usage
    error that should answer at once. Reads the CSV header, the parquet schema, or the keys of the
    first JSON line. None when the file is of another kind or its first record cannot be read
    this way (then `datasets` decides).
    """
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            import csv

            with open(path, newline="", encoding="utf-8-sig") as fh:
                return next(csv.reader(fh), None)
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return list(pq.read_schema(path).names)
        if suffix in (".json", ".jsonl"):
            import orjson

            from .problems import iter_lines

            with open(path, "rb") as fh:
                for _, raw, _ in iter_lines(fh):
                    if raw is not None and raw.strip():
                        first = orjson.loads(raw)
                        return list(first) if isinstance(first, dict) else None
    except Exception:  # noqa: BLE001 - any doubt is left to `datasets`, which reports it in full
        return None
    return None


def _csv_has_a_row(path: Path) -> bool:
    """Whether a CSV file has a non-blank row after its header (read up to that row only)."""
    import csv

    with open(path, newline="", encoding="utf-8-sig") as fh:
        rows = csv.reader(fh)
        next(rows, None)
        return any(any(cell.strip() for cell in row) for row in rows)


def _missing_problem_column(source: str, columns: Sequence[str], problem_fields: Sequence[str]) -> DatasetError:
    wanted = " or ".join(repr(f) for f in problem_fields)
    return DatasetError(f"{source}: no column {wanted} (columns: {', '.join(columns)}); choose one with "
                        f"--problem-field")


def open_dataset(
    name_or_path: str,
    split: str | None = None,
    config: str | None = None,
    limit: int | None = None,
    shuffle: bool = False,
    seed: int = 0,
    problem_fields: Sequence[str] = DEFAULT_PROBLEM_FIELDS,
    answer_field: str = "answer",
    id_field: str = "id",
) -> DatasetRows:
    """Load a dataset and pick the rows to solve.

    Args:
        name_or_path: local ``.json``/``.jsonl``/``.parquet`` file or folder, or a hub name.
        split: split to read; None picks the only split, else ``test`` (see :data:`DEFAULT_SPLIT`).
        config: dataset configuration (hub datasets with several, e.g. GSM8K's ``main``).
        limit: read at most this many rows (after shuffling).
        shuffle: visit rows in a random order drawn from ``seed`` (numpy ``default_rng``), so the
            same seed picks the same rows and order on every run.
        seed: shuffle seed.
        problem_fields / answer_field / id_field: field names, as in
            :func:`core.io.problems.parse_record`.

    Returns:
        The rows (see :class:`DatasetRows`): one :class:`Problem` or :class:`ProblemError` each.

    Raises:
        DatasetError: see :func:`_load`; an unknown split; no column for the problem statement.
    """
    path = Path(name_or_path).expanduser()
    if path.is_file():
        columns = local_columns(path)
        if columns is not None and not any(f in columns for f in problem_fields):
            raise _missing_problem_column(name_or_path, columns, problem_fields)
        if columns is not None and path.suffix.lower() == ".csv" and not _csv_has_a_row(path):
            raise DatasetError(f"{name_or_path}: no problems (the file has no data rows)")
    import numpy as np

    dataset_dict = _load(name_or_path, config)
    split = _pick_split(dataset_dict, name_or_path, split)
    ds = dataset_dict[split]
    source = f"{name_or_path}[{split}]"
    if not any(f in ds.column_names for f in problem_fields):
        raise _missing_problem_column(source, ds.column_names, problem_fields)
    order = np.random.default_rng(seed).permutation(len(ds)) if shuffle else np.arange(len(ds))
    if limit is not None:
        order = order[:limit]
    return DatasetRows(ds, [int(i) for i in order], source, split, tuple(problem_fields), answer_field, id_field)

"""Where `solve` reads its problems: a JSONL file or stdin (PROBLEMS), or a dataset (--dataset)."""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import click

from core.io.problems import DEFAULT_PROBLEM_FIELDS, Problem, ProblemError, count_records

# PROBLEMS files read as tables through `datasets` (like --dataset) rather than as JSONL
TABLE_SUFFIXES = (".csv", ".parquet", ".json")


def input_options(fn):
    """Add the field-name and dataset options of `solve` (all optional)."""
    opts = [
        click.option("--dataset", default=None, metavar="NAME_OR_PATH",
                     help="Read problems with the `datasets` library instead of PROBLEMS: a local .jsonl, .json "
                          "or .parquet file, or a hub name (org/name; needs network or the HF cache)."),
        click.option("--dataset-config", default=None, metavar="NAME",
                     help="--dataset configuration, for hub datasets with several (GSM8K: main)."),
        click.option("--split", default=None,
                     help="--dataset split (default: the only split, else 'test')."),
        click.option("--shuffle", is_flag=True,
                     help="--dataset: visit rows in a random order drawn from --seed (with --limit: a random sample)."),
        click.option("--problem-field", default=None, metavar="NAME",
                     help="Field holding the problem statement (default: 'problem', else 'question')."),
        click.option("--answer-field", default="answer", show_default=True, metavar="NAME",
                     help="Field holding the reference answer (a GSM8K solution ending in '#### 42' gives 42)."),
        click.option("--id-field", default="id", show_default=True, metavar="NAME",
                     help="Field holding the problem id (missing ids are made up from the line or row number)."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return functools.wraps(fn)(fn)


@dataclass(frozen=True)
class InputChoice:
    """The flags of `solve` that choose and read its input.

    problems: PROBLEMS: a JSONL file, ``-`` for stdin, or a .csv/.parquet/.json table; None with
        ``dataset``.
    dataset: --dataset: a local file or a hub name read with `datasets`; None with ``problems``.
    dataset_config / split / shuffle: --dataset-config, --split, --shuffle (``dataset`` only).
    seed: the run's seed, which orders a shuffled dataset.
    limit: --limit: the first N problems (N rows drawn at random with ``shuffle``); None for all.
    problem_field: --problem-field (None: ``problem``, else ``question``).
    answer_field / id_field: --answer-field, --id-field.
    """

    problems: str | None = None
    dataset: str | None = None
    dataset_config: str | None = None
    split: str | None = None
    shuffle: bool = False
    seed: int = 0
    limit: int | None = None
    problem_field: str | None = None
    answer_field: str = "answer"
    id_field: str = "id"


@dataclass
class ProblemInput:
    """The chosen input of one run.

    Attributes:
        source: name used in error messages (``<stdin>``, the file, or ``name[split]``).
        label: short name for the default output folder ``runs/<label>``.
        total: how many items it yields (None for stdin, which is read once and not counted).
        open: returns a fresh iterator over the items (``--limit`` applied); stdin can be opened once.
        config: the input settings stored in ``OUT/run.json`` and compared on ``--resume``.
    """

    source: str
    label: str
    total: int | None
    open: Callable[[], Iterator[Problem | ProblemError]]
    config: dict


def _limited(items: Iterable, limit: int | None) -> Iterator:
    return iter(items) if limit is None else itertools.islice(items, limit)


def _require_a_valid_problem(items: Iterator[Problem | ProblemError], source: str) -> list[Problem | ProblemError]:
    """Read ``items`` up to the first valid problem and return what was read.

    A run whose every record is bad would load the models only to report each line; this makes
    it a usage error at once. Reading stops at the first valid record, so a good file costs one line.

    Raises:
        click.UsageError: no record of ``items`` is a valid problem (the first error is shown).
    """
    head: list[Problem | ProblemError] = []
    for item in items:
        head.append(item)
        if isinstance(item, Problem):
            return head
    errors = [item for item in head if isinstance(item, ProblemError)]
    if not errors:
        raise click.UsageError(f"{source}: no problems")
    more = f" (and {len(errors) - 1} more bad record{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    hint = ""
    if errors[0].field is None and "invalid JSON" in errors[0].message:
        hint = ("; PROBLEMS must be JSONL, one JSON object per line (a .csv, .parquet or .json file is read as a "
                "table by its extension)")
    raise click.UsageError(f"{source}: no valid problem in {len(head)} record{'s' if len(head) != 1 else ''}; "
                           f"{errors[0].describe()}{more}{hint}")


def open_input(choice: InputChoice) -> ProblemInput:
    """Check the input options and open the input (a dataset is loaded here, before any model).

    Raises:
        click.UsageError: both or neither of PROBLEMS and --dataset; dataset options without
            --dataset; a missing, unreadable or empty file; a dataset that cannot be loaded.
    """
    from core.io.dataset_source import DatasetError, open_dataset
    from core.io.problems import read_problems

    problems, dataset, limit = choice.problems, choice.dataset, choice.limit
    split, dataset_config, shuffle = choice.split, choice.dataset_config, choice.shuffle
    problem_field, answer_field, id_field = choice.problem_field, choice.answer_field, choice.id_field
    if (problems is None) == (dataset is None):
        raise click.UsageError("give exactly one input: a PROBLEMS file ('-' for stdin) or --dataset NAME_OR_PATH")
    if problems is not None and Path(problems).suffix.lower() in TABLE_SUFFIXES:
        # a table file is read like --dataset does; line-by-line JSON errors would only confuse
        problems, dataset = None, problems
    fields = (problem_field,) if problem_field else DEFAULT_PROBLEM_FIELDS
    for name, value in (("--problem-field", problem_field), ("--answer-field", answer_field),
                        ("--id-field", id_field)):
        if value is not None and not value.strip():
            raise click.UsageError(f"{name} must not be empty")
    config = {"problem_fields": list(fields), "answer_field": answer_field, "id_field": id_field}

    if dataset is not None:
        try:
            rows = open_dataset(dataset, split=split, config=dataset_config, limit=limit, shuffle=shuffle,
                                seed=choice.seed, problem_fields=fields, answer_field=answer_field, id_field=id_field)
        except DatasetError as exc:
            raise click.UsageError(str(exc)) from exc
        if len(rows) == 0:
            raise click.UsageError(f"{rows.source}: no problems (the split has no rows)")
        _require_a_valid_problem(iter(rows), rows.source)
        config.update(dataset=dataset, dataset_config=dataset_config, split=rows.split,
                      shuffle=shuffle)
        return ProblemInput(rows.source, Path(dataset).stem or "dataset", len(rows), lambda: iter(rows), config)

    for flag, value in (("--split", split), ("--dataset-config", dataset_config), ("--shuffle", shuffle or None)):
        if value is not None:
            raise click.UsageError(f"{flag} works with --dataset; a PROBLEMS file is read in order, as it is")
    if problems == "-":
        opened = []
        stdin_items = _limited(read_problems("-", fields, answer_field, id_field), limit)
        # stdin is read once: the records read to find a valid one are replayed first
        head = _require_a_valid_problem(stdin_items, "<stdin>")

        def open_stdin() -> Iterator[Problem | ProblemError]:
            if opened:
                raise RuntimeError("stdin can be read once")
            opened.append(True)
            return itertools.chain(head, stdin_items)

        return ProblemInput("<stdin>", "stdin", None, open_stdin, config)

    path = Path(problems)
    if path.is_dir():
        raise click.BadParameter(f"{problems} is a directory, not a JSONL file", param_hint="PROBLEMS")
    if not path.exists():
        raise click.BadParameter(f"no such file: {problems}", param_hint="PROBLEMS")
    if not path.is_file():
        raise click.BadParameter(f"{problems} is not a regular file (a device, pipe or socket); give a JSONL file, "
                                 f"or - to read problems from stdin", param_hint="PROBLEMS")
    try:
        total = count_records(path)
    except OSError as exc:
        raise click.BadParameter(f"{problems}: cannot be read: {exc.strerror or exc}", param_hint="PROBLEMS") from exc
    if total == 0:
        raise click.UsageError(f"{problems}: no problems (the file is empty or holds only blank lines)")
    if limit is not None:
        total = min(total, limit)
    _require_a_valid_problem(_limited(read_problems(problems, fields, answer_field, id_field), limit), problems)
    return ProblemInput(problems, path.stem, total,
                        lambda: _limited(read_problems(problems, fields, answer_field, id_field), limit), config)

"""Verification requests built from reference solutions, with no generator in the loop.

`profile-threshold` and `bench verifier` score steps of real worked solutions (GSM8K, MATH) on the
PRM exactly as the search does: a path's scorer input starts at ``scorer.root_ids(problem, system
prompt)`` and grows by ``scorer.step_ids(step)`` per step (docs/design.md, "Verifier and PRM formats"), and the step
being scored goes through ``scorer.request(parent_prefix, prefix)``. A step's text ends with the
step delimiter, as a generated step does.
"""

from __future__ import annotations

import re

from .base import ScoreRequest, Scorer, encode_text

# GSM8K reference solutions carry calculator annotations such as "<<48/2=24>>" (the dataset's
# tool-use markup, not part of the prose) and end with a "#### <answer>" line.
_CALC_ANNOTATION = re.compile(r"<<[^<>]*>>")
_FINAL_ANSWER = re.compile(r"^####\s*(.+?)\s*$")


def solution_steps(solution: str) -> list[str]:
    """Reasoning steps of a reference solution: its non-blank lines, stripped.

    GSM8K calculator annotations (``<<48/2=24>>``) are removed and the closing ``#### 18`` line
    becomes ``The final answer is \\boxed{18}.``, the form the search's system prompt asks for.

    Returns:
        The steps in order (empty for an empty or blank solution).
    """
    steps = []
    for line in _CALC_ANNOTATION.sub("", solution).splitlines():
        line = line.strip()
        if not line:
            continue
        final = _FINAL_ANSWER.match(line)
        steps.append(f"The final answer is \\boxed{{{final.group(1)}}}." if final else line)
    return steps


def step_ids(scorer: Scorer, step_text: str, first_step: bool) -> list[int]:
    """The ids one step adds to its parent's prefix (``first_step``: the parent is the root)."""
    return scorer.step_ids(step_text, encode_text(scorer.tokenizer, step_text), first_step=first_step)


def path_prefixes(scorer: Scorer, problem: str, system_prompt: str, steps: list[str]) -> list[list[int]]:
    """Scorer ``prefix_ids`` along one path: ``[root, root+s1, root+s1+s2, ...]``.

    ``steps`` are step texts including their delimiter. Returns ``len(steps) + 1`` id lists.
    """
    prefixes = [list(scorer.root_ids(problem, system_prompt))]
    for i, text in enumerate(steps):
        prefixes.append(prefixes[-1] + step_ids(scorer, text, first_step=i == 0))
    return prefixes


def step_request(scorer: Scorer, parent_prefix: list[int], step_text: str, first_step: bool) -> ScoreRequest:
    """The scorer's prefill for ``step_text`` as the next step after ``parent_prefix``.

    ``first_step``: the step is at depth 1 (``parent_prefix`` is the root's).
    """
    return scorer.request(parent_prefix, parent_prefix + step_ids(scorer, step_text, first_step))


def read_solved_problems(paths, limit: int | None = None) -> list:
    """Problems that carry a reference ``solution`` (string), in file order, from JSONL files.

    Records without a ``solution`` field are skipped (a file may mix solved and unsolved records).

    Args:
        paths: JSONL files (see :func:`core.io.problems.read_problems`).
        limit: stop after this many solved problems (None: all).

    Returns:
        :class:`core.io.problems.Problem` objects; ``extra["solution"]`` holds the solution.

    Raises:
        OSError: a file cannot be opened.
        ValueError: a malformed line, or a ``solution`` that is not a string (the message names
            file, line and field), or no record with a solution at all.
    """
    from core.io.problems import ProblemError, read_problems

    out = []
    for path in paths:
        for rec in read_problems(path):
            if isinstance(rec, ProblemError):
                raise ValueError(rec.describe())
            solution = rec.extra.get("solution")
            if solution is None:
                continue
            if not isinstance(solution, str):
                raise ValueError(f"{path}:{rec.line}: field 'solution': expected a string, "
                                 f"got {type(solution).__name__}")
            out.append(rec)
            if limit is not None and len(out) >= limit:
                return out
    if not out:
        raise ValueError(f"{', '.join(map(str, paths))}: no record has a 'solution' field (a reference "
                         "solution is needed to build steps)")
    return out

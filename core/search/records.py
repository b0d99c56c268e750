"""The lines `solve` writes for a problem: its answer record (graded) and trace, or an error record.

Built wherever the search ran: in the `solve` process itself, or in a replica of a scaled-out run
(core/distributed), which sends the finished record and trace to the run's driver process. Grading
happens here too, so its time limit holds in whichever process searched the problem.
"""

from __future__ import annotations

import time

from core.io.problems import Problem, ProblemError

from .config import PICK_FIELDS


def answer_record(problem: Problem, result: dict, search) -> dict:
    """The answer record of a finished problem.

    Args:
        problem: the problem as read from the input.
        result: ``search.result()`` (see :meth:`core.search.beam_search.BeamSearch.result`).
        search: the finished :class:`~core.search.beam_search.BeamSearch` (its policy name and start time).

    Returns:
        ``id``, ``gold``, ``pred``, ``problem_hash`` (:func:`core.io.problems.problem_hash` of the
        statement); with a gold answer ``correct``, ``gold_parsed`` and one
        ``correct_<rule>`` per selection rule; then every field of ``result``, ``policy`` and
        ``time_s`` (seconds from admission to now, on this process's clock). With a gold answer,
        every ``at_n`` entry (the picks over the first n completions) is graded the same way:
        ``correct`` and ``correct_<rule>`` beside its picks.
    """
    from core.grading.equivalence import answers_equivalent, grade
    from core.io.problems import problem_hash

    gold = problem.answer
    record = {"id": problem.id, "gold": gold, "pred": result["pred"], "problem_hash": problem_hash(problem.problem)}
    result = dict(result)
    if gold is not None:
        # the problem statement tells a unit from a variable (gold 6m must not accept 6)
        graded = grade(result["pred"], gold, problem.problem)
        record["correct"], record["gold_parsed"] = graded.correct, graded.gold_parsed
        verdicts = {result["pred"]: graded.correct}  # selections often agree: grade each answer once

        def verdict(pick) -> bool:
            if pick not in verdicts:
                verdicts[pick] = answers_equivalent(pick, gold, problem.problem)
            return verdicts[pick]

        for rule, field in PICK_FIELDS.items():
            record[f"correct_{rule}"] = verdict(result[field])
        if "at_n" in result:
            result["at_n"] = {n: {**entry, "correct": verdict(entry["pred"]),
                                  **{f"correct_{rule}": verdict(entry[field]) for rule, field in PICK_FIELDS.items()}}
                              for n, entry in result["at_n"].items()}
    record.update(result)
    record["policy"] = search.policy.name
    record["time_s"] = round(time.perf_counter() - search.tree.t0, 3)
    return record


def problem_trace(search) -> dict:
    """The search tree of a finished problem as written to ``OUT/traces/`` (with its policy)."""
    trace = search.tree.to_dict()
    trace["policy"] = search.policy.name
    # the problem's token counts, as in its answer record (the nodes alone cannot tell what CD shared)
    trace["num_generated_tokens"] = search.sampled_tokens - search.cd_saved_tokens
    trace["num_sampled_tokens"] = search.sampled_tokens
    trace["num_cd_saved_tokens"] = search.cd_saved_tokens
    return trace


def error_record(err: ProblemError) -> dict:
    """The record written for an input item that could not be searched."""
    return {"id": err.id, "line": err.line, "error": {"field": err.field, "message": err.message,
                                                      "where": err.describe()}}


def count_record(counts: dict, record: dict) -> None:
    """Add one answer record to a run's counts (``done``, ``graded``, ``correct``, ``correct_<rule>``,
    and per ``at_n`` entry ``graded@<n>``, ``correct@<n>`` and ``correct_<rule>@<n>``)."""
    counts["done"] += 1
    if record.get("gold") is not None:
        counts["graded"] += 1
        counts["correct"] += int(record["correct"])
        for rule in PICK_FIELDS:
            counts[f"correct_{rule}"] += int(record[f"correct_{rule}"])
        # per subset size, graded apart: a resumed run may keep records written without at_n
        for n, entry in (record.get("at_n") or {}).items():
            counts[f"graded@{n}"] = counts.get(f"graded@{n}", 0) + 1
            for key in ("correct", *(f"correct_{rule}" for rule in PICK_FIELDS)):
                counts[f"{key}@{n}"] = counts.get(f"{key}@{n}", 0) + int(entry[key])

"""Scorers side by side on one loaded PRM (``specscale bench verifier``): AUROC and pairwise accuracy
of each on the same correct/wrong step pairs (:mod:`core.verify.quality`)."""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence


def compare_scorers(settings, prm, scorers: Sequence[str], pairs, search_cfg,
                    on_scorer: Callable[[str, dict], None] | None = None) -> dict[str, dict]:
    """:func:`core.verify.quality.evaluate_scorer` of each scorer in ``scorers``, in order, each
    through its own verifier and PRM engine over the one loaded ``prm``
    (:class:`core.models.loader.LoadedModel`), sized by ``settings``
    (:class:`core.settings.ModelSettings`); steps end with ``search_cfg.step_delimiter`` after
    its system prompt, as the search scores them. ``on_scorer(name, figures)`` after each.

    Raises:
        ValueError: a scorer that refuses the PRM's head, or an input too long for its engine.
    """
    from core.solver import build_verifier
    from core.verify.quality import evaluate_scorer

    results = {}
    for name in scorers:
        verifier = build_verifier(dataclasses.replace(settings, scorer=name), prm)
        results[name] = evaluate_scorer(verifier, pairs, search_cfg.system_prompt, search_cfg.step_delimiter)
        if on_scorer is not None:
            on_scorer(name, results[name])
    return results


def best_scorer(results: dict[str, dict]) -> str:
    """The scorer with the highest AUROC, pairwise accuracy breaking ties (the first of equals)."""
    return max(results, key=lambda n: (results[n]["auroc"], results[n]["pairwise_accuracy"]))

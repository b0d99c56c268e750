"""Search policies as small rule objects: when to score, when to expand, what to prune early.

Every policy runs the same beam search and the same decision rule (docs/design.md, "Policies");
a :class:`Policy` only answers the questions where they differ, and
:class:`core.search.beam_search.BeamSearch` asks them. The four policies are instances below.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from core.verify.lazy import LazyFlushRule

# when a candidate is expanded into its children
AFTER_DECISION = "after-decision"  # once its depth is decided and it was selected
WHEN_SCORED = "when-scored"  # as soon as its step is scored, before its depth is decided
FIRST_CHILD_AT_ONCE = "first-child-at-once"  # its first child starts when its step ends, at low priority


@dataclass(frozen=True)
class Policy:
    """The rules one search policy follows.

    name: the policy's name (``--policy``).
    score_at_once: a finished step is queued for scoring at once; otherwise once every candidate
        of its depth finished its step.
    lookahead: with depth-wise scoring, also queue the finished speculative steps below the depth
        (FastTTS's lookahead verification).
    expand: when a candidate gets its children: :data:`AFTER_DECISION`, :data:`WHEN_SCORED` or
        :data:`FIRST_CHILD_AT_ONCE`.
    speculation_cap: with :data:`FIRST_CHILD_AT_ONCE`, no speculation starts while this many
        sequences are unfinished, and a problem's speculative steps still generating are cancelled
        (FastTTS's speculative candidate selection).
    early_pruning: prune a scored candidate that k better-scored ones already outrank (EP, paper
        section 4.1). perfect_score: with EP, k candidates at this score decide their depth.
    dedup: candidates with a common prefix share one sequence (CD, section 4.2).
    lazy: the verification queue's flush rule (LV, section 4.3); None flushes whatever is queued
        after every engine step.
    low_priority: scheduling priority of speculative work (lower runs first): FastTTS's first
        children, and with a speculation budget every speculative child until its parent is selected.
    speculation_budget: tokens per engine step that speculative work may fill up to (the measured
        batch-size knee, :mod:`core.engine.knee`); ``"auto"`` until the run measures it, None for no
        budget (speculative children then run at priority 0, beside the frontier).
    """

    name: str
    score_at_once: bool = False
    lookahead: bool = False
    expand: str = AFTER_DECISION
    speculation_cap: int | None = None
    early_pruning: bool = False
    perfect_score: float | None = None
    dedup: bool = False
    lazy: LazyFlushRule | None = None
    low_priority: int = 1
    speculation_budget: int | str | None = None

    @property
    def speculative(self) -> bool:
        """Whether candidates are expanded before their depth is decided."""
        return self.expand != AFTER_DECISION


NON_SPEC = Policy("non-spec")
NAIVE_SPEC = Policy("naive-spec", score_at_once=True, expand=WHEN_SCORED)
FASTTTS = Policy("fasttts", lookahead=True, expand=FIRST_CHILD_AT_ONCE, speculation_cap=256)
SPECSCALE = Policy("specscale", score_at_once=True, expand=WHEN_SCORED, early_pruning=True, perfect_score=1.0,
                   dedup=True, lazy=LazyFlushRule())

# in the order of core.settings.POLICY_NAMES, the list flags are checked against (tested equal)
POLICIES = {p.name: p for p in (NON_SPEC, NAIVE_SPEC, FASTTTS, SPECSCALE)}

# policies whose speculative children the speculation budget schedules (FastTTS has its own cap)
BUDGETED = ("naive-spec", "specscale")

# SearchConfig fields that only the specscale policy reads (EP, CD, LV switches and settings)
SPECSCALE_ONLY = ("early_pruning", "dedup", "perfect_score", "lazy_verification", "lv_threshold",
                  "lv_max_deferrals")


# policies that have nothing to do under a strategy: best-of-N keeps every sample, so no depth is
# ever decided against a candidate and there is nothing to speculate on
UNFIT = {
    ("best-of-n", "naive-spec"): "best-of-n keeps every sample, so there is no decision to speculate on; use "
                                 "--policy non-spec, or specscale for deduplication and lazy verification",
    ("best-of-n", "fasttts"): "best-of-n keeps every sample, so FastTTS's speculative beam extension has nothing "
                              "to extend; use --policy non-spec, or specscale for deduplication and lazy "
                              "verification",
}


def check_fit(name: str, strategy: str) -> None:
    """Refuse a policy that makes no sense for a search strategy.

    Raises:
        ValueError: the pair is in :data:`UNFIT` (the message says why and what to use).
    """
    reason = UNFIT.get((strategy, name))
    if reason is not None:
        raise ValueError(f"--policy {name} with --strategy {strategy}: {reason}")


def policy_for(name: str, config) -> Policy:
    """The policy ``name`` with the switches of ``config`` (a SearchConfig) applied where it has them.

    ``specscale`` has switches: ``early_pruning``, ``perfect_score``, ``dedup``,
    ``lazy_verification`` with ``lv_threshold``/``lv_max_deferrals``; ``specscale`` and
    ``naive-spec`` take ``speculation_budget`` (:data:`BUDGETED`).

    Raises:
        ValueError: an unknown policy name, or one that makes no sense for ``config.strategy``
            (:func:`check_fit`).
    """
    if name not in POLICIES:
        raise ValueError(f"unknown policy '{name}'; choose one of {', '.join(POLICIES)}")
    check_fit(name, config.strategy)
    policy = POLICIES[name]
    if name in BUDGETED:
        policy = replace(policy, speculation_budget=config.speculation_budget)
    if name != "specscale":
        return policy
    return replace(policy, early_pruning=config.early_pruning,
                   perfect_score=config.perfect_score if config.early_pruning else None, dedup=config.dedup,
                   lazy=LazyFlushRule(config.lv_threshold, config.lv_max_deferrals)
                   if config.lazy_verification else None)

"""Search settings shared by every policy (defaults from Snell et al. / search-and-learn)."""

from __future__ import annotations

from dataclasses import dataclass

from core.verify.lazy import LazyFlushRule

from .aggregation import AGGREGATIONS

# search strategies (docs/design.md, "Strategies"): how the N candidates of a problem are grouped
STRATEGIES = {
    "beam": "beam search: one beam of N, the top N/M expanded into M children each step",
    "best-of-n": "N independent samples of the whole solution, every step scored",
    "dvts": "diverse verifier tree search: N/M independent beams of width M, each keeping its best",
}
# how pred is chosen among the N completions
SELECTIONS = {
    "best": "the completion with the best path score",
    "weighted-vote": "the answer whose equivalent completions have the largest summed path score",
    "majority": "the answer most completions agree on (ties to the best path score)",
}

# every answer record keeps each rule's pick and grades it: short rule name -> the record's field
# (the record's correct_<rule> and summary.json's accuracy_<rule> use the short name)
PICK_FIELDS = {"best": "pred_best", "weighted": "pred_weighted", "majority": "pred_majority"}

DEFAULT_SYSTEM_PROMPT = (
    "Solve the math problem step by step. Separate steps with a blank line, keep each step short, "
    "and end with the final answer written as \\boxed{answer}."
)


def parse_speculation_budget(value) -> int | str | None:
    """``"auto"``, a row count >= 1, or None from a flag, preset or config value (``"off"``, ``"none"``
    and None mean no budget; a digit string is a row count).

    Raises:
        ValueError: anything else (the message names the accepted forms).
    """
    if value is None or (isinstance(value, str) and value.strip().lower() in ("off", "none")):
        return None
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ValueError(f"speculation budget must be 'auto', 'off' or a number of rows >= 1, got {value!r}")


@dataclass
class SearchConfig:
    """PRM-guided beam search settings.

    beam_size: N, completed candidates per problem. beam_width: M, children per selected candidate;
    top-k = N / M candidates are selected per depth. max_steps: step cap per path.
    max_step_tokens / max_tokens: token limits per step and per path (generated tokens).
    aggregation: path score from step scores (last | min | prod | mean).
    seed: run seed; each candidate's sampler seed derives from it, the problem id and its tree path.
    early_pruning / dedup: SpecScale's EP (paper section 4.1) and CD (section 4.2); used by the
        ``specscale`` policy only.
    perfect_score: with EP, a score at or above which k candidates close their depth at once
        (None disables the rule).
    lazy_verification / lv_threshold / lv_max_deferrals: SpecScale's LV (section 4.3), see
        :mod:`core.verify.lazy`; used by the ``specscale`` policy only.
    strategy: how the N candidates are grouped (:data:`STRATEGIES`); best-of-n ignores M.
    select: how ``pred`` is chosen among the completions (:data:`SELECTIONS`).
    speculation_budget: tokens per engine step that speculative children may fill up to (policies
        ``specscale`` and ``naive-spec``): ``"auto"`` (the generator's measured batch-size knee,
        :mod:`core.engine.knee`), a number of rows, or None (``"off"``: no budget). It changes when
        work runs, never what is searched.

    Raises:
        ValueError: N < 1, M < 1, N not divisible by M (beam, dvts), temperature < 0, top_p outside (0, 1],
            non-positive limits, or an unknown aggregation, strategy or selection.
    """

    beam_size: int = 4
    beam_width: int = 4
    temperature: float = 0.8
    top_p: float = 1.0
    max_steps: int = 40
    step_delimiter: str = "\n\n"
    max_step_tokens: int = 256
    max_tokens: int = 2048
    aggregation: str = "last"
    seed: int = 0
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    early_pruning: bool = True
    dedup: bool = True
    perfect_score: float | None = 1.0
    lazy_verification: bool = True
    lv_threshold: int = 2048
    lv_max_deferrals: int = 6
    strategy: str = "beam"
    select: str = "best"
    speculation_budget: int | str | None = "auto"

    def __post_init__(self):
        if self.beam_size < 1:
            raise ValueError(f"beam size N must be >= 1, got {self.beam_size}")
        if self.beam_width < 1:
            raise ValueError(f"beam width M must be >= 1, got {self.beam_width}")
        if self.beam_size % self.beam_width and self.strategy != "best-of-n":
            raise ValueError(f"beam size N={self.beam_size} must be divisible by beam width M={self.beam_width}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        for name in ("max_steps", "max_step_tokens", "max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        LazyFlushRule(self.lv_threshold, self.lv_max_deferrals)  # raises ValueError on bad LV settings
        if not self.step_delimiter:
            raise ValueError("step delimiter must not be empty (it is what ends a step)")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy '{self.strategy}'; choose one of {', '.join(STRATEGIES)}")
        if self.select not in SELECTIONS:
            raise ValueError(f"unknown selection '{self.select}'; choose one of {', '.join(SELECTIONS)}")
        self.speculation_budget = parse_speculation_budget(self.speculation_budget)
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"unknown aggregation '{self.aggregation}'; choose one of {', '.join(AGGREGATIONS)}")

    @property
    def num_selected(self) -> int:
        """k = N / M: candidates a beam search selects per depth while none has completed (the
        paper's "top-k"; named apart from sampling's top-p/top-k)."""
        return self.beam_size // self.beam_width

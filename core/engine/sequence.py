"""One physical sequence in the engine: its tokens, KV block table and stopping state."""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field
from typing import Any

_ids = itertools.count()


class SeqStatus(enum.Enum):
    WAITING = "waiting"  # needs (re)prefill; in the scheduler's waiting queue
    RUNNING = "running"  # admitted; gets tokens every step
    PAUSED = "paused"  # stopped at a step boundary, KV kept, waiting for the search to resume or free it
    FINISHED = "finished"  # freed; its blocks are released


class StopReason(str, enum.Enum):
    """Why a sequence stopped generating (recorded on the sequence and in traces)."""

    DELIMITER = "delimiter"  # the step delimiter was generated (the step is complete, the path is not)
    EOS = "eos"
    STEP_TOKENS = "step_tokens"  # per-step token limit
    MAX_TOKENS = "max_tokens"  # total generated-token limit of the path
    CONTEXT = "context"  # the model's context length
    PREFILLED = "prefilled"  # prefill-only sequence done

    @property
    def ends_path(self) -> bool:
        """True when the search path cannot continue after this stop."""
        return self is not StopReason.DELIMITER


@dataclass
class SamplingParams:
    """Sampling settings of a sequence.

    temperature: 0 means greedy (argmax); top_p: nucleus mass in (0, 1].
    """

    temperature: float = 0.8
    top_p: float = 1.0

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclass
class StopCriteria:
    """When a sequence stops (checked after every sampled token).

    step_delimiter: text that ends a step (included in the step); None disables it.
    eos_token_ids: token ids that end the path.
    max_step_tokens: most tokens one step may have.
    max_tokens: most generated tokens (all steps) of the path, counted from ``num_prompt_tokens``.
    ignore_eos: keep generating past EOS (benchmarks with fixed output lengths).
    """

    step_delimiter: str | None = "\n\n"
    eos_token_ids: frozenset[int] = frozenset()
    max_step_tokens: int = 512
    max_tokens: int = 2048
    ignore_eos: bool = False


@dataclass(eq=False)
class Sequence:
    """A physical sequence: prompt plus generated tokens, with KV in the engine's block pool.

    ``seeds``/``candidates`` are parallel lists: one entry per *logical* candidate this sequence
    stands for. Each sampled row draws one token per seed; the engine forks the sequence when
    candidates must part ways. ``candidates`` are opaque, hashable ids of the caller's (the search
    uses ``(problem key, node id)``); the engine only compares and reports them.
    ``read_positions`` (prefill-only sequences) are the token positions whose logits are returned.
    """

    token_ids: list[int]
    sampling: SamplingParams
    stop: StopCriteria
    seeds: list[int] = field(default_factory=list)
    candidates: list[Any] = field(default_factory=list)
    prefill_only: bool = False
    read_positions: list[int] = field(default_factory=list)
    dedup: bool = False
    priority: int = 0  # lower runs first; ties by arrival
    seq_id: int = field(default_factory=lambda: next(_ids))
    num_prompt_tokens: int = 0
    num_computed: int = 0
    num_cached_prompt: int = 0  # tokens served from the prefix cache at the last admission
    block_table: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)
    status: SeqStatus = SeqStatus.WAITING
    stop_reason: StopReason | None = None
    step_start: int = 0
    stop_tail: str = ""  # the step's last len(delimiter) - 1 decoded characters
    stop_pending: bytes = b""  # bytes of a character that the step's tokens have not completed yet
    step_has_text: bool = False  # the current step has non-whitespace text (a delimiter may end it)
    read_logits: list = field(default_factory=list)
    arrival: int = 0
    num_preemptions: int = 0

    def __post_init__(self):
        if not self.num_prompt_tokens:
            self.num_prompt_tokens = len(self.token_ids)
        if not self.step_start:
            self.step_start = len(self.token_ids)

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def is_paused(self) -> bool:
        """True while the sequence waits at a step boundary (its KV kept) to be resumed or freed."""
        return self.status is SeqStatus.PAUSED

    @property
    def num_pending(self) -> int:
        """Tokens whose KV is not computed yet."""
        return len(self.token_ids) - self.num_computed

    @property
    def step_token_ids(self) -> list[int]:
        """Tokens generated in the current step."""
        return self.token_ids[self.step_start:]

    @property
    def num_generated(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

"""The search tree of one problem: nodes hold one reasoning step each."""

from __future__ import annotations

import enum
import time
import weakref
from dataclasses import dataclass, field

from core.engine.sequence import Sequence, StopReason


class NodeStatus(str, enum.Enum):
    GENERATING = "generating"
    FINISHED = "finished"  # step generated, waiting for its score
    VERIFIED = "verified"  # scored, not yet decided
    SELECTED = "selected"  # kept and expanded
    COMPLETED = "completed"  # a finished path (one of the N answers)
    PRUNED = "pruned"  # lost selection (or early pruning)
    CANCELLED = "cancelled"  # a speculative descendant of a pruned candidate, or a surplus child


class EndReason(str, enum.Enum):
    """Why a path ended."""

    EOS = "eos"
    LENGTH = "length"
    STEP_CAP = "step-cap"
    PRUNED = "pruned"
    CANCELLED = "cancelled"


@dataclass(eq=False)
class Node:
    """One candidate step; the root holds the prompt and has no step.

    parent_ref: a weak reference to the parent (the tree holds every node; a strong parent pointer
        beside the children lists would make every tree a reference cycle, freed only by the
        garbage collector); read it as :attr:`parent`.
    path: child indices from the root joined by '.' (seeds the candidate's sampler).
    step_start: index in the carrying sequence's tokens where this step begins.
    prefix_ids: the scorer's input ids up to and including this step.
    scores: step scores along the path from depth 1 to this node.
    """

    node_id: int
    parent_ref: "weakref.ref[Node] | None"
    depth: int
    path: str
    seed: int = 0
    seq: Sequence | None = None
    step_start: int = 0
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    status: NodeStatus = NodeStatus.GENERATING
    stop_reason: StopReason | None = None
    end_reason: EndReason | None = None
    score: float | None = None
    path_score: float | None = None
    scores: list[float] = field(default_factory=list)
    prefix_ids: list[int] = field(default_factory=list)
    children: list["Node"] = field(default_factory=list)
    t_start: float = 0.0
    t_finish: float | None = None
    t_scored: float | None = None
    beam: int = 0  # the independently decided group it belongs to (DVTS subtree, best-of-N sample)
    speculative: bool = False  # created before its parent's depth was decided
    pruned_by: str | None = None  # the policy rule that pruned or cancelled it
    potential: int = 1  # logical candidates sharing its sequence when its step finished (CD)
    submitted: bool = False  # its verification task was queued
    t_submitted: float | None = None  # when it was queued for verification (t_scored - this = time queued)

    @property
    def parent(self) -> "Node | None":
        """The parent node (None for the root)."""
        return self.parent_ref() if self.parent_ref is not None else None

    def path_nodes(self) -> list["Node"]:
        """Nodes from depth 1 down to this one."""
        out = []
        n = self
        while n is not None and n.parent is not None:
            out.append(n)
            n = n.parent
        return out[::-1]


class SearchTree:
    """All nodes of one problem's search, with timestamps relative to ``t0`` (seconds)."""

    def __init__(self, problem_id: str, problem: str, root_token_ids: list[int], t0: float | None = None):
        self.problem_id = problem_id
        self.problem = problem
        self.t0 = t0 if t0 is not None else time.perf_counter()
        self.nodes: list[Node] = []
        self.root = self._new(None, 0, "")
        self.root.token_ids = list(root_token_ids)
        self.root.status = NodeStatus.SELECTED

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def _new(self, parent: Node | None, depth: int, path: str) -> Node:
        node = Node(len(self.nodes), weakref.ref(parent) if parent is not None else None, depth, path,
                    t_start=self.now())
        self.nodes.append(node)
        if parent is not None:
            parent.children.append(node)
        return node

    def add_child(self, parent: Node, index: int) -> Node:
        """A new candidate under ``parent`` with path ``parent.path + '.' + index``."""
        path = f"{parent.path}.{index}" if parent.path else str(index)
        node = self._new(parent, parent.depth + 1, path)
        node.beam = parent.beam
        return node

    def to_dict(self, tokenizer=None) -> dict:
        """JSON-ready trace: every node with parent, step text, tokens, score, status, timestamps."""
        return {
            "id": self.problem_id,
            "problem": self.problem,
            "num_prompt_tokens": len(self.root.token_ids),
            "nodes": [
                {
                    "id": n.node_id,
                    "parent": n.parent.node_id if n.parent else None,
                    "depth": n.depth,
                    "path": n.path,
                    "text": n.text,
                    "num_tokens": len(n.token_ids) if n.parent else 0,
                    "score": n.score,
                    "path_score": n.path_score,
                    "status": n.status.value,
                    "stop_reason": n.stop_reason.value if n.stop_reason else None,
                    "end_reason": n.end_reason.value if n.end_reason else None,
                    "pruned_by": n.pruned_by,
                    "beam": n.beam,
                    "speculative": n.speculative,
                    "potential": n.potential,
                    "deduplicated": n.potential > 1,
                    "t_start": round(n.t_start, 4),
                    "t_finish": round(n.t_finish, 4) if n.t_finish is not None else None,
                    "t_submitted": round(n.t_submitted, 4) if n.t_submitted is not None else None,
                    "t_scored": round(n.t_scored, 4) if n.t_scored is not None else None,
                }
                for n in self.nodes
            ],
        }

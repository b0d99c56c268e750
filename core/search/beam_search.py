"""PRM-guided beam search for one problem, under any policy (:mod:`core.search.policy`).

All policies share one depth-synchronous *decision* rule (docs/design.md, "Policies"; Snell et al.
2024): the candidates of depth d (the children of the candidates selected at depth d-1) each
generate one step and are scored; once all are scored, candidates whose path ended (EOS, a length
limit, the step cap) complete; with ``remaining = N - completed``, the best ``k = ceil(remaining /
M)`` live ones by path score are selected (ties go to the earlier candidate) and expanded into
``remaining`` children in total, M each, best parents first. The search ends when N candidates
have completed, so it returns exactly N.

The policy says *when* work happens: when a finished step is queued for scoring, when a candidate
is expanded, what may be pruned before its depth is decided (EP), whether candidates with a common
prefix share a sequence (CD). The search talks to the engine only through its public methods, and
names its candidates to the engine and the verifier by :data:`CandidateId` ``(problem key, node
id)``: the driver routes the engine's events and the verifier's scores back by that id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from core.engine.engine import GenerationEngine
from core.engine.sampler import candidate_seed
from core.engine.sequence import SamplingParams, Sequence, SeqStatus, StopCriteria, StopReason
from core.grading.extract import extract_answer
from core.verify.base import Scorer
from core.verify.verifier import Verifier

from .aggregation import aggregate, select_answers, subset_sizes
from .config import SearchConfig
from .policy import FIRST_CHILD_AT_ONCE, WHEN_SCORED, Policy
from .tree import EndReason, Node, NodeStatus, SearchTree

CandidateId = tuple[int, int]  # (problem key, node id): how the engine and the verifier name a candidate

_END_REASONS = {
    StopReason.EOS: EndReason.EOS,
    StopReason.STEP_TOKENS: EndReason.LENGTH,
    StopReason.MAX_TOKENS: EndReason.LENGTH,
    StopReason.CONTEXT: EndReason.LENGTH,
}
_LIVE = (NodeStatus.GENERATING, NodeStatus.FINISHED, NodeStatus.VERIFIED, NodeStatus.SELECTED)


@dataclass
class PruneCounts:
    """Candidates ended by a policy rule, per rule name (``top-k``, ``ep``, ``perfect-score``, ``surplus``,
    ``fasttts-cap``): ``pruned`` counts frontier candidates, ``cancelled`` their speculative descendants
    and surplus children. One instance may be shared by every problem of a run (live totals).
    """

    pruned: dict[str, int] = field(default_factory=dict)
    cancelled: dict[str, int] = field(default_factory=dict)


def split_children(total: int, parents: int) -> list[int]:
    """Children per selected parent, best parent first: as even as possible, extras to the best."""
    base, extra = divmod(total, parents)
    return [base + (1 if i < extra else 0) for i in range(parents)]


@dataclass(eq=False)
class Beam:
    """One independently decided group of candidates and its share of the answers.

    Beam search has one beam (size N, width M); DVTS has N/M beams of size M and width M (each keeps
    its best candidate per step); best-of-N has N beams of size 1 and width 1 (each sample goes its
    own way). The decision rule runs per beam: ``size`` completed candidates end it, ``width``
    children per selected candidate.

    Attributes:
        index: the beam's number (its nodes carry it as ``Node.beam``).
        size / width: its beam size and beam width.
        frontier: its candidates of the undecided depth. completed: its finished paths.
        done: it has ``size`` completed paths (or nothing live left).
    """

    index: int
    size: int
    width: int
    frontier: list[Node] = field(default_factory=list)
    completed: list[Node] = field(default_factory=list)
    done: bool = False


def beam_shape(config: SearchConfig) -> tuple[int, int, int]:
    """``(number of beams, beam size, beam width)`` of ``config.strategy`` (see :class:`Beam`)."""
    if config.strategy == "best-of-n":
        return config.beam_size, 1, 1
    if config.strategy == "dvts":
        return config.beam_size // config.beam_width, config.beam_width, config.beam_width
    return 1, config.beam_size, config.beam_width


class BeamSearch:
    """One problem's beam search under one policy (see the module docstring).

    Args:
        key: the problem's key in its driver (the first half of every :data:`CandidateId`).
        problem_id/problem: the problem.
        prompt_ids: generator prompt ids (chat template applied).
        policy: the :class:`~core.search.policy.Policy` to follow.
        engine: the generator engine. verifier/scorer: step scoring.
        config: search settings. tokenizer: generator tokenizer (decodes step text).
        eos_token_ids: generator EOS ids.
        prune_counts: where candidates ended by a rule are counted (default: a fresh one per problem).
    """

    def __init__(self, key: int, problem_id: str, problem: str, prompt_ids: list[int], *, policy: Policy,
                 engine: GenerationEngine, verifier: Verifier, scorer: Scorer, config: SearchConfig, tokenizer,
                 eos_token_ids: frozenset[int], t0: float | None = None, prune_counts: PruneCounts | None = None):
        self.key = key
        self.policy = policy
        self.config = config
        self.prune_counts = prune_counts if prune_counts is not None else PruneCounts()
        self.engine = engine
        self.verifier = verifier
        self.scorer = scorer
        self.tokenizer = tokenizer
        self.tree = SearchTree(problem_id, problem, prompt_ids, t0)
        self.tree.root.prefix_ids = scorer.root_ids(problem, config.system_prompt)
        self.sampling = SamplingParams(config.temperature, config.top_p)
        self.stop = StopCriteria(config.step_delimiter, eos_token_ids, config.max_step_tokens, config.max_tokens)
        count, size, width = beam_shape(config)
        self.beams = [Beam(i, size, width) for i in range(count)]
        self.done = False
        # tokens drawn for this problem's candidates (one per candidate), and of those the ones CD
        # drew once for several candidates (counted by the driver from the engine's draws)
        self.sampled_tokens = 0
        self.cd_saved_tokens = 0

    def cid(self, node: Node) -> CandidateId:
        """The id under which the engine and the verifier know ``node``."""
        return (self.key, node.node_id)

    def node(self, cid: CandidateId) -> Node:
        """The node a :data:`CandidateId` of this search names."""
        return self.tree.nodes[cid[1]]

    @property
    def completed(self) -> list[Node]:
        """Every finished path, all beams together."""
        return [n for b in self.beams for n in b.completed]

    @property
    def frontier(self) -> list[Node]:
        """The candidates of every beam's undecided depth."""
        return [n for b in self.beams for n in b.frontier]

    def _beam(self, node: Node) -> Beam:
        return self.beams[node.beam]

    # ------------------------------------------------------------------ small predicates
    def _ends(self, node: Node) -> bool:
        """True when a scored candidate's path cannot continue (so it completes, never expands)."""
        return node.stop_reason.ends_path or node.depth >= self.config.max_steps

    @staticmethod
    def _order_key(node: Node) -> tuple[int, ...]:
        """Tree path as numbers: a candidate order that is the same under every policy."""
        return tuple(int(i) for i in node.path.split("."))

    def _rank_key(self, node: Node):
        # ties go to the earlier path, so every policy selects the same candidates
        return (-node.path_score, self._order_key(node))

    # ------------------------------------------------------------------ engine events
    def start(self) -> None:
        """Queue the prompt; its one logits row yields the N first-step candidates."""
        root = self.tree.root
        nodes = [self.tree.add_child(root, i) for i in range(self.config.beam_size)]
        size = self.beams[0].size
        for i, n in enumerate(nodes):
            n.beam = i // size
            self.beams[n.beam].frontier.append(n)
        self._launch(nodes, len(root.token_ids))
        seq = self.engine.add(root.token_ids, sampling=self.sampling, stop=self.stop, seeds=[n.seed for n in nodes],
                              candidates=[self.cid(n) for n in nodes], dedup=self.policy.dedup)
        for n in nodes:
            n.seq = seq

    def _launch(self, nodes: list[Node], step_start: int) -> None:
        for n in nodes:
            n.seed = candidate_seed(self.config.seed, self.tree.problem_id, n.path)
            n.step_start = step_start
            n.t_start = self.tree.now()

    def on_forked(self, nodes: list[Node], child: Sequence) -> None:
        """The engine moved ``nodes`` to the new sequence ``child`` (they drew another token)."""
        for node in nodes:
            node.seq = child

    def on_stopped(self, node: Node, seq: Sequence, first: bool) -> None:
        """``node``'s step finished on ``seq`` (paused there with its KV); ``first``: the first of the
        candidates ``seq`` carries, which counts the step's tokens for all of them."""
        node.token_ids = seq.token_ids[node.step_start:]
        node.text = self.tokenizer.decode(node.token_ids, skip_special_tokens=True)
        node.stop_reason = seq.stop_reason
        node.status = NodeStatus.FINISHED
        node.potential = len(seq.candidates)
        node.t_finish = self.tree.now()
        beam = self._beam(node)
        if self.policy.expand == FIRST_CHILD_AT_ONCE and node in beam.frontier:
            self._extend_first_child(node)
        if self.policy.score_at_once:
            self._submit(node)
        else:
            self._submit_frontier_when_finished(beam)

    def _submit_frontier_when_finished(self, beam: Beam) -> None:
        """Depth-synchronous verification: one batch once every candidate of the beam's depth
        finished its step (with lookahead, the finished speculative steps below it go along)."""
        if beam.frontier and all(n.status in (NodeStatus.FINISHED, NodeStatus.VERIFIED) for n in beam.frontier):
            for n in beam.frontier:
                self._submit(n)
                if self.policy.lookahead:
                    for child in n.children:
                        self._submit(child)

    def _submit(self, node: Node) -> None:
        if node.submitted or node.status is not NodeStatus.FINISHED:
            return
        node.submitted = True
        node.t_submitted = self.tree.now()
        parent = node.parent
        step_ids = self.scorer.step_ids(node.text, node.token_ids, first_step=node.depth == 1)
        node.prefix_ids = parent.prefix_ids + step_ids
        # the last sibling to finish completes its group: the search needs the group's scores now
        group_complete = not any(s.status is NodeStatus.GENERATING for s in parent.children)
        self.verifier.submit(self.cid(node), self.scorer.request(parent.prefix_ids, node.prefix_ids), group_complete)

    def on_scored(self, scored: Iterable[tuple[Node, float]]) -> None:
        """Record one flush's scores for this problem, then expand, prune and decide as the policy says."""
        fresh = []
        for node, score in scored:
            node.score = score
            node.scores = node.parent.scores + [score]
            node.path_score = aggregate(node.scores, self.config.aggregation)
            node.t_scored = self.tree.now()
            if node.status is NodeStatus.FINISHED:
                node.status = NodeStatus.VERIFIED
                fresh.append(node)
        for beam in self.beams:
            if self.policy.expand == WHEN_SCORED:
                self._speculate(beam, [n for n in fresh if n.beam == beam.index and n in beam.frontier])
            self._advance(beam)
        self.done = all(b.done for b in self.beams)

    # ------------------------------------------------------------------ policy steps
    def _speculate(self, beam: Beam, nodes: list[Node]) -> None:
        """Expand scored, live frontier candidates into M children before their depth is decided."""
        if self.policy.early_pruning:
            self._early_prune(beam)
        ready = [n for n in nodes if n.status is NodeStatus.VERIFIED and not self._ends(n) and not n.children]
        self._expand_many([(n, list(range(beam.width))) for n in ready], speculative=True,
                          priority=self._speculative_priority)

    @property
    def _speculative_priority(self) -> int:
        """Under a speculation budget speculative children run at low priority (the scheduler fills
        only spare rows with them) until their parent is selected; without one, beside the frontier."""
        return self.policy.low_priority if self.policy.speculation_budget is not None else 0

    def _early_prune(self, beam: Beam) -> None:
        """EP: prune scored live candidates that can no longer reach the top-k (paper section 4.1)."""
        # k at decision time is at most ceil(|frontier| / M): completions only shrink it
        k_max = -(-len(beam.frontier) // beam.width)
        scored = [n for n in beam.frontier if n.status in (NodeStatus.VERIFIED, NodeStatus.PRUNED)
                  and not self._ends(n)]
        scored.sort(key=self._rank_key)
        for node in scored[k_max:]:
            if node.status is NodeStatus.VERIFIED:
                self._prune(node, "ep")

    def _perfect_decision(self, beam: Beam) -> bool:
        """EP's perfect-score rule: k live candidates at the perfect score decide the depth at once."""
        target = self.policy.perfect_score
        if not self.policy.early_pruning or target is None:
            return False
        remaining = beam.size - len(beam.completed) - sum(
            1 for n in beam.frontier if n.status is NodeStatus.VERIFIED and self._ends(n))
        k = -(-remaining // beam.width)
        perfect = [n for n in beam.frontier if n.status is NodeStatus.VERIFIED and not self._ends(n)
                   and n.path_score >= target]
        return remaining > 0 and len(perfect) >= k

    def _advance(self, beam: Beam) -> None:
        """Decide the beam's depths while its frontier allows it (speculation can make several ready)."""
        while not beam.done:
            scored = all(n.status in (NodeStatus.VERIFIED, NodeStatus.PRUNED) for n in beam.frontier)
            if scored:
                self._decide(beam, closed_early=False)
            elif self._perfect_decision(beam):
                self._decide(beam, closed_early=True)
            else:
                return

    def _decide(self, beam: Beam, closed_early: bool) -> None:
        """Complete ended paths, select the top-k live candidates, expand them; next depth."""
        active: list[Node] = []
        for node in beam.frontier:
            if node.status is NodeStatus.VERIFIED and self._ends(node):
                reason = EndReason.STEP_CAP if not node.stop_reason.ends_path else _END_REASONS[node.stop_reason]
                self._complete(beam, node, reason)
            elif node.status in (NodeStatus.VERIFIED, NodeStatus.PRUNED):
                active.append(node)
            else:  # closed early: candidates still generating or unscored lose their chance
                self._prune(node, "perfect-score")
        remaining = beam.size - len(beam.completed)
        if remaining <= 0 or not active:
            for node in active:
                self._prune(node, "top-k")
            beam.frontier = []
            beam.done = True
            return
        ranked = sorted(active, key=self._rank_key)
        k = min(len(ranked), -(-remaining // beam.width))
        selected = ranked[:k]
        for node in ranked[k:]:
            self._prune(node, "top-k")
        new_frontier: list[Node] = []
        expansions = []
        for parent, count in zip(selected, split_children(remaining, k)):
            parent.status = NodeStatus.SELECTED
            live = {self._child_index(c): c for c in parent.children if c.status in _LIVE}
            for index, child in live.items():
                if index >= count:
                    self._cancel_subtree(child, "surplus")
            new_frontier.extend(c for i, c in live.items() if i < count)
            missing = [i for i in range(count) if i not in live]
            if missing:
                expansions.append((parent, missing))
        if self.policy.speculation_budget is not None:
            self._promote(new_frontier)
        new_frontier.extend(self._expand_many(expansions, speculative=False))
        beam.frontier = sorted(new_frontier, key=self._order_key)
        self._on_new_frontier(beam)

    def _promote(self, nodes: list[Node]) -> None:
        """Speculative children whose parent was just selected are the frontier now: work that is
        sure to be kept, scheduled at priority 0 (their own speculative children stay low)."""
        for node in nodes:
            seq = node.seq
            if node.status is NodeStatus.GENERATING and seq is not None and seq.priority > 0:
                self.engine.set_priority(seq, 0)

    def _on_new_frontier(self, beam: Beam) -> None:
        """After a decision: the work the new depth's candidates can start at once."""
        if self.policy.expand == WHEN_SCORED:
            self._speculate(beam, [n for n in beam.frontier if n.status is NodeStatus.VERIFIED])
        elif self.policy.expand == FIRST_CHILD_AT_ONCE:
            for node in beam.frontier:
                if node.status in (NodeStatus.FINISHED, NodeStatus.VERIFIED):
                    self._extend_first_child(node)
        if not self.policy.score_at_once:
            self._submit_frontier_when_finished(beam)

    def _extend_first_child(self, node: Node) -> None:
        """FastTTS: start the first child's step at once at low priority, unless the path ends; past
        the speculation cap, cancel this problem's speculative steps still generating instead."""
        if node.children or node.stop_reason.ends_path or node.depth >= self.config.max_steps:
            return
        if self.policy.speculation_cap is not None and self.engine.num_unfinished >= self.policy.speculation_cap:
            frontier = self._beam(node).frontier
            for n in self.tree.nodes:
                if n.speculative and n.status is NodeStatus.GENERATING and n.parent in frontier:
                    self._cancel_subtree(n, "fasttts-cap")
            return
        self._expand_many([(node, [0])], speculative=True, priority=self.policy.low_priority)

    @staticmethod
    def _child_index(node: Node) -> int:
        return int(node.path.rsplit(".", 1)[-1])

    def _expand_many(self, expansions: list[tuple[Node, list[int]]], speculative: bool,
                     priority: int = 0) -> list[Node]:
        """Give each ``(parent, child indices)`` new children; parents sharing a paused sequence resume it together.

        A child's index fixes its tree path and so its sampler seed: the same child index draws the
        same tokens under every policy.
        """
        by_seq: dict[int, list[tuple[Node, list[Node]]]] = {}
        created: list[Node] = []
        for parent, indices in expansions:
            children = [self.tree.add_child(parent, i) for i in indices]
            for c in children:
                c.speculative = speculative
            created.extend(children)
            by_seq.setdefault(id(parent.seq), []).append((parent, children))
        for group in by_seq.values():
            seq = group[0][0].seq
            children = [c for _, kids in group for c in kids]
            parents = [p for p, _ in group]
            if seq is not None and seq.is_paused:
                parent_ids = {self.cid(p) for p in parents}
                for other in [cid for cid in seq.candidates if cid not in parent_ids]:
                    # a twin that is not expanded now keeps its own copy of the KV (forked, shared blocks)
                    twin = self.node(other)
                    twin.seq = self.engine.fork(seq, [twin.seed], [other])
                    self.engine.detach(seq, other)
                self._launch(children, len(seq.token_ids))
                self.engine.resume(seq, [c.seed for c in children], [self.cid(c) for c in children],
                                   priority=priority)
                for p in parents:
                    p.seq = None
                for c in children:
                    c.seq = seq
            else:
                # the parent's sequence already moved on (or was released): start from its tokens,
                # which the prefix cache mostly still holds
                for p in parents:
                    kids = [c for c in children if c.parent is p]
                    tokens = self._path_token_ids(p)
                    self._launch(kids, len(tokens))
                    new_seq = self.engine.add(tokens, sampling=self.sampling, stop=self.stop,
                                              seeds=[c.seed for c in kids], candidates=[self.cid(c) for c in kids],
                                              dedup=self.policy.dedup, priority=priority)
                    new_seq.num_prompt_tokens = len(self.tree.root.token_ids)
                    for c in kids:
                        c.seq = new_seq
        return created

    def _path_token_ids(self, node: Node) -> list[int]:
        tokens = list(self.tree.root.token_ids)
        for n in node.path_nodes():
            tokens.extend(n.token_ids)
        return tokens

    # ------------------------------------------------------------------ endings
    def _complete(self, beam: Beam, node: Node, reason: EndReason) -> None:
        node.status = NodeStatus.COMPLETED
        node.end_reason = reason
        beam.completed.append(node)
        self._release(node)

    def _prune(self, node: Node, rule: str) -> None:
        """Prune a frontier candidate and cancel its speculative subtree."""
        if node.status is NodeStatus.PRUNED:
            return
        self._end(node, NodeStatus.PRUNED, EndReason.PRUNED, rule)
        for child in node.children:
            self._cancel_subtree(child, rule)

    def _cancel_subtree(self, node: Node, rule: str) -> None:
        if node.status in _LIVE:
            self._end(node, NodeStatus.CANCELLED, EndReason.CANCELLED, rule)
        for child in node.children:
            self._cancel_subtree(child, rule)

    def _end(self, node: Node, status: NodeStatus, reason: EndReason, rule: str) -> None:
        """Mark a candidate dead by a policy rule; a still-generating one keeps the part of its step
        drawn so far (the trace shows what was wasted)."""
        if node.status is NodeStatus.GENERATING and node.seq is not None:
            node.token_ids = node.seq.token_ids[node.step_start:]
            node.text = self.tokenizer.decode(node.token_ids, skip_special_tokens=True)
        node.status, node.end_reason, node.pruned_by = status, reason, rule
        counts = self.prune_counts.pruned if status is NodeStatus.PRUNED else self.prune_counts.cancelled
        counts[rule] = counts.get(rule, 0) + 1
        self._release(node)

    def _release(self, node: Node) -> None:
        """Let go of the node's place on its sequence (the sequence is freed with its last candidate)."""
        cid = self.cid(node)
        self.verifier.discard(cid)
        seq, node.seq = node.seq, None
        if seq is not None and seq.status is not SeqStatus.FINISHED and cid in seq.candidates:
            self.engine.detach(seq, cid)

    def abort(self, rule: str = "error") -> None:
        """Give the problem up (the driver writes an error record instead): cancel every live
        candidate, which frees its KV and drops its queued verification tasks; ``rule`` is recorded
        as their ``pruned_by``."""
        for child in self.tree.root.children:
            self._cancel_subtree(child, rule)
        for beam in self.beams:
            beam.frontier, beam.done = [], True
        self.done = True

    # ------------------------------------------------------------------ results
    def _completion(self, node: Node) -> dict[str, Any]:
        path = node.path_nodes()
        text = "".join(n.text for n in path)
        return {
            "text": text,
            "answer": extract_answer(text, self.tree.problem),
            "step_scores": [round(s, 6) for s in node.scores],
            "path_score": round(node.path_score, 6),
            "end_reason": node.end_reason.value,
            "num_steps": len(path),
            "num_tokens": sum(len(n.token_ids) for n in path),
            "node": node.node_id,
        }

    def _picks(self, nodes: list[Node], entries: dict[int, dict]) -> tuple[list[dict], dict[str, Any]]:
        """The completions of ``nodes`` best-first (ties keep the order given) and every rule's pick."""
        best_first = [entries[n.node_id] for n in sorted(nodes, key=lambda n: -n.path_score)]
        picks = select_answers([c["answer"] for c in best_first], [c["path_score"] for c in best_first])
        return best_first, {
            "pred": picks[self.config.select][0],
            "pred_best": picks["best"][0],
            "pred_weighted": picks["weighted-vote"][0],
            "vote_weight": round(picks["weighted-vote"][1], 6),
            "pred_majority": picks["majority"][0],
            "majority_count": picks["majority"][1],
        }

    def subset(self, k: int, entries: dict[int, dict] | None = None) -> dict[str, Any]:
        """The picks over the first ``k`` completed paths (see :meth:`result`): ``pred``, ``pred_best``,
        ``pred_weighted``, ``pred_majority`` and ``num_tokens`` (their paths' generated tokens).

        ``entries``: the completions as :meth:`result` builds them, by node id (built when None).
        """
        nodes = self.completed[:k]
        entries = entries if entries is not None else {n.node_id: self._completion(n) for n in nodes}
        chosen, picks = self._picks(nodes, entries)
        return {**{f: picks[f] for f in ("pred", "pred_best", "pred_weighted", "pred_majority")},
                "num_tokens": sum(c["num_tokens"] for c in chosen)}

    def result(self) -> dict[str, Any]:
        """The answer record body: ``pred`` by the configured selection, the pick of every selection
        rule (``pred_best``, ``pred_weighted`` with ``vote_weight``, ``pred_majority`` with
        ``majority_count``), the N completions best-first, and ``at_n``: the same picks over the
        first n completions for n = 1, 2, 4, ... and N (:func:`~core.search.aggregation.subset_sizes`).

        The subsets follow the order the search completed its paths, beam by beam: for best-of-N
        the sample order (so the first n are exactly the completions of a run at N = n: each sample's
        sampler seed derives from its tree path alone), for DVTS subtree by subtree, for beam search
        by the depth a path ended at, then tree order. Every rule sees the same subset; ``at_n[N]``
        equals the record's own picks. Each ``at_n`` entry also has ``num_tokens``, the generated
        tokens of its completions' paths (for best-of-N what a run at N = n generates).
        """
        entries = {n.node_id: self._completion(n) for n in self.completed}
        completions, picks = self._picks(self.completed, entries)
        at_n = {str(k): self.subset(k, entries) for k in subset_sizes(len(self.completed))}
        return {
            **picks,
            "strategy": self.config.strategy,
            "select": self.config.select,
            "completions": completions,
            "at_n": at_n,
            # what the generator computed for this problem; num_sampled_tokens counts a token CD
            # drew once for several candidates once per candidate (the sum of the nodes' steps)
            "num_generated_tokens": self.sampled_tokens - self.cd_saved_tokens,
            "num_sampled_tokens": self.sampled_tokens,
            "num_cd_saved_tokens": self.cd_saved_tokens,
            "num_nodes": len(self.tree.nodes) - 1,
        }

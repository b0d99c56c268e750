"""Non-speculative PRM-guided beam search for one problem (the baseline policy, ``non-spec``).

Per depth (DESIGN.md "Policies", Snell et al. 2024 / search-and-learn):

1. every live candidate generates one step (the N first-step candidates are N draws from the one
   prompt row; later ones continue from their parent's cached KV);
2. once all of them finished the step, all are scored in one verification batch;
3. candidates whose path ended (EOS, a length limit, or the step cap) become *completed*; with
   ``remaining = N - completed``, the best ``ceil(remaining / M)`` live ones by path score are
   selected (top-k = N / M while nothing has completed) and the rest pruned;
4. the selected ones are expanded into ``remaining`` children in total, M each (the best parents
   first), and the next depth begins.

The search ends when N candidates have completed, so it returns exactly N completed candidates.
"""

from __future__ import annotations

from typing import Any

from core.engine.engine import GenerationEngine
from core.engine.sampler import candidate_seed
from core.engine.sequence import SamplingParams, Sequence, StopCriteria, StopReason
from core.grading.extract import extract_answer
from core.verify.base import Scorer
from core.verify.verifier import Verifier

from .aggregation import aggregate, weighted_vote
from .config import SearchConfig
from .tree import EndReason, Node, NodeStatus, SearchTree

_END_REASONS = {
    StopReason.EOS: EndReason.EOS,
    StopReason.STEP_TOKENS: EndReason.LENGTH,
    StopReason.MAX_TOKENS: EndReason.LENGTH,
    StopReason.CONTEXT: EndReason.LENGTH,
}


def split_children(total: int, parents: int) -> list[int]:
    """Children per selected parent, best parent first: as even as possible, extras to the best."""
    base, extra = divmod(total, parents)
    return [base + (1 if i < extra else 0) for i in range(parents)]


class NonSpecBeamSearch:
    """The ``non-spec`` policy's state machine for one problem.

    Args:
        problem_id/problem: the problem.
        prompt_ids: generator prompt ids (chat template applied).
        engine: the generator engine. verifier/scorer: step scoring.
        config: search settings. tokenizer: generator tokenizer (decodes step text).
        eos_token_ids: generator EOS ids.
    """

    policy = "non-spec"

    def __init__(self, problem_id: str, problem: str, prompt_ids: list[int], *, engine: GenerationEngine,
                 verifier: Verifier, scorer: Scorer, config: SearchConfig, tokenizer,
                 eos_token_ids: frozenset[int], t0: float | None = None, extra: dict | None = None):
        self.config = config
        self.engine = engine
        self.verifier = verifier
        self.scorer = scorer
        self.tokenizer = tokenizer
        self.extra = extra or {}
        self.tree = SearchTree(problem_id, problem, prompt_ids, t0)
        self.tree.owner = self
        self.tree.root.search = self
        self.tree.root.prefix_ids = scorer.root_ids(problem, config.system_prompt)
        self.sampling = SamplingParams(config.temperature, config.top_p)
        self.stop = StopCriteria(config.step_delimiter, eos_token_ids, config.max_step_tokens, config.max_tokens)
        self.completed: list[Node] = []
        self.frontier: list[Node] = []  # candidates of the current depth
        self.done = False
        self.generated_tokens = 0

    # ------------------------------------------------------------------ driving
    def start(self) -> None:
        """Queue the prompt; its one logits row yields the N first-step candidates."""
        root = self.tree.root
        nodes = [self.tree.add_child(root, i) for i in range(self.config.beam_size)]
        for n in nodes:
            n.seed = candidate_seed(self.config.seed, self.tree.problem_id, n.path)
            n.step_start = len(root.token_ids)
        seq = self.engine.add(root.token_ids, sampling=self.sampling, stop=self.stop,
                              seeds=[n.seed for n in nodes], tags=nodes)
        for n in nodes:
            n.seq = seq
        self.frontier = nodes

    def on_forked(self, child: Sequence) -> None:
        """The engine split candidates off onto ``child``."""
        for node in child.tags:
            node.seq = child

    def on_stopped(self, node: Node, seq: Sequence) -> None:
        """``node``'s step finished on ``seq`` (paused there with its KV)."""
        node.token_ids = seq.token_ids[node.step_start:]
        node.text = self.tokenizer.decode(node.token_ids, skip_special_tokens=True)
        node.stop_reason = seq.stop_reason
        node.status = NodeStatus.FINISHED
        node.t_finish = self.tree.now()
        self.generated_tokens += len(node.token_ids)
        if all(n.status is NodeStatus.FINISHED for n in self.frontier):
            for n in self.frontier:
                self._submit(n)

    def _submit(self, node: Node) -> None:
        parent = node.parent
        node.prefix_ids = parent.prefix_ids + self.scorer.step_ids(node.text, node.token_ids)
        self.verifier.submit(node, self.scorer.request(parent.prefix_ids, node.prefix_ids))

    def on_scored(self, node: Node, score: float) -> None:
        """Record a step score; decide the depth once all its candidates are scored."""
        node.score = score
        node.scores = node.parent.scores + [score]
        node.path_score = aggregate(node.scores, self.config.aggregation)
        node.status = NodeStatus.VERIFIED
        node.t_scored = self.tree.now()
        if all(n.status is NodeStatus.VERIFIED for n in self.frontier):
            self._decide_depth()

    # ------------------------------------------------------------------ selection
    def _decide_depth(self) -> None:
        active: list[Node] = []
        for node in self.frontier:
            if node.stop_reason.ends_path:
                self._complete(node, _END_REASONS[node.stop_reason])
            elif node.depth >= self.config.max_steps:
                self._complete(node, EndReason.STEP_CAP)
            else:
                active.append(node)
        remaining = self.config.beam_size - len(self.completed)
        if remaining <= 0 or not active:
            for node in active:
                self._prune(node)
            self._finish()
            return
        # stable sort: ties keep generation order, so results do not depend on float noise in sorting
        ranked = sorted(active, key=lambda n: -n.path_score)
        k = min(len(ranked), -(-remaining // self.config.beam_width))
        selected, losers = ranked[:k], ranked[k:]
        for node in losers:
            self._prune(node)
        self.frontier = []
        for parent, count in zip(selected, split_children(remaining, k)):
            self._expand(parent, count)

    def _expand(self, parent: Node, count: int) -> None:
        parent.status = NodeStatus.SELECTED
        children = [self.tree.add_child(parent, i) for i in range(count)]
        seq = parent.seq
        for c in children:
            c.seed = candidate_seed(self.config.seed, self.tree.problem_id, c.path)
            c.step_start = len(seq.token_ids)
            c.seq = seq
        self.engine.resume(seq, [c.seed for c in children], children)
        self.frontier.extend(children)

    def _complete(self, node: Node, reason: EndReason) -> None:
        node.status = NodeStatus.COMPLETED
        node.end_reason = reason
        self.completed.append(node)
        self._release(node)

    def _prune(self, node: Node) -> None:
        node.status = NodeStatus.PRUNED
        node.end_reason = EndReason.PRUNED
        self._release(node)

    def _release(self, node: Node) -> None:
        seq = node.seq
        node.seq = None
        if seq is not None and not any(t.seq is seq for t in seq.tags if t is not node):
            self.engine.free(seq)

    def _finish(self) -> None:
        self.done = True

    # ------------------------------------------------------------------ results
    def result(self) -> dict[str, Any]:
        """The answer record body: prediction, vote, and the N completions best-first."""
        completions = []
        for node in sorted(self.completed, key=lambda n: -n.path_score):
            path = node.path_nodes()
            text = "".join(n.text for n in path)
            completions.append({
                "text": text,
                "answer": extract_answer(text),
                "step_scores": [round(s, 6) for s in node.scores],
                "path_score": round(node.path_score, 6),
                "end_reason": node.end_reason.value,
                "num_steps": len(path),
                "num_tokens": sum(len(n.token_ids) for n in path),
                "node": node.node_id,
            })
        answers = [c["answer"] for c in completions]
        vote, vote_weight = weighted_vote(answers, [c["path_score"] for c in completions])
        return {
            "pred": completions[0]["answer"] if completions else None,
            "vote_pred": vote,
            "vote_weight": round(vote_weight, 6),
            "completions": completions,
            "num_generated_tokens": self.generated_tokens,
            "num_nodes": len(self.tree.nodes) - 1,
        }

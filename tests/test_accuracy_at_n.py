"""Accuracy against N from one run: every answer record's picks over its first n completions.

The generator is a tiny random Llama whose LM head is pushed towards a few tokens (three boxed
answers, a filler word, the step delimiter, EOS), so its completions carry answers that differ from
sample to sample and the picks of best, weighted vote and majority change with n.
"""

from __future__ import annotations

import copy

import orjson

import pytest
import torch
from transformers import AddedToken, LlamaForCausalLM

from conftest import run_search, tiny_chat_config

from core.io.problems import Problem
from core.io.resume import scan_answers
from core.bench.search_bench import run_policy
from core.bench.strategies_bench import run_strategies, strategy_config
from core.metrics import accuracy_at_n
from core.models.loader import LoadedModel
from core.search.aggregation import subset_sizes
from core.search.config import PICK_FIELDS, SearchConfig
from core.search.records import answer_record, count_record
from core.settings import ModelSettings

# gold answers that the samples of this model sometimes reach (the problems' text does not matter to it)
PROBLEMS = [Problem("p1", "What is 2 - 1?", "1", 1), Problem("p2", "What is 6 / 2?", "3", 2),
            Problem("p3", "What is 1 + 1?", "2", 3)]
PICKS = ("pred", *PICK_FIELDS.values())
CORRECT = ("correct", *(f"correct_{rule}" for rule in PICK_FIELDS))


BOXES = ("\\boxed{1}", "\\boxed{2}", "\\boxed{3}")


@pytest.fixture(scope="module")
def answering(smollm2):
    """A tiny random chat model whose text is made of ``\\boxed{1}``..``\\boxed{3}`` (one added token
    each), " x", the step delimiter and EOS: nearly every completion has an answer, and they differ."""
    tok = copy.deepcopy(smollm2.tokenizer)
    tok.add_tokens([AddedToken(box, special=False) for box in BOXES])
    torch.manual_seed(3)
    model = LlamaForCausalLM(tiny_chat_config(tok, eos_token_id=tok.eos_token_id)).eval()
    # rare enough boxes that a line mostly holds one (boxes on one line make a list answer)
    allowed = {**{tok.convert_tokens_to_ids(box): -1.0 for box in BOXES}, tok.eos_token_id: -1.0,
               tok.encode(" x", add_special_tokens=False)[0]: 0.0, tok.encode("\n\n", add_special_tokens=False)[0]: 0.5}
    bias = torch.full((len(tok),), -30.0)
    for token, value in allowed.items():
        bias[token] = value
    # every other token is out of reach: sampled text is made of these few
    model.lm_head.register_forward_hook(lambda module, args, out: out + bias.to(out.dtype))
    return LoadedModel(model, tok, "tiny-answering")


def search(loaded, n, strategy="best-of-n", policy="non-spec"):
    cfg = SearchConfig(beam_size=n, beam_width=1 if strategy == "best-of-n" else 2, strategy=strategy,
                       temperature=1.0, max_steps=3, step_delimiter="\n\n", max_step_tokens=8, max_tokens=64,
                       perfect_score=None)
    _, results, searches = run_search(loaded, PROBLEMS, cfg, policy)
    return {p.id: answer_record(p, results[p.id], searches[p.id]) for p in PROBLEMS}


def test_subset_sizes_are_powers_of_two_then_n():
    assert subset_sizes(1) == [1]
    assert subset_sizes(16) == [1, 2, 4, 8, 16]
    assert subset_sizes(12) == [1, 2, 4, 8, 12]
    assert subset_sizes(0) == []


@pytest.mark.parametrize("policy", ["non-spec", "specscale"])
def test_one_best_of_n_run_gives_the_curve_of_separate_runs(answering, policy):
    big = search(answering, 16, policy=policy)
    counts = {"done": 0, "graded": 0, "correct": 0, **{f"correct_{rule}": 0 for rule in PICK_FIELDS}}
    for rec in big.values():
        assert list(rec["at_n"]) == ["1", "2", "4", "8", "16"]
        count_record(counts, rec)
    separate = {}
    for n in (1, 2, 4, 8, 16):
        runs = big if n == 16 else search(answering, n, policy=policy)
        run_counts = {"done": 0, "graded": 0, "correct": 0, **{f"correct_{rule}": 0 for rule in PICK_FIELDS}}
        for pid, rec in runs.items():
            count_record(run_counts, rec)
            entry = big[pid]["at_n"][str(n)]
            # the first n samples of the N=16 run are the n samples of a run at N=n: same picks, verdicts, tokens
            assert {k: entry[k] for k in PICKS + CORRECT} == {k: rec[k] for k in PICKS + CORRECT}
            assert entry["num_tokens"] == sum(c["num_tokens"] for c in rec["completions"])
            assert {k: v for k, v in big[pid]["at_n"].items() if int(k) <= n} == rec["at_n"]
        separate[str(n)] = {"accuracy": run_counts["correct"] / 3,
                            **{f"accuracy_{rule}": run_counts[f"correct_{rule}"] / 3 for rule in PICK_FIELDS}}
    assert accuracy_at_n(counts) == separate
    # the comparison is not trivially met: the samples disagree, and the picks move with n
    answers = [c["answer"] for rec in big.values() for c in rec["completions"]]
    assert len(set(answers) - {None}) >= 3
    assert len({tuple(e["pred_majority"] for e in rec["at_n"].values()) for rec in big.values()}) > 1
    assert len({(a["accuracy_best"], a["accuracy_majority"]) for a in separate.values()}) > 1


@pytest.mark.parametrize("strategy", ["beam", "dvts"])
def test_subsets_of_beam_and_dvts_runs_are_graded_too(answering, strategy):
    for rec in search(answering, 4, strategy=strategy).values():
        assert list(rec["at_n"]) == ["1", "2", "4"]
        # the whole set is the record itself
        assert {k: rec["at_n"]["4"][k] for k in PICKS + CORRECT} == {k: rec[k] for k in PICKS + CORRECT}
        assert rec["at_n"]["4"]["num_tokens"] == sum(c["num_tokens"] for c in rec["completions"])


def test_a_resumed_run_counts_the_subsets_of_the_records_it_keeps(tmp_path):
    entry = {"pred": "2", "pred_best": "2", "pred_weighted": "3", "pred_majority": "2", "num_tokens": 5}
    verdicts = {"correct": True, "correct_best": True, "correct_weighted": False, "correct_majority": True}
    kept = [{"id": "a", "gold": "2", "correct": True, "at_n": {"1": {**entry, **verdicts}, "2": {**entry, **verdicts}}},
            {"id": "b", "gold": "2", "correct": False,
             "at_n": {"1": {**entry, **{k: False for k in verdicts}}, "2": {**entry, **verdicts}}},
            {"id": "c", "gold": "2", "correct": True},  # written before records had subsets
            {"id": "d", "gold": None, "pred": None}]
    path = tmp_path / "answers.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in kept))
    done = scan_answers(path)
    assert done.at_n == {"graded@1": 2, "correct@1": 1, "correct_best@1": 1, "correct_majority@1": 1,
                         "graded@2": 2, "correct@2": 2, "correct_best@2": 2, "correct_majority@2": 2}
    # the counts a run goes on with: the record without subsets is not in their denominators
    assert accuracy_at_n(done.at_n) == {
        "1": {"accuracy": 0.5, "accuracy_best": 0.5, "accuracy_weighted": 0.0, "accuracy_majority": 0.5},
        "2": {"accuracy": 1.0, "accuracy_best": 1.0, "accuracy_weighted": 0.0, "accuracy_majority": 1.0}}


def test_bench_strategies_reads_smaller_best_of_n_from_the_largest_run(answering, monkeypatch):
    import core.bench.strategies_bench as sb

    settings = ModelSettings(gen_kv_bytes=64 << 20, prm_kv_bytes=64 << 20, block_size=8, max_model_len=1024)
    base = SearchConfig(beam_size=4, beam_width=2, temperature=1.0, max_steps=3, step_delimiter="\n\n",
                        max_step_tokens=8, max_tokens=64, perfect_score=None)
    runs = []
    monkeypatch.setattr(sb, "run_policy", lambda *a, **kw: runs.append((a[3].strategy, a[3].beam_size)) or
                        run_policy(*a, **kw))
    rows = run_strategies((answering, answering), settings, PROBLEMS, base, "specscale", [2, 4, 8], 3)
    assert runs == [("beam", 1), ("best-of-n", 8), ("beam", 2), ("dvts", 2), ("beam", 4), ("dvts", 4),
                    ("beam", 8), ("dvts", 8)]
    by_point = {(r["strategy"], r["n"]): r for r in rows}
    for n in (2, 4, 8):
        alone = run_policy((answering, answering), settings, PROBLEMS, strategy_config(base, "best-of-n", n),
                           "specscale", 3)
        row = by_point[("best-of-n", n)]
        assert row["subset_of"] == (8 if n < 8 else None)
        # what a run at N=n measures: accuracy of every rule, and the tokens it generates
        assert {k: row[k] for k in ("accuracy", "accuracy_best", "accuracy_weighted", "accuracy_majority")} == {
            k: alone[k] for k in ("accuracy", "accuracy_best", "accuracy_weighted", "accuracy_majority")}
        assert row["generated_tokens"] == alone["output_tokens"] == alone["answer_tokens"]
    assert len({tuple(v for k, v in by_point[("best-of-n", n)].items() if k.startswith("accuracy"))
                for n in (2, 4, 8)}) > 1

"""`specscale bench verifier`: step pairs, number changes, AUROC / pairwise accuracy, scoring, CLI."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from conftest import hf_logits

from core.io.problems import Problem
from core.solver import ModelSettings, build_verifier
from core.verify.base import chat_prompt_ids, encode_text
from core.verify.quality import (NUMBER, auroc, build_pairs, change_number, pairwise_accuracy, score_pairs,
                                 wrong_twin)
from core.verify.reference import read_solved_problems, solution_steps
from specscale_cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
GSM8K = ROOT / "examples" / "gsm8k_sample.jsonl"
SYSTEM = "Solve step by step."


# ------------------------------------------------------------------ steps and wrong twins
def test_solution_steps_strip_calculator_annotations_and_rewrite_the_answer_line():
    solution = ("Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\n\n"
                "  She makes 9 * 2 = $<<9*2=18>>18 every day.  \n#### 18")
    assert solution_steps(solution) == ["Janet sells 16 - 3 - 4 = 9 duck eggs a day.",
                                        "She makes 9 * 2 = $18 every day.",
                                        "The final answer is \\boxed{18}."]
    assert solution_steps(" \n\n") == []


@pytest.mark.parametrize("text, index, delta, expected", [
    ("Janet sells 16 - 3 - 4 = 9 duck eggs", 2, -2, "Janet sells 16 - 3 - 2 = 9 duck eggs"),
    ("Janet sells 16 - 3 - 4 = 9 duck eggs", 0, 3, "Janet sells 19 - 3 - 4 = 9 duck eggs"),
    ("It takes 2/2=1 bolt", 2, -3, "It takes 2/2=4 bolt"),  # 1 - 3 < 0: shifted up instead
    ("a rise of 150%", 0, 2, "a rise of 170%"),  # three digits: unit 10
    ("came to 80,000+50,000=$130,000", 2, 2, "came to 80,000+50,000=$150,000"),  # separators kept
    ("came to 80,000+50,000=$130,000", 0, -1, "came to 79,000+50,000=$130,000"),
    ("by 80,000*1.5=120,000", 1, 1, "by 80,000*2.5=120,000"),  # decimals kept
    ("pay $0.25 each", 0, -1, "pay $1.25 each"),
    ("The final answer is \\boxed{70000}.", 0, -1, "The final answer is \\boxed{69000}."),
])
def test_change_number_exact(text, index, delta, expected):
    assert change_number(text, index, delta) == expected


def test_change_number_refuses_zero_shift_and_missing_number():
    with pytest.raises(ValueError):
        change_number("3 apples", 0, 0)
    with pytest.raises(IndexError):
        change_number("3 apples", 1, 1)


def test_wrong_twin_changes_exactly_one_number_deterministically():
    assert wrong_twin("no digits here", random.Random(0)) is None
    steps = [s for p in read_solved_problems([GSM8K]) for s in solution_steps(p.extra["solution"])]
    numbered = [s for s in steps if NUMBER.search(s)]
    assert len(numbered) >= 30
    for i, step in enumerate(numbered):
        twin = wrong_twin(step, random.Random(i))
        assert twin == wrong_twin(step, random.Random(i))
        assert twin != step
        before, after = NUMBER.findall(step), NUMBER.findall(twin)
        assert len(before) == len(after)
        assert sum(a != b for a, b in zip(before, after)) == 1
        assert NUMBER.sub("#", step) == NUMBER.sub("#", twin)  # the prose around the numbers is untouched


def test_build_pairs_one_per_numbered_step_after_the_correct_prefix():
    p = Problem("p1", "How many?", "5", 1, {"solution": "Start here.\nAdd 2+3=<<2+3=5>>5 apples.\n#### 5"})
    no_solution = Problem("p2", "Why?", None, 2, {})
    pairs = build_pairs([p, no_solution], seed=7)
    assert [(x.prefix, x.correct) for x in pairs] == [
        (["Start here."], "Add 2+3=5 apples."),
        (["Start here.", "Add 2+3=5 apples."], "The final answer is \\boxed{5}."),
    ]
    assert [x.wrong for x in pairs] == [wrong_twin(x.correct, random.Random(f"7:p1:{i + 1}"))
                                        for i, x in enumerate(pairs)]


def test_read_solved_problems_names_file_line_and_field(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "a", "solution": "1"}\n{"problem": "b", "solution": 3}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: field 'solution'"):
        read_solved_problems([bad])
    none = tmp_path / "none.jsonl"
    none.write_text('{"problem": "a"}\n')
    with pytest.raises(ValueError, match="no record has a 'solution'"):
        read_solved_problems([none])
    assert [p.problem for p in read_solved_problems([bad], limit=1)] == ["a"]


# ------------------------------------------------------------------ metrics
def test_auroc_and_pairwise_accuracy_on_hand_made_scores():
    # 6 comparisons: 0.9 beats both, 0.8 beats both, 0.5 ties 0.5 and beats 0.3 -> 5.5 / 6
    assert auroc([0.9, 0.8, 0.5], [0.5, 0.3]) == 5.5 / 6
    assert auroc([1.0, 1.0], [0.0]) == 1.0
    assert auroc([0.0], [1.0, 2.0]) == 0.0
    assert auroc([0.5, 0.5], [0.5, 0.5, 0.5]) == 0.5
    # pairs: win, tie, loss, win
    assert pairwise_accuracy([0.9, 0.4, 0.1, 0.7], [0.2, 0.4, 0.3, 0.6]) == 2.5 / 4
    with pytest.raises(ValueError):
        auroc([], [0.1])
    with pytest.raises(ValueError):
        pairwise_accuracy([0.1], [0.1, 0.2])


def test_auroc_equals_counting_all_comparisons():
    rng = random.Random(3)
    pos = [rng.choice([0.1, 0.2, 0.3, 0.4, 0.5]) for _ in range(40)]
    neg = [rng.choice([0.0, 0.1, 0.2, 0.3]) for _ in range(25)]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    assert auroc(pos, neg) == pytest.approx(wins / (len(pos) * len(neg)), abs=1e-12)


# ------------------------------------------------------------------ scoring on a tiny model


@pytest.mark.parametrize("scorer", ["likelihood", "lm-judge"])
def test_pair_scores_match_a_plain_forward(tiny_loaded, scorer):
    """Both steps of each pair are scored after the correct prefix, as a plain transformers forward says."""
    tok = tiny_loaded.tokenizer
    problems = read_solved_problems([GSM8K], limit=2)
    pairs = build_pairs(problems, seed=0)[:5]
    settings = ModelSettings(prm="tiny", scorer=scorer, prm_kv_bytes=1 << 25, max_model_len=1024, block_size=4)
    verifier = build_verifier(settings, tiny_loaded)
    correct, wrong = score_pairs(verifier, pairs, SYSTEM, "\n", flush_tasks=4)
    judge = verifier.scorer

    def reference(pair, step):
        prefix = (chat_prompt_ids(tok, pair.problem, SYSTEM) if scorer == "likelihood"
                  else judge.root_ids(pair.problem, SYSTEM))
        for s in pair.prefix:
            prefix = prefix + encode_text(tok, s + "\n")
        new = encode_text(tok, step + "\n")
        if scorer == "likelihood":
            logits = hf_logits(tiny_loaded.model, prefix + new)
            logp = torch.log_softmax(logits[len(prefix) - 1:-1], -1).gather(1, torch.tensor(new)[:, None])
            return logp.mean().exp().item()
        row = hf_logits(tiny_loaded.model, prefix + new + judge._suffix)[-1]
        return torch.sigmoid(row[judge.yes_id] - row[judge.no_id]).item()

    for pair, c, w in zip(pairs, correct, wrong):
        assert c == pytest.approx(reference(pair, pair.correct), rel=1e-4, abs=1e-6)
        assert w == pytest.approx(reference(pair, pair.wrong), rel=1e-4, abs=1e-6)


def test_bench_verifier_cli_on_tiny_model(tiny_dir):
    args = ["bench", "verifier", "--problems", str(GSM8K), "--limit", "2", "--json", "--prm", str(tiny_dir),
            "--prm-kv-cache-gb", "0.05", "--max-model-len", "1024"]
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    expected_pairs = len(build_pairs(read_solved_problems([GSM8K], limit=2), seed=0))
    assert out["pairs"] == expected_pairs == 6
    assert out["problems"] == 2 and out["problems_file"] == str(GSM8K) and out["seed"] == 0
    assert set(out["scorers"]) == {"likelihood", "lm-judge"}
    for r in out["scorers"].values():
        assert r["pairs"] == expected_pairs
        assert 0.0 <= r["auroc"] <= 1.0 and 0.0 <= r["pairwise_accuracy"] <= 1.0
        assert 0.0 < r["mean_correct"] < 1.0 and 0.0 < r["mean_wrong"] < 1.0
    assert out["best_scorer"] in out["scorers"]

    res = CliRunner().invoke(cli, args + ["--scorers", "likelihood,nope"])
    assert res.exit_code == 2 and "nope" in res.output

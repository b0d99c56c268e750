"""Answer records say how the gold was read (``gold_parsed``) and grade with the problem at hand."""

from __future__ import annotations

import orjson
import pytest

from conftest import tiny_chat_config
from core.grading.equivalence import grade
from solve_helpers import records, run_solve

ANSWERS = [
    # id, problem, gold: a list gold, a gold that does not parse, and one with a variable for a unit
    ("list", "Find both roots of $x^2 + 4x + 4 = 0$.", "-2, -2"),
    ("interval", "For which $t$ is $t(4 - t) > 0$?", "t(0,4]"),
    ("variable", "The slope is $m$. What is $6$ times the slope?", "6m"),
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, smollm2):
    from transformers import LlamaForCausalLM

    import torch

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-grading-model")
    LlamaForCausalLM(tiny_chat_config(smollm2.tokenizer)).save_pretrained(path)
    smollm2.tokenizer.save_pretrained(path)
    return path


@pytest.mark.slow
def test_answer_records_carry_gold_parsed(model_dir, tmp_path):
    problems = tmp_path / "problems.jsonl"
    problems.write_bytes(b"".join(orjson.dumps({"id": i, "problem": p, "answer": a}) + b"\n" for i, p, a in ANSWERS))
    out = tmp_path / "out"
    res = run_solve([str(problems), "-o", str(out)], model_dir)
    assert res.exit_code == 0, res.output
    by_id = {r["id"]: r for r in records(out)}
    assert by_id["list"]["gold_parsed"] == {"as": "list", "items": [{"as": "math", "value": "-2"}] * 2}
    assert by_id["interval"]["gold_parsed"] == {"as": "text", "value": "t(0,4]"}
    assert by_id["variable"]["gold_parsed"] == {"as": "math", "value": "6*m"}
    for i, problem, gold in ANSWERS:
        r = by_id[i]
        assert r["correct"] is grade(r["pred"], gold, problem).correct


def test_the_problem_decides_whether_a_letter_is_a_unit():
    assert grade("6", "6m", ANSWERS[2][1]).correct is False
    assert grade("6", "6 m", "How many meters of rope are left after $4$ are cut off?").correct is True

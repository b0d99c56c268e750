"""Where problems come from: field names, GSM8K '####' answers, `--dataset` (datasets library), stdin."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from solve_helpers import GSM8K, records, run_solve

from core.io.dataset_source import DatasetError, open_dataset
from core.io.problems import Problem, ProblemError, gold_answer, parse_record, read_problems

GSM8K_ROWS = [orjson.loads(line) for line in GSM8K.read_bytes().splitlines()]


def _hub_style_rows() -> list[dict]:
    """GSM8K as the hub serves it: `question` and a worked `answer` ending in '#### N', no id."""
    return [{"question": r["problem"], "answer": r["solution"]} for r in GSM8K_ROWS]


# ------------------------------------------------------------------ GSM8K answers, field names


def test_gsm8k_solution_in_answer_field_gives_the_number_after_hashes(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_bytes(b"\n".join(orjson.dumps(r) for r in _hub_style_rows()) + b"\n")
    items = list(read_problems(f))
    assert all(isinstance(p, Problem) for p in items)
    # the shared examples carry both forms: the gold after '####' equals their `answer` field
    assert [p.answer for p in items] == [r["answer"] for r in GSM8K_ROWS]
    assert [p.extra["solution"] for p in items] == [r["solution"] for r in GSM8K_ROWS]
    assert [p.id for p in items] == [f"line-{i}" for i in range(1, 11)]


def test_gold_answer_forms():
    assert gold_answer("He pays 2,125 in all.\n#### 2,125") == "2125"
    assert gold_answer("\\frac{1}{2}") == "\\frac{1}{2}"
    with pytest.raises(ValueError, match="no answer after it"):
        gold_answer("work shown\n####   ")


def test_hashes_without_answer_is_an_error_on_the_answer_field():
    e = parse_record({"problem": "p", "answer": "steps ####"}, 4, "f.jsonl")
    assert isinstance(e, ProblemError) and (e.field, e.line) == ("answer", 4)
    assert e.describe() == "f.jsonl:4: field 'answer': has '####' but no answer after it"


def test_own_solution_field_is_kept():
    p = parse_record({"problem": "p", "answer": "a\n#### 3", "solution": "mine"}, 1, "f")
    assert p.answer == "3" and p.extra == {"solution": "mine"}


def test_custom_field_names_only_use_that_field():
    p = parse_record({"question": "q", "prompt": "use me", "gold": 7, "key": "k1"}, 2, "f",
                     problem_fields=("prompt",), answer_field="gold", id_field="key")
    assert (p.id, p.problem, p.answer, p.extra) == ("k1", "use me", "7", {"question": "q"})
    e = parse_record({"question": "q"}, 3, "f", problem_fields=("prompt",))
    assert isinstance(e, ProblemError) and e.field == "prompt"


# ------------------------------------------------------------------ --dataset through `datasets`


def _parquet(path, rows):
    import datasets

    datasets.Dataset.from_list(rows).to_parquet(str(path))
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet"])
def test_local_files_by_extension(tmp_path, suffix):
    rows = _hub_style_rows()
    path = tmp_path / f"gsm8k{suffix}"
    if suffix == ".parquet":
        _parquet(path, rows)
    elif suffix == ".json":
        path.write_bytes(orjson.dumps(rows))
    else:
        path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    ds = open_dataset(str(path))
    assert ds.source == f"{path}[train]" and len(ds) == 10
    items = list(ds)
    assert [p.id for p in items] == [f"row-{i}" for i in range(1, 11)]
    assert [p.answer for p in items] == [r["answer"] for r in GSM8K_ROWS]
    assert [p.problem for p in items] == [r["problem"] for r in GSM8K_ROWS]
    assert list(ds) == items  # iterable again, same problems


def test_shuffle_and_limit_follow_the_seed_and_keep_row_ids(tmp_path):
    path = _parquet(tmp_path / "g.parquet", _hub_style_rows())
    ds = open_dataset(str(path), shuffle=True, seed=3, limit=4)
    expected = np.random.default_rng(3).permutation(10)[:4]
    assert [p.line for p in ds] == [int(i) + 1 for i in expected]
    assert [p.id for p in ds] == [f"row-{int(i) + 1}" for i in expected]
    assert [p.answer for p in ds] == [GSM8K_ROWS[int(i)]["answer"] for i in expected]
    assert [p.id for p in open_dataset(str(path), shuffle=True, seed=3, limit=4)] == [p.id for p in ds]
    assert [p.line for p in open_dataset(str(path), limit=2)] == [1, 2]


def test_bad_rows_become_errors_with_row_numbers(tmp_path):
    rows = [{"id": "a", "problem": "p", "answer": None}, {"id": "a", "problem": "q", "answer": "1"},
            {"id": "c", "problem": None, "answer": "2"}]
    ds = open_dataset(str(_parquet(tmp_path / "r.parquet", rows)))
    a, dup, missing = ds
    assert isinstance(a, Problem) and a.answer is None
    assert dup.describe() == f"{tmp_path / 'r.parquet'}[train]:2: field 'id': duplicate id 'a' (first seen on line 1)"
    assert (missing.field, missing.message) == ("problem", "missing or empty")


def test_split_choice(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    _parquet(folder / "train.parquet", _hub_style_rows()[:3])
    _parquet(folder / "test.parquet", _hub_style_rows()[3:5])
    assert (open_dataset(str(folder)).split, len(open_dataset(str(folder)))) == ("test", 2)
    assert len(open_dataset(str(folder), split="train")) == 3
    with pytest.raises(DatasetError, match="no split 'dev'; it has"):
        open_dataset(str(folder), split="dev")


def test_hub_name_offline_is_refused_at_once(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DatasetError, match="HF_HUB_OFFLINE=1 forbids downloading it"):
        open_dataset("specscale-tests/no-such-dataset")


# ------------------------------------------------------------------ solve with --dataset / stdin (tiny model)


def test_solve_dataset_parquet_shuffled_sample(tiny_dir, tmp_path):
    path = _parquet(tmp_path / "gsm8k.parquet", _hub_style_rows())
    out = tmp_path / "out"
    res = run_solve(["--dataset", str(path), "--shuffle", "--seed", "5", "--limit", "2", "-o", str(out)], tiny_dir)
    assert res.exit_code == 0, res.output
    picked = [int(i) for i in np.random.default_rng(5).permutation(10)[:2]]
    recs = records(out)
    assert sorted(r["id"] for r in recs) == sorted(f"row-{i + 1}" for i in picked)
    for r in recs:
        assert r["gold"] == GSM8K_ROWS[int(r["id"][4:]) - 1]["answer"] and isinstance(r["correct"], bool)
    run = orjson.loads((out / "run.json").read_bytes())
    assert run["input"] == {"dataset": str(path), "dataset_config": None, "split": "train", "shuffle": True,
                            "problem_fields": ["problem", "question"], "answer_field": "answer", "id_field": "id"}
    assert run["search"]["seed"] == 5


@pytest.mark.slow
def test_solve_stdin_with_custom_field_names(tiny_dir, tmp_path):
    lines = [orjson.dumps({"uid": f"q{i}", "prompt": r["problem"], "target": r["answer"]})
             for i, r in enumerate(GSM8K_ROWS[:2])]
    lines.insert(1, orjson.dumps({"uid": "no-prompt", "problem": "has the wrong field"}))
    out = tmp_path / "out"
    res = run_solve(["-", "-o", str(out), "--problem-field", "prompt", "--answer-field", "target",
                     "--id-field", "uid"], tiny_dir, input=b"\n".join(lines) + b"\n")
    assert res.exit_code == 1, res.output
    recs = {r["id"]: r for r in records(out)}
    assert recs.keys() == {"q0", "q1", "no-prompt"}
    assert [recs[f"q{i}"]["gold"] for i in range(2)] == [r["answer"] for r in GSM8K_ROWS[:2]]
    where = "<stdin>:2: field 'prompt': missing; fields present: uid, problem; use --problem-field problem"
    assert recs["no-prompt"]["error"]["where"] == where
    assert f"error: {where}" in res.output

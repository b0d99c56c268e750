"""The speculation budget: the measured batch-size knee, the scheduler's two-tier rule, and that it
changes only when work runs (the answers stay those of non-spec: tests/test_policies.py)."""

from __future__ import annotations

import json

import pytest

from conftest import make_engine, random_prompts, run_to_end
from core.engine.knee import RowPoint, engine_knee, find_knee, row_counts
from core.engine.sequence import SamplingParams, StopCriteria


def _points(step_time, counts) -> list[RowPoint]:
    return [RowPoint(r, 16, step_time(r), r / step_time(r)) for r in counts]


DOUBLING = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def test_knee_of_a_fixed_plus_per_row_step_time():
    # t = 31 + r: doubling from 32 gains 2*63/95 - 1 = 32.6%, from 64 only 2*95/159 - 1 = 19.5%
    assert find_knee(_points(lambda r: 31 + r, DOUBLING)) == 64
    assert find_knee(_points(lambda r: 31 + r, DOUBLING), min_gain=0.4) == 32
    # no fixed part: one more row always costs a whole row, nothing is free
    assert find_knee(_points(lambda r: float(r), DOUBLING)) == 1


def test_knee_of_a_device_flat_until_full():
    # a GPU-like step time: flat until 128 rows fill the device, then linear
    assert find_knee(_points(lambda r: max(1.0, r / 128), DOUBLING)) == 128
    # never fills within the measured rows: the largest count measured
    assert find_knee(_points(lambda r: 1.0, DOUBLING)) == 256


def test_knee_judges_a_short_last_step_per_doubling():
    # 128 -> 200 rows at t = 1 + r/1000: +47% rows/s over 0.64 doublings is +82% per doubling
    counts = row_counts(200)
    assert counts[-2:] == [128, 200]
    assert find_knee(_points(lambda r: 1 + r / 1000, counts)) == 200


def test_row_counts_and_bad_arguments():
    assert row_counts(1) == [1]
    assert row_counts(256) == DOUBLING
    with pytest.raises(ValueError, match="max rows"):
        row_counts(0)
    with pytest.raises(ValueError, match="no measured points"):
        find_knee([])
    with pytest.raises(ValueError, match="min_gain"):
        find_knee(_points(float, [1, 2]), min_gain=1.5)


@pytest.mark.real_knee_timing
def test_engine_knee_is_measured_once_and_cached(tiny_llama, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSCALE_KNEE_CACHE", str(tmp_path))
    engine = make_engine(tiny_llama)
    first = engine_knee(engine, max_rows=4, context=8, repeats=1, whole_curve=True)
    assert not first.cached
    assert [p.rows for p in first.points] == [1, 2, 4]
    assert all(p.context_tokens == 8 and len(p.runs_s) == 1 and p.seconds > 0 for p in first.points)
    assert first.knee == find_knee(first.points)
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1
    again = engine_knee(engine, max_rows=4, context=8, repeats=1)
    assert again.cached and again.knee == first.knee and again.points == first.points
    # the run's own engine is untouched by the profile
    assert engine.total_steps == 0 and engine.pool.num_used == 0
    # a damaged cache file is measured again, never trusted
    files[0].write_text("{not json")
    assert not engine_knee(engine, max_rows=4, context=8, repeats=1).cached
    assert json.loads(files[0].read_text())["points"]


def _record_batches(engine) -> list[list[tuple]]:
    batches = []
    schedule = engine.scheduler.schedule

    def recording():
        batch = schedule()
        batches.append([(seq, n) for seq, n in batch])
        return batch

    engine.scheduler.schedule = recording
    return batches


def _run(tiny_llama, budget):
    engine = make_engine(tiny_llama)
    engine.set_speculation_budget(budget)
    batches = _record_batches(engine)
    sampling, stop = SamplingParams(temperature=0), StopCriteria(step_delimiter=None, max_tokens=6)
    prompts = random_prompts([5, 6, 7, 5, 6, 7, 5], seed=3)
    sure = [engine.add(p, sampling=sampling, stop=stop) for p in prompts[:3]]
    spec = [engine.add(p, sampling=sampling, stop=stop, priority=1) for p in prompts[3:]]
    run_to_end(engine)
    return engine, batches, sure, spec


def test_budget_fills_only_spare_rows_and_never_delays_sure_work(tiny_llama):
    engine, batches, sure, spec = _run(tiny_llama, budget=4)
    free_engine, free_batches, free_sure, free_spec = _run(tiny_llama, budget=None)
    for batch in batches:
        sure_tokens = sum(n for seq, n in batch if seq.priority == 0)
        assert sum(n for _, n in batch) <= max(4, sure_tokens)
    # the sure sequences run every step until they end, as fast as without speculation beside them
    steps_sure = max(i for i, b in enumerate(batches) for seq, _ in b if seq in sure)
    steps_free = max(i for i, b in enumerate(free_batches) for seq, _ in b if seq in free_sure)
    assert steps_sure <= steps_free
    # while they decode (3 rows), speculation gets exactly the one spare row of the budget of 4
    decoding = [b for b in batches if sum(1 for seq, n in b if seq in sure and n == 1) == 3]
    assert decoding and all(sum(n for seq, n in b if seq in spec) == 1 for b in decoding)
    assert engine.scheduler.num_budget_bound_steps > 0
    assert free_engine.scheduler.num_budget_bound_steps == 0
    # without a budget the speculative sequences run beside the others at once
    assert any(sum(1 for seq, _ in b if seq in free_spec) == 4 for b in free_batches)
    # same tokens either way: the budget changes when work runs, not what is drawn
    assert [s.token_ids for s in sure + spec] == [s.token_ids for s in free_sure + free_spec]


def test_promoted_sequence_is_scheduled_as_sure_work(tiny_llama):
    engine = make_engine(tiny_llama)
    engine.set_speculation_budget(1)
    batches = _record_batches(engine)
    sampling, stop = SamplingParams(temperature=0), StopCriteria(step_delimiter=None, max_tokens=4)
    a, b = random_prompts([5, 5], seed=4)
    sure = engine.add(a, sampling=sampling, stop=stop)
    spec = engine.add(b, sampling=sampling, stop=stop, priority=1)
    engine.step()
    assert [s for s, _ in batches[-1]] == [sure]  # the sure prefill alone is past the budget of 1
    engine.set_priority(spec, 0)
    engine.step()
    assert {s for s, _ in batches[-1]} == {sure, spec}


def test_budget_must_be_positive(tiny_llama):
    with pytest.raises(ValueError, match=">= 1 token"):
        make_engine(tiny_llama).set_speculation_budget(0)


def test_profile_knee_command_prints_draws_caches_and_writes_the_preset(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from specscale_cli.main import cli

    monkeypatch.setenv("SPECSCALE_KNEE_CACHE", str(tmp_path / "cache"))
    preset = tmp_path / "p.toml"
    preset.write_text('[models]\ngenerator = "synthetic:tiny"\n')
    res = CliRunner().invoke(cli, ["profile-knee", "--generator", "synthetic:tiny", "--max-rows", "8", "--context",
                                   "16", "--repeats", "1", "--threads", "1", "-o", str(tmp_path / "out"),
                                   "--write", str(preset), "--json"])
    assert res.exit_code == 0, res.output
    result = json.loads(res.output.strip().splitlines()[-1])
    assert [p["rows"] for p in result["points"]] == [1, 2, 4, 8]
    assert result["knee"] == result["speculation_budget"] == find_knee([RowPoint(**p) for p in result["points"]])
    assert (tmp_path / "out" / "knee.png").stat().st_size > 0
    assert json.loads((tmp_path / "out" / "knee.json").read_text())["knee"] == result["knee"]
    assert list((tmp_path / "cache").glob("*.json")) == [tmp_path / "cache" / result["cache"].rsplit("/", 1)[-1]]
    assert f"speculation_budget = {result['knee']}" in preset.read_text()


def test_the_budget_in_force_is_shown_in_one_short_line():
    from specscale_cli.dashboard import _speculation

    line = _speculation({"speculation_budget": 64, "speculation_budget_source": "measured",
                         "speculation_bound_steps": 3})
    assert line == "64 rows per step (measured knee); held back 3 steps"
    assert _speculation({"speculation_budget": 8, "speculation_budget_source": "set",
                         "speculation_bound_steps": 1}) == "8 rows per step (set); held back 1 step"

"""`specscale profile-threshold`: batch sizes, batch filling, the recommendation rule, --write, CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from core.preset_edit import set_search_field
from core.presets import PresetError, load_preset
from core.solver import ModelSettings, build_verifier
from core.verify.base import ScoreRequest
from core.verify.profile import (ProfilePoint, batch_sizes, fill_batch, profile_throughput, recommend_threshold,
                                 verification_requests)
from core.verify.reference import read_solved_problems
from specscale_cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.jsonl"))
PRESET = ROOT / "presets" / "smollm2-cpu.toml"


def _point(tokens: int, tps: float) -> ProfilePoint:
    return ProfilePoint(tokens, tokens, 1, tokens / tps, tps, tokens)


def _req(n: int) -> ScoreRequest:
    return ScoreRequest(list(range(n)), [n - 1])


def test_batch_sizes_double_from_min_to_max():
    assert batch_sizes(128, 8192) == [128, 256, 512, 1024, 2048, 4096, 8192]
    assert batch_sizes(100, 1000) == [100, 200, 400, 800]
    assert batch_sizes(64, 64) == [64]
    with pytest.raises(ValueError):
        batch_sizes(256, 128)
    with pytest.raises(ValueError):
        batch_sizes(0, 128)


def test_recommend_smallest_batch_within_95_percent_of_best():
    curve = [_point(128, 100), _point(256, 180), _point(512, 300), _point(1024, 380), _point(2048, 396),
             _point(4096, 400), _point(8192, 390)]
    assert recommend_threshold(curve) == 1024  # 380 >= 0.95 * 400 exactly
    assert recommend_threshold(curve, 0.99) == 2048
    assert recommend_threshold(curve, 1.0) == 4096
    assert recommend_threshold(curve[:3]) == 512
    with pytest.raises(ValueError):
        recommend_threshold([])


def test_fill_batch_lands_nearest_the_target():
    reqs = [_req(100), _req(50), _req(80), _req(200)]
    assert [len(r.token_ids) for r in fill_batch(reqs, 120)] == [100]  # 100 is 20 short, 150 is 30 over
    assert [len(r.token_ids) for r in fill_batch(reqs, 140)] == [100, 50]
    assert [len(r.token_ids) for r in fill_batch(reqs, 30)] == [100]  # never empty
    assert len(fill_batch(reqs, 430)) == 4
    with pytest.raises(ValueError, match="fewer than a batch of 431"):
        fill_batch(reqs, 431)


def test_write_keeps_comments_and_sets_the_threshold(tmp_path):
    copy = tmp_path / "mine.toml"
    shutil.copy(PRESET, copy)
    original = copy.read_text().splitlines()
    assert set_search_field(str(copy), "lv_threshold", 512) == copy
    lines = copy.read_text().splitlines()
    assert [line for line in lines if line not in original] == ["lv_threshold = 512"]
    # the shipped preset sets the measured 1024; the write replaces it in place, every comment kept
    assert [line for line in original if line not in lines] == ["lv_threshold = 1024"]
    assert lines.index("lv_threshold = 512") > lines.index("[search]")
    assert load_preset(str(copy))[1]["lv_threshold"] == 512
    set_search_field(str(copy), "lv_threshold", 1024)  # a second write replaces the value in place
    assert copy.read_text().count("lv_threshold") == 1 and load_preset(str(copy))[1]["lv_threshold"] == 1024

    bare = tmp_path / "bare.toml"
    bare.write_text('# only models\n[models]\nscorer = "likelihood"\n')
    set_search_field(str(bare), "lv_threshold", 256)
    assert bare.read_text().startswith('# only models\n[models]\nscorer = "likelihood"\n')
    assert load_preset(str(bare))[1] == {"lv_threshold": 256}
    with pytest.raises(PresetError, match="lv_threshold"):
        set_search_field(str(bare), "lv_threshold", 0)
    with pytest.raises(PresetError, match="nope"):
        set_search_field(str(bare), "nope", 1)


# ------------------------------------------------------------------ measuring on a tiny model


def _verifier(loaded, caching: bool, scorer: str = "likelihood"):
    settings = ModelSettings(prm="tiny", scorer=scorer, prm_kv_bytes=1 << 25, max_model_len=1024, block_size=4,
                             enable_prefix_caching=caching)
    return build_verifier(settings, loaded)


def test_profile_computes_every_input_token(tiny_loaded):
    with pytest.raises(ValueError, match="prefix caching"):
        profile_throughput(_verifier(tiny_loaded, True), [_req(10)], [8])
    verifier = _verifier(tiny_loaded, False, "lm-judge")
    problems = read_solved_problems(EXAMPLES)
    requests = verification_requests(verifier, problems, "Solve.", "\n")
    steps = sum(len(p.extra["solution"].strip().splitlines()) for p in problems)
    assert len(requests) <= steps and len(requests) >= len(problems)
    seen = []
    points = profile_throughput(verifier, requests, [64, 128, 256], repeats=2, on_point=seen.append)
    assert seen == points
    assert [p.target_tokens for p in points] == [64, 128, 256]
    for p in points:
        batch = fill_batch(requests, p.target_tokens)
        assert (p.tokens, p.tasks) == (sum(len(r.token_ids) for r in batch), len(batch))
        assert p.computed_tokens == p.tokens  # nothing served from a cache
        assert len(p.runs_s) == 2 and p.tokens_per_s > 0
    assert verifier.stats.flushes == 1 + 3 * 2  # one warm-up, then two timed flushes per size


def test_profile_threshold_cli_on_tiny_model(tiny_loaded, tmp_path):
    model_dir = tmp_path / "tiny"
    tiny_loaded.model.save_pretrained(model_dir)
    tiny_loaded.tokenizer.save_pretrained(model_dir)
    preset = tmp_path / "preset.toml"
    shutil.copy(PRESET, preset)
    out = tmp_path / "profile"
    res = CliRunner().invoke(cli, [
        "profile-threshold", "--min-batch-tokens", "64", "--max-batch-tokens", "256", "--repeats", "1", "-o", str(out),
        "--json", "--write", str(preset), "--preset", str(preset), "--prm", str(model_dir),
        "--prm-kv-cache-gb", "0.05", "--max-model-len", "1024"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    result = json.loads(res.stdout.strip().splitlines()[-1])
    assert json.loads((out / "profile.json").read_text()) == result
    assert (out / "throughput.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p["target_tokens"] for p in result["points"]] == [64, 128, 256]
    assert all(p["computed_tokens"] == p["tokens"] for p in result["points"])
    assert result["prefix_caching"] is False and result["scorer"] == "likelihood" and result["repeats"] == 1
    best = max(p["tokens_per_s"] for p in result["points"])
    assert result["best_tokens_per_s"] == best
    assert result["recommended_threshold"] == min(p["target_tokens"] for p in result["points"]
                                                  if p["tokens_per_s"] >= 0.95 * best)
    assert result["wrote_preset"] == str(preset)
    assert load_preset(str(preset))[1]["lv_threshold"] == result["recommended_threshold"]

    res = CliRunner().invoke(cli, ["profile-threshold", "--min-batch-tokens", "512", "--max-batch-tokens", "256"])
    assert res.exit_code == 2 and "min batch tokens" in res.output

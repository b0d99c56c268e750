"""tools/gpu-check and tools/gpu-wheels without a GPU: step choice, the study problem file, the
flashinfer wheel's pieces, skipped tests on a CUDA machine, and the whole --dry-run rehearsal."""

import importlib.machinery
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "gpu-check"


def _load_tool():
    loader = importlib.machinery.SourceFileLoader("gpu_check", str(TOOL))
    spec = importlib.util.spec_from_loader("gpu_check", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_study_problems_cycle_the_examples_with_numbered_distinct_texts():
    tool = _load_tool()
    examples = []
    for name in ("math500_sample.jsonl", "gsm8k_sample.jsonl"):
        examples += [orjson.loads(line) for line in (ROOT / "examples" / name).read_bytes().splitlines() if line]
    problems = tool._numbered_problems(2 * len(examples) + 3)
    assert len(problems) == 2 * len(examples) + 3
    assert len({p["id"] for p in problems}) == len(problems)
    assert len({p["problem"] for p in problems}) == len(problems)
    for i, p in enumerate(problems):
        source = examples[i % len(examples)]
        assert p["problem"] == f"Problem {i + 1}. {source['problem']}"
        assert p["answer"] == source["answer"]


def test_unknown_step_is_refused_before_anything_runs(tmp_path):
    proc = subprocess.run([sys.executable, str(TOOL), "--steps", "tests,bogus", "--out-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "unknown step(s) bogus" in proc.stderr
    assert not list(tmp_path.iterdir())  # no logs folder, no report


def _load(path: Path, name: str):
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    loader.exec_module(module)
    return module


def test_flashinfer_wheel_pieces_join_back_and_a_bad_piece_is_named(tmp_path):
    """gpu-wheels cuts the wheel so each call carries one piece; gpu-check joins and checks them."""
    import hashlib
    import json

    wheels, check = _load(ROOT / "tools" / "gpu-wheels", "gpu_wheels"), _load_tool()
    wheel = tmp_path / "flashinfer_python-0.0.1-py3-none-any.whl"
    wheel.write_bytes(bytes(range(256)) * 1001)
    folders = [tmp_path / "part0", tmp_path / "part1", tmp_path / "part2"]
    parts = wheels.split(wheel, 3, folders)
    assert [p["bytes"] for p in parts] == [85419, 85419, 85418] and sum(p["bytes"] for p in parts) == 256 * 1001
    manifest = {"wheel": wheel.name, "bytes": wheel.stat().st_size, "parts": parts,
                "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}
    (folders[-1] / "manifest.json").write_text(json.dumps(manifest))
    joined, problem = check.join_parts(folders, tmp_path / "joined")
    assert problem == "" and joined.read_bytes() == wheel.read_bytes()
    joined, problem = check.join_parts(folders[1:], tmp_path / "joined")
    assert joined is None and problem.startswith(f"piece {wheel.name}.part0 is in none of")
    piece = folders[1] / f"{wheel.name}.part1"
    piece.write_bytes(b"x" + piece.read_bytes()[1:])
    joined, problem = check.join_parts(folders, tmp_path / "joined")
    assert joined is None and "has sha256" in problem and manifest["sha256"][:12] in problem
    assert check.join_parts([tmp_path], tmp_path / "j")[1].startswith("no manifest.json in")


def test_a_skipped_cuda_test_fails_the_check_on_a_cuda_machine(tmp_path, monkeypatch):
    """On a CUDA machine a skip hides a missing package or a broken install: the step fails."""
    tool = _load_tool()
    args = SimpleNamespace(out_dir=str(tmp_path), budget_s=60, python=sys.executable, dry_run=False, device="cuda")
    check = tool.Check(args)
    xml = check.logs / "t.xml"

    def fake_run(name, cmd, timeout, counts=True):
        xml.write_text('<testsuites><testsuite><testcase name="test_a"/><testcase name="test_b">'
                       '<skipped message="needs flashinfer"/></testcase></testsuite></testsuites>')
        return 0, "1 passed, 1 skipped"

    monkeypatch.setattr(check, "run", fake_run)
    result = check.tests("cuda and flashinfer", "t")
    assert result["passed"] == ["test_a"] and result["skipped"] == ["test_b"]
    assert result["failed_because"] == "1 test(s) skipped on a CUDA machine" and check.ok is False
    check.ok, check.dry = True, True  # the CPU rehearsal skips them all and passes
    result = check.tests("cuda and flashinfer", "t")
    assert "failed_because" not in result and check.ok is True


@pytest.mark.slow
def test_dry_run_goes_through_every_step_on_cpu(tmp_path):
    """The rehearsal CI runs: probe and smoke, tests, bench engine and bench search on the small
    synthetic models, flashinfer noted as CUDA-only; one JSON with the goals' figures."""
    import json

    proc = subprocess.run([sys.executable, str(TOOL), "--dry-run", "--out-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    assert report["status"] == "ok" and report["dry_run"] is True and report["smoke"] == {"ok": True}
    names = [s["name"] for s in report["steps"]]
    assert names == ["smoke", "tests-cuda-torch", "bench-engine-torch", "bench-search-torch"]
    assert all(s["rc"] == 0 for s in report["steps"])
    assert report["bench_engine"]["model"] == "synthetic:tiny"
    assert set(report["bench_engine"]["goals"]) == {
        "engine / HF generate, mixed lengths (goal >= 1.5)", "batch-1 decode step / weights-read bound",
        "batch-4 decode step / weights-read bound (goal <= 2)"}
    assert set(report["bench_search"]["policies"]) == {"non-spec", "specscale:ep+cd+lv@off", "specscale:ep+cd+lv"}
    assert report["flashinfer"] == {"note": "dry run on CPU: flashinfer needs CUDA"}
    assert "gpu-check: ok; wrote" in proc.stdout

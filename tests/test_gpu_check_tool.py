"""tools/gpu-check's pieces that run without a GPU: step choice and the study problem file."""

import importlib.machinery
import importlib.util
import subprocess
import sys
from pathlib import Path

import orjson

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

"""Helpers for tests that run `specscale solve` on tiny random models saved as HF folders."""

from __future__ import annotations

from pathlib import Path

import orjson
from click.testing import CliRunner


from specscale_cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
GSM8K = ROOT / "examples" / "gsm8k_sample.jsonl"


def tiny_flags(model_dir: Path, prm_dir: Path | None = None, max_model_len: int = 1024) -> list[str]:
    """Flags that make a solve run small: 4 candidates, 2 steps of at most 32 tokens, small KV pools."""
    return ["--generator", str(model_dir), "--prm", str(prm_dir or model_dir), "--step-delimiter", "e",
            "-n", "4", "-m", "2", "--max-steps", "2", "--max-step-tokens", "32",
            "--kv-cache-gb", "0.05", "--prm-kv-cache-gb", "0.05", "--max-model-len", str(max_model_len)]


def run_solve(args: list[str], model_dir: Path | None = None, input: bytes | str | None = None, **kw):
    """Invoke `specscale solve ARGS --no-dashboard` in-process (with the tiny-model flags when given)."""
    base = ["solve", *args, "--no-dashboard"]
    if model_dir is not None:
        base += tiny_flags(model_dir, **kw)
    return CliRunner().invoke(cli, base, input=input, catch_exceptions=False)


def records(out: Path) -> list[dict]:
    """The records of ``OUT/answers.jsonl`` in file order."""
    return [orjson.loads(line) for line in (out / "answers.jsonl").read_bytes().splitlines()]


def without_timing(recs: list[dict]) -> list[dict]:
    """Records without ``time_s`` (the only field that differs between equal runs), sorted by id."""
    return sorted(({k: v for k, v in r.items() if k != "time_s"} for r in recs), key=lambda r: str(r["id"]))


def wait_for_answers(proc, out: Path, err_path: Path | None = None, count: int = 1, poll_s: float = 0.05) -> None:
    """Wait until ``OUT/answers.jsonl`` of the running ``proc`` holds ``count`` whole lines.

    The 600 s deadline is a guard against a hang, not a speed check.
    """
    import time

    answers = out / "answers.jsonl"
    deadline = time.monotonic() + 600
    while not (answers.exists() and answers.read_bytes().count(b"\n") >= count):
        assert proc.poll() is None, err_path.read_text() if err_path else f"exited with {proc.returncode}"
        assert time.monotonic() < deadline, "no answer written"
        time.sleep(poll_s)

"""Helpers for tests that run `specscale solve` on tiny random models saved as HF folders."""

from __future__ import annotations

from pathlib import Path

import orjson
import torch
from click.testing import CliRunner
from transformers import LlamaForCausalLM

from conftest import tiny_chat_config

from specscale_cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
GSM8K = ROOT / "examples" / "gsm8k_sample.jsonl"


def save_tiny_model(path: Path, tokenizer, seed: int = 0, **config) -> Path:
    """A tiny random Llama over ``tokenizer`` (SmolLM2's chat tokenizer), saved like any HF folder."""
    torch.manual_seed(seed)
    cfg = tiny_chat_config(tokenizer, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                           **config)
    LlamaForCausalLM(cfg).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


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

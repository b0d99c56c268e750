"""Synthetic models (issue 24): random weights in a real model's shape, with steps of chosen lengths.

``synthetic:NAME`` must be a first-class model spec: checked before torch loads, built in the
shape its config gives, tilted so the delimiter and EOS come at exact rates, run by the paged
engine exactly as `transformers` runs it, and solvable end to end on CPU.
"""

from __future__ import annotations

import pytest
import torch

from conftest import hf_greedy, make_engine
from solve_helpers import GSM8K, records, run_solve

from core.engine.engine import EngineConfig, GenerationEngine
from core.engine.sequence import SamplingParams, StopCriteria
from core.models.loader import ModelLoadError, load_model
from core.models.specs import ModelSpecError, check_model_spec, spec_kind
from core.models.synthetic import DELIMITER, synthetic_tokenizer
from core.models.synthetic_specs import SyntheticSpecError, parse_synthetic


# ---------------------------------------------------------------------- specs
def test_spec_defaults_and_options():
    spec = parse_synthetic("synthetic:qwen2.5-7b")
    assert (spec.name, spec.step_tokens, spec.steps, spec.temperature, spec.layers, spec.seed) == \
        ("qwen2.5-7b", 60.0, 8.0, 0.8, None, 0)
    spec = parse_synthetic("synthetic:tiny:step_tokens=10, steps=2,temperature=1.0,layers=3,seed=7,init=0.1")
    assert (spec.step_tokens, spec.steps, spec.temperature, spec.layers, spec.seed, spec.init) == \
        (10.0, 2.0, 1.0, 3, 7, 0.1)
    assert spec.end_probability == 0.1 and spec.eos_share == 0.5
    assert spec_kind("synthetic:tiny") == "synthetic"


@pytest.mark.parametrize("text,message", [
    ("synthetic:qwen9", "unknown synthetic model 'qwen9'"),
    ("synthetic:tiny:depth=3", "options are key=value with key one of step_tokens, steps"),
    ("synthetic:tiny:steps", "options are key=value"),
    ("synthetic:tiny:step_tokens=1", "step_tokens=1 in 'synthetic:tiny:step_tokens=1': needs a mean step length of at least 2"),
    ("synthetic:tiny:layers=two", "layers=two in 'synthetic:tiny:layers=two': needs at least 1 layer"),
    ("synthetic:tiny:temperature=0", "needs a sampling temperature above 0"),
])
def test_bad_specs_are_one_line_before_torch_loads(text, message):
    with pytest.raises(SyntheticSpecError, match=message):
        parse_synthetic(text)
    with pytest.raises(ModelSpecError) as info:
        check_model_spec(text, "--prm")
    assert str(info.value).startswith(f"--prm {text}: ") and "\n" not in str(info.value)
    with pytest.raises(ModelLoadError, match=message):
        load_model(text)


def test_check_model_spec_accepts_synthetic():
    check_model_spec("synthetic:tiny-prm:seed=3", "--prm")


def test_paper_scale_shapes_from_their_configs():
    """Built on the meta device (no memory): parameter counts of the configs' models."""
    gen = load_model("synthetic:qwen2.5-7b", "bfloat16", "meta").model
    prm = load_model("synthetic:qwen2.5-math-prm-7b", "bfloat16", "meta").model
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    # Qwen2.5-7B: 28 x (q, k, v with biases, o, 3 MLP matrices, 2 norms) + embeddings + untied LM head + norm
    layer = (3584 * 3584 + 3584) + 2 * (3584 * 512 + 512) + 3584 * 3584 + 3 * 3584 * 18944 + 2 * 3584
    assert count(gen) == 28 * layer + 2 * 152064 * 3584 + 3584 == 7_615_616_512
    assert gen.dtype == torch.bfloat16 and count(gen) * 2 / 1e9 == pytest.approx(15.23, abs=0.01)
    head = 3584 * 3584 + 3584 + 3584 * 2 + 2
    assert count(prm) == 28 * layer + 152064 * 3584 + 3584 + head
    assert prm.config.rope_parameters["rope_theta"] == 1e4 and gen.config.rope_parameters["rope_theta"] == 1e6
    small = load_model("synthetic:smollm2-135m", "float32", "meta").model
    assert count(small) == 134_515_008  # SmolLM2-135M's parameter count (tied embeddings)
    shallow = load_model("synthetic:qwen2.5-7b:layers=2,init=0.1", "bfloat16", "meta").model.config
    assert (shallow.num_hidden_layers, shallow.initializer_range, gen.config.initializer_range) == (2, 0.1, 0.02)


# ---------------------------------------------------------------------- tokenizer
def test_byte_level_tokenizer():
    tok = synthetic_tokenizer()
    assert len(tok) == 261 and tok.bos_token_id is None
    text = "Tom has 7 apples.\n\nHe eats 2 — wörds ² ∞ <extra_0>"
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    assert ids[:3] == list(b"Tom")
    assert tok.convert_tokens_to_ids(DELIMITER) == 260 and ids.count(260) == 1
    assert tok.convert_tokens_to_ids("<extra_0>") == 259 and ids[-1] == 259
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 258


# ---------------------------------------------------------------------- the tilt
@pytest.mark.parametrize("options,p,q,temperature", [("", 1 / 60, 1 / 8, 0.8),
                                                      (":step_tokens=5,steps=2,temperature=1.0", 0.2, 0.5, 1.0)])
def test_delimiter_and_eos_rates_are_exact(options, p, q, temperature):
    loaded = load_model(f"synthetic:tiny{options}")
    tok = loaded.tokenizer
    with torch.inference_mode():
        logits = loaded.model(torch.tensor([tok.encode("What is 2 + 3? Think.", add_special_tokens=False)])).logits[0]
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    torch.testing.assert_close(probs[:, 260], torch.full((len(probs),), p * (1 - q), dtype=torch.float64),
                               rtol=1e-5, atol=0)
    torch.testing.assert_close(probs[:, tok.eos_token_id], torch.full((len(probs),), p * q, dtype=torch.float64),
                               rtol=1e-5, atol=0)
    never = [10, 256, 257, 259]  # the lone newline byte, pad, <|im_start|>, <extra_0>
    assert probs[:, never].max().item() == 0.0
    assert probs[:, :256].max().item() > 0  # the body keeps the random model's odds
    assert not torch.allclose(probs[0, :256], probs[1, :256])


def test_engine_equals_transformers_on_the_tilted_model():
    loaded = load_model("synthetic:tiny")
    prompt = loaded.tokenizer.encode("Solve: 12 * 7 = ?", add_special_tokens=False)
    engine = make_engine(loaded.model, max_model_len=256)
    (seq,) = engine.generate([prompt], SamplingParams(temperature=0), StopCriteria(None, max_tokens=12))
    assert seq.token_ids[len(prompt):] == hf_greedy(loaded.model, prompt, 12)


def test_sampled_steps_have_the_chosen_mean_length():
    """Seeded, so the figures are fixed; the tolerance is for the geometric spread of 400 steps."""
    loaded = load_model("synthetic:tiny:step_tokens=8,steps=4")
    tok = loaded.tokenizer
    engine = GenerationEngine(loaded.model, EngineConfig(block_size=16, num_blocks=4096, max_model_len=512), tok)
    prompt = tok.encode("Problem.", add_special_tokens=False)
    stop = StopCriteria(DELIMITER, eos_token_ids=frozenset({tok.eos_token_id}), max_step_tokens=200, max_tokens=200)
    seqs = engine.generate([prompt] * 400, SamplingParams(temperature=0.8), stop, seeds=list(range(400)))
    lengths = [len(s.token_ids) - len(prompt) for s in seqs]
    ends = [s.token_ids[-1] for s in seqs]
    assert all(e in (260, tok.eos_token_id) for e in ends)  # every step ended at the delimiter or EOS
    assert sum(lengths) / len(lengths) == pytest.approx(8, rel=0.15)
    assert sum(e == tok.eos_token_id for e in ends) / len(ends) == pytest.approx(0.25, abs=0.07)


# ---------------------------------------------------------------------- end to end
def test_solve_with_a_synthetic_pair(tmp_path):
    out = tmp_path / "out"
    result = run_solve([str(GSM8K), "-o", str(out), "--generator", "synthetic:tiny:step_tokens=6",
                        "--prm", "synthetic:tiny-prm", "--scorer", "qwen-math-prm", "--limit", "2", "-n", "4",
                        "-m", "2", "--max-steps", "3", "--max-step-tokens", "24", "--policy", "specscale"])
    assert result.exit_code == 0, result.output
    recs = records(out)
    assert sorted(r["id"] for r in recs) == ["gsm8k-test-0000", "gsm8k-test-0001"]
    for r in recs:
        assert len(r["completions"]) == 4
        assert all(0 < c["path_score"] < 1 for c in r["completions"])
        # steps ended at the delimiter well before the 24-token cap: the tilt is in force
        assert any(c["text"].count(DELIMITER) >= 1 for c in r["completions"])

"""The Skywork-o1-Open-PRM ("skywork-prm") and TRL-trained ("token-classification") adapters on tiny
random PRMs.

Every score the batched, prefix-cached verifier produces must equal the score a plain
`transformers` forward gives for the whole path, its input built here as Skywork's
``prepare_input`` and TRL's ``PRMTrainer.tokenize_row`` build it (each step tokenized alone, one
separator after it, the score read at the separator). Checkpoints are written as the published
ones are laid out and loaded through the project's loader. Tokenizer: the embedded SmolLM2
tokenizer (its BOS is ``<|im_start|>``), and a copy of it without BOS.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, Qwen2Config, Qwen2ForCausalLM

from conftest import reference_mode
from test_prm_adapters import PROBLEMS, STEPS, score_tree

from core.models.loader import LoadedModel, ModelLoadError, load_model
from core.models.prm_head import Qwen2ValueHeadPRM, token_classifier_class
from core.solver import SCORERS, ModelSettings, build_verifier
from core.verify.skywork import SkyworkPRMScorer
from core.verify.token_classification import TokenClassificationScorer

TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=1024, initializer_range=0.1)


# ---------------------------------------------------------------------- models
def _biased(model):
    """Random init zeroes biases; give them values so every path (q/k/v and head biases) is exercised."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.1)
    return model.eval()


def tiny_skywork(vocab_size: int, seed: int = 11) -> Qwen2ValueHeadPRM:
    torch.manual_seed(seed)
    return _biased(Qwen2ValueHeadPRM(Qwen2Config(vocab_size=vocab_size, architectures=["Qwen2ForPrmModel"], **TINY)))


def tiny_token_classifier(arch: str, vocab_size: int, seed: int = 12):
    """A tiny random TRL-style PRM: ``arch`` (Qwen2/Llama ``*ForTokenClassification``), 2 labels."""
    torch.manual_seed(seed)
    config_cls = Qwen2Config if arch.startswith("Qwen2") else LlamaConfig
    cfg = config_cls(vocab_size=vocab_size, num_labels=2, architectures=[arch], **TINY)
    return _biased(token_classifier_class(arch)(cfg))


def without_bos(tok):
    tok = copy.deepcopy(tok)
    tok.bos_token = None
    assert tok.bos_token_id is None
    return tok


@pytest.fixture(scope="module")
def skywork_prm(smollm2):
    return tiny_skywork(len(smollm2.tokenizer)), smollm2.tokenizer


@pytest.fixture(scope="module", params=["Qwen2ForTokenClassification", "LlamaForTokenClassification"])
def trl_prm(request, smollm2):
    return tiny_token_classifier(request.param, len(smollm2.tokenizer)), smollm2.tokenizer


# ---------------------------------------------------------------------- references (published code)
def skywork_ids(tok, problem: str, steps: list[str]) -> tuple[list[int], list[int]]:
    """Skywork's prepare_input for our steps: BOS + problem + "\\n", each step alone + the "\\n" id;
    returns the ids and the separator positions."""
    ids = tok.encode(tok.bos_token + problem + "\n", add_special_tokens=False)
    sep = tok.encode("\n", add_special_tokens=False)[-1]
    positions = []
    for s in steps:
        ids += tok.encode(s.strip(), add_special_tokens=False) + [sep]
        positions.append(len(ids) - 1)
    return ids, positions


def skywork_reference(model, tok, problem, steps) -> list[float]:
    """sigmoid(v_head(last hidden state)) at each separator, the head applied by hand in float32."""
    ids, positions = skywork_ids(tok, problem, steps)
    hidden = decoder_hidden(model.model, ids)[positions]
    w, b = model.v_head.summary.weight.detach().float(), model.v_head.summary.bias.detach().float()
    return torch.sigmoid(hidden @ w.T + b)[:, 0].tolist()


def trl_ids(tok, problem: str, steps: list[str], separator: str = "\n") -> tuple[list[int], list[int]]:
    """TRL's tokenize_row: [BOS if any] + prompt + (step + separator)*; label at each separator's last token."""
    ids = ([tok.bos_token_id] if tok.bos_token_id is not None else []) + tok(problem, add_special_tokens=False)["input_ids"]
    positions = []
    for s in steps:
        ids += tok(s.strip(), add_special_tokens=False)["input_ids"] + tok.encode(separator, add_special_tokens=False)
        positions.append(len(ids) - 1)
    return ids, positions


def trl_reference(model, tok, problem, steps) -> list[float]:
    """softmax(...)[1] of the stock `transformers` token-classification forward at each label position."""
    ids, positions = trl_ids(tok, problem, steps)
    stock = next(c for c in type(model).__mro__ if c.__module__.startswith("transformers.models."))
    prev = model.config._attn_implementation
    model.set_attn_implementation("sdpa")
    try:
        with torch.inference_mode():
            logits = stock.forward(model, torch.tensor([ids])).logits[0].float()
    finally:
        model.set_attn_implementation(prev)
    return torch.softmax(logits[positions], -1)[:, 1].tolist()


def decoder_hidden(decoder, ids) -> torch.Tensor:
    """Last hidden states ``[T, hidden]`` of a stock `transformers` decoder (sdpa attention)."""
    with reference_mode(decoder):
        return decoder(torch.tensor([ids])).last_hidden_state[0].float()


def path_steps(p: int, path: str) -> list[str]:
    parts = path.split(".")
    return [STEPS[(p, ".".join(parts[: i + 1]))] for i in range(len(parts))]


def assert_tree_matches(scores: dict, reference, model, tok) -> None:
    assert set(scores) == set(STEPS)
    for (p, path), score in scores.items():
        expected = reference(model, tok, PROBLEMS[p], path_steps(p, path))
        assert score == pytest.approx(expected[-1], abs=1e-5)


# ---------------------------------------------------------------------- verifier path
@pytest.mark.parametrize("share", [False, True], ids=["re-encoded", "shared-ids"])
def test_skywork_scores_equal_plain_forward(skywork_prm, share):
    model, tok = skywork_prm
    scores, verifier = score_tree(model, tok, SkyworkPRMScorer(tok, share_generator_ids=share))
    assert_tree_matches(scores, skywork_reference, model, tok)
    assert len({round(s, 6) for s in scores.values()}) == len(scores)  # spread: the match is not trivial
    # later flushes reuse their parents' KV from the prefix cache: a step costs its new tokens
    assert verifier.stats.computed_tokens < 0.6 * verifier.stats.input_tokens
    assert verifier.engine.pool.num_used == 0


@pytest.mark.parametrize("share", [False, True], ids=["re-encoded", "shared-ids"])
def test_token_classification_scores_equal_plain_forward(trl_prm, share):
    model, tok = trl_prm
    scores, verifier = score_tree(model, tok, TokenClassificationScorer(tok, share_generator_ids=share))
    assert_tree_matches(scores, trl_reference, model, tok)
    assert len({round(s, 6) for s in scores.values()}) == len(scores)
    assert verifier.stats.computed_tokens < 0.6 * verifier.stats.input_tokens


def test_skywork_input_has_one_separator_per_double_newline_step(skywork_prm):
    _, tok = skywork_prm
    scorer = SkyworkPRMScorer(tok, share_generator_ids=True)
    root = scorer.root_ids("  What is 2 + 3?\n", "a generator prompt the PRM never sees")
    first = root + scorer.step_ids("We add.\n\n", tok.encode("We add.\n\n"), first_step=True)
    second = first + scorer.step_ids("So 5.", tok.encode("So 5.") + [tok.eos_token_id])
    assert tok.decode(second) == "<|im_start|>What is 2 + 3?\nWe add.\nSo 5.\n"
    assert second[0] == tok.bos_token_id and second.count(tok.encode("\n\n")[0]) == 0
    req = scorer.request(first, second)
    assert req.token_ids == second and req.read_positions == [len(second) - 1]
    assert second[req.read_positions[0]] == tok.encode("\n")[0]


def test_token_classification_without_bos_starts_with_the_question(trl_prm):
    model, tok = trl_prm
    plain = without_bos(tok)
    scorer = TokenClassificationScorer(plain)
    assert scorer.root_ids("What is 2 + 3?", "") == tok.encode("What is 2 + 3?", add_special_tokens=False)
    assert TokenClassificationScorer(tok).root_ids("What is 2 + 3?", "")[0] == tok.bos_token_id
    scores, _ = score_tree(model, plain, scorer)
    assert_tree_matches(scores, trl_reference, model, plain)


def test_skywork_refuses_a_tokenizer_without_bos(skywork_prm):
    _, tok = skywork_prm
    with pytest.raises(ValueError, match="skywork-prm.*BOS token.*has none"):
        SkyworkPRMScorer(without_bos(tok))


def test_scorers_refuse_the_wrong_head(skywork_prm, trl_prm, tiny_loaded):
    with pytest.raises(ValueError, match="value head.*returned 2 values"):
        SkyworkPRMScorer(skywork_prm[1]).score(None, [torch.zeros(2)])
    with pytest.raises(ValueError, match="2-label.*returned 1 values"):
        TokenClassificationScorer(trl_prm[1]).score(None, [torch.zeros(1)])
    with pytest.raises(ValueError, match="'skywork-prm' reads the PRM's 'value' output.*'lm' head"):
        build_verifier(ModelSettings(scorer="skywork-prm", prm_kv_bytes=8 << 20), tiny_loaded)
    with pytest.raises(ValueError, match="'token-classification' reads the PRM's 'classifier' output.*'value' head"):
        build_verifier(ModelSettings(scorer="token-classification", prm_kv_bytes=8 << 20),
                       LoadedModel(skywork_prm[0], skywork_prm[1], "tiny-skywork"))


def test_both_scorers_registered():
    assert SCORERS["skywork-prm"] is SkyworkPRMScorer
    assert SCORERS["token-classification"] is TokenClassificationScorer


# ---------------------------------------------------------------------- checkpoints as published
def save_like_skywork(model: Qwen2ValueHeadPRM, tok, folder, fmt: str = "safetensors", with_head: bool = True):
    """The hub layout: config naming ``Qwen2ForPrmModel``, weights ``model.*`` + ``lm_head.weight``
    (Skywork saves its causal LM whole) + ``v_head.summary.*``, as safetensors or a pickled
    ``pytorch_model.bin``, and the tokenizer."""
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()
             if with_head or not k.startswith("v_head.")}
    state["lm_head.weight"] = model.model.embed_tokens.weight.detach().clone()
    if fmt == "safetensors":
        save_file(state, folder / "model.safetensors")
    else:
        torch.save(state, folder / "pytorch_model.bin")
    config = model.config.to_dict()
    config["architectures"] = ["Qwen2ForPrmModel"]
    (folder / "config.json").write_text(json.dumps(config))
    tok.save_pretrained(folder)


def skywork_head_tensors(folder) -> dict:
    path = folder / "model.safetensors"
    state = load_file(path) if path.exists() else torch.load(folder / "pytorch_model.bin", weights_only=True)
    return {k: v for k, v in state.items() if k.startswith("v_head.")}


@pytest.mark.parametrize("fmt", ["safetensors", "pytorch_model.bin"])
def test_loader_loads_skywork_checkpoint_and_scores_equal_skyworks_own_wiring(skywork_prm, tmp_path, fmt):
    model, tok = skywork_prm
    save_like_skywork(model, tok, tmp_path, fmt)
    loaded = load_model(str(tmp_path))
    assert isinstance(loaded.model, Qwen2ValueHeadPRM) and loaded.head == "value"
    verifier = build_verifier(ModelSettings(scorer="skywork-prm", prm_kv_bytes=8 << 20, block_size=4,
                                            max_model_len=512), loaded)
    got, _ = score_tree(loaded.model, loaded.tokenizer, verifier.scorer)
    # Skywork's own wiring: the checkpoint as a causal LM, the value head on hidden_states[-1]
    lm = Qwen2ForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    head = skywork_head_tensors(tmp_path)
    for (p, path), score in got.items():
        ids, positions = skywork_ids(tok, PROBLEMS[p], path_steps(p, path))
        with torch.inference_mode():
            hidden = lm(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0, positions[-1]]
        value = hidden.float() @ head["v_head.summary.weight"].float().T + head["v_head.summary.bias"].float()
        assert score == pytest.approx(torch.sigmoid(value).item(), abs=1e-5)


def test_skywork_value_head_stays_float32_in_a_bf16_model(skywork_prm, tmp_path):
    model, tok = skywork_prm
    save_like_skywork(model, tok, tmp_path)
    loaded = load_model(str(tmp_path), dtype="bfloat16")
    assert loaded.model.model.embed_tokens.weight.dtype == torch.bfloat16
    assert loaded.model.v_head.summary.weight.dtype == torch.float32
    assert torch.equal(loaded.model.v_head.summary.weight, model.v_head.summary.weight)


@pytest.mark.parametrize("fmt", ["safetensors", "pytorch_model.bin"])
def test_loader_names_the_head_tensors_a_skywork_checkpoint_lacks(skywork_prm, tmp_path, fmt):
    model, tok = skywork_prm
    save_like_skywork(model, tok, tmp_path, fmt, with_head=False)
    with pytest.raises(ModelLoadError, match=r"as Qwen2ValueHeadPRM: its checkpoint lacks v_head\.summary\.bias \[1\], "
                                             r"v_head\.summary\.weight \[1, 32\]"):
        load_model(str(tmp_path))


class _RunsCode:
    """Unpickling this would create a file: what unrestricted torch.load of a hostile checkpoint does."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_loader_never_unpickles_objects_from_pytorch_model_bin(skywork_prm, tmp_path):
    model, tok = skywork_prm
    save_like_skywork(model, tok, tmp_path, "pytorch_model.bin")
    state = torch.load(tmp_path / "pytorch_model.bin", weights_only=True)
    marker = tmp_path / "code-ran"
    state["v_head.summary.bias"] = _RunsCode(marker)
    torch.save(state, tmp_path / "pytorch_model.bin")
    with pytest.raises(ModelLoadError, match="cannot load model .*Weights only load failed"):
        load_model(str(tmp_path))
    assert not marker.exists()


def test_loader_loads_trl_token_classification_checkpoint(trl_prm, tmp_path):
    model, tok = trl_prm
    arch = model.config.architectures[0]
    stock = getattr(transformers, arch)(model.config)  # what TRL's trainer saves: the stock class
    stock.load_state_dict(model.state_dict())
    stock.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded = load_model(str(tmp_path))
    assert type(loaded.model) is token_classifier_class(arch) and loaded.head == "classifier"
    verifier = build_verifier(ModelSettings(scorer="token-classification", prm_kv_bytes=8 << 20, block_size=4,
                                            max_model_len=512), loaded)
    got, _ = score_tree(loaded.model, loaded.tokenizer, verifier.scorer)
    assert_tree_matches(got, trl_reference, stock.eval(), tok)


def test_loader_names_the_head_tensors_a_token_classification_checkpoint_lacks(trl_prm, tmp_path):
    model, tok = trl_prm
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items() if not k.startswith("score.")}
    save_file(state, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps(model.config.to_dict()))
    tok.save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match=r"its checkpoint lacks score\.bias \[2\], score\.weight \[2, 32\]"):
        load_model(str(tmp_path))


# ---------------------------------------------------------------------- the preset's code path, on CPU
def save_generator(folder, tok, arch: str, seed: int = 21):
    """A tiny random generator of Qwen2.5-Math's shape (Qwen2, q/k/v biases, tied embeddings) or
    Llama-3.2's (Llama, tied embeddings), over ``tok``, saved as a model folder."""
    torch.manual_seed(seed)
    config_cls, model_cls = (Qwen2Config, Qwen2ForCausalLM) if arch == "qwen2" else (LlamaConfig,
                                                                                       transformers.LlamaForCausalLM)
    cfg = config_cls(vocab_size=len(tok), tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                     eos_token_id=tok.eos_token_id, **{**TINY, "initializer_range": 0.05})
    _biased(model_cls(cfg)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def node_steps(trace: dict, node_id: int) -> list[str]:
    """Step texts from depth 1 down to ``node_id``, from a trace."""
    nodes = {n["id"]: n for n in trace["nodes"]}
    steps = []
    while nodes[node_id]["parent"] is not None:
        steps.append(nodes[node_id]["text"])
        node_id = nodes[node_id]["parent"]
    return steps[::-1]


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_solve_with_the_skywork_preset_on_tiny_models_of_both_shapes(skywork_prm, tmp_path, arch):
    """`solve --preset qwen2.5-math-1.5b-skywork` with the two model folders replaced by tiny ones,
    on the CPU: every step score of the answers is Skywork's score of that step (the PRM's tokenizer
    has one token more than the generator's, so steps are re-encoded from their text, as for a
    Llama generator)."""
    import orjson

    from solve_helpers import GSM8K, records, run_solve

    model, tok = skywork_prm
    prm_tok = copy.deepcopy(tok)
    prm_tok.add_tokens(["<unused_prm_token>"])
    prm = tiny_skywork(len(prm_tok))
    (tmp_path / "prm").mkdir()
    save_like_skywork(prm, prm_tok, tmp_path / "prm")
    gen = save_generator(tmp_path / "gen", tok, arch)
    out = tmp_path / "out"
    res = run_solve([str(GSM8K), "--preset", "qwen2.5-math-1.5b-skywork", "--generator", str(gen), "--prm",
                     str(tmp_path / "prm"), "--device", "cpu", "--dtype", "float32", "--limit", "2", "-n", "4",
                     "--max-steps", "2", "--max-step-tokens", "12", "--kv-cache-gb", "0.05", "--prm-kv-cache-gb",
                     "0.05", "--max-model-len", "1024", "-o", str(out)])
    assert res.exit_code == 0, res.output
    recs = records(out)
    assert len(recs) == 2
    problems = {orjson.loads(line)["id"]: orjson.loads(line)["problem"] for line in GSM8K.read_bytes().splitlines()[:2]}
    for rec in recs:
        assert len(rec["completions"]) == 4 and list(rec["at_n"]) == ["1", "2", "4"]
        trace = orjson.loads((out / "traces" / f"{rec['id']}.json").read_bytes())
        for c in rec["completions"]:
            expected = skywork_reference(prm, prm_tok, problems[rec["id"]], node_steps(trace, c["node"]))
            assert c["step_scores"] == pytest.approx(expected, abs=1e-5)
    run = orjson.loads((out / "run.json").read_bytes())
    assert run["models"]["scorer"] == "skywork-prm"

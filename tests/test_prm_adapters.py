"""Trained-PRM adapters (qwen-math-prm, rlhflow, math-shepherd) on tiny random PRMs.

Every score that the batched, prefix-cached verifier produces must equal the score a plain
`transformers` forward gives for the whole path text, built here as each model card builds it
(chat template / plain text, tokenized in one piece, scores read where the card reads them).
Tokenizers are the embedded SmolLM2 tokenizer with the format's special tokens added.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
from transformers import AddedToken, LlamaForCausalLM, Qwen2Config

from conftest import tiny_chat_config

from core.engine.engine import EngineConfig, GenerationEngine
from core.io.problems import Problem
from core.models.loader import LoadedModel, ModelLoadError, load_model
from core.models.prm_head import Qwen2ProcessRewardModel
from core.search.config import SearchConfig
from core.search.driver import SearchDriver
from core.solver import SCORERS, ModelSettings, build_runtime, build_verifier
from core.verify.math_shepherd import MathShepherdScorer
from core.verify.qwen_math_prm import QwenMathPRMScorer
from core.verify.rlhflow import RLHFlowScorer
from core.verify.verifier import Verifier

QWEN_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
PROBLEMS = ["What is 2 + 3?", "Tom has 7 apples and eats 2. How many are left?"]
# (problem, tree path) -> step text as the generator writes it (ending with the delimiter)
STEPS = {
    (0, "1"): "We add 2 and 3.\n\n", (0, "1.1"): "2 + 3 = 5, since 2+3 is five.\n\n",
    (0, "1.1.1"): "The answer is \\boxed{5}.", (0, "2"): "First, 2+3=6.\n\n", (0, "2.1"): "So the answer is 6.\n\n",
    (1, "1"): "Tom starts with 7 apples.\n\n", (1, "1.1"): "He eats 2, so 7 - 2 = 5 are left.\n\n",
    (1, "1.2"): "7 - 2 = 4.\n\n", (1, "1.1.1"): "The answer is \\boxed{5}.",
}
# one flush per line: parent and child in one flush (1/1 with 1/1.1), later flushes hit the cache
FLUSHES = [[(0, "1"), (0, "2"), (1, "1"), (1, "1.1")],
           [(0, "1.1"), (0, "2.1"), (1, "1.2"), (1, "1.1.1")],
           [(0, "1.1.1")]]


# ---------------------------------------------------------------------- models
def _with_tokens(tok, tokens, special=False):
    """A copy of ``tok`` with ``tokens`` added (the session tokenizer stays as it is)."""
    tok = copy.deepcopy(tok)
    tok.add_tokens([AddedToken(t, special=special) for t in tokens], special_tokens=special)
    return tok


def tiny_qwen_prm(vocab_size: int, seed: int = 5) -> Qwen2ProcessRewardModel:
    """A tiny random Qwen2.5-Math-PRM: Qwen2 decoder + Linear-ReLU-Linear 2-class head."""
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      initializer_range=0.1, architectures=["Qwen2ForProcessRewardModel"])
    model = Qwen2ProcessRewardModel(cfg).eval()
    with torch.no_grad():  # random init zeroes biases; give them values so every path is exercised
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.1)
    return model


@pytest.fixture(scope="module")
def qwen_prm(smollm2):
    tok = _with_tokens(smollm2.tokenizer, ["<extra_0>"], special=True)
    return tiny_qwen_prm(len(tok)), tok


@pytest.fixture(scope="module")
def rlhflow_prm(smollm2):
    torch.manual_seed(6)
    tok = smollm2.tokenizer
    return LlamaForCausalLM(tiny_chat_config(tok, initializer_range=0.1)).eval(), tok


@pytest.fixture(scope="module")
def shepherd_prm(smollm2):
    torch.manual_seed(7)
    tok = _with_tokens(smollm2.tokenizer, ["ки"])
    return LlamaForCausalLM(tiny_chat_config(tok, initializer_range=0.1)).eval(), tok


# ---------------------------------------------------------------------- references (model cards)
def _sdpa(model):
    prev = model.config._attn_implementation
    model.set_attn_implementation("sdpa")
    return prev


def plain_forward(model, ids) -> torch.Tensor:
    """Plain `transformers` forward of one sequence: LM logits or, for the Qwen PRM, hidden states."""
    prev = _sdpa(model)
    try:
        with torch.inference_mode():
            if isinstance(model, Qwen2ProcessRewardModel):
                return model.model(torch.tensor([ids])).last_hidden_state[0].float()
            return model(torch.tensor([ids])).logits[0].float()
    finally:
        model.set_attn_implementation(prev)


def qwen_reference(model, tok, problem, steps) -> list[float]:
    """Card: system, user question, assistant = steps joined and ended by <extra_0>; P(class 1) there."""
    messages = [{"role": "system", "content": QWEN_SYSTEM}, {"role": "user", "content": problem},
                {"role": "assistant", "content": "".join(s.strip() + "<extra_0>" for s in steps)}]
    ids = tok.encode(tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=False))
    tag = tok.convert_tokens_to_ids("<extra_0>")
    hidden = plain_forward(model, ids)[[i for i, t in enumerate(ids) if t == tag]]
    w0, b0, w2, b2 = (p.detach().float() for p in (model.score[0].weight, model.score[0].bias,
                                                     model.score[2].weight, model.score[2].bias))
    logits = torch.relu(hidden @ w0.T + b0) @ w2.T + b2
    return torch.softmax(logits, -1)[:, 1].tolist()


def rlhflow_reference(model, tok, problem, steps) -> list[float]:
    """Card: user = question + " " + step 1, assistant "+", user = step 2, ...; P(+) where "+" is predicted."""
    conv = []
    for k, s in enumerate(steps):
        conv += [{"role": "user", "content": (problem + " " + s.strip()) if k == 0 else s.strip()},
                 {"role": "assistant", "content": "+"}]
    text = tok.apply_chat_template(conv, tokenize=False)
    enc = tok(text, return_offsets_mapping=True, add_special_tokens=False)
    ids, starts = enc["input_ids"], [a for a, _ in enc["offset_mapping"]]
    plus, minus = tok.encode("+")[-1], tok.encode("-")[-1]
    header, positions, at = "<|im_start|>assistant\n", [], 0
    while (at := text.find(header + "+", at)) >= 0:
        token = starts.index(at + len(header))
        assert ids[token] == plus
        positions.append(token - 1)
        at += 1
    assert len(positions) == len(steps)
    rows = plain_forward(model, ids)[positions][:, [plus, minus]]
    return torch.softmax(rows, -1)[:, 0].tolist()


def shepherd_reference(model, tok, problem, steps) -> list[float]:
    """Card: f"{question} {steps joined by ' ки\\n'} ки"; "+" share of softmax over "+"/"-" at each ки.

    The card's "+"/"-" ids are those of ``"+ -"`` in the Mistral tokenizer, the forms after a space.
    """
    text = problem + " " + " ки\n".join(s.strip() for s in steps) + " ки"
    ids = tok.encode(text)
    tag = tok.convert_tokens_to_ids("ки")
    (good,), (bad,) = tok.encode(" +"), tok.encode(" -")
    rows = plain_forward(model, ids)[[i for i, t in enumerate(ids) if t == tag]][:, [good, bad]]
    return torch.softmax(rows, -1)[:, 0].tolist()


ADAPTERS = {
    "qwen-math-prm": (QwenMathPRMScorer, "qwen_prm", qwen_reference),
    "rlhflow": (RLHFlowScorer, "rlhflow_prm", rlhflow_reference),
    "math-shepherd": (MathShepherdScorer, "shepherd_prm", shepherd_reference),
}


# ---------------------------------------------------------------------- verifier path
def score_tree(model, tok, scorer, eos: bool = True):
    """Submit :data:`FLUSHES` through one verifier; returns ``{(problem, path): score}`` and the verifier.

    Generator ids are the step text's ids, plus EOS on the last step of a path when ``eos``.
    """
    engine = GenerationEngine(model, EngineConfig(block_size=4, num_blocks=2048, max_model_len=1024), tok)
    verifier = Verifier(engine, scorer)
    prefix = {(p, ""): scorer.root_ids(problem, "A generator system prompt.") for p, problem in enumerate(PROBLEMS)}
    scores = {}
    for flush in FLUSHES:
        for p, path in flush:
            parent = path.rpartition(".")[0]
            text = STEPS[(p, path)]
            gen_ids = tok.encode(text, add_special_tokens=False)
            if eos and not text.endswith("\n\n"):
                gen_ids.append(tok.eos_token_id)
            prefix[(p, path)] = prefix[(p, parent)] + scorer.step_ids(text, gen_ids, first_step=not parent)
            verifier.submit((p, path), scorer.request(prefix[(p, parent)], prefix[(p, path)]))
        for task in verifier.flush():
            scores[task.owner] = task.score
    return scores, verifier


@pytest.mark.parametrize("share", [False, True], ids=["re-encoded", "shared-ids"])
@pytest.mark.parametrize("adapter", list(ADAPTERS))
def test_verifier_scores_equal_plain_forward_of_card_format(adapter, share, request):
    scorer_cls, fixture, reference = ADAPTERS[adapter]
    model, tok = request.getfixturevalue(fixture)
    scorer = scorer_cls(tok, share_generator_ids=share)
    scores, verifier = score_tree(model, tok, scorer)
    assert set(scores) == set(STEPS)
    for (p, path), score in scores.items():
        parts = path.split(".")
        steps = [STEPS[(p, ".".join(parts[: i + 1]))] for i in range(len(parts))]
        expected = reference(model, tok, PROBLEMS[p], steps)
        assert len(expected) == len(steps)
        assert score == pytest.approx(expected[-1], abs=1e-5)
    # later flushes reuse their parents' KV from the prefix cache
    assert verifier.stats.computed_tokens < 0.6 * verifier.stats.input_tokens
    assert verifier.engine.pool.num_used == 0


def test_scores_are_spread_and_differ_by_path(qwen_prm):
    """The comparison above is not trivially met: scores vary across steps and problems."""
    model, tok = qwen_prm
    scores, _ = score_tree(model, tok, QwenMathPRMScorer(tok))
    assert len({round(s, 6) for s in scores.values()}) == len(scores)


def test_step_prefix_is_prefix_of_children_and_ends_with_trail(rlhflow_prm):
    model, tok = rlhflow_prm
    scorer = RLHFlowScorer(tok, share_generator_ids=True)
    root = scorer.root_ids(PROBLEMS[0], "")
    first = root + scorer.step_ids("We add.\n\n", tok.encode("We add.\n\n"), first_step=True)
    second = first + scorer.step_ids("Then 5.\n\n", tok.encode("Then 5.\n\n"))
    req = scorer.request(first, second)
    assert second[: len(first)] == first
    assert tok.decode(second[len(root):]) == (
        " We add.<|im_end|>\n<|im_start|>assistant\n+<|im_end|>\n<|im_start|>user"
        "\nThen 5.<|im_end|>\n<|im_start|>assistant\n+<|im_end|>\n<|im_start|>user")
    assert tok.decode(req.token_ids[req.read_positions[0]:][:2]) == "\n+"


# ---------------------------------------------------------------------- refusals
def test_adapters_refuse_tokenizers_without_their_tokens(smollm2):
    tok = smollm2.tokenizer
    with pytest.raises(ValueError, match="qwen-math-prm.*'<extra_0>'.*single token"):
        QwenMathPRMScorer(tok)
    with pytest.raises(ValueError, match="math-shepherd.*'ки' as one token"):
        MathShepherdScorer(tok)
    with pytest.raises(ValueError, match="rlhflow.*'\\+\\+\\+ \\+' to be a single token"):
        RLHFlowScorer(tok, good="+++ +")
    no_template = copy.deepcopy(tok)
    no_template.chat_template = None
    for cls in (QwenMathPRMScorer, RLHFlowScorer):
        with pytest.raises(ValueError, match="needs a chat template"):
            cls(no_template)


def test_qwen_scorer_refuses_lm_logits(rlhflow_prm):
    model, tok = rlhflow_prm
    scorer = QwenMathPRMScorer(_with_tokens(tok, ["<extra_0>"], special=True))
    with pytest.raises(ValueError, match="2-class head"):
        scorer.score(None, [torch.zeros(len(tok))])


def test_all_adapters_registered():
    for name, (cls, _, _) in ADAPTERS.items():
        assert SCORERS[name] is cls


# ---------------------------------------------------------------------- loading a Qwen PRM checkpoint
def save_like_qwen_prm(model: Qwen2ProcessRewardModel, tok, folder, with_head: bool = True) -> None:
    """Write ``model`` as the hub checkpoint is laid out: sharded safetensors with ``model.*`` and
    ``score.0.*``/``score.2.*`` keys, a config naming ``Qwen2ForProcessRewardModel`` with its remote-code
    ``auto_map``, and the tokenizer."""
    from huggingface_hub import save_torch_state_dict

    state = {k: v.detach().clone() for k, v in model.state_dict().items() if with_head or not k.startswith("score.")}
    assert {"model.embed_tokens.weight", "score.0.weight", "score.0.bias", "score.2.weight",
            "score.2.bias"} <= set(state) or not with_head
    save_torch_state_dict(state, folder, max_shard_size="100KB")
    config = model.config.to_dict()
    config["architectures"] = ["Qwen2ForProcessRewardModel"]
    config["auto_map"] = {"AutoConfig": "configuration_qwen2_rm.Qwen2RMConfig",
                          "AutoModel": "modeling_qwen2_rm.Qwen2ForProcessRewardModel"}
    (folder / "config.json").write_text(json.dumps(config))
    tok.save_pretrained(folder)


def test_loader_loads_qwen_prm_checkpoint_and_scores_match(qwen_prm, tmp_path):
    model, tok = qwen_prm
    save_like_qwen_prm(model, tok, tmp_path)
    assert (tmp_path / "model.safetensors.index.json").is_file()  # sharded, like the hub checkpoint
    loaded = load_model(str(tmp_path))
    assert isinstance(loaded.model, Qwen2ProcessRewardModel) and loaded.head == "classifier"
    reference = model.state_dict()
    assert all(torch.equal(v, reference[k]) for k, v in loaded.model.state_dict().items())
    expected, _ = score_tree(model, tok, QwenMathPRMScorer(tok))
    verifier = build_verifier(ModelSettings(scorer="qwen-math-prm", prm_kv_bytes=8 << 20, block_size=4,
                                            max_model_len=512), loaded)
    got, _ = score_tree(loaded.model, loaded.tokenizer, verifier.scorer)
    assert got == pytest.approx(expected, abs=1e-6)


def test_loader_refuses_prm_checkpoint_without_head(qwen_prm, tmp_path):
    model, tok = qwen_prm
    save_like_qwen_prm(model, tok, tmp_path, with_head=False)
    with pytest.raises(ModelLoadError, match="lacks score"):
        load_model(str(tmp_path))


def test_scorer_and_model_heads_must_match(qwen_prm, rlhflow_prm):
    model, tok = qwen_prm
    prm = LoadedModel(model, tok, "tiny-qwen-prm")
    with pytest.raises(ValueError, match="'likelihood' reads the PRM's 'lm' output.*'classifier' head"):
        build_verifier(ModelSettings(scorer="likelihood", prm_kv_bytes=8 << 20), prm)
    lm, lm_tok = rlhflow_prm
    with pytest.raises(ValueError, match="'qwen-math-prm' reads the PRM's 'classifier' output.*'lm' head"):
        build_verifier(ModelSettings(scorer="qwen-math-prm", prm_kv_bytes=8 << 20),
                       LoadedModel(lm, _with_tokens(lm_tok, ["<extra_0>"], special=True), "tiny-llama"))
    with pytest.raises(ValueError, match="not a causal LM"):
        build_runtime(ModelSettings(scorer="qwen-math-prm"), generator=prm, prm=prm)


# ---------------------------------------------------------------------- in the search
def test_search_builds_rlhflow_inputs_in_card_format(rlhflow_prm):
    """A beam search whose PRM is the RLHFlow adapter (shared ids): every node's PRM input is the
    card's conversation of its path, with the question and step 1 in one user turn."""
    model, tok = rlhflow_prm
    loaded = LoadedModel(model, tok, "tiny-random-llama")
    rt = build_runtime(ModelSettings(scorer="rlhflow", gen_kv_bytes=32 << 20, prm_kv_bytes=32 << 20, block_size=8,
                                     max_model_len=1024), generator=loaded, prm=loaded)
    assert rt.scorer.share_generator_ids
    searches = {}
    cfg = SearchConfig(beam_size=2, beam_width=2, temperature=1.0, max_steps=3, step_delimiter="e",
                       max_step_tokens=16, max_tokens=256)
    driver = SearchDriver(rt.engine, tok, loaded.eos_token_ids, rt.verifier, rt.scorer, cfg, max_concurrent=1,
                          on_result=lambda p, r, s: searches.setdefault(p.id, s), on_error=pytest.fail)
    driver.run([Problem("p", "What is 2 + 3?", "5", 1)])
    nodes = [n for n in searches["p"].tree.nodes[1:] if n.prefix_ids]
    assert any(n.depth == 3 for n in nodes)
    for node in nodes:
        conv = []
        for k, n in enumerate(node.path_nodes()):
            text = tok.decode(n.token_ids, skip_special_tokens=True).strip()
            conv += [{"role": "user", "content": "What is 2 + 3? " + text if k == 0 else text},
                     {"role": "assistant", "content": "+"}]
        expected = tok.apply_chat_template(conv, tokenize=False) + "<|im_start|>user"
        assert tok.decode(node.prefix_ids) == expected

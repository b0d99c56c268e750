"""GPU memory a generator-PRM pair needs, from the numbers in the models' ``config.json`` (no download).

`specscale presets` tells a user, before minutes of loading, whether a preset's pair fits a card:
the weights of both models plus the KV cache each engine needs at the preset's N. Weights are
counted from the config numbers of a Llama/Qwen2-style decoder (embeddings, per layer the
attention projections, with Qwen2's q/k/v biases, the gated MLP and two norms, the final norm),
plus the head the model is loaded with: the LM head unless tied to the embeddings for a causal LM,
none for a PRM read through its own head (:mod:`core.models.prm_head`: Qwen2.5-Math-PRM's
Linear-ReLU-Linear, Skywork's value head, a token-classification ``score``). The KV cache of one
problem is N paths of ``max_model_len`` tokens in each engine (no prefix sharing counted: an upper
bound for one problem, the least a run needs; more problems in flight use more, or wait).

The numbers of the models the shipped presets name are below (:data:`KNOWN_CONFIGS`, from each
model's ``config.json`` on the hub); a local model folder is read from its own ``config.json``.
Standard library only: `specscale presets` imports no torch.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

GIB = 1 << 30
#: bytes per weight and KV element by dtype name (None / "auto": bf16 on CUDA, fp32 on CPU)
DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2}
#: common GPU memory sizes (GB as sold, taken as GiB), smallest first
CARD_SIZES_GB = (8, 12, 16, 24, 40, 48, 80, 96, 141)
#: a pair fits a card when weights and KV leave this share of it, and at least CARD_RESERVE_GIB, for
#: the CUDA context, activations, logits rows and attention workspaces (the shipped 80 GB presets
#: leave ~10 GiB; on a small card the context and a prefill chunk's activations take over a GiB)
CARD_RESERVE_SHARE = 0.1
CARD_RESERVE_GIB = 1.5

_QWEN25_MATH_15B = dict(model_type="qwen2", hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                        num_attention_heads=12, num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                        max_position_embeddings=4096)
_QWEN25_MATH_7B = dict(model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False,
                       max_position_embeddings=4096)
_LLAMA31_8B = dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                   num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=False,
                   max_position_embeddings=131072)
#: ``config.json`` numbers of the models the shipped presets name (hub name -> config fields)
KNOWN_CONFIGS: dict[str, dict] = {
    "Qwen/Qwen2.5-Math-1.5B-Instruct": _QWEN25_MATH_15B,
    # Skywork's PRMs are trained on Qwen2.5-Math-1.5B/7B-Instruct and keep their decoder's shape
    "Skywork/Skywork-o1-Open-PRM-Qwen-2.5-1.5B": _QWEN25_MATH_15B,
    "Skywork/Skywork-o1-Open-PRM-Qwen-2.5-7B": _QWEN25_MATH_7B,
    "Qwen/Qwen2.5-Math-7B-Instruct": _QWEN25_MATH_7B,
    "Qwen/Qwen2.5-Math-PRM-7B": _QWEN25_MATH_7B,
    "Qwen/Qwen2.5-7B-Instruct": {**_QWEN25_MATH_7B, "max_position_embeddings": 32768},
    "Qwen/Qwen2.5-3B-Instruct": dict(model_type="qwen2", hidden_size=2048, intermediate_size=11008,
                                     num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2,
                                     vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=32768),
    "meta-llama/Llama-3.2-1B-Instruct": dict(model_type="llama", hidden_size=2048, intermediate_size=8192,
                                             num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                                             head_dim=64, vocab_size=128256, tie_word_embeddings=True,
                                             max_position_embeddings=131072),
    "meta-llama/Llama-3.2-3B-Instruct": dict(model_type="llama", hidden_size=3072, intermediate_size=8192,
                                             num_hidden_layers=28, num_attention_heads=24, num_key_value_heads=8,
                                             head_dim=128, vocab_size=128256, tie_word_embeddings=True,
                                             max_position_embeddings=131072),
    "meta-llama/Llama-3.1-8B-Instruct": _LLAMA31_8B,
    "RLHFlow/Llama3.1-8B-PRM-Deepseek-Data": _LLAMA31_8B,
    "RLHFlow/Llama3.1-8B-PRM-Mistral-Data": _LLAMA31_8B,
    "smollm2-135m-instruct": dict(model_type="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                  num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                                  tie_word_embeddings=True, max_position_embeddings=8192),
}

#: the heads a model can be loaded with (see DecoderShape.parameters)
LM, CLASSIFIER, MLP_CLASSIFIER, VALUE = "lm", "classifier", "mlp-classifier", "value"
#: the head the PRM is loaded with, by scorer (core.solver.SCORERS; the others read a causal LM)
SCORER_HEADS = {"qwen-math-prm": MLP_CLASSIFIER, "skywork-prm": VALUE, "token-classification": CLASSIFIER}


@dataclass(frozen=True)
class DecoderShape:
    """The config numbers that decide a Llama/Qwen2-style decoder's weights and KV bytes."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    qkv_bias: bool
    max_positions: int | None

    @classmethod
    def from_config(cls, config: dict) -> "DecoderShape":
        """From ``config.json`` fields (Qwen2 has q/k/v biases; others when ``attention_bias``).

        Raises:
            KeyError: a field every decoder config has is missing.
        """
        heads = config["num_attention_heads"]
        return cls(hidden=config["hidden_size"], intermediate=config["intermediate_size"],
                   layers=config["num_hidden_layers"], heads=heads,
                   kv_heads=config.get("num_key_value_heads") or heads,
                   head_dim=config.get("head_dim") or config["hidden_size"] // heads, vocab=config["vocab_size"],
                   tied=bool(config.get("tie_word_embeddings", False)),
                   qkv_bias=config.get("model_type") == "qwen2" or bool(config.get("attention_bias", False)),
                   max_positions=config.get("max_position_embeddings"))

    def parameters(self, head: str = LM, num_labels: int = 2) -> int:
        """Parameter count of the decoder with ``head``: ``lm`` (the LM head unless tied),
        ``classifier`` (a token-classification ``score``), ``mlp-classifier`` (Qwen2.5-Math-PRM's
        Linear-ReLU-Linear), ``value`` (Skywork's value head)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        attention = 2 * self.hidden * q + 2 * self.hidden * kv + (q + 2 * kv if self.qkv_bias else 0)
        layer = attention + 3 * self.hidden * self.intermediate + 2 * self.hidden
        total = self.vocab * self.hidden + self.layers * layer + self.hidden
        if head == LM:
            return total + (0 if self.tied else self.vocab * self.hidden)
        if head == VALUE:
            return total + self.hidden + 1
        if head == MLP_CLASSIFIER:
            total += self.hidden * self.hidden + self.hidden
        return total + self.hidden * num_labels + num_labels

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """K and V of one token over all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


def model_config(spec: str) -> dict | None:
    """``config.json`` fields of a model spec: a local folder's own file, else :data:`KNOWN_CONFIGS`
    (None when neither knows it, or the folder's file cannot be read)."""
    path = Path(os.path.expanduser(spec))
    if (path / "config.json").is_file():
        try:
            config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        # a checkpoint that wraps its decoder config (some PRMs) keeps the numbers in text_config
        return config.get("text_config", config) if isinstance(config, dict) else None
    return KNOWN_CONFIGS.get(spec)


def dtype_bytes(dtype: str | None, device: str) -> int:
    """Bytes per element of ``dtype`` (None/"auto": bf16 on CUDA, fp32 on CPU, as the loader does)."""
    if dtype in (None, "auto"):
        return 2 if str(device).startswith("cuda") else 4
    return DTYPE_BYTES[dtype]


@dataclass(frozen=True)
class PairFootprint:
    """Memory of a generator-PRM pair, in bytes; see :func:`pair_footprint`.

    weights: generator and PRM weights (the PRM's 0 when it is the generator: loaded once).
    kv_needed: each engine's KV for one problem's N paths of the context length.
    kv_pools: the fixed KV pools the settings set (None where sized to the work).
    """

    generator_weights: int
    prm_weights: int
    generator_kv_needed: int
    prm_kv_needed: int
    generator_kv_pool: int | None
    prm_kv_pool: int | None
    context_tokens: int

    @property
    def weights(self) -> int:
        return self.generator_weights + self.prm_weights

    @property
    def kv(self) -> int:
        """KV bytes the pair holds: a fixed pool where set (it is allocated whole), else what one problem needs."""
        gen = self.generator_kv_pool if self.generator_kv_pool is not None else self.generator_kv_needed
        prm = self.prm_kv_pool if self.prm_kv_pool is not None else self.prm_kv_needed
        return gen + prm

    @property
    def total(self) -> int:
        return self.weights + self.kv

    def fits(self) -> int | None:
        """The smallest card of :data:`CARD_SIZES_GB` that holds :attr:`total` and keeps its reserve
        (:data:`CARD_RESERVE_SHARE`, at least :data:`CARD_RESERVE_GIB`); None when none does."""
        return next((gb for gb in CARD_SIZES_GB
                     if self.total <= gb * GIB - max(CARD_RESERVE_SHARE * gb, CARD_RESERVE_GIB) * GIB), None)


def pair_footprint(generator: str, prm: str, prm_head: str, beam_size: int, max_model_len: int | None,
                   dtype: str | None, device: str, gen_kv_bytes: int | None = None,
                   prm_kv_bytes: int | None = None) -> PairFootprint:
    """What a run of ``generator`` + ``prm`` at beam size N needs (see the module docstring).

    Args:
        prm_head: how the PRM is loaded (``lm``, ``classifier``, ``mlp-classifier``, ``value``;
            :data:`SCORER_HEADS` by scorer).
        max_model_len: the run's context limit (None: the models' own), capped by each model's.
        gen_kv_bytes / prm_kv_bytes: fixed pools of the settings (None: sized to the work).

    Raises:
        KeyError: a model whose config numbers are unknown (names the spec).
    """
    configs = {}
    for role, spec in (("generator", generator), ("PRM", prm)):
        config = model_config(spec)
        if config is None:
            raise KeyError(f"no config numbers for {role} '{spec}' (give a model folder, or a model of a shipped "
                           "preset)")
        try:
            configs[role] = DecoderShape.from_config(config)
        except KeyError as exc:
            raise KeyError(f"the config of {role} '{spec}' lacks {exc.args[0]}") from None
    gen, prm_shape = configs["generator"], configs["PRM"]
    size = dtype_bytes(dtype, device)

    def context(shape: DecoderShape) -> int:
        limits = [x for x in (max_model_len, shape.max_positions) if x]
        return min(limits) if limits else 4096

    return PairFootprint(
        generator_weights=gen.parameters(LM) * size,
        prm_weights=0 if prm == generator else prm_shape.parameters(prm_head) * size,
        generator_kv_needed=beam_size * context(gen) * gen.kv_bytes_per_token(size),
        prm_kv_needed=beam_size * context(prm_shape) * prm_shape.kv_bytes_per_token(size),
        generator_kv_pool=gen_kv_bytes, prm_kv_pool=prm_kv_bytes, context_tokens=context(gen))


def gib(nbytes: int) -> float:
    """Bytes as GiB, to one decimal (rounded up: a figure to plan memory with)."""
    return math.ceil(nbytes / GIB * 10) / 10

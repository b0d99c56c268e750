"""Synthetic model specs: ``synthetic:NAME[:key=value,...]``, random weights in a real model's shape.

A machine without network (the lent GPU machine, CI) cannot download Qwen2.5-7B, but a benchmark of
the engine and of the search policies needs only the shape: the weights' bytes, the KV bytes per
token, the attention layout, and steps whose lengths vary the way a real model's do. A synthetic
model is a `transformers` model of that shape with random weights (built on the device in seconds)
and a byte-level tokenizer built in code (:mod:`core.models.synthetic`), whose output logits are
tilted so that each sampled token ends the step with probability ``1 / step_tokens`` (step lengths
are geometric with that mean, capped by ``--max-step-tokens``) and one step end in ``steps`` is EOS
instead (the steps per path are geometric with that mean). The rates are exact at the sampling
temperature ``temperature`` (default 0.8, the presets' temperature). A random model never writes
the delimiter by itself, which would leave every step at the step cap and give speculation
nothing to gain.

Shapes (``config.json`` of each model on the hub, a few numbers each):

* ``qwen2.5-7b``: Qwen/Qwen2.5-7B-Instruct (Qwen2, 28 layers, hidden 3584, MLP 18944, 28 query and
  4 KV heads, vocabulary 152064, RoPE theta 1e6): 7.6 B parameters, 15.2 GB in bf16;
* ``qwen2.5-math-prm-7b``: Qwen/Qwen2.5-Math-PRM-7B's shape (the Qwen2.5-Math-7B decoder above with
  RoPE theta 1e4, plus its Linear-ReLU-Linear 2-class head), scored with ``--scorer qwen-math-prm``;
* ``smollm2-135m``: HuggingFaceTB/SmolLM2-135M-Instruct (Llama, 30 layers, hidden 576, 9 query and
  3 KV heads, tied embeddings, vocabulary 49152);
* ``tiny`` / ``tiny-prm``: a 2-layer Qwen2 of hidden size 64 over the tokenizer's own vocabulary, for
  CPU tests and ``tools/gpu-check --dry-run``.

Options: ``step_tokens`` (mean step length, tokens, >= 2), ``steps`` (mean steps per path, >= 1),
``temperature`` (> 0), ``layers`` (override the layer count: a shallower model of the same width),
``seed`` (weights), ``init`` (the weights' init standard deviation, default the config's 0.02: a
wider one, such as 0.1, gives peaked logits whose greedy tokens survive bf16 rounding). Standard library only: specs are checked before torch is imported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PREFIX = "synthetic:"

# Qwen2 decoder of Qwen2.5-7B(-Instruct) and of Qwen2.5-Math-7B (the PRM's base): hub config.json
_QWEN25_7B = dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                  num_key_value_heads=4, vocab_size=152064, rms_norm_eps=1e-6, tie_word_embeddings=False)
_TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             rms_norm_eps=1e-6, tie_word_embeddings=False, initializer_range=0.1)


@dataclass(frozen=True)
class SyntheticModel:
    """One synthetic shape: its architecture family, head and `transformers` config values.

    arch: ``qwen2`` or ``llama``; head: ``lm`` (a causal LM, the generator) or ``prm`` (decoder +
    2-class step head, as Qwen2.5-Math-PRM); config: config keyword values (``vocab_size`` None: the
    synthetic tokenizer's size); source: where the numbers come from.
    """

    arch: str
    head: str
    config: dict
    source: str


SYNTHETIC_MODELS = {
    "qwen2.5-7b": SyntheticModel("qwen2", "lm", dict(_QWEN25_7B, max_position_embeddings=32768, rope_theta=1e6),
                                 "Qwen/Qwen2.5-7B-Instruct config.json"),
    "qwen2.5-math-prm-7b": SyntheticModel("qwen2", "prm", dict(_QWEN25_7B, max_position_embeddings=4096, rope_theta=1e4),
                                          "Qwen/Qwen2.5-Math-PRM-7B config.json (Qwen2.5-Math-7B decoder + 2-class head)"),
    "smollm2-135m": SyntheticModel("llama", "lm", dict(
        hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
        vocab_size=49152, max_position_embeddings=8192, rope_theta=1e5, rms_norm_eps=1e-5, tie_word_embeddings=True),
        "HuggingFaceTB/SmolLM2-135M-Instruct config.json"),
    "tiny": SyntheticModel("qwen2", "lm", dict(_TINY, vocab_size=None, max_position_embeddings=4096), "tests"),
    "tiny-prm": SyntheticModel("qwen2", "prm", dict(_TINY, vocab_size=None, max_position_embeddings=4096), "tests"),
}

# option -> (type, default, check, what a bad value is told)
_OPTIONS = {
    "step_tokens": (float, 60.0, lambda v: v >= 2, "a mean step length of at least 2 tokens"),
    "steps": (float, 8.0, lambda v: v >= 1, "a mean of at least 1 step per path"),
    "temperature": (float, 0.8, lambda v: v > 0, "a sampling temperature above 0"),
    "layers": (int, None, lambda v: v >= 1, "at least 1 layer"),
    "seed": (int, 0, lambda v: True, "an integer"),
    "init": (float, None, lambda v: v > 0, "a weight init standard deviation above 0"),
}


class SyntheticSpecError(ValueError):
    """A ``synthetic:`` spec that names no shape or has a bad option; the message says which."""


@dataclass(frozen=True)
class SyntheticSpec:
    """A parsed ``synthetic:NAME[:key=value,...]`` spec (options as in the module docstring)."""

    name: str
    model: SyntheticModel
    step_tokens: float = 60.0
    steps: float = 8.0
    temperature: float = 0.8
    layers: int | None = None
    seed: int = 0
    init: float | None = None
    text: str = field(default="", compare=False)

    @property
    def end_probability(self) -> float:
        """P(a sampled token ends its step), delimiter or EOS: ``1 / step_tokens``."""
        return 1.0 / self.step_tokens

    @property
    def eos_share(self) -> float:
        """The share of step ends that are EOS: ``1 / steps``."""
        return 1.0 / self.steps


def is_synthetic(spec: str) -> bool:
    """True for a ``synthetic:...`` model spec."""
    return spec.startswith(PREFIX)


def parse_synthetic(spec: str) -> SyntheticSpec:
    """Parse ``synthetic:NAME[:key=value,...]``.

    Raises:
        SyntheticSpecError: unknown NAME, unknown option, or an option value of the wrong type or range.
    """
    body = spec[len(PREFIX):] if is_synthetic(spec) else spec
    name, _, opts = body.partition(":")
    if name not in SYNTHETIC_MODELS:
        raise SyntheticSpecError(f"unknown synthetic model '{name}' in '{spec}'; choose one of "
                                 f"{', '.join(SYNTHETIC_MODELS)}")
    values = {}
    for item in filter(None, (part.strip() for part in opts.split(","))):
        key, eq, raw = item.partition("=")
        key = key.strip()
        if key not in _OPTIONS or not eq:
            raise SyntheticSpecError(f"'{item}' in '{spec}': options are key=value with key one of "
                                     f"{', '.join(_OPTIONS)}")
        kind, _, ok, wanted = _OPTIONS[key]
        try:
            value = kind(raw)
        except ValueError:
            raise SyntheticSpecError(f"{key}={raw} in '{spec}': needs {wanted}") from None
        if not ok(value):
            raise SyntheticSpecError(f"{key}={raw} in '{spec}': needs {wanted}")
        values[key] = value
    return SyntheticSpec(name, SYNTHETIC_MODELS[name], text=spec, **values)

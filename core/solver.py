"""Builds the models, engines, scorer and verifier that one run needs, from plain settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.engine.engine import EngineConfig, GenerationEngine
from core.models.loader import LoadedModel, load_model
from core.settings import ModelSettings
from core.verify.base import Scorer
from core.verify.likelihood import LikelihoodScorer
from core.verify.lm_judge import LMJudgeScorer
from core.verify.math_shepherd import MathShepherdScorer
from core.verify.qwen_math_prm import QwenMathPRMScorer
from core.verify.rlhflow import RLHFlowScorer
from core.verify.verifier import Verifier

# keys: core.settings.SCORER_NAMES, which flag checking uses before torch is imported (tested equal)
SCORERS = {"likelihood": LikelihoodScorer, "lm-judge": LMJudgeScorer, "qwen-math-prm": QwenMathPRMScorer,
           "rlhflow": RLHFlowScorer, "math-shepherd": MathShepherdScorer}


@dataclass
class Runtime:
    """Everything a search run needs, built once and shared by every problem."""

    generator: LoadedModel
    prm: LoadedModel
    engine: GenerationEngine
    verifier: Verifier
    scorer: Scorer
    settings: ModelSettings = field(default_factory=ModelSettings)


def same_tokenizer(a, b) -> bool:
    """True when two tokenizers map text to the same ids (same object, or same vocab and class)."""
    if a is b:
        return True
    return type(a) is type(b) and len(a) == len(b) and a.get_vocab() == b.get_vocab()


def build_engine(loaded: LoadedModel, settings: ModelSettings, kv_bytes: int) -> GenerationEngine:
    """A paged engine over ``loaded`` sized by ``settings`` with a KV pool of ``kv_bytes`` bytes.

    ``max_model_len`` is capped at the model's ``max_position_embeddings``.

    Raises:
        ValueError: the KV pool cannot hold one sequence of ``max_model_len`` tokens (see
            :class:`GenerationEngine`).
    """
    cfg = EngineConfig(block_size=settings.block_size, kv_cache_bytes=kv_bytes, max_num_seqs=settings.max_num_seqs,
                       max_num_batched_tokens=settings.max_num_batched_tokens,
                       max_model_len=min(settings.max_model_len or 1 << 30,
                                         getattr(loaded.model.config, "max_position_embeddings", 1 << 30)),
                       enable_prefix_caching=settings.enable_prefix_caching)
    return GenerationEngine(loaded.model, cfg, loaded.tokenizer)


def build_verifier(settings: ModelSettings, prm: LoadedModel, generator_tokenizer=None) -> Verifier:
    """The scorer ``settings.scorer`` over the loaded PRM and its own engine (``prm_kv_bytes`` pool).

    ``generator_tokenizer``: when it maps text like the PRM's, the scorer reuses generator step ids;
    None (commands that load no generator) makes the scorer tokenize step text itself.

    Raises:
        ValueError: unknown scorer, a scorer that refuses the model, or an engine that cannot be sized.
    """
    if settings.scorer not in SCORERS:
        raise ValueError(f"unknown scorer '{settings.scorer}'; choose one of {', '.join(SCORERS)}")
    scorer_cls = SCORERS[settings.scorer]
    if prm.head != scorer_cls.head:
        raise ValueError(f"scorer '{settings.scorer}' reads the PRM's {scorer_cls.head!r} output, but '{prm.name}' "
                         f"has a {prm.head!r} head; pick a scorer that matches the PRM model")
    share = generator_tokenizer is not None and same_tokenizer(generator_tokenizer, prm.tokenizer)
    scorer = scorer_cls(prm.tokenizer, share_generator_ids=share)
    return Verifier(build_engine(prm, settings, settings.prm_kv_bytes), scorer)


def load_models(settings: ModelSettings, generator: LoadedModel | None = None,
                prm: LoadedModel | None = None) -> tuple[LoadedModel, LoadedModel]:
    """The generator and PRM models (loaded unless given; an equal spec is loaded once).

    Raises:
        ModelLoadError: a model spec cannot be loaded.
        ValueError: unknown scorer, or a PRM (classifier head) given as generator.
    """
    if settings.scorer not in SCORERS:
        raise ValueError(f"unknown scorer '{settings.scorer}'; choose one of {', '.join(SCORERS)}")
    generator = generator or load_model(settings.generator, settings.dtype, settings.device)
    if generator.head != "lm":
        raise ValueError(f"generator '{generator.name}' is a PRM with a {generator.head!r} head, not a causal LM")
    if prm is None:
        prm = generator if settings.prm == settings.generator else load_model(settings.prm, settings.dtype, settings.device)
    return generator, prm


def build_runtime(settings: ModelSettings, generator: LoadedModel | None = None,
                  prm: LoadedModel | None = None) -> Runtime:
    """Load models (unless given) and build the generator engine, scorer engine and verifier.

    Raises:
        ModelLoadError: a model spec cannot be loaded.
        ValueError: unknown scorer, or an engine that cannot be sized as asked.
    """
    generator, prm = load_models(settings, generator, prm)

    engine = build_engine(generator, settings, settings.gen_kv_bytes)
    verifier = build_verifier(settings, prm, generator.tokenizer)
    return Runtime(generator, prm, engine, verifier, verifier.scorer, settings)

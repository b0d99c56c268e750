"""Builds the models, engines, scorer and verifier that one run needs, from plain settings."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from core.engine.engine import EngineConfig, GenerationEngine
from core.models.loader import LoadedModel, load_model
from core.settings import ModelSettings
from core.verify.base import Scorer
from core.verify.likelihood import LikelihoodScorer
from core.verify.lm_judge import LMJudgeScorer
from core.verify.math_shepherd import MathShepherdScorer
from core.verify.qwen_math_prm import QwenMathPRMScorer
from core.verify.rlhflow import RLHFlowScorer
from core.verify.skywork import SkyworkPRMScorer
from core.verify.token_classification import TokenClassificationScorer
from core.verify.verifier import Verifier

# keys: core.settings.SCORER_NAMES, which flag checking uses before torch is imported (tested equal)
SCORERS = {"likelihood": LikelihoodScorer, "lm-judge": LMJudgeScorer, "qwen-math-prm": QwenMathPRMScorer,
           "rlhflow": RLHFlowScorer, "math-shepherd": MathShepherdScorer, "skywork-prm": SkyworkPRMScorer,
           "token-classification": TokenClassificationScorer}


# Auto sizing of the KV pools (ModelSettings.gen_kv_bytes / prm_kv_bytes None):
# on CPU the pools grow with the work, and together may reach this share of the machine's memory
# (a cap, so that several runs on one machine cannot each claim it all), split 3:1 between the
# generator and the PRM;
CPU_KV_MEMORY_SHARE = 0.125
CPU_GENERATOR_SHARE = 0.75
# the PRM's prefix cache (scoring step t reuses the KV of steps before it) may keep a quarter of
# its pool before the pool evicts instead of growing: a trade of PRM compute for memory (make demo
# computes 3.0x the PRM tokens of an unbounded cache at 0.25, 2.3x at 0.5, for 118 and 164 blocks);
# the generator's cache is rarely hit (children fork their parents' blocks) and gives way first;
PRM_CACHE_SHARE = 0.25
# on CUDA, as serving engines do, fixed pools take this fraction of the device memory left free
# once the weights are loaded, split so that both pools hold as many tokens.
GPU_MEMORY_UTILIZATION = 0.85


@dataclass(frozen=True)
class KVPoolSize:
    """How one engine's KV pool is sized.

    nbytes: the pool's size in bytes, or a growing pool's cap.
    grow: the pool starts empty and grows on demand up to ``nbytes`` (CPU: memory resident only for
        the blocks used); False: all of it is allocated up front.
    cache_share: see :class:`core.engine.block_pool.BlockPool` (growing pools).
    """

    nbytes: int
    grow: bool
    cache_share: float = 0.0


def auto_kv_pool(role: str, device: str, gpu_free_bytes: int | None = None) -> KVPoolSize:
    """The KV pool of ``role`` (``"generator"`` or ``"prm"``) when no size is set.

    CPU: a growing pool whose cap is the role's part (:data:`CPU_GENERATOR_SHARE`) of
    :data:`CPU_KV_MEMORY_SHARE` of the machine's memory (:func:`core.memory.physical_memory_bytes`;
    4 GiB when unknown). CUDA: a fixed pool of :data:`GPU_MEMORY_UTILIZATION` of ``gpu_free_bytes``
    (the caller's share of the device's free memory; the device's free memory now when None).

    Raises:
        ValueError: unknown role.
    """
    if role not in ("generator", "prm"):
        raise ValueError(f"unknown engine role '{role}'")
    if str(device).startswith("cuda"):
        if gpu_free_bytes is None:
            import torch

            gpu_free_bytes = torch.cuda.mem_get_info(torch.device(device))[0]
        return KVPoolSize(int(gpu_free_bytes * GPU_MEMORY_UTILIZATION), grow=False)
    from core.memory import physical_memory_bytes

    budget = (physical_memory_bytes() or 4 << 30) * CPU_KV_MEMORY_SHARE
    share = CPU_GENERATOR_SHARE if role == "generator" else 1.0 - CPU_GENERATOR_SHARE
    return KVPoolSize(int(budget * share), grow=True, cache_share=0.0 if role == "generator" else PRM_CACHE_SHARE)


@dataclass
class Runtime:
    """Everything a search run needs, built once and shared by every problem.

    ``max_model_len``/``prm_max_model_len``: the context limits the engines use (the settings' value
    capped by each model's own limit), the values a run should record.
    """

    generator: LoadedModel
    prm: LoadedModel
    engine: GenerationEngine
    verifier: Verifier
    scorer: Scorer
    settings: ModelSettings = field(default_factory=ModelSettings)

    @property
    def max_model_len(self) -> int:
        """The generator engine's context limit in tokens, as used."""
        return self.engine.max_model_len

    @property
    def prm_max_model_len(self) -> int:
        """The PRM engine's context limit in tokens, as used."""
        return self.verifier.engine.max_model_len


def same_tokenizer(a, b) -> bool:
    """True when two tokenizers map text to the same ids (same object, or same vocab and class)."""
    if a is b:
        return True
    return type(a) is type(b) and len(a) == len(b) and a.get_vocab() == b.get_vocab()


def model_context_limit(loaded: LoadedModel) -> int | None:
    """The longest context the model supports (its config's ``max_position_embeddings``), or None."""
    return getattr(loaded.model.config, "max_position_embeddings", None)


def build_engine(loaded: LoadedModel, settings: ModelSettings, kv_bytes: int | KVPoolSize | None,
                 role: str = "generator") -> GenerationEngine:
    """A paged engine over ``loaded`` sized by ``settings``.

    ``max_model_len`` is capped at the model's ``max_position_embeddings``. The KV pool: ``kv_bytes``
    bytes allocated up front (``--kv-cache-gb``), a :class:`KVPoolSize`, or None for
    :func:`auto_kv_pool` of ``role`` (a growing pool on CPU; a share of free memory on CUDA). A
    growing pool's cap is raised, where needed, to hold one sequence of ``max_model_len`` tokens.

    Raises:
        ValueError: a fixed KV pool cannot hold one sequence of ``max_model_len`` tokens (see
            :class:`GenerationEngine`), or the model's attention is not supported.
    """
    limit = model_context_limit(loaded)
    max_len = min(settings.max_model_len or 1 << 30, limit or 1 << 30)
    if kv_bytes is None:
        pool = auto_kv_pool(role, settings.device)
    elif isinstance(kv_bytes, KVPoolSize):
        pool = kv_bytes
    else:
        pool = KVPoolSize(int(kv_bytes), grow=False)
    nbytes = pool.nbytes
    if pool.grow:
        from core.engine.kv_cache import KVLayout

        layout = KVLayout.from_config(loaded.model.config, next(loaded.model.parameters()).dtype)
        one_sequence = (-(-max_len // settings.block_size) + 1) * settings.block_size * layout.bytes_per_token
        nbytes = max(nbytes, one_sequence)
    cfg = EngineConfig(block_size=settings.block_size, kv_cache_bytes=nbytes, kv_grow=pool.grow,
                       kv_cache_share=pool.cache_share, max_num_seqs=settings.max_num_seqs,
                       max_num_batched_tokens=settings.max_num_batched_tokens, max_model_len=max_len,
                       enable_prefix_caching=settings.enable_prefix_caching,
                       attention_backend=settings.attention_backend, enforce_eager=settings.enforce_eager)
    return GenerationEngine(loaded.model, cfg, loaded.tokenizer)


def build_verifier(settings: ModelSettings, prm: LoadedModel, generator_tokenizer=None,
                   kv_pool: KVPoolSize | None = None) -> Verifier:
    """The scorer ``settings.scorer`` over the loaded PRM and its own engine.

    The PRM engine's KV pool: ``kv_pool`` when given, else ``settings.prm_kv_bytes`` (None: auto,
    see :func:`build_engine`).

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
    return Verifier(build_engine(prm, settings, settings.prm_kv_bytes if kv_pool is None else kv_pool, role="prm"),
                    scorer)


def load_models(settings: ModelSettings, generator: LoadedModel | None = None,
                prm: LoadedModel | None = None) -> tuple[LoadedModel, LoadedModel]:
    """The generator and PRM models (loaded unless given; an equal spec is loaded once).

    Raises:
        ModelLoadError: a model spec cannot be loaded.
        ValueError: unknown scorer, or a PRM (classifier head) given as generator.
    """
    if settings.scorer not in SCORERS:
        raise ValueError(f"unknown scorer '{settings.scorer}'; choose one of {', '.join(SCORERS)}")
    if settings.threads:
        torch.set_num_threads(settings.threads)
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
    gen_pool, prm_pool = settings.gen_kv_bytes, None
    if str(settings.device).startswith("cuda") and None in (settings.gen_kv_bytes, settings.prm_kv_bytes):
        gen_pool, prm_pool = _gpu_pools(settings, generator, prm)
    engine = build_engine(generator, settings, gen_pool, role="generator")
    verifier = build_verifier(settings, prm, generator.tokenizer, kv_pool=prm_pool)
    return Runtime(generator, prm, engine, verifier, verifier.scorer, settings)


def _gpu_pools(settings: ModelSettings, generator: LoadedModel, prm: LoadedModel) -> tuple:
    """CUDA pools for the sizes left to auto: the device's free memory shared so that both pools hold
    as many tokens (a pool with a set size keeps it, and its bytes are not shared out)."""
    import torch

    from core.engine.kv_cache import KVLayout

    free = torch.cuda.mem_get_info(torch.device(settings.device))[0]
    per_token = [KVLayout.from_config(m.model.config, next(m.model.parameters()).dtype).bytes_per_token
                 for m in (generator, prm)]
    sizes = [settings.gen_kv_bytes, settings.prm_kv_bytes]
    free -= sum(s for s in sizes if s is not None)
    auto_per_token = sum(b for b, s in zip(per_token, sizes) if s is None)
    pools = [s if s is not None else auto_kv_pool(role, settings.device, max(0, free) * b // auto_per_token)
             for s, b, role in zip(sizes, per_token, ("generator", "prm"))]
    return pools[0], pools[1]

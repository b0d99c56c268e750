"""Run settings that can be checked without torch: which models, which scorer, how to size engines.

`solve` validates flags, presets and its input before it imports torch or loads a model, so a
usage error costs well under a second; everything here therefore imports only the standard library.
:mod:`core.solver` turns these settings into engines.
"""

from __future__ import annotations

from dataclasses import dataclass

# Names of the scorers :data:`core.solver.SCORERS` maps to classes, with the one-line description
# `--help` shows; kept here so flag checking needs no model code.
SCORER_DESCRIPTIONS = {
    "likelihood": "exp of the mean token log-probability of the step (CPU default)",
    "lm-judge": "P(Yes)/(P(Yes)+P(No)) of a chat model asked whether the step is correct",
    "qwen-math-prm": "Qwen2.5-Math-PRM: class-1 probability of its 2-class head at each <extra_0>",
    "rlhflow": "RLHFlow Llama3.1-8B-PRM: P(+) over {+,-} after each step",
    "math-shepherd": "Math-Shepherd: the + share of {+,-} at each ' ки' step tag",
}
SCORER_NAMES = tuple(SCORER_DESCRIPTIONS)
# the search policies (core.search.driver.POLICIES) and what each does, in one line
POLICY_DESCRIPTIONS = {
    "non-spec": "a depth's N candidates finish their step, one PRM batch scores them, the top-k expand",
    "naive-spec": "each finished step is scored at once and expanded speculatively; losers' subtrees cancelled",
    "fasttts": "FastTTS baseline: low-priority speculative extension, a depth verified once all of it finished",
    "specscale": "naive-spec plus early pruning (--ep), deduplication (--cd) and lazy verification (--lv)",
}
POLICY_NAMES = tuple(POLICY_DESCRIPTIONS)
# dtype names the loader accepts (core.models.loader.DTYPES maps them to torch dtypes)
DTYPE_NAMES = ("float32", "fp32", "bfloat16", "bf16", "float16", "fp16")
GIB = 1 << 30


@dataclass
class ModelSettings:
    """Which models to load and how to size their engines.

    generator/prm: model specs (see :func:`core.models.loader.load_model`); an equal spec loads once.
    scorer: the scoring adapter run on the PRM model (one of :data:`SCORER_NAMES`).
    gen_kv_bytes/prm_kv_bytes: KV pool sizes in bytes, allocated up front; None (the default) sizes
        them to the work: on CPU pools that grow on demand up to a share of the machine's memory,
        on CUDA a share of the device memory left free by the weights (see :mod:`core.solver`).
    """

    generator: str = "smollm2-135m-instruct"
    prm: str = "smollm2-135m-instruct"
    scorer: str = "likelihood"
    dtype: str | None = None
    device: str = "cpu"
    block_size: int = 16
    gen_kv_bytes: int | None = None
    prm_kv_bytes: int | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    max_model_len: int | None = 4096
    enable_prefix_caching: bool = True

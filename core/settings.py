"""Run settings that can be checked without torch: which models, which scorer, how to size engines.

`solve` validates flags, presets and its input before it imports torch or loads a model, so a
usage error costs well under a second; everything here therefore imports only the standard library.
:mod:`core.solver` turns these settings into engines.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass

# Names of the scorers :data:`core.solver.SCORERS` maps to classes, with the one-line description
# `--help` shows; kept here so flag checking needs no model code.
SCORER_DESCRIPTIONS = {
    "likelihood": "exp of the mean token log-probability of the step (CPU default)",
    "lm-judge": "P(Yes)/(P(Yes)+P(No)) of a chat model asked whether the step is correct",
    "qwen-math-prm": "Qwen2.5-Math-PRM: class-1 probability of its 2-class head at each <extra_0>",
    "rlhflow": "RLHFlow Llama3.1-8B-PRM: P(+) over {+,-} after each step",
    "math-shepherd": "Math-Shepherd: the + share of {+,-} at each ' ки' step tag",
    "skywork-prm": "Skywork-o1-Open-PRM: sigmoid of its value head at the newline after each step",
    "token-classification": "TRL-trained PRM (2-label token classification): P(label 1) at the newline after each step",
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
# Attention backends of the paged engine (core.engine.backends) and what each is, in one line.
ATTENTION_BACKEND_DESCRIPTIONS = {
    "auto": "flashinfer on a CUDA device when the flashinfer package and its kernels (prebuilt or nvcc) are there, "
            "torch otherwise",
    "torch": "SDPA over gathered KV blocks, rows grouped by shared blocks (the reference; CPU and CUDA)",
    "flashinfer": "FlashInfer paged kernels with cascade attention over shared prefixes (CUDA, fp16/bf16; "
                  "pip install 'specscale[cuda]')",
}
ATTENTION_BACKENDS = tuple(ATTENTION_BACKEND_DESCRIPTIONS)
# dtypes FlashInfer's attention kernels take (its wrappers' q_data_type/kv_data_type: fp16, bf16)
FLASHINFER_DTYPES = ("bfloat16", "bf16", "float16", "fp16")


def attention_backend_problem(backend: str, device: str, dtype: str | None = None,
                              flashinfer_installed: bool | None = None) -> str | None:
    """Why ``backend`` cannot run on ``device`` with ``dtype`` (one line), or None when it can.

    Decided from the names alone, without importing torch or flashinfer, so a usage error costs no
    model loading: ``flashinfer`` needs a CUDA device, a fp16/bf16 dtype (None is the device default,
    bf16 on CUDA), the ``flashinfer`` package (``importlib.util.find_spec``) and kernels it can run:
    prebuilt ones or ``nvcc`` to compile them (:func:`core.flashinfer_env.kernels_problem`). Pass
    ``flashinfer_installed`` to decide both without looking (True: kernels given, as tests inject
    stand-ins). ``auto`` and ``torch`` run anywhere.
    """
    if backend not in ATTENTION_BACKENDS:
        return f"unknown attention backend '{backend}'; choose one of {', '.join(ATTENTION_BACKENDS)}"
    if backend != "flashinfer":
        return None
    if not str(device).startswith("cuda"):
        return (f"the flashinfer attention backend needs a CUDA device (--device cuda[:i]); this run uses "
                f"--device {device} (use --attention-backend torch or auto)")
    if dtype not in (None, "auto", *FLASHINFER_DTYPES):
        return f"the flashinfer attention backend takes bfloat16 or float16 weights, not {dtype}"
    if flashinfer_installed is None:
        if importlib.util.find_spec("flashinfer") is None:
            return "the flashinfer package is not installed: pip install 'specscale[cuda]' (flashinfer-python)"
        from core.flashinfer_env import kernels_problem

        return kernels_problem()
    if not flashinfer_installed:
        return "the flashinfer package is not installed: pip install 'specscale[cuda]' (flashinfer-python)"
    return None


def resolve_attention_backend(backend: str, device: str, dtype_name: str | None = None,
                              flashinfer_installed: bool | None = None) -> str:
    """The backend a run uses: ``torch`` or ``flashinfer`` (``auto`` decided here).

    ``auto`` is ``flashinfer`` on a CUDA device with a fp16/bf16 dtype when the package is
    importable and its kernels can be had, ``torch`` otherwise (CPU, float32, no flashinfer, or no
    kernels); on a CUDA device with such a dtype, choosing torch says why once, as a ``note:`` line.

    Raises:
        ValueError: :func:`attention_backend_problem` names a problem.
    """
    if backend == "auto":
        problem = attention_backend_problem("flashinfer", device, dtype_name, flashinfer_installed)
        if problem is None:
            return "flashinfer"
        if str(device).startswith("cuda") and dtype_name in (None, "auto", *FLASHINFER_DTYPES):
            _note_once(f"attention backend auto: torch, since {problem}")
        return "torch"
    problem = attention_backend_problem(backend, device, dtype_name, flashinfer_installed)
    if problem:
        raise ValueError(problem)
    return backend


_noted: set[str] = set()


def _note_once(text: str) -> None:
    """One ``note:`` line per distinct text and process (the choice is made per engine)."""
    if text not in _noted:
        _noted.add(text)
        logging.getLogger("specscale.notes").info("%s", text)


@dataclass
class ModelSettings:
    """Which models to load and how to size their engines.

    generator/prm: model specs (see :func:`core.models.loader.load_model`); an equal spec loads once.
    scorer: the scoring adapter run on the PRM model (one of :data:`SCORER_NAMES`).
    gen_kv_bytes/prm_kv_bytes: KV pool sizes in bytes, allocated up front; None (the default) sizes
        them to the work: on CPU pools that grow on demand up to a share of the machine's memory,
        on CUDA a share of the device memory left free by the weights (see :mod:`core.solver`).
    attention_backend: ``auto``, ``torch`` or ``flashinfer`` (:data:`ATTENTION_BACKENDS`).
    enforce_eager: no CUDA graphs for decode steps (they are used with the flashinfer backend on CUDA).
    threads: torch CPU threads of the process that loads the models (None: torch's default, one per
        core). 1 on a machine shared with another heavy job: torch's threads wait on each other at
        every operation, and a core held by another process makes that wait dominate.
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
    attention_backend: str = "auto"
    enforce_eager: bool = False
    threads: int | None = None

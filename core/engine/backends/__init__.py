"""Attention backends: the engine builds one :class:`AttentionPlan` per forward and a backend runs it.

The plan says, in plain host lists, which rows of the packed batch decode (one query at the end of
its context) and which are prefill chunks (how many cached tokens precede them), with the block
tables that cover each. A backend turns the plan into its own metadata once per step
(:meth:`AttentionBackend.prepare`); the attention hook (:func:`core.engine.attention.paged_attention`)
writes every layer's new keys/values into the pages and calls that metadata's ``attend``.

The plan and the interface every backend implements are in :mod:`.plan`; this package's
:func:`create_backend` picks the backend. One file per backend:

* ``torch`` (:mod:`.torch_backend`): SDPA over gathered blocks, decode rows grouped by shared blocks;
  the reference, and the CPU path.
* ``flashinfer`` (:mod:`.flashinfer_backend`): FlashInfer's paged decode/prefill kernels, cascade
  attention over shared prefixes, CUDA graphs for decode; CUDA only, imported only when chosen.
  :mod:`.flashinfer_reference` computes what those kernels are specified to compute, in torch, so
  the backend's whole path runs and is tested on a CPU.

This module imports no torch, so the choice (:func:`core.settings.resolve_attention_backend`) can
be checked before torch loads.
"""

from __future__ import annotations

from .plan import AttentionBackend, AttentionPlan, PrefillRow

__all__ = ["AttentionBackend", "AttentionPlan", "PrefillRow", "create_backend"]


def create_backend(name: str, kv, model_config, *, kernels=None, **options) -> AttentionBackend:
    """The backend ``name`` (``torch`` or ``flashinfer``; resolve ``auto`` first) over ``kv``.

    ``kernels``: for ``flashinfer``, the module providing the wrappers (default: ``flashinfer``
    itself; :mod:`.flashinfer_reference` runs the same path in torch).

    Raises:
        ValueError: an unknown name.
    """
    heads = model_config.num_attention_heads
    q_per_kv = heads // kv.layout.num_kv_heads
    if name == "torch":
        from .torch_backend import TorchBackend

        return TorchBackend(kv, q_per_kv)
    if name in ("flashinfer", "flashinfer-reference"):
        from .flashinfer_backend import FlashInferBackend

        if kernels is None and name == "flashinfer-reference":
            from . import flashinfer_reference as kernels
        return FlashInferBackend(kv, heads, kernels=kernels, **options)
    raise ValueError(f"unknown attention backend '{name}'")

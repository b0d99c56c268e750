"""Whether FlashInfer's attention kernels can be had on this machine, decided without importing it.

flashinfer-python from PyPI ships no compiled fa2 decode/prefill modules: the first ``plan()`` of a
wrapper JIT-compiles them with ``nvcc`` (through ninja) and raises where no CUDA toolkit is found,
which is the case with a CUDA build of torch from PyPI alone. Its kernels are therefore at hand when
one of these holds (FlashInfer's ``flashinfer/jit/env.py`` and ``jit/cpp_ext.py``, 0.6-0.7):

* prebuilt modules: the ``flashinfer-jit-cache`` package (``flashinfer_jit_cache``), or an AOT
  build's ``flashinfer/data/aot`` folder with shared objects in it;
* a CUDA compiler for the JIT: ``$FLASHINFER_NVCC``, ``$CUDA_HOME/bin/nvcc`` or
  ``$CUDA_PATH/bin/nvcc``, ``nvcc`` on ``PATH``, or ``/usr/local/cuda/bin/nvcc`` (FlashInfer's own
  search order for the CUDA home).

``flashinfer-cubin`` holds cubins for other kernels (TensorRT-LLM's), not the fa2 modules, so it
does not count. Standard library only: :mod:`core.settings` calls this before torch is imported.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

DEFAULT_CUDA_HOME = "/usr/local/cuda"


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def find_nvcc(env: Mapping[str, str] | None = None, which: Callable[[str], str | None] = shutil.which) -> str | None:
    """Path of the CUDA compiler FlashInfer's JIT would use, or None when there is none.

    Args:
        env: environment to read (default ``os.environ``); which: ``PATH`` lookup (tests replace it).
    """
    env = os.environ if env is None else env
    candidates = [env.get("FLASHINFER_NVCC")]
    candidates += [str(Path(env[var]) / "bin" / "nvcc") for var in ("CUDA_HOME", "CUDA_PATH") if env.get(var)]
    candidates += [which("nvcc"), str(Path(DEFAULT_CUDA_HOME) / "bin" / "nvcc")]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def prebuilt_kernels(flashinfer_dir: Path | None = None, jit_cache_installed: bool | None = None) -> str | None:
    """Where prebuilt FlashInfer modules are (a one-line description), or None.

    Args:
        flashinfer_dir: the ``flashinfer`` package folder (default: found with importlib).
        jit_cache_installed: whether ``flashinfer_jit_cache`` is importable (default: looked up).
    """
    if jit_cache_installed is None:
        jit_cache_installed = importlib.util.find_spec("flashinfer_jit_cache") is not None
    if jit_cache_installed:
        return "the flashinfer-jit-cache package"
    flashinfer_dir = flashinfer_dir if flashinfer_dir is not None else _package_dir("flashinfer")
    aot = flashinfer_dir / "data" / "aot" if flashinfer_dir is not None else None
    if aot is not None and aot.is_dir() and any(aot.rglob("*.so")):
        return f"AOT modules in {aot}"
    return None


def kernels_problem(*, flashinfer_dir: Path | None = None, jit_cache_installed: bool | None = None,
                    env: Mapping[str, str] | None = None,
                    which: Callable[[str], str | None] = shutil.which) -> str | None:
    """Why FlashInfer's kernels cannot be had here (one line), or None when prebuilt ones or nvcc exist.

    Call it only once the ``flashinfer`` package is known to be installed. The keyword arguments
    replace the lookups (tests).
    """
    if prebuilt_kernels(flashinfer_dir, jit_cache_installed) or find_nvcc(env, which):
        return None
    return ("flashinfer is installed without prebuilt kernels (no flashinfer-jit-cache) and no CUDA compiler "
            "was found to build them (nvcc on PATH, $CUDA_HOME/bin/nvcc or /usr/local/cuda/bin/nvcc): install "
            "flashinfer-jit-cache for your CUDA version or a CUDA toolkit")

"""``auto`` picks flashinfer only where its kernels can be had (issue 24, defect 4).

FlashInfer from PyPI JIT-compiles its decode/prefill modules with nvcc at the first ``plan()``; on
a machine with a CUDA torch but no toolkit and no prebuilt modules that raises mid-run. These tests
fake the package and the toolkit on disk.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import logging
import stat

import pytest

from core import flashinfer_env, settings
from core.settings import attention_backend_problem, resolve_attention_backend


def _executable(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def no_default_cuda(tmp_path, monkeypatch):
    monkeypatch.setattr(flashinfer_env, "DEFAULT_CUDA_HOME", str(tmp_path / "no-cuda"))


def test_nvcc_found_by_flashinfers_search_order(tmp_path, no_default_cuda):
    nowhere = lambda name: None  # noqa: E731
    assert flashinfer_env.find_nvcc({}, nowhere) is None
    home = tmp_path / "cuda-12"
    nvcc = _executable(home / "bin" / "nvcc")
    assert flashinfer_env.find_nvcc({"CUDA_HOME": str(home)}, nowhere) == str(nvcc)
    assert flashinfer_env.find_nvcc({"CUDA_PATH": str(home)}, nowhere) == str(nvcc)
    explicit = _executable(tmp_path / "my-nvcc")
    assert flashinfer_env.find_nvcc({"FLASHINFER_NVCC": str(explicit), "CUDA_HOME": str(home)}, nowhere) == str(explicit)
    on_path = _executable(tmp_path / "path" / "nvcc")
    assert flashinfer_env.find_nvcc({}, lambda name: str(on_path)) == str(on_path)
    # a file that is not executable does not count
    (tmp_path / "plain" / "bin").mkdir(parents=True)
    (tmp_path / "plain" / "bin" / "nvcc").write_text("")
    assert flashinfer_env.find_nvcc({"CUDA_HOME": str(tmp_path / "plain")}, nowhere) is None
    default = _executable(tmp_path / "no-cuda" / "bin" / "nvcc")
    assert flashinfer_env.find_nvcc({}, nowhere) == str(default)


def test_prebuilt_kernels_jit_cache_or_aot_folder(tmp_path):
    pkg = tmp_path / "flashinfer"
    (pkg / "data" / "aot").mkdir(parents=True)
    assert flashinfer_env.prebuilt_kernels(pkg, jit_cache_installed=False) is None  # an empty AOT folder
    (pkg / "data" / "aot" / "batch_decode").mkdir()
    (pkg / "data" / "aot" / "batch_decode" / "batch_decode.so").write_bytes(b"")
    assert "AOT modules" in flashinfer_env.prebuilt_kernels(pkg, jit_cache_installed=False)
    assert flashinfer_env.prebuilt_kernels(tmp_path / "none", jit_cache_installed=True) == "the flashinfer-jit-cache package"


def test_kernels_problem_names_both_ways_out(tmp_path, no_default_cuda):
    problem = flashinfer_env.kernels_problem(flashinfer_dir=tmp_path, jit_cache_installed=False,
                                             env={"CUDA_HOME": str(tmp_path / "no-cuda")}, which=lambda n: None)
    assert "no CUDA compiler" in problem and "flashinfer-jit-cache" in problem
    home = tmp_path / "cuda"
    _executable(home / "bin" / "nvcc")
    assert flashinfer_env.kernels_problem(flashinfer_dir=tmp_path, jit_cache_installed=False,
                                          env={"CUDA_HOME": str(home)}, which=lambda n: None) is None


@pytest.fixture
def flashinfer_without_kernels(tmp_path, monkeypatch):
    """``flashinfer`` importable (a fake spec), no jit cache, no nvcc anywhere the JIT looks."""
    pkg = tmp_path / "site" / "flashinfer"
    pkg.mkdir(parents=True)
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name == "flashinfer":
            spec = importlib.machinery.ModuleSpec("flashinfer", None, is_package=True)
            spec.submodule_search_locations = [str(pkg)]
            return spec
        if name == "flashinfer_jit_cache":
            return None
        return real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    for var in ("CUDA_HOME", "CUDA_PATH", "FLASHINFER_NVCC"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(flashinfer_env, "DEFAULT_CUDA_HOME", str(tmp_path / "no-cuda"))
    monkeypatch.setattr(settings, "_noted", set())
    return tmp_path


def test_auto_is_torch_with_a_note_where_flashinfer_has_no_kernels(flashinfer_without_kernels, caplog):
    with caplog.at_level(logging.INFO, logger="specscale.notes"):
        assert resolve_attention_backend("auto", "cuda", "bfloat16") == "torch"
        assert resolve_attention_backend("auto", "cuda", None) == "torch"
    notes = [r.getMessage() for r in caplog.records if r.name == "specscale.notes"]
    assert len(notes) == 1  # said once per process
    assert notes[0].startswith("attention backend auto: torch, since flashinfer is installed without prebuilt kernels")
    problem = attention_backend_problem("flashinfer", "cuda", "bfloat16")
    assert "no CUDA compiler" in problem and "\n" not in problem
    with pytest.raises(ValueError, match="no CUDA compiler"):
        resolve_attention_backend("flashinfer", "cuda", "bfloat16")


def test_auto_is_flashinfer_once_nvcc_is_there(flashinfer_without_kernels, monkeypatch):
    home = flashinfer_without_kernels / "cuda"
    _executable(home / "bin" / "nvcc")
    monkeypatch.setenv("CUDA_HOME", str(home))
    assert resolve_attention_backend("auto", "cuda", "bfloat16") == "flashinfer"
    assert attention_backend_problem("flashinfer", "cuda:0", None) is None


def test_auto_on_cpu_or_fp32_says_nothing(flashinfer_without_kernels, caplog):
    with caplog.at_level(logging.INFO, logger="specscale.notes"):
        assert resolve_attention_backend("auto", "cpu") == "torch"
        assert resolve_attention_backend("auto", "cuda", "float32") == "torch"
    assert not [r for r in caplog.records if r.name == "specscale.notes"]

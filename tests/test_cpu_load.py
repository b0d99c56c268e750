"""The busy-machine note: when it is given, and that --threads reaches torch."""

from __future__ import annotations

import pytest

from core.cpu_load import busy_note, current_busy_note


@pytest.mark.parametrize("load, cores, threads, noted", [
    (1.9, 2, None, True),     # a test suite beside the run on the 2-core machine
    (1.5, 2, None, True),     # the boundary: cores - 0.5
    (1.4, 2, None, False),    # a finished install or an editor
    (1.9, 2, 1, False),       # --threads 1 already
    (1.9, 2, 2, True),
    (3.0, 1, None, False),    # one core: one thread anyway
    (7.6, 8, 4, True),
    (6.0, 8, None, False),
])
def test_busy_note_only_when_other_work_holds_the_cores_and_torch_uses_several(load, cores, threads, noted):
    note = busy_note(load, cores, threads)
    assert (note is not None) == noted
    if noted:
        assert f"load average {load:.1f} on {cores} cores" in note and "--threads 1" in note
        assert f"torch would run {threads or cores} threads" in note


def test_omp_num_threads_counts_as_the_thread_count(monkeypatch):
    monkeypatch.setattr("os.getloadavg", lambda: (5.0, 5.0, 5.0))
    monkeypatch.setattr("core.cpu_load.usable_cores", lambda: 2)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert current_busy_note(None) is not None
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert current_busy_note(None) is None


def test_threads_setting_reaches_torch(tiny_dir):
    import torch

    from core.settings import ModelSettings
    from core.solver import load_models

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        load_models(ModelSettings(generator=str(tiny_dir), prm=str(tiny_dir), threads=1))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)

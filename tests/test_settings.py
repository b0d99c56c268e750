"""The torch-free settings module names exactly what the model code implements."""

from __future__ import annotations

import subprocess
import sys

from core.settings import DTYPE_NAMES, SCORER_NAMES


def test_scorer_and_dtype_names_match_the_model_code():
    from core.models.loader import DTYPES
    from core.solver import SCORERS

    assert tuple(SCORERS) == SCORER_NAMES
    assert set(DTYPES) == set(DTYPE_NAMES)


def test_checking_settings_imports_no_torch():
    code = ("import sys; from specscale_cli.options import build_settings; "
            "build_settings({'preset': None, 'policy': 'non-spec'}); "
            "import specscale_cli.main; print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_program_name_is_what_was_typed(monkeypatch, tmp_path):
    from specscale_cli import run_dir

    script = tmp_path / "venv" / "bin" / "specscale"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "argv", [".venv/bin/specscale", "solve"])
    monkeypatch.setattr(run_dir.shutil, "which", lambda name: None)
    assert run_dir.program_name() == [".venv/bin/specscale"]
    monkeypatch.setattr(sys, "argv", [str(script), "solve"])
    monkeypatch.setattr(run_dir.shutil, "which", lambda name: str(script))
    assert run_dir.program_name() == ["specscale"]  # the one on PATH: its bare name
    monkeypatch.setattr(sys, "argv", ["/x/specscale_cli/__main__.py", "solve"])
    assert run_dir.program_name() == [sys.executable, "-m", "specscale_cli"]
    monkeypatch.setattr(sys, "argv", ["/usr/bin/pytest"])
    assert run_dir.program_name() == ["specscale"]

"""The de-quantized model cache: one copy per model, atomic writes, stale leftovers removed,
`specscale cache` lists and clears."""

from __future__ import annotations

import os

import orjson
import pytest
from click.testing import CliRunner

from core.models import cache
from specscale_cli.main import cli


@pytest.fixture()
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSCALE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / cache.GGUF_DIR


def _gguf(tmp_path, content: bytes, name="Model.Q4.gguf"):
    path = tmp_path / name
    path.write_bytes(content)
    return path


def _save(folder):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"w" * 1000)


def test_copy_name_follows_content_not_path_or_time(tmp_path, root):
    a = _gguf(tmp_path, b"x" * 3000)
    other_dir = tmp_path / "reinstalled"
    other_dir.mkdir()
    b = _gguf(other_dir, b"x" * 3000)
    os.utime(b, (1, 1))  # a reinstall: another path, another time, the same bytes
    assert cache.gguf_copy_dir(a) == cache.gguf_copy_dir(b)
    c = _gguf(tmp_path, b"y" * 3000, name="Model.Q4.gguf")
    assert cache.gguf_copy_dir(c) != cache.gguf_copy_dir(b)


def test_store_keeps_one_copy_per_model(tmp_path, root):
    first = cache.store_copy(_gguf(tmp_path, b"v1" * 100), _save)
    assert cache.is_complete(first)
    second = cache.store_copy(_gguf(tmp_path, b"v2" * 100), _save)  # the same model name, a new file
    assert second != first and cache.is_complete(second)
    assert [p.name for p in root.iterdir()] == [second.name]


def test_the_copy_is_readable_as_a_plain_write_would_be(tmp_path, root):
    def private_weights(folder):
        _save(folder)
        (folder / "model.safetensors").chmod(0o600)  # what the weights writer leaves

    umask = os.umask(0o022)
    try:
        copy = cache.store_copy(_gguf(tmp_path, b"m" * 100), private_weights)
    finally:
        os.umask(umask)
    assert {p.name: p.stat().st_mode & 0o777 for p in copy.iterdir()} == {"config.json": 0o644,
                                                                       "model.safetensors": 0o644}


def test_a_crashed_write_leaves_nothing_that_is_used_later(tmp_path, root):
    gguf = _gguf(tmp_path, b"z" * 100)

    def crash(folder):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        cache.store_copy(gguf, crash)
    assert not cache.gguf_copy_dir(gguf).exists() and list(root.iterdir()) == []


def test_stale_temporaries_are_removed_but_a_live_writer_is_left_alone(tmp_path, root):
    root.mkdir(parents=True)
    dead = root / f"{cache.TMP_PREFIX}999999999-Model-abc"  # no such process
    live = root / f"{cache.TMP_PREFIX}{os.getppid()}-Model-def"  # a running process
    old_style = root / "SmolLM2-135M-Instruct.Q4_1-b5e0a6e27374.tmp"  # what earlier versions left
    for folder in (dead, live, old_style):
        folder.mkdir()
        (folder / "config.json").write_text("{}")
    removed = cache.remove_stale_temporaries()
    assert sorted(removed) == sorted([dead, old_style]) and live.is_dir()


def test_cache_command_lists_and_clears(tmp_path, root, monkeypatch):
    from specscale_cli import cache_cmd

    copy = cache.store_copy(_gguf(tmp_path, b"q" * 100), _save)
    res = CliRunner().invoke(cli, ["cache", "--json"])
    assert res.exit_code == 0
    doc = orjson.loads(res.output)
    assert [(m["path"], m["size_bytes"], m["complete"]) for m in doc["models"]] == [(str(copy), 1002, True)]
    res = CliRunner().invoke(cli, ["cache"])
    assert copy.name in res.output and "total 0.0 MiB" in res.output
    res = CliRunner().invoke(cli, ["cache", "clear"], input="")
    assert res.exit_code == 2 and copy.is_dir()  # no terminal: says how to go on, and asks nothing
    assert res.output.startswith("Error: nothing removed: no terminal to confirm on; pass -y to remove the 1 cached "
                                 "model (0.0 MiB)"), res.output
    monkeypatch.setattr(cache_cmd, "_can_ask", lambda: True)
    res = CliRunner().invoke(cli, ["cache", "clear"], input="n\n")
    assert res.exit_code == 1 and copy.is_dir() and "remove 1 cached model, 0.0 MiB?" in res.output  # answer: no
    res = CliRunner().invoke(cli, ["cache", "clear", "nosuch", "--yes"])
    assert res.exit_code == 0 and "no cached model's name contains 'nosuch'" in res.output and copy.is_dir()
    res = CliRunner().invoke(cli, ["cache", "clear", "--yes"])
    assert res.exit_code == 0 and "removed 1 cached model," in res.output and not copy.exists()
    assert "no cached models" in CliRunner().invoke(cli, ["cache"]).output

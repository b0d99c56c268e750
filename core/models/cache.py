"""The cache of de-quantized GGUF models: one copy per model, written atomically, listed and cleared.

`transformers` de-quantizes a GGUF file on every load (about 40 s for SmolLM2 on two CPU cores), so
the first load saves the plain weights as safetensors under ``$SPECSCALE_CACHE/gguf`` (default
``~/.cache/specscale``) and later loads read that copy. The rules that keep the folder small and
never let a half-written copy be used:

- a copy is named by the GGUF file's name and a fingerprint of its content (size and the xxh3 of
  its first and last MiB), not by its path or time: reinstalling the same file finds the same
  copy, and a changed file replaces the old copy of that name instead of adding one;
- a copy is written to a temporary folder named after the writing process and renamed into place
  once complete; temporary folders of processes that no longer run are removed;
- ``specscale cache`` lists the copies and their sizes, ``specscale cache clear`` removes them.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import xxhash

GGUF_DIR = "gguf"
# temporary folders are named .tmp-<pid>-<name>; the pid tells whether their writer still runs
TMP_PREFIX = ".tmp-"
_FINGERPRINT_BYTES = 1 << 20


def cache_root() -> Path:
    """Folder of the cache (``$SPECSCALE_CACHE`` or ``~/.cache/specscale``)."""
    return Path(os.environ.get("SPECSCALE_CACHE", Path.home() / ".cache" / "specscale"))


def fingerprint(gguf: Path) -> str:
    """12 hex digits naming the file's content: its size and xxh3 of its first and last MiB.

    Raises:
        OSError: the file cannot be read.
    """
    size = gguf.stat().st_size
    h = xxhash.xxh3_64()
    h.update(str(size).encode())
    with open(gguf, "rb") as fh:
        h.update(fh.read(_FINGERPRINT_BYTES))
        if size > 2 * _FINGERPRINT_BYTES:
            fh.seek(size - _FINGERPRINT_BYTES)
            h.update(fh.read(_FINGERPRINT_BYTES))
    return h.hexdigest()[:12]


def gguf_copy_dir(gguf: Path) -> Path:
    """Where the de-quantized copy of ``gguf`` lives (it may not exist yet).

    Raises:
        OSError: the GGUF file cannot be read.
    """
    return cache_root() / GGUF_DIR / f"{gguf.stem}-{fingerprint(gguf)}"


def is_complete(copy: Path) -> bool:
    """True when ``copy`` holds a whole saved model (config and weights)."""
    return (copy / "config.json").is_file() and any(copy.glob("*.safetensors"))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by someone else
    return True


def remove_stale_temporaries(folder: Path | None = None) -> list[Path]:
    """Remove temporary copies whose writing process is gone (and the ``*.tmp`` folders earlier
    versions left). Returns the folders removed."""
    folder = folder or cache_root() / GGUF_DIR
    removed = []
    if not folder.is_dir():
        return removed
    for path in folder.iterdir():
        stale = path.name.endswith(".tmp")
        if path.name.startswith(TMP_PREFIX):
            pid = path.name[len(TMP_PREFIX):].split("-", 1)[0]
            stale = not pid.isdigit() or not _pid_alive(int(pid))
        if stale and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def store_copy(gguf: Path, save) -> Path:
    """Write the de-quantized copy of ``gguf`` atomically and drop older copies of the same name.

    Args:
        gguf: the GGUF file.
        save: ``save(folder)`` writes the model and tokenizer into ``folder``.

    Returns:
        The copy's folder (an equal copy another process finished first is kept as it is).

    Raises:
        OSError: the cache cannot be written (the temporary folder is removed).
    """
    final = gguf_copy_dir(gguf)
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(final.parent)
    tmp = final.parent / f"{TMP_PREFIX}{os.getpid()}-{final.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        save(tmp)
        _readable_by_all(tmp)
        if is_complete(final):
            shutil.rmtree(tmp)  # another process finished first; its copy is as good
        else:
            shutil.rmtree(final, ignore_errors=True)  # an incomplete copy left by hand or by a bug
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for older in final.parent.glob(f"{gguf.stem}-*"):
        if older != final and older.is_dir():
            shutil.rmtree(older, ignore_errors=True)  # the same model from an earlier file
    return final


def _readable_by_all(folder: Path) -> None:
    """Give the copy's files the mode a plain write would (0644 less the umask): the weights file
    comes out 0600 from the writer's temporary file, so another user of a shared cache could not
    read it."""
    umask = os.umask(0)
    os.umask(umask)
    for path in folder.iterdir():
        if path.is_file():
            path.chmod(0o644 & ~umask)


@dataclass
class CachedModel:
    """One entry of the cache: ``path``, size in bytes, last use (seconds since the epoch: the
    folder's time, which every load refreshes), and whether it is complete."""

    path: Path
    size_bytes: int
    last_used: float
    complete: bool


def list_cache() -> list[CachedModel]:
    """Every folder in the GGUF cache, complete copies and leftovers alike, largest first."""
    folder = cache_root() / GGUF_DIR
    if not folder.is_dir():
        return []
    out = []
    for path in folder.iterdir():
        if not path.is_dir():
            continue
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        out.append(CachedModel(path, size, path.stat().st_mtime,
                               is_complete(path) and not path.name.startswith(TMP_PREFIX)))
    return sorted(out, key=lambda m: -m.size_bytes)


def clear_cache(match: str | None = None) -> list[CachedModel]:
    """Remove cached copies (those whose folder name contains ``match``, or all); returns them.

    Copies being written by a running process are left alone.
    """
    removed = []
    for entry in list_cache():
        name = entry.path.name
        if match is not None and match not in name:
            continue
        if name.startswith(TMP_PREFIX):
            pid = name[len(TMP_PREFIX):].split("-", 1)[0]
            if pid.isdigit() and _pid_alive(int(pid)) and int(pid) != os.getpid():
                continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry)
    return removed


def touch(copy: Path) -> None:
    """Record a use of ``copy`` (its folder's time), for `specscale cache`'s last-use column."""
    try:
        os.utime(copy, (time.time(), time.time()))
    except OSError:
        pass

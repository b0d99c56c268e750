"""Command-line options shared by `solve` and `bench`: preset, models, engine sizing, search."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import click

from core.search.config import SELECTIONS, STRATEGIES
from core.settings import GIB as _GIB
from core.settings import (ATTENTION_BACKEND_DESCRIPTIONS, ATTENTION_BACKENDS, POLICY_DESCRIPTIONS, POLICY_NAMES,
                           SCORER_DESCRIPTIONS, SCORER_NAMES)

THREADS_HELP = ("CPU threads torch uses, fixed. Default: the cores that other processes leave free as the run "
                "starts (one per core on an idle machine); solve looks again every 10 s, benches keep the first "
                "count so the runs they compare get the same threads.")
_KV_HELP = ("{} KV pool: this many GiB allocated up front. Default: sized to the work (on CPU the pool grows "
            "on demand up to a share of the machine's memory; on CUDA a share of the free device memory).")

# (option flags, destination field, table, click type, help)
_MODEL_OPTIONS = [
    (("--generator",), "generator", str, "Generator model: embedded name, HF folder, hub name or .gguf file."),
    (("--prm",), "prm", str, "Scoring model (same forms as --generator)."),
    (("--scorer",), "scorer", click.Choice(SCORER_NAMES),
     "How the PRM model scores a step: " + "; ".join(f"{k}: {v}" for k, v in SCORER_DESCRIPTIONS.items()) + "."),
    (("--dtype",), "dtype", click.Choice(["float32", "bfloat16", "float16"]), "Weights dtype (CPU default float32)."),
    (("--device",), "device", str, "cpu or cuda[:i]."),
    (("--max-num-seqs",), "max_num_seqs", click.IntRange(min=1), "Engine: running sequences per step."),
    (("--max-num-batched-tokens",), "max_num_batched_tokens", click.IntRange(min=1), "Engine: tokens per step."),
    (("--max-model-len",), "max_model_len", click.IntRange(min=2), "Engine: context limit in tokens."),
    (("--block-size",), "block_size", click.IntRange(min=1), "Engine: tokens per KV block."),
    (("--threads",), "threads", click.IntRange(min=1), THREADS_HELP),
    (("--attention-backend",), "attention_backend", click.Choice(ATTENTION_BACKENDS),
     "Engine: attention kernels. " + "; ".join(f"{k}: {v}" for k, v in ATTENTION_BACKEND_DESCRIPTIONS.items()) + "."),
]
_ENFORCE_EAGER_HELP = ("Engine: no CUDA graphs; decode steps run eagerly (graphs are used with the flashinfer "
                       "backend on CUDA).")
_SEARCH_OPTIONS = [
    (("-n", "--beam-size"), "beam_size", int, "Beam size N: completed candidates per problem."),
    (("-m", "--beam-width"), "beam_width", int, "Beam width M: children per selected candidate."),
    (("--temperature",), "temperature", float, "Sampling temperature (0 = greedy)."),
    (("--top-p",), "top_p", float, "Nucleus sampling mass."),
    (("--max-steps",), "max_steps", int, "Step cap per path."),
    (("--max-step-tokens",), "max_step_tokens", int, "Token limit per step."),
    (("--max-tokens",), "max_tokens", int, "Generated-token limit per path."),
    (("--step-delimiter",), "step_delimiter", str, "Text that ends a step (\\n \\t \\r \\\\ are understood)."),
    (("--aggregation",), "aggregation", click.Choice(["last", "min", "prod", "mean"]), "Path score from step scores."),
    (("--seed",), "seed", int, "Run seed (each candidate's sampler derives from it, the problem id and its path)."),
    (("--strategy",), "strategy", click.Choice(list(STRATEGIES)),
     "How the N candidates are searched. " + "; ".join(f"{k}: {v}" for k, v in STRATEGIES.items()) + "."),
    (("--select",), "select", click.Choice(list(SELECTIONS)),
     "How pred is chosen among the N completions (every record keeps all three). "
     + "; ".join(f"{k}: {v}" for k, v in SELECTIONS.items()) + "."),
    (("--speculation-budget",), "speculation_budget", str,
     "naive-spec, specscale: speculative children fill each generator step only up to this many rows, after "
     "the rows that are sure to be kept: auto (the generator's measured batch-size knee, cached; see `specscale "
     "profile-knee`), a number, or off."),
    (("--system-prompt",), "system_prompt", str,
     "The generator's system turn ('' for none); \\n \\t \\r \\\\ are understood, other backslashes (\\boxed) kept."),
]
# flags of the specscale policy's own techniques (EP, CD, LV): refused under the other policies
_SPECSCALE_FLAGS = {"early_pruning": "--ep/--no-ep", "dedup": "--cd/--no-cd", "lazy_verification": "--lv/--no-lv",
                    "lv_threshold": "--lv-threshold", "lv_max_deferrals": "--lv-max-deferrals",
                    "perfect_score": "--perfect-score"}
# Text flags where a shell makes some characters awkward to type; see decode_escapes.
_ESCAPED_OPTIONS = ("step_delimiter", "system_prompt")
_ESCAPE = re.compile(r"\\([\\ntr])")
_ESCAPED_CHARS = {"\\": "\\", "n": "\n", "t": "\t", "r": "\r"}


def decode_escapes(text: str) -> str:
    """Turn ``\\n``, ``\\t``, ``\\r`` and ``\\\\`` typed on a command line into the characters they name.

    Any other backslash stays as typed, so LaTeX in a prompt (``\\boxed{}``, ``\\frac``) survives;
    write ``\\\\times`` for a literal ``\\times``. Non-ASCII text is kept (``unicode_escape`` would
    mangle it).
    """
    return _ESCAPE.sub(lambda m: _ESCAPED_CHARS[m.group(1)], text)


def model_and_search_options(fn=None, *, with_policy: bool = True):
    """Add preset, model, engine and search options to a click command (all default to the preset).

    Use bare (``@model_and_search_options``) or as ``@model_and_search_options(with_policy=False)``
    for commands that choose policies themselves.
    """
    if fn is None:
        return functools.partial(model_and_search_options, with_policy=with_policy)
    opts = [
        click.option("--preset", default=None,
                     help="Preset name (list: `specscale presets`) or a .toml path; flags override its fields. "
                          "Default: smollm2-cpu."),
    ]
    if with_policy:
        opts.append(click.option("--policy", type=click.Choice(POLICY_NAMES), default="non-spec", show_default=True,
                                 help="Search policy. " + "; ".join(f"{k}: {v}" for k, v in
                                                                    POLICY_DESCRIPTIONS.items()) + "."))
    opts += [
        click.option("--ep/--no-ep", "early_pruning", default=None,
                     help="specscale: early pruning of candidates that cannot reach the top-k."
                          + preset_default("early_pruning")),
        click.option("--cd/--no-cd", "dedup", default=None,
                     help="specscale: computation deduplication of candidates sharing a prefix."
                          + preset_default("dedup")),
        click.option("--lv/--no-lv", "lazy_verification", default=None,
                     help="specscale: lazy verification, one PRM queue for all problems."
                          + preset_default("lazy_verification")),
        click.option("--lv-threshold", type=click.IntRange(min=1), default=None,
                     help="LV: flush once the queue holds this many tokens the PRM must compute."
                          + preset_default("lv_threshold")),
        click.option("--lv-max-deferrals", type=click.IntRange(min=0), default=None,
                     help="LV: flush once a task has been passed over this many times."
                          + preset_default("lv_max_deferrals")),
        click.option("--perfect-score", type=float, default=None,
                     help="specscale EP: score that closes a depth once k candidates reach it (a value above 1 "
                          "disables the rule)." + preset_default("perfect_score")),
        click.option("--kv-cache-gb", type=click.FloatRange(min=0.001), default=None, help=_KV_HELP.format("Generator")),
        click.option("--prm-kv-cache-gb", type=click.FloatRange(min=0.001), default=None, help=_KV_HELP.format("Scorer")),
        click.option("--no-prefix-caching", is_flag=True, help="Disable prefix caching (for measurements)."),
        click.option("--enforce-eager", is_flag=True, help=_ENFORCE_EAGER_HELP),
    ]
    for flags, dest, typ, help_ in _MODEL_OPTIONS + _SEARCH_OPTIONS:
        opts.append(click.option(*flags, dest, type=typ, default=None, help=help_ + preset_default(dest)))
    for opt in reversed(opts):
        fn = opt(fn)
    return functools.wraps(fn)(fn)


@functools.lru_cache(maxsize=1)
def _default_preset_values() -> tuple[dict, frozenset]:
    """Every field of the default preset as it resolves (preset fields over dataclass defaults), and
    the names of the fields the preset file sets itself (the KV flags' names included)."""
    import dataclasses

    from core.presets import DEFAULT_PRESET, PresetError, read_preset

    try:
        preset = read_preset(DEFAULT_PRESET)
        models, search = preset.resolve()
    except PresetError:
        return {}, frozenset()  # a broken default preset is reported when a command reads it
    values = {**dataclasses.asdict(models), **dataclasses.asdict(search)}
    set_by_preset = set(preset.models) | set(preset.search)
    for dest, field in (("kv_cache_gb", "gen_kv_bytes"), ("prm_kv_cache_gb", "prm_kv_bytes")):
        if values.get(field) is not None:
            values[dest] = round(values[field] / _GIB, 3)
        if field in set_by_preset:
            set_by_preset.add(dest)
    return values, frozenset(set_by_preset)


def preset_default(dest: str) -> str:
    """The end of a flag's help that says its default: `` [default: 4 from smollm2-cpu]`` when the
    default preset sets the field, `` [default: on]`` when the preset leaves it at the built-in value.

    Empty for a field that has no value unless given (a flag's own help says what happens then).
    """
    from core.presets import DEFAULT_PRESET

    values, set_by_preset = _default_preset_values()
    if values.get(dest) is None:
        return ""
    value = values[dest]
    if isinstance(value, str):
        value = repr(value) if len(value) <= 40 else repr(value[:37] + "...")
    elif isinstance(value, bool):
        value = "on" if value else "off"
    where = f" from {DEFAULT_PRESET}" if dest in set_by_preset else ""
    return f"  [default: {value}{where}]"


def prm_options(fn=None, *, with_scorer: bool = True):
    """Add preset, PRM-model and engine options (no generator, no search flags) to a click command.

    For commands that run only the PRM (`profile-threshold`, `bench verifier`); the values go
    through :func:`build_settings` like the full set. ``with_scorer=False`` leaves out ``--scorer``
    for commands that take their own list of scorers.
    """
    if fn is None:
        return functools.partial(prm_options, with_scorer=with_scorer)
    opts = [
        click.option("--preset", default=None, help="Preset name (see presets/) or a .toml path. Default: smollm2-cpu."),
        click.option("--prm-kv-cache-gb", type=click.FloatRange(min=0.001), default=None, help=_KV_HELP.format("Scorer")),
        click.option("--enforce-eager", is_flag=True, help=_ENFORCE_EAGER_HELP),
    ]
    for flags, dest, typ, help_ in _MODEL_OPTIONS:
        if dest != "generator" and (with_scorer or dest != "scorer"):
            opts.append(click.option(*flags, dest, type=typ, default=None, help=help_))
    for opt in reversed(opts):
        fn = opt(fn)
    return functools.wraps(fn)(fn)


def generator_options(fn):
    """Add preset, generator-model and engine options (no PRM, no search flags) to a click command,
    for commands that run only the generator (`profile-knee`); values go through :func:`build_settings`."""
    opts = [
        click.option("--preset", default=None, help="Preset name (see presets/) or a .toml path. Default: smollm2-cpu."),
        click.option("--kv-cache-gb", type=click.FloatRange(min=0.001), default=None, help=_KV_HELP.format("Generator")),
        click.option("--enforce-eager", is_flag=True, help=_ENFORCE_EAGER_HELP),
    ]
    for flags, dest, typ, help_ in _MODEL_OPTIONS:
        if dest not in ("prm", "scorer"):
            opts.append(click.option(*flags, dest, type=typ, default=None, help=help_))
    for opt in reversed(opts):
        fn = opt(fn)
    return functools.wraps(fn)(fn)


def build_settings(opts: dict):
    """Merge preset and flags into ``(ModelSettings, SearchConfig, policy)``.

    Raises:
        click.UsageError: unknown or invalid preset, or invalid settings (N not divisible by M, an
            unknown scorer, ...).
    """
    from core.presets import DEFAULT_PRESET, PresetError, load_preset, model_settings_problems
    from core.search.config import SearchConfig
    from core.search.policy import check_fit
    from core.settings import ModelSettings, attention_backend_problem

    try:
        models, search = load_preset(opts.pop("preset") or DEFAULT_PRESET)
    except PresetError as exc:
        raise click.UsageError(str(exc)) from exc
    chooses_policy = "policy" in opts
    policy = opts.pop("policy", "non-spec")
    if chooses_policy and policy not in ("specscale", "naive-spec") and opts.get("speculation_budget") is not None:
        raise click.UsageError(f"--speculation-budget: only the speculative policies naive-spec and specscale have a "
                               f"speculation budget; this run uses --policy {policy}")
    if chooses_policy and policy != "specscale":
        # EP, CD and LV exist only in the specscale policy: a flag for them would silently do nothing
        given = [flag for dest, flag in _SPECSCALE_FLAGS.items() if opts.get(dest) is not None]
        if given:
            raise click.UsageError(f"{', '.join(given)}: only the specscale policy has early pruning, deduplication "
                                   f"and lazy verification; this run uses --policy {policy}")
    if opts.get("kv_cache_gb") is not None:
        models["gen_kv_bytes"] = int(opts["kv_cache_gb"] * _GIB)
    if opts.get("prm_kv_cache_gb") is not None:
        models["prm_kv_bytes"] = int(opts["prm_kv_cache_gb"] * _GIB)
    if opts.get("no_prefix_caching"):
        models["enable_prefix_caching"] = False
    if opts.get("enforce_eager"):
        models["enforce_eager"] = True
    for _, dest, _, _ in _MODEL_OPTIONS:
        if opts.get(dest) is not None:
            models[dest] = opts[dest]
    for dest in ("early_pruning", "dedup", "lazy_verification", "lv_threshold", "lv_max_deferrals"):
        if opts.get(dest) is not None:
            search[dest] = opts[dest]
    if opts.get("perfect_score") is not None:
        search["perfect_score"] = opts["perfect_score"] if opts["perfect_score"] <= 1.0 else None
    for _, dest, _, _ in _SEARCH_OPTIONS:
        if opts.get(dest) is not None:
            search[dest] = decode_escapes(opts[dest]) if dest in _ESCAPED_OPTIONS else opts[dest]
    for field, message in model_settings_problems(models):
        if field != "device":  # check_device below says more (it asks torch)
            raise click.UsageError(f"--{field.replace('_', '-')}: {message}")
    # decided from the names (device string, find_spec) before torch loads: one line, exit 2
    problem = attention_backend_problem(models.get("attention_backend", "auto"), models.get("device", "cpu"),
                                        models.get("dtype"))
    if problem:
        raise click.UsageError(f"--attention-backend {models.get('attention_backend')}: {problem}")
    try:
        settings, search_cfg = ModelSettings(**models), SearchConfig(**search)
        if chooses_policy:
            check_fit(policy, search_cfg.strategy)
        if search_cfg.strategy == "best-of-n" and opts.get("beam_width") is not None:
            raise ValueError("--beam-width does not apply to --strategy best-of-n (every sample is its own path); "
                             "drop -m")
    except (TypeError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc
    check_device(settings.device)
    return settings, search_cfg, policy


def check_device(device: str) -> None:
    """Refuse a device torch cannot name or this torch build cannot use.

    A CPU device needs no check, and a CPU-only torch build is recognised from its version file,
    so neither imports torch (seconds); only a CUDA build asked for CUDA is asked whether a device
    is there.

    Raises:
        click.UsageError: a malformed device, or e.g. ``--device cuda`` with the CPU build of torch.
    """
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise click.UsageError(f"invalid --device '{device}': use cpu or cuda[:index]")
    if device == "cpu":
        return
    version = _torch_build_version()
    if version is not None and version[1] is None:
        raise click.UsageError(f"--device {device}: this torch build ({version[0]}) has no CUDA; use --device cpu "
                               f"or install a CUDA build of torch")
    import torch

    if not torch.cuda.is_available():
        raise click.UsageError(f"--device {device}: no CUDA device is available (torch {torch.__version__}); "
                               f"use --device cpu")
    index = int(device.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        raise click.UsageError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")


def _torch_build_version() -> tuple[str, str | None] | None:
    """(torch version, CUDA version or None) read from torch's ``version.py`` without importing
    torch; None when it cannot be read."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        text = (Path(list(spec.submodule_search_locations)[0]) / "version.py").read_text()
    except OSError:
        return None
    version = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", text, re.M)
    cuda = re.search(r"^cuda\s*(?::[^=]*)?=\s*(?:['\"]([^'\"]*)['\"]|None)", text, re.M)
    if version is None or cuda is None:
        return None
    return version.group(1), cuda.group(1)


def settle_threads(requested: int | None, device: str = "cpu"):
    """Set torch's CPU threads before the models load (see :class:`core.cpu_load.ThreadGovernor`)
    and print its note, if any; returns the governor (None off the CPU, where only --threads counts)."""
    from core.cpu_load import ThreadGovernor, program_watch

    if device != "cpu":
        if requested:
            ThreadGovernor(requested, None).settle()  # the host threads asked for, nothing measured
        return None
    governor = ThreadGovernor(requested, program_watch())
    note = governor.settle()
    if note:
        click.echo(f"note: {note}", err=True)
    return governor

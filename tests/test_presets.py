"""Presets: the paper's four generator-PRM pairs, flags overriding preset fields, `specscale presets`,
and clear errors for bad preset files. Pure configuration: no model is loaded."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import click
import orjson
import pytest
from click.testing import CliRunner

from core.presets import PresetError, available_presets, load_preset, read_preset
from core.search.config import DEFAULT_SYSTEM_PROMPT, SearchConfig
from core.solver import SCORERS, ModelSettings
from specscale_cli import options
from specscale_cli.main import cli
from specscale_cli.options import build_settings, decode_escapes, model_and_search_options

GIB = 1 << 30
PRESET_FILES = Path(__file__).resolve().parents[1] / "presets"

# name -> (generator, PRM, scorer, generator KV GiB, PRM KV GiB)
PAPER_PAIRS = {
    "qwen2.5-3b-math-prm": ("Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-Math-PRM-7B", "qwen-math-prm", 20, 30),
    "qwen2.5-7b-math-prm": ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-Math-PRM-7B", "qwen-math-prm", 20, 20),
    "llama3.2-3b-rlhflow": ("meta-llama/Llama-3.2-3B-Instruct", "RLHFlow/Llama3.1-8B-PRM-Deepseek-Data", "rlhflow",
                            22, 26),
    "llama3.1-8b-rlhflow": ("meta-llama/Llama-3.1-8B-Instruct", "RLHFlow/Llama3.1-8B-PRM-Deepseek-Data", "rlhflow",
                            19, 19),
}
# FastTTS's pairs: name -> (generator, smallest card that holds weights + KV at N=8)
FASTTTS_PAIRS = {
    "qwen2.5-math-1.5b-skywork": ("Qwen/Qwen2.5-Math-1.5B-Instruct", 12),
    "qwen2.5-math-7b-skywork": ("Qwen/Qwen2.5-Math-7B-Instruct", 24),
    "llama3.2-1b-skywork": ("meta-llama/Llama-3.2-1B-Instruct", 12),
}
SKYWORK_1_5B = "Skywork/Skywork-o1-Open-PRM-Qwen-2.5-1.5B"


@pytest.fixture
def any_device(monkeypatch):
    """Let build_settings accept ``cuda`` presets on a CPU-only test machine (device checks are not under test)."""
    monkeypatch.setattr(options, "check_device", lambda device: None)


@click.command()
@model_and_search_options
def _settings_cmd(**opts):
    """Prints what build_settings makes of the flags, as JSON."""
    models, search, policy = build_settings(opts)
    click.echo(orjson.dumps({"models": dataclasses.asdict(models), "search": dataclasses.asdict(search),
                             "policy": policy}).decode())


def settings_for(*args) -> tuple[dict, dict]:
    res = CliRunner().invoke(_settings_cmd, list(args), catch_exceptions=False)
    assert res.exit_code == 0, res.output
    doc = orjson.loads(res.output)
    return doc["models"], doc["search"]


def test_shipped_presets_are_found():
    assert set(available_presets()) == {"smollm2-cpu", *PAPER_PAIRS, *FASTTTS_PAIRS}
    assert {p.name for p in PRESET_FILES.glob("*.toml")} == {f"{name}.toml" for name in available_presets()}


@pytest.mark.parametrize("name", sorted(PAPER_PAIRS))
def test_paper_preset_fields(name):
    generator, prm, scorer, gen_gib, prm_gib = PAPER_PAIRS[name]
    preset = read_preset(name)
    models, search = preset.resolve()
    assert (models.generator, models.prm, models.scorer) == (generator, prm, scorer)
    assert models.scorer in SCORERS
    assert (models.device, models.dtype) == ("cuda", "bfloat16")
    assert (models.gen_kv_bytes, models.prm_kv_bytes) == (gen_gib * GIB, prm_gib * GIB)
    assert models.max_model_len == 4096
    assert (search.beam_size, search.beam_width, search.num_selected) == (8, 4, 2)
    assert (search.temperature, search.top_p, search.max_steps) == (0.8, 1.0, 40)
    assert (search.step_delimiter, search.aggregation, search.lv_threshold) == ("\n\n", "last", 2048)
    assert (search.max_step_tokens, search.max_tokens) == (512, 2048)
    # a TOML literal string: the backslash of \boxed must survive (a basic string would make it \x08)
    assert "$\\boxed{ANSWER}$" in search.system_prompt and "\x08" not in search.system_prompt
    assert search.system_prompt != DEFAULT_SYSTEM_PROMPT
    assert preset.description.startswith(generator.split("/")[1])
    # the four pairs differ only in models and KV sizes: the search settings are one block
    assert preset.search == read_preset("qwen2.5-7b-math-prm").search


@pytest.mark.parametrize("name", sorted(PAPER_PAIRS))
def test_flags_override_paper_preset(name, any_device):
    models, search = settings_for("--preset", name, "--policy", "specscale", "-n", "16", "--step-delimiter", "\\n",
                                  "--system-prompt", "Be brief.\\nEnd with \\boxed{x}.", "--lv-threshold", "512",
                                  "--kv-cache-gb", "1.5", "--device", "cuda:1")
    generator, prm, scorer, _, prm_gib = PAPER_PAIRS[name]
    assert (search["beam_size"], search["step_delimiter"], search["lv_threshold"]) == (16, "\n", 512)
    assert search["system_prompt"] == "Be brief.\nEnd with \\boxed{x}."
    assert (models["gen_kv_bytes"], models["device"]) == (int(1.5 * GIB), "cuda:1")
    # fields without a flag keep the preset's values
    assert (models["generator"], models["prm"], models["scorer"]) == (generator, prm, scorer)
    assert (models["prm_kv_bytes"], search["beam_width"], search["max_steps"]) == (prm_gib * GIB, 4, 40)


def test_every_field_has_a_flag_that_overrides_it(any_device):
    args = ["--preset", "smollm2-cpu", "--policy", "specscale", "--generator", "gen-x", "--prm", "prm-y", "--scorer", "lm-judge",
            "--dtype", "bfloat16", "--device", "cuda", "--block-size", "8", "--kv-cache-gb", "0.5",
            "--prm-kv-cache-gb", "0.25", "--max-num-seqs", "7", "--max-num-batched-tokens", "99",
            "--max-model-len", "1234", "--no-prefix-caching", "--attention-backend", "torch", "--enforce-eager",
            "--threads", "3", "-n", "6", "-m", "3", "--temperature", "0.5", "--top-p", "0.9", "--max-steps", "5",
            "--step-delimiter", "\\t", "--max-step-tokens", "33", "--max-tokens", "300", "--aggregation", "min",
            "--seed", "7", "--system-prompt", "", "--no-ep", "--no-cd", "--perfect-score", "2",
            "--no-lv", "--lv-threshold", "100", "--lv-max-deferrals", "2", "--strategy", "dvts",
            "--select", "majority", "--speculation-budget", "48"]
    models, search = settings_for(*args)
    assert models == {"generator": "gen-x", "prm": "prm-y", "scorer": "lm-judge", "dtype": "bfloat16",
                      "device": "cuda", "block_size": 8, "gen_kv_bytes": GIB // 2, "prm_kv_bytes": GIB // 4,
                      "max_num_seqs": 7, "max_num_batched_tokens": 99, "max_model_len": 1234,
                      "enable_prefix_caching": False, "attention_backend": "torch", "enforce_eager": True,
                      "threads": 3}
    assert search == {"beam_size": 6, "beam_width": 3, "temperature": 0.5, "top_p": 0.9, "max_steps": 5,
                      "step_delimiter": "\t", "max_step_tokens": 33, "max_tokens": 300, "aggregation": "min",
                      "seed": 7, "system_prompt": "", "early_pruning": False, "dedup": False,
                      "perfect_score": None, "lazy_verification": False, "lv_threshold": 100,
                      "lv_max_deferrals": 2, "strategy": "dvts", "select": "majority", "speculation_budget": 48}
    # every field moved away from what the preset resolves to, so no field is out of the flags' reach
    base_models, base_search = read_preset("smollm2-cpu").resolve()
    assert all(models[k] != v for k, v in dataclasses.asdict(base_models).items())
    assert all(search[k] != v for k, v in dataclasses.asdict(base_search).items())


def test_no_flags_means_the_preset(any_device):
    models, search = settings_for("--preset", "llama3.1-8b-rlhflow")
    want_models, want_search = read_preset("llama3.1-8b-rlhflow").resolve()
    assert (models, search) == (dataclasses.asdict(want_models), dataclasses.asdict(want_search))


@pytest.mark.parametrize("typed, meant", [
    ("\\n\\n", "\n\n"),
    ("a\\tb\\r", "a\tb\r"),
    ("\\boxed{x} and \\frac{1}{2}", "\\boxed{x} and \\frac{1}{2}"),
    ("\\\\times", "\\times"),          # \\ is one backslash, so \\times is not a tab
    ("\\\\n", "\\n"),
    ("é\\n→", "é\n→"),                 # unicode_escape would have mangled these
])
def test_decode_escapes(typed, meant):
    assert decode_escapes(typed) == meant


def test_bad_scorer_flag_is_a_usage_error():
    res = CliRunner().invoke(_settings_cmd, ["--scorer", "nope"])
    assert res.exit_code == 2
    choices = ", ".join(f"'{name}'" for name in SCORERS)
    assert f"Invalid value for '--scorer': 'nope' is not one of {choices}." in res.output


@pytest.mark.parametrize("policy", ["non-spec", "naive-spec", "fasttts"])
def test_specscale_flags_are_refused_under_other_policies(policy):
    res = CliRunner().invoke(_settings_cmd, ["--policy", policy, "--no-ep", "--lv-threshold", "100"])
    assert res.exit_code == 2
    assert (f"Error: --ep/--no-ep, --lv-threshold: only the specscale policy has early pruning, deduplication and "
            f"lazy verification; this run uses --policy {policy}") in res.output
    assert settings_for("--policy", "specscale", "--no-ep", "--lv-threshold", "100")[1]["lv_threshold"] == 100


def test_unknown_preset_lists_available():
    with pytest.raises(PresetError) as err:
        load_preset("no-such-preset")
    assert str(err.value) == (f"unknown preset 'no-such-preset'; available: {', '.join(sorted(available_presets()))} "
                              "(or a .toml path)")
    res = CliRunner().invoke(cli, ["presets", "no-such-preset"])
    assert res.exit_code == 2 and "llama3.1-8b-rlhflow, llama3.2-1b-skywork, llama3.2-3b-rlhflow" in res.output


GOOD = """description = "test"
[models]
generator = "g"
scorer = "likelihood"
gen_kv_gb = 1.5

[search]
beam_size = 8
beam_width = 4
"""


@pytest.mark.parametrize("old, new, message", [
    ('scorer = "likelihood"', 'scorer = "prm-x"',
     f":4: [models] scorer: unknown scorer 'prm-x'; choose one of {', '.join(SCORERS)}"),
    ("beam_size = 8", 'beam_size = "eight"', ":8: [search] beam_size: expected int, got str 'eight'"),
    ("beam_size = 8", "beam_size = true", ":8: [search] beam_size: expected int, got bool True"),
    ("beam_size = 8", "beam_size = 6", ":8: [search] beam_size: beam size N=6 must be divisible by beam width M=4"),
    ("beam_width = 4", "beam_width = 3", ":9: [search] beam_width: beam size N=8 must be divisible by beam width M=3"),
    ("beam_width = 4", 'beam_width = 4\nstep_delimiter = ""',
     ":10: [search] step_delimiter: step delimiter must not be empty"),
    ("beam_width = 4", "beam_width = 4\nlv_threshold = 0", ":10: [search] lv_threshold: LV threshold must be >= 1"),
    ("gen_kv_gb = 1.5", "gen_kv_gb = -1", ":5: [models] gen_kv_gb: must be a positive number of GiB, got -1"),
    ("gen_kv_gb = 1.5", "gen_kv_gb = 1.5\ngen_kv_bytes = 1024",
     ":5: [models] gen_kv_gb: set either gen_kv_gb or gen_kv_bytes, not both"),
    ("gen_kv_gb = 1.5", 'gen_kv_gb = 1.5\nmax_num_seqs = "many"', ":6: [models] max_num_seqs: expected int, got str"),
    ("gen_kv_gb = 1.5", 'gen_kv_gb = 1.5\ndevice = "tpu"',
     ":6: [models] device: unknown device 'tpu'; use cpu or cuda[:index]"),
    ("gen_kv_gb = 1.5", 'gen_kv_gb = 1.5\ndtype = "int3"', ":6: [models] dtype: unknown dtype 'int3'"),
    ('generator = "g"', 'generator = "g"\nbeam_size = 8',
     ":4: [models] beam_size: unknown field; known fields: attention_backend, block_size, device, dtype, "
     "enable_prefix_caching, enforce_eager, gen_kv_bytes, gen_kv_gb, generator, max_model_len, "),
    ("[search]", "[serach]", ": unknown table or key(s): serach (expected description, [models], [search])"),
    ("beam_size = 8", "beam_size = ", ": invalid TOML: "),
])
def test_bad_preset_names_file_line_and_field(tmp_path, old, new, message):
    path = tmp_path / "mine.toml"
    path.write_text(GOOD.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(PresetError) as err:
        read_preset(str(path))
    assert str(err.value).startswith(f"{path}{message}"), str(err.value)


def test_good_preset_file_by_path(tmp_path, any_device):
    path = tmp_path / "mine.toml"
    path.write_text(GOOD, encoding="utf-8")
    preset = read_preset(str(path))
    assert (preset.name, preset.description) == ("mine", "test")
    assert preset.models == {"generator": "g", "scorer": "likelihood", "gen_kv_bytes": int(1.5 * GIB)}
    assert preset.search == {"beam_size": 8, "beam_width": 4}
    models, search = settings_for("--preset", str(path))
    assert (models["generator"], models["prm"], search["beam_size"]) == ("g", ModelSettings().prm, 8)
    assert search["system_prompt"] == SearchConfig().system_prompt == DEFAULT_SYSTEM_PROMPT


def test_bad_preset_is_a_usage_error_in_solve(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(GOOD.replace("beam_width = 4", "beam_width = 3"), encoding="utf-8")
    res = CliRunner().invoke(cli, ["solve", "-", "--preset", str(path)], input="")
    assert res.exit_code == 2
    assert f"{path}:9: [search] beam_width: beam size N=8 must be divisible by beam width M=3" in res.output


def test_presets_command_lists_all_as_json():
    res = CliRunner().invoke(cli, ["presets", "--json"])
    assert res.exit_code == 0, res.output
    rows = {row["name"]: row for row in orjson.loads(res.output)}
    assert set(rows) == set(available_presets())
    for name, (generator, prm, scorer, _, _) in PAPER_PAIRS.items():
        row = rows[name]
        assert "error" not in row, row
        assert (row["generator"], row["prm"], row["scorer"], row["device"]) == (generator, prm, scorer, "cuda")
        assert (row["beam_size"], row["beam_width"]) == (8, 4)
        assert row["path"] == str(available_presets()[name])
    assert (rows["smollm2-cpu"]["beam_size"], rows["smollm2-cpu"]["beam_width"]) == (4, 2)


def test_presets_command_table_names_every_preset():
    res = CliRunner().invoke(cli, ["presets"], env={"COLUMNS": "240"})
    assert res.exit_code == 0, res.output
    for name, (generator, prm, scorer, _, _) in PAPER_PAIRS.items():
        line = next(ln for ln in res.output.splitlines() if ln.startswith(f"│ {name} "))
        assert re.search(rf"{re.escape(generator)} .*{re.escape(prm)} .*{scorer} .*cuda .*8/4", line), line
    assert "invalid preset" not in res.output


def test_presets_command_shows_one_resolved():
    res = CliRunner().invoke(cli, ["presets", "qwen2.5-7b-math-prm", "--json"])
    assert res.exit_code == 0, res.output
    doc = orjson.loads(res.output)
    models, search = read_preset("qwen2.5-7b-math-prm").resolve()
    assert doc["path"] == str(available_presets()["qwen2.5-7b-math-prm"])
    assert doc["models"] == dataclasses.asdict(models) and doc["search"] == dataclasses.asdict(search)
    assert "block_size" not in doc["set_in_preset"]["models"] and "seed" in doc["set_in_preset"]["search"]

    res = CliRunner().invoke(cli, ["presets", "qwen2.5-7b-math-prm"], env={"COLUMNS": "240"})
    assert res.exit_code == 0, res.output
    assert str(available_presets()["qwen2.5-7b-math-prm"]) in res.output
    fields = [f.name for f in dataclasses.fields(ModelSettings)] + [f.name for f in dataclasses.fields(SearchConfig)]
    assert all(re.search(rf"│ {f} +│", res.output) for f in fields)
    assert re.search(r"│ step_delimiter +│ \"\\n\\n\" +│ preset", res.output)
    assert re.search(r"│ gen_kv_bytes +│ 21474836480 \(20 GiB\) +│ preset", res.output)
    assert re.search(r"│ block_size +│ 16 +│ default", res.output)


@pytest.mark.parametrize("name", sorted(available_presets()))
def test_every_shipped_preset_can_be_shown(name):
    """`specscale presets NAME` prints every field; a KV pool sized to the work (None) says so."""
    res = CliRunner().invoke(cli, ["presets", name], catch_exceptions=False, env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    rows = [line for line in res.output.splitlines() if "gen_kv_bytes" in line]
    assert len(rows) == 1
    if name == "smollm2-cpu":  # its pools are sized to the work
        assert "sized to the work" in rows[0]
    threads = [line for line in res.output.splitlines() if " threads " in line]
    assert len(threads) == 1 and "the cores left free" in threads[0]  # no preset pins torch's thread count


# ---------------------------------------------------------------------- FastTTS's pairs and their memory
@pytest.mark.parametrize("name", sorted(FASTTTS_PAIRS))
def test_fasttts_preset_fields(name):
    generator, fits_gb = FASTTTS_PAIRS[name]
    preset = read_preset(name)
    models, search = preset.resolve()
    assert (models.generator, models.prm, models.scorer) == (generator, SKYWORK_1_5B, "skywork-prm")
    assert (models.device, models.dtype, models.max_model_len) == ("cuda", "bfloat16", 4096)
    assert models.gen_kv_bytes is models.prm_kv_bytes is None  # pools sized to the card's free memory
    assert (search.beam_width, search.temperature, search.top_p, search.max_steps) == (4, 0.8, 1.0, 10)
    assert (search.step_delimiter, search.strategy, search.aggregation) == ("\n\n", "beam", "last")
    assert search.beam_size % search.beam_width == 0
    assert "$\\boxed{ANSWER}$" in search.system_prompt
    assert preset.description == (f"{generator.split('/')[1]} + Skywork-o1-Open-PRM-Qwen-2.5-1.5B (CUDA, bf16, "
                                  f"{fits_gb} GB and up)")


def test_footprint_counts_weights_and_kv_from_config_numbers():
    from core.models.footprint import KNOWN_CONFIGS, VALUE, DecoderShape, SCORER_HEADS

    shape = {name: DecoderShape.from_config(KNOWN_CONFIGS[name]) for name in KNOWN_CONFIGS}
    # the parameter counts the model cards give: 1.54B, 7.62B, 1.24B, 8.03B
    assert shape["Qwen/Qwen2.5-Math-1.5B-Instruct"].parameters() == 1_543_714_304
    assert shape["Qwen/Qwen2.5-Math-7B-Instruct"].parameters() == 7_615_616_512
    assert shape["meta-llama/Llama-3.2-1B-Instruct"].parameters() == 1_235_814_400
    assert shape["meta-llama/Llama-3.1-8B-Instruct"].parameters() == 8_030_261_248
    # a PRM read through its value head has no LM head (tied here: the embeddings stay) but the head
    skywork = shape[SKYWORK_1_5B]
    assert skywork.parameters(VALUE) == skywork.parameters() + 1536 + 1
    untied = shape["Qwen/Qwen2.5-Math-PRM-7B"]
    assert untied.parameters(SCORER_HEADS["qwen-math-prm"]) == (untied.parameters() - 152064 * 3584
                                                                + 3584 * 3584 + 3584 + 2 * 3584 + 2)
    # K and V of one token: layers x KV heads x head size x 2 x 2 bytes
    assert skywork.kv_bytes_per_token(2) == 28 * 2 * 128 * 2 * 2
    assert shape["meta-llama/Llama-3.2-1B-Instruct"].kv_bytes_per_token(2) == 16 * 8 * 64 * 2 * 2


def test_footprint_heads_are_the_scorers_heads():
    from core.models.footprint import SCORER_HEADS

    for name, cls in SCORERS.items():
        head = SCORER_HEADS.get(name, "lm")
        assert cls.head == {"mlp-classifier": "classifier"}.get(head, head), name


@pytest.mark.parametrize("name", sorted(FASTTTS_PAIRS))
def test_presets_command_says_which_card_each_pair_fits(name):
    from core.models.footprint import GIB, KNOWN_CONFIGS, DecoderShape

    generator, fits_gb = FASTTTS_PAIRS[name]
    rows = {row["name"]: row for row in orjson.loads(CliRunner().invoke(cli, ["presets", "--json"]).output)}
    mem = rows[name]["memory"]
    gen, prm = (DecoderShape.from_config(KNOWN_CONFIGS[m]) for m in (generator, SKYWORK_1_5B))
    weights = (gen.parameters() + prm.parameters("value")) * 2
    kv = 8 * 4096 * (gen.kv_bytes_per_token(2) + prm.kv_bytes_per_token(2))  # N=8 paths of 4096 tokens each
    assert mem["total_gib"] == pytest.approx((weights + kv) / GIB, abs=0.15)
    assert mem["fits_gb"] == fits_gb and mem["kv_pools_gib"] is None
    # the card keeps 10% (at least 1.5 GiB) for the CUDA context and activations; the next smaller does not
    assert weights + kv <= fits_gb * GIB - max(0.1 * fits_gb, 1.5) * GIB
    smaller = [gb for gb in (8, 12, 16, 24) if gb < fits_gb][-1]
    assert weights + kv > smaller * GIB - max(0.1 * smaller, 1.5) * GIB
    shown = CliRunner().invoke(cli, ["presets", name], env={"COLUMNS": "200"}).output
    assert f"{mem['total_gib']:g} GiB: weights" in shown and f"smallest card it fits: {fits_gb} GB" in shown


def test_presets_memory_reads_a_model_folder_and_says_when_a_model_is_unknown(tmp_path):
    from core.models.footprint import KNOWN_CONFIGS
    from specscale_cli.presets_cmd import memory

    (tmp_path / "config.json").write_text(orjson.dumps({**KNOWN_CONFIGS[SKYWORK_1_5B],
                                                        "architectures": ["Qwen2ForPrmModel"]}).decode())
    models, search = read_preset("qwen2.5-math-1.5b-skywork").resolve()
    named = memory(models, search)
    assert memory(dataclasses.replace(models, prm=str(tmp_path)), search) == named
    unknown = memory(dataclasses.replace(models, generator="someone/unknown-model"), search)
    assert unknown == {"error": "no config numbers for generator 'someone/unknown-model' (give a model folder, or "
                                "a model of a shipped preset)"}

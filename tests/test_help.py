"""What `--help`, `--version` and `presets` show a user."""

from __future__ import annotations

import click
from click.testing import CliRunner
from rich.console import Console

from core.settings import POLICY_DESCRIPTIONS, SCORER_DESCRIPTIONS
from specscale_cli.main import cli


def _help(*args: str) -> str:
    res = CliRunner().invoke(cli, [*args, "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    return " ".join(res.output.split())


def test_preset_filled_flags_show_the_effective_default():
    text = _help("solve")
    for flag, shown in (("-n, --beam-size INTEGER", "[default: 4 from smollm2-cpu]"),
                        ("-m, --beam-width INTEGER", "[default: 2 from smollm2-cpu]"),
                        ("--max-steps INTEGER", "[default: 12 from smollm2-cpu]"),
                        ("--step-delimiter TEXT", "[default: '\\n' from smollm2-cpu]"),
                        ("--generator TEXT", "[default: 'smollm2-135m-instruct' from smollm2-cpu]"),
                        ("--lv-threshold INTEGER RANGE", "[default: 1024 from smollm2-cpu]"),
                        # the preset leaves these at the built-in values: no "from smollm2-cpu"
                        ("--lv-max-deferrals INTEGER RANGE", "[default: 6]"),
                        ("--ep / --no-ep", "[default: on]")):
        after = text.split(flag, 1)[1].split(" --", 1)[0]
        assert shown in after, (flag, after)


def test_scorer_and_policy_help_name_each_choice_with_what_it_does():
    text = _help("solve")
    for name, meaning in {**SCORER_DESCRIPTIONS, **POLICY_DESCRIPTIONS}.items():
        assert f"{name}: {' '.join(meaning.split())}" in text, name


def test_every_option_of_every_command_has_a_description():
    def walk(cmd, path):
        for param in cmd.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert (param.help or "").strip(), (path, param.opts)
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, path + [name])

    walk(cli, ["specscale"])


def test_version():
    from importlib.metadata import version

    res = CliRunner().invoke(cli, ["--version"])
    assert res.exit_code == 0 and res.output == f"specscale, version {version('specscale')}\n"


def test_presets_list_reads_at_80_columns(monkeypatch):
    from specscale_cli import presets_cmd

    from core.presets import available_presets, read_preset

    consoles = []
    real = Console

    def narrow(*args, **kwargs):
        consoles.append(real(*args, **{**kwargs, "width": 80, "record": True}))
        return consoles[-1]

    monkeypatch.setattr("rich.console.Console", narrow)
    res = CliRunner().invoke(cli, ["presets"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    for name in available_presets():
        assert any(line.startswith(f"{name}  ") for line in lines), name  # names whole, never broken
    assert presets_cmd.WIDE_TABLE > 80
    # descriptions wrap at words under the block's indent, and no line ends in padding
    assert all(line == line.rstrip() for line in lines)
    text = " ".join(line.strip() for line in lines)
    for name, path in available_presets().items():
        assert read_preset(name).description in text, name


def test_policy_and_scorer_names_match_the_code():
    from core.search.policy import POLICIES
    from core.settings import POLICY_NAMES

    assert tuple(POLICIES) == POLICY_NAMES


def test_bench_tables_in_a_log_keep_whole_rows(monkeypatch):
    from specscale_cli.bench_report import LOG_WIDTH, report_console

    monkeypatch.setenv("COLUMNS", "80")
    console = report_console()  # stderr is not a terminal under pytest
    assert not console.is_terminal and console.width == LOG_WIDTH

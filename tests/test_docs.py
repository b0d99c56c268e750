"""The README and docs/ only show what exists: every `specscale` command and flag they name is one
the command line has, every tool flag one the tool takes, and every relative link and anchor
resolves (issue 28)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from specscale_cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOOLS = {name: ROOT / "tools" / name for name in ("gpu-check", "gpu-wheels", "bench-grading", "eta-simulation")}
# flags of other programs that the docs show in their own commands (pip, pytest, ray, make)
FOREIGN = {"--no-deps": "pip", "--no-index": "pip", "--target": "pip", "--only-binary": "pip",
           "--upgrade": "pip", "--head": "ray start", "--address": "ray start", "-m": "pytest / python",
           "--junitxml": "pytest", "-e": "pip install -e", "-q": "pip / pytest", "-p": "pytest", "-rs": "pytest",
           "-y": "specscale cache clear", "--platform": "pip download", "--python-version": "pip download",
           "--implementation": "pip download", "-d": "pip download"}


def _commands() -> dict[str, click.Command]:
    """Every command path of the CLI (``""`` is the group itself): ``solve``, ``bench engine``, ..."""
    out: dict[str, click.Command] = {}

    def walk(cmd: click.Command, path: str) -> None:
        out[path] = cmd
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                walk(sub, f"{path} {name}".strip())

    walk(cli, "")
    return out


def _flags(cmd: click.Command) -> set[str]:
    flags = {"--help"}
    for p in cmd.params:
        flags.update(getattr(p, "opts", []))
        flags.update(getattr(p, "secondary_opts", []))
    return flags


def _tool_flags() -> set[str]:
    flags = set()
    for path in TOOLS.values():
        if path.exists():
            text = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True,
                                  timeout=60).stdout
            flags.update(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", text))
    return flags


def _code(text: str) -> list[tuple[int, str]]:
    """(line number, code) for every inline code span (one may run over a line break: it is read
    with its paragraph) and every line of a fenced block."""
    out, fenced, paragraph = [], False, []

    def spans():
        if paragraph:
            joined = " ".join(line for _, line in paragraph)
            out.extend((paragraph[0][0], span) for span in re.findall(r"`([^`]+)`", joined))
            paragraph.clear()

    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            spans()
            fenced = not fenced
        elif fenced:
            code = line.split(" #")[0]
            if out and out[-1][1].endswith("\\"):  # a shell line continued
                out[-1] = (out[-1][0], out[-1][1][:-1] + " " + code.strip())
            else:
                out.append((number, code))
        elif not line.strip():
            spans()
        else:
            paragraph.append((number, line))
    spans()
    return out


def _invocations(code: str) -> list[list[str]]:
    """The token lists after each ``specscale`` in a piece of code (up to a pipe or ``;``)."""
    found = []
    # the program at the start of a command (not `--policy specscale`, the policy's name)
    for m in re.finditer(r"(?:^\s*|[;&|(]\s*|/)specscale\s+([^|;]*)", code):
        try:
            found.append(shlex.split(m.group(1).replace("\\", " ")))
        except ValueError:  # an unclosed quote in a cut-off span
            found.append(m.group(1).split())
    return found


def test_every_specscale_command_and_flag_the_docs_show_exists():
    commands = _commands()
    problems = []
    for doc in DOCS:
        for number, code in _code(doc.read_text()):
            for tokens in _invocations(code):
                words = [t for t in tokens if not t.startswith("-")]
                path = ""
                for word in words[:2]:  # the longest command path the words name
                    if f"{path} {word}".strip() in commands:
                        path = f"{path} {word}".strip()
                    else:
                        break
                if not path and words and words[0].isidentifier():
                    problems.append(f"{doc.name}:{number}: unknown command 'specscale {words[0]}'")
                    continue
                allowed = _flags(commands[path]) | _flags(cli)
                for token in tokens:
                    flag = token.split("=")[0]
                    if re.fullmatch(r"--?[a-zA-Z][\w-]*", flag) and flag not in allowed:
                        problems.append(f"{doc.name}:{number}: 'specscale {path}' has no flag {flag}")
    assert not problems, "\n".join(problems)


def test_every_flag_the_docs_name_exists_somewhere():
    """A flag named on its own (`--resume`, `--ep/--no-ep`, `--threads N`) is one of a specscale
    command's, a tool's, or another program's the docs show it with (:data:`FOREIGN`)."""
    known = set().union(*(_flags(c) for c in _commands().values())) | _tool_flags() | set(FOREIGN)
    problems = []
    for doc in DOCS:
        for number, code in _code(doc.read_text()):
            for flag in re.findall(r"(?<![\w./*-])(--?[a-zA-Z](?:[\w-]*[a-zA-Z0-9])?)(?![\w>-])", code):
                if flag not in known:
                    problems.append(f"{doc.name}:{number}: no command or tool has {flag} (in `{code}`)")
    assert not problems, "\n".join(problems)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = path.read_text()
    text = re.sub(r"(?ms)^```.*?^```", "", text)
    return {_slug(m) for m in re.findall(r"(?m)^#+\s+(.*)$", text)}


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_links_resolve(doc):
    problems = []
    text = re.sub(r"(?ms)^```.*?^```", "", doc.read_text())
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists():
            problems.append(f"{doc.name}: link to {target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            problems.append(f"{doc.name}: link to {target}: no heading '{anchor}' in {path.name}")
    assert not problems, "\n".join(problems)


def test_the_checks_catch_what_they_claim(tmp_path, monkeypatch):
    """A made-up flag, command and link are each reported (the checks can fail)."""
    bad = tmp_path / "bad.md"
    bad.write_text("Run `specscale solve x.jsonl --no-such-flag` or `specscale frobnicate`, with `--nope`.\n"
                   "See [there](missing.md) and [here](#nowhere).\n\n# Here\n")
    monkeypatch.setattr(sys.modules[__name__], "DOCS", [bad])
    with pytest.raises(AssertionError, match=r"bad.md:1: 'specscale solve' has no flag --no-such-flag"):
        test_every_specscale_command_and_flag_the_docs_show_exists()
    with pytest.raises(AssertionError, match=r"unknown command 'specscale frobnicate'"):
        test_every_specscale_command_and_flag_the_docs_show_exists()
    with pytest.raises(AssertionError, match=r"no command or tool has --nope"):
        test_every_flag_the_docs_name_exists_somewhere()
    with pytest.raises(AssertionError, match=r"missing.md: no such file[\s\S]*no heading 'nowhere'"):
        test_links_resolve(bad)

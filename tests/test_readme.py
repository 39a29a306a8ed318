"""The README and docs/ cannot go stale: the generated tables match the registries, every console output shown is
what its command prints today, the install-extras table is pyproject.toml's, every command is listed, and every
link and file named resolves in a checkout."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
import tomllib
from types import ModuleType
from typing import Any

import pytest

from aisim.cli import build_parser

from .conftest import ROOT


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


tables = _script("readme_tables")
outputs = _script("readme_outputs")
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8") for path in outputs.PAGES}


def test_the_gpu_and_model_tables_are_the_registries() -> None:
    assert tables.stale(README) == [], "run python scripts/readme_tables.py"


def test_a_new_profile_makes_the_table_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    from aisim.scenario.presets import GPU_PROFILES

    monkeypatch.setitem(GPU_PROFILES, "X100", GPU_PROFILES["H100-SXM"])
    assert tables.stale(README) == ["gpu-profiles"]


def test_every_console_block_is_checked() -> None:
    _, problems = outputs.checked_blocks(slow=True)
    assert problems == []


BLOCKS, _ = outputs.checked_blocks(slow=False)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_each_console_output_is_what_the_command_prints(block: Any) -> None:
    if any(step.command.startswith("curl ") for step in block.steps) and shutil.which("curl") is None:
        pytest.skip("no curl on this machine")
    problems = outputs.check(block)
    assert not problems, "\n".join(problems) + "\n(python scripts/readme_outputs.py --update rewrites it; read the diff)"


@pytest.mark.parametrize(("shown", "actual", "expected"), [
    (["a", "b"], ["a", "b"], True),
    (["a"], ["a", "b"], False),                   # without `...` the block is the whole output
    (["a", "...", "c"], ["a", "b", "c"], True),
    (["...", "c"], ["a", "b", "c"], True),
    (["a", "c"], ["a", "b", "c"], False),         # lines between need a `...`
    (["c", "...", "a"], ["a", "b", "c"], False),  # in order
    (["x 1.5 ms"], ["x 1.6 ms"], False),          # a figure that moved
    (["starts with ..."], ["starts with more"], True),
    (["run in 5.03 wall s (696x real time), 9 events"], ["run in 15.14 wall s (231x real time), 9 events"], True),
    (["run in 5 wall s (6x real time), 9 events"], ["run in 5 wall s (6x real time), 8 events"], False),
    ([], [], True),
    ([], ["a"], False),
])
def test_the_comparison(shown: list[str], actual: list[str], expected: bool) -> None:
    assert outputs.matches(shown, actual) is expected


def test_an_update_keeps_the_excerpt_and_takes_the_new_figures() -> None:
    shown = ["...", "model chat", "...", "  ITL   10.6   9.6", "...", "GPU streams", "  busy 96.7 %"]
    actual = ["scenario x", "model chat", "  TTFT 1.0 2.0", "  ITL   7.0   6.5", "model other", "  ITL 9 9",
              "GPU streams", "  busy 99.9 %"]
    assert outputs.updated(shown, actual) == ["...", "model chat", "...", "  ITL   7.0   6.5", "...", "GPU streams",
                                              "  busy 99.9 %"]
    assert outputs.updated(["...", "a line that is gone"], actual) is None


def _extras_rows() -> dict[str, str]:
    table = README.split("<!-- extras -->", 1)[1].split("<!-- /extras -->", 1)[0]
    rows: dict[str, str] = {}
    for line in table.strip().splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        for name in re.findall(r"`([\w-]+)`", cells[0]) or [cells[0]]:
            rows[name] = cells[1]
    return rows


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\s]", requirement, maxsplit=1)[0]


def test_the_extras_table_is_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    rows = _extras_rows()
    wanted = {"(base)": project["dependencies"], **project["optional-dependencies"]}
    assert set(rows) == set(wanted)
    for extra, requirements in wanted.items():
        listed = {item.strip() for item in re.split(r"[,;]\s+", rows[extra])}
        for requirement in requirements:
            name = _name(requirement)
            if name.startswith(("aisim[", "ruamel.yaml.clib")):
                continue  # an alias of another extra; ruamel.yaml's C parser comes with ruamel.yaml
            assert name in listed, f"{extra}: {name} is not in the README's extras table"


def test_every_command_is_in_the_commands_table() -> None:
    parser = build_parser()
    commands = next(action for action in parser._actions if action.dest == "command").choices or {}
    table = README.split("## Commands", 1)[1].split("\n## ", 1)[0]
    for name in commands:
        assert f"| `aisim {name}" in table, f"aisim {name} is not in the README's commands table"


@pytest.mark.parametrize("page", sorted(PAGES))
def test_no_page_sends_a_reader_to_what_a_checkout_lacks(page: str) -> None:
    text = PAGES[page]
    for pattern in (r"DESIGN\.md", r"`shared/", r"\bissue \d+\b", r"shared folder"):
        assert not re.search(pattern, text), f"{page}: {pattern}"
    folder = (ROOT / page).parent
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if not re.match(r"\w+://", target):
            assert (folder / target).exists(), f"{page}: a link to {target}, which does not exist"

"""`aisim --help` explains itself: every subcommand (nested ones too) has a one-line description and an example,
every option and argument a help text; and `aisim list gpus|models` lists the registries."""

from __future__ import annotations

import argparse
import json

import pytest

from aisim.cli import EXAMPLES, build_parser, main
from aisim.scenario.presets import GPU_PROFILES, MODEL_FAMILIES


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> list[tuple[str, argparse.ArgumentParser]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append((f"{prefix}{name}", sub))
                found += _commands(sub, f"{prefix}{name} ")
    return found


COMMANDS = _commands(build_parser())


def test_the_tree_is_walked() -> None:
    names = {name for name, _ in COMMANDS}
    assert {"run", "serve", "memory", "list", "workload import", "tokenizer save"} <= names


@pytest.mark.parametrize(("name", "parser"), COMMANDS, ids=[name for name, _ in COMMANDS])
def test_every_subcommand_has_a_description_an_example_and_help_on_every_option(
        name: str, parser: argparse.ArgumentParser) -> None:
    assert parser.description and parser.description.strip(), f"aisim {name}: no description"
    assert parser.epilog == f"example:\n  {EXAMPLES[name]}"
    assert EXAMPLES[name].startswith(f"aisim {name.split()[0]}")
    missing = [action.option_strings or [action.dest] for action in parser._actions
               if not isinstance(action, argparse._SubParsersAction) and not action.help]
    assert missing == [], f"aisim {name}: options without help: {missing}"
    text = parser.format_help()
    assert f"example:\n  {EXAMPLES[name]}\n" in text


def test_list_gpus_and_models_as_tables_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "gpus"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["GPU", "VENDOR", "MEMORY"] and len(lines) == 1 + len(GPU_PROFILES)
    h100 = next(line.split() for line in lines if line.startswith("H100-SXM "))
    assert float(h100[2]) == round(GPU_PROFILES["H100-SXM"].capacity / 2**30, 1)

    assert main(["list", "models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["name"] for row in rows] == list(MODEL_FAMILIES)
    embedders = {row["name"] for row in rows if row["task"] == "embed"}
    assert "bge-large-en" in embedders and "llama-3-8b" not in embedders
    llama = next(row for row in rows if row["name"] == "llama-3-8b")
    assert llama["config"] == "aisim/scenario/configs/meta-llama--Meta-Llama-3-8B_config.json"

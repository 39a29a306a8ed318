"""`aisim.errors`: the hierarchy its docstring draws is the one the classes have."""

from __future__ import annotations

import importlib
import re

import pytest

import aisim.errors
from aisim.errors import AisimError, OutputError, UsageError, within

LINE = re.compile(r"^(?P<indent> *)[*x+-] (?P<name>\w+) +exit (?P<status>\d)(?: +(?P<module>[\w/]+)\.py:)?")


def _drawn() -> list[tuple[str, str | None, int, str]]:
    """(class, parent, exit status, module) for each line of the drawing."""
    found: list[tuple[str, str | None, int, str]] = []
    parents: list[str] = []
    for line in (aisim.errors.__doc__ or "").splitlines():
        match = LINE.match(line)
        if not match:
            continue
        depth = len(match["indent"]) // 2
        parents[depth:] = [match["name"]]
        module = "aisim." + match["module"].replace("/", ".") if match["module"] else "aisim.errors"
        found.append((match["name"], parents[depth - 1] if depth else None, int(match["status"]), module))
    return found


def test_the_drawing_is_the_hierarchy() -> None:
    drawn = _drawn()
    assert len(drawn) > 20 and drawn[0] == ("AisimError", None, 1, "aisim.errors")
    classes = {name: getattr(importlib.import_module(module), name) for name, _, _, module in drawn}
    for name, parent, status, _ in drawn:
        assert classes[name].exit_status == status, name
        if parent:
            assert classes[parent] in classes[name].__mro__[1:], f"{name} is not a {parent}"
    drawn_names = {name for name, *_ in drawn}
    assert {c.__name__ for c in vars(aisim.errors).values() if isinstance(c, type) and issubclass(c, AisimError)} \
        <= drawn_names


def test_within_names_what_the_message_is_about_outermost_first() -> None:
    with pytest.raises(UsageError) as caught, within("run"), within("--until"):
        raise UsageError("'5 parsecs' is not a duration")
    assert caught.value.report("run") == "aisim run: run: --until: '5 parsecs' is not a duration\n"
    assert str(caught.value) == "'5 parsecs' is not a duration"  # what code catching it by name reads is unchanged


def test_an_output_error_names_the_file_and_the_reason() -> None:
    error = OutputError(NotADirectoryError(20, "Not a directory", "out/t.jsonl"), "--report")
    assert (error.exit_status, error.user_message) == (2, "--report: cannot write out/t.jsonl: Not a directory")

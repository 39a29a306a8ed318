"""Problem records: one per mistake in a scenario, each with its place, and their renderers.

The record follows yamllint's `LintProblem` (1-based line and column, a rule id) and adds the
JSON path into the document, which neither yamllint nor check-jsonschema report together.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

from ..errors import InputError

Severity = Literal["error", "warning"]
PathPart = str | int

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def format_path(parts: Sequence[PathPart]) -> str:
    """`('gpus', 0, 'memoryPool')` as `$.gpus[0].memoryPool`."""
    text = "$"
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            text += f".{part}"
        else:
            text += f"[{json.dumps(part)}]"
    return text


@dataclass(frozen=True, order=True)
class Problem:
    """One mistake (or warning) in a scenario file."""

    file: str
    line: int
    column: int
    path: str
    message: str
    rule: str
    severity: Severity = "error"

    def render(self) -> str:
        """`file:line:col: severity: $.path: message (rule)`."""
        return f"{self.file}:{self.line}:{self.column}: {self.severity}: {self.path}: {self.message} ({self.rule})"

    def to_dict(self) -> dict[str, object]:
        """The record as plain JSON data."""
        return asdict(self)


class ScenarioError(InputError):
    """A scenario that cannot be used; carries every problem found (and `closing`, a line to report after
    them: `aisim run`'s verdict)."""

    def __init__(self, problems: Sequence[Problem], closing: str = "") -> None:
        self.problems = list(problems)
        self.closing = closing
        errors = [p for p in self.problems if p.severity == "error"]
        super().__init__("\n".join(p.render() for p in errors) or "invalid scenario")

    def report(self, command: str) -> str:
        """Every problem, one a line: each names its file and position already."""
        return render_text(self.problems) + self.closing


def render_text(problems: Iterable[Problem]) -> str:
    """One problem per line."""
    return "".join(p.render() + "\n" for p in problems)


def render_json(files: dict[str, Sequence[Problem]]) -> str:
    """Per file: whether it is valid and its problems."""
    report = [
        {
            "file": name,
            "valid": not any(p.severity == "error" for p in problems),
            "problems": [p.to_dict() for p in problems],
        }
        for name, problems in files.items()
    ]
    return json.dumps(report, indent=2) + "\n"

"""Load a scenario: YAML with positions, then JSON Schema, then pydantic, then cross-references.

Each stage adds problem records instead of stopping, so one run reports every mistake (a duplicate
key or a bad tag in the YAML does not stop the later stages, which see the first value, or null). A
pydantic error at a place the schema already reported is dropped (same mistake, said twice).
Names and references are checked on the raw data, whatever else is wrong with an entry; capacity
checks run on the GPU and model entries that are valid on their own. Identical records are reported
once. Warnings (fields that are accepted but not simulated yet) come only for an otherwise valid
document.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from . import crossref
from .base import Spec, is_planned
from .document import API_VERSION, Scenario
from .problems import PathPart, Problem, ScenarioError
from .repository import read_repository
from .source import Source, parse
from .validation import (
    common_problems,
    json_type_name,
    pydantic_problems,
    schema_problems,
)


@dataclass
class Checked:
    """The outcome of checking one document: a scenario when it is valid, and every problem."""

    file: str
    scenario: Scenario | None
    problems: list[Problem]
    base_dir: Path

    @property
    def valid(self) -> bool:
        return self.scenario is not None


def check_text(text: str, file: str = "<scenario>", base_dir: Path | None = None) -> Checked:
    """Check a scenario document given as text; relative paths resolve against `base_dir`."""
    base = base_dir if base_dir is not None else Path(file).parent
    source = parse(text, file)
    problems = list(source.problems)
    scenario = None
    if source.readable and (source.data is not None or not problems):
        later: list[Problem] = []
        scenario = _validate(source, base, later)
        problems += [p for p in later if (p.path, p.line, p.column) not in _replaced(source.problems)]
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        scenario = None
    problems = sorted(set(problems), key=lambda p: (p.line, p.column, p.path, p.message))
    return Checked(file, scenario, problems, base)


def _replaced(problems: list[Problem]) -> set[tuple[str, int, int]]:
    """Where YAML problems left a null in place of a value (an unsupported tag, a recursive alias): the
    later stages would only say that null is of the wrong type there."""
    return {(p.path, p.line, p.column) for p in problems if p.rule in ("yaml-tag", "yaml-alias", "yaml-number")}


def check_file(path: str | Path) -> Checked:
    """Check a scenario file."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        return Checked(str(path), None, [Problem(str(path), 1, 1, "$", f"cannot read the file: {reason}", "file")], file.parent)
    return check_text(text, str(path), file.parent)


def load_scenario(path: str | Path) -> Scenario:
    """The scenario in `path`; raises `ScenarioError` with every problem when it is not valid."""
    checked = check_file(path)
    if checked.scenario is None:
        raise ScenarioError(checked.problems)
    return checked.scenario


def _validate(source: Source, base_dir: Path, problems: list[Problem]) -> Scenario | None:
    data = source.data
    if not isinstance(data, dict):
        shown = "an empty document" if data is None else json_type_name(data)
        problems.append(source.problem([], f"a scenario is a mapping with apiVersion: {API_VERSION}, not {shown}", "document"))
        return None
    version = data.get("apiVersion")
    if version is not None and version != API_VERSION:
        problems.append(
            source.problem(
                ["apiVersion"],
                f"unknown apiVersion {version!r}: this aisim reads {API_VERSION!r} documents",
                "apiVersion",
            )
        )
        return None
    from_schema, covered = schema_problems(source)
    problems.extend(from_schema)
    data = _with_repository(data, base_dir, problems)
    if not data.get("models") and not any(p.path == "$.models" for p in from_schema):
        problems.append(source.problem(["models"], "a scenario needs at least one model, in `models` or in the "
                                                   "folder of `server.modelRepository`", "required"))
    scenario = None
    try:
        scenario = Scenario.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as error:
        problems.extend(pydantic_problems(source, error, covered))
        problems.extend(common_problems(source, data, covered))
    except (TypeError, ValueError, RecursionError) as error:  # defensive: never a traceback
        problems.append(source.problem([], f"cannot be read as a scenario: {error}", "document"))
    parts = crossref.Parts.of(scenario) if scenario else crossref.Parts.salvage(data, base_dir)
    problems.extend(crossref.check(parts, data, source, base_dir))
    if scenario is not None and not any(p.severity == "error" for p in problems):
        problems.extend(planned_warnings(scenario, source))
    return scenario


def _with_repository(data: dict[str, Any], base_dir: Path, problems: list[Problem]) -> dict[str, Any]:
    """The document with the models of its Triton model repository (`server.modelRepository`) added."""
    server = data.get("server")
    folder = server.get("modelRepository") if isinstance(server, dict) else None
    if not isinstance(folder, str):
        return data
    devices = []
    for gpu in data.get("gpus") or []:
        if isinstance(gpu, dict) and isinstance(gpu.get("id"), str):
            count = gpu.get("count", 1)
            devices += [gpu["id"]] if count == 1 else [f"{gpu['id']}-{i}" for i in range(count if isinstance(count, int) else 1)]
    models, found = read_repository(base_dir / folder, devices)
    problems.extend(found)
    return {**data, "models": [*(data.get("models") or []), *models]}


def planned_warnings(scenario: Scenario, source: Source) -> list[Problem]:
    """A warning for each field or variant the scenario uses whose behaviour is not built yet."""
    warnings: list[Problem] = []

    def visit(node: Any, path: list[PathPart]) -> None:
        if isinstance(node, BaseModel):
            issue = is_planned(node.model_config.get("json_schema_extra"))
            if issue:
                kind = getattr(node, "kind", None)
                warnings.append(_warning(source, path, f"kind {kind!r}" if kind else type(node).__name__, issue))
                return
            if isinstance(node, Spec):
                for key, what, planned_by in node.planned_values():
                    warnings.append(_warning(source, [*path, key], what, planned_by))
            for name in sorted(node.model_fields_set, key=list(type(node).model_fields).index):
                info = type(node).model_fields[name]
                key = info.alias or name
                issue = is_planned(info.json_schema_extra)
                if issue:
                    warnings.append(_warning(source, [*path, key], repr(key), issue))
                    continue
                visit(getattr(node, name), [*path, key])
        elif isinstance(node, list):
            for i, item in enumerate(node):
                visit(item, [*path, i])
        elif isinstance(node, dict):
            for key, value in node.items():
                visit(value, [*path, key])

    visit(scenario, [])
    return warnings


def _warning(source: Source, path: list[PathPart], what: str, issue: str) -> Problem:
    return source.problem(
        path,
        f"{what} is accepted but not simulated yet; planned in {issue}",
        "planned",
        at_key=True,
        severity="warning",
    )

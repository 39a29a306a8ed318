"""Names and references, checked on the raw document: unique ids, and references that name something.

Ids, names and references are plain strings even when a sibling field of their entry is wrong, so
these checks read the parsed YAML data rather than validated models: a duplicate GPU id is reported
even when that GPU's profile is misspelled, and a fault scope naming an unknown model even when the
fault's trigger is broken. A value of the wrong type is skipped here (the schema reports it).
"""

from __future__ import annotations

import csv
import difflib
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from .dcgm_fields import FIELDS
from .problems import PathPart, Problem
from .server import Listener
from .source import Source
from .workload import Trace

Report = Callable[[Sequence[PathPart], str, str], None]
Streams = set[str] | None
"""The stream names of a GPU entry; None when its `streams` is not a list (unknown)."""


def check(data: Any, source: Source, base_dir: Path) -> list[Problem]:
    """Every uniqueness and reference problem of the (raw) document."""
    problems: list[Problem] = []
    if not isinstance(data, dict):
        return problems

    def report(path: Sequence[PathPart], message: str, rule: str) -> None:
        problems.append(source.problem(path, message, rule))

    devices = _check_gpus(data, report)
    models = _check_models(data, devices, base_dir, report)
    classes = _check_priority_classes(data, devices, report)
    keys = _check_server(data, base_dir, report)
    _check_faults(data, set(devices), models, keys, report)
    _check_sources(data, models, classes, base_dir, report)
    _check_telemetry(data, report)
    _check_plan(data, models, report)
    return problems


def _entries(value: Any) -> list[tuple[int, dict[str, Any]]]:
    """(index, item) for the mappings of a list (other items are the schema's business)."""
    return [(i, item) for i, item in enumerate(value) if isinstance(item, dict)] if isinstance(value, list) else []


def _strings(value: Any) -> list[tuple[int, str]]:
    """(index, item) for the strings of a list."""
    return [(i, item) for i, item in enumerate(value) if isinstance(item, str)] if isinstance(value, list) else []


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def suggest(name: str, known: Iterable[str]) -> str:
    """`; did you mean 'x'?` for a close known name, or nothing."""
    hint = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean {hint[0]!r}?" if hint else ""


def _unique(names: Iterable[tuple[Sequence[PathPart], str]], what: str, report: Report) -> None:
    seen: set[str] = set()
    for path, name in names:
        if name in seen:
            report(path, f"duplicate {what} {name!r}", "unique")
        seen.add(name)


def _check_gpus(data: dict[str, Any], report: Report) -> dict[str, Streams]:
    """Unique device ids and stream names; every declared device id with its entry's streams."""
    devices: dict[str, Streams] = {}
    for i, gpu in _entries(data.get("gpus")):
        streams: Streams = {"default"} if "streams" not in gpu else None
        if isinstance(gpu.get("streams"), list):
            named: list[tuple[Sequence[PathPart], str]] = [
                (["gpus", i, "streams", j, "name"], s["name"]) for j, s in _entries(gpu["streams"]) if isinstance(s.get("name"), str)
            ]
            _unique(named, "stream", report)
            streams = {name for _, name in named}
        gpu_id = _string(gpu.get("id"))
        if gpu_id is None:
            continue
        count = gpu.get("count", 1)
        numbered = [f"{gpu_id}-{k}" for k in range(count)] if isinstance(count, int) and 1 < count <= 1024 else []
        for device in [gpu_id, *numbered]:
            if device in devices:
                report(["gpus", i, "id"], f"duplicate GPU id {device!r}", "unique")
            else:
                devices[device] = streams
    return devices


def _check_models(data: dict[str, Any], devices: dict[str, Streams], base_dir: Path, report: Report) -> set[str]:
    """Unique model names, placements on declared GPUs and streams, versions; every declared model name."""
    declared: list[tuple[Sequence[PathPart], str]] = []
    for i, model in _entries(data.get("models")):
        if isinstance(model.get("id"), str):
            declared.append((["models", i, "id"], model["id"]))
        declared += [(["models", i, "aliases", j], alias) for j, alias in _strings(model.get("aliases"))]
        _check_placement(i, model, devices, report)
        _check_versions(i, model, report)
        kserve = _mapping(model.get("kserve"))
        for j, group in _entries(kserve.get("instanceGroups")):
            for k, gpu in _strings(group.get("gpus")):
                if gpu not in devices:
                    report(["models", i, "kserve", "instanceGroups", j, "gpus", k], f"unknown GPU {gpu!r}{suggest(gpu, devices)}",
                           "reference")
        content_file = _string(_mapping(model.get("content")).get("file"))
        if content_file and not (base_dir / content_file).is_file():
            report(["models", i, "content", "file"], f"file {content_file!r} does not exist", "file")
    _unique(declared, "model name", report)
    return {name for _, name in declared}


def _check_placement(i: int, model: dict[str, Any], devices: dict[str, Streams], report: Report) -> None:
    placement = model.get("placement")
    if placement is None:
        if model.get("latency") is None:
            name = f"model {model['id']!r}" if isinstance(model.get("id"), str) else "a model"
            report(["models", i], f"{name} needs a placement (or a latency override for mock mode)", "placement")
        return
    placement = _mapping(placement)
    stream = placement.get("stream", "default")
    for j, gpu in _strings(placement.get("gpus")):
        if gpu not in devices:
            report(["models", i, "placement", "gpus", j], f"unknown GPU {gpu!r}{suggest(gpu, devices)}", "reference")
            continue
        streams = devices[gpu]
        if isinstance(stream, str) and streams is not None and stream not in streams:
            report(["models", i, "placement", "stream"], f"GPU {gpu!r} has no stream {stream!r}", "reference")


def _check_versions(i: int, model: dict[str, Any], report: Report) -> None:
    listed: list[tuple[Sequence[PathPart], str]] = [
        (["models", i, "versions", j, "version"], v["version"]) for j, v in _entries(model.get("versions"))
        if isinstance(v.get("version"), str)
    ]
    _unique(listed, "version", report)
    if "versions" in model and not isinstance(model["versions"], list):
        return
    versions = [v for _, v in listed] if "versions" in model else ["1"]
    lifecycle = _mapping(model.get("lifecycle"))
    refs: list[tuple[list[PathPart], Any]] = [(["models", i, "lifecycle", "initialVersion"], lifecycle.get("initialVersion"))]
    refs += [(["models", i, "lifecycle", "schedule", j, "version"], a.get("version")) for j, a in _entries(lifecycle.get("schedule"))]
    for path, version in refs:
        if isinstance(version, str) and version not in versions:
            report(path, f"unknown version {version!r} (versions: {', '.join(versions)})", "reference")


def _check_priority_classes(data: dict[str, Any], devices: dict[str, Streams], report: Report) -> set[str]:
    classes = [(i, c) for i, c in _entries(data.get("priorityClasses")) if isinstance(c.get("name"), str)]
    _unique(((["priorityClasses", i, "name"], c["name"]) for i, c in classes), "priority class", report)
    streams = {name for known in devices.values() for name in known or ()}
    unreadable = any(known is None for known in devices.values())  # such a GPU might have it: say nothing
    for i, cls in classes:
        stream = cls.get("stream")
        if not unreadable and isinstance(stream, str) and stream not in streams:
            report(["priorityClasses", i, "stream"], f"no GPU has a stream {stream!r}{suggest(stream, streams)}", "reference")
    return {c["name"] for _, c in classes}


def _check_faults(data: dict[str, Any], devices: set[str], models: set[str], keys: set[str], report: Report) -> None:
    faults = _entries(data.get("faults"))
    _unique(((["faults", i, "name"], f["name"]) for i, f in faults if isinstance(f.get("name"), str)), "fault name", report)
    known_fields = [name for name, spec in FIELDS.items() if spec.dcgm_type != "s"]
    for i, fault in faults:
        scope = _mapping(fault.get("scope"))
        for kind, key, known in (("model", "models", models), ("GPU", "gpus", devices), ("API key", "apiKeys", keys)):
            for j, name in _strings(scope.get(key)):
                if name not in known:
                    report(["faults", i, "scope", key, j], f"unknown {kind} {name!r}{suggest(name, known)}", "reference")
        dcgm_field = _string(fault.get("field"))
        if fault.get("kind") == "dcgm_field" and dcgm_field and dcgm_field not in known_fields:
            why = "is a string field" if dcgm_field in FIELDS else "is not a DCGM field aisim simulates"
            report(["faults", i, "field"], f"{dcgm_field!r} {why}{suggest(dcgm_field, known_fields)}", "reference")


def _check_sources(data: dict[str, Any], models: set[str], classes: set[str], base_dir: Path, report: Report) -> None:
    sources = _entries(_mapping(data.get("workload")).get("sources"))
    _unique(((["workload", "sources", i, "name"], s["name"]) for i, s in sources if isinstance(s.get("name"), str)),
            "source name", report)
    for i, source in sources:
        path: list[PathPart] = ["workload", "sources", i]
        refs = [([*path, "model"], source.get("model"))]
        refs += [([*path, "mix", j, "model"], m.get("model")) for j, m in _entries(source.get("mix"))]
        for ref_path, name in refs:
            if isinstance(name, str) and name not in models:
                report(ref_path, f"unknown model {name!r}{suggest(name, models)}", "reference")
        chosen = source.get("priorityClass")
        if isinstance(chosen, str) and chosen not in classes:
            report([*path, "priorityClass"], f"unknown priority class {chosen!r}{suggest(chosen, classes)}", "reference")
        arrival = _mapping(source.get("arrival"))
        if arrival.get("kind") == "trace":
            try:
                trace = TypeAdapter(Trace).validate_python(arrival)
            except ValidationError:
                continue  # the schema reports what is wrong with it
            problem = trace_problem(trace, base_dir)
            if problem:
                report([*path, "arrival", "file"], problem, "trace")


def trace_problem(trace: Trace, base_dir: Path) -> str | None:
    """Why a trace file cannot be used (missing, unreadable, or without the needed columns), or None."""
    file = base_dir / trace.file
    if not file.is_file():
        return f"trace file {trace.file!r} does not exist (looked in {file.parent})"
    fmt = trace.resolved_format()
    needed = trace.columns.names(fmt)
    try:
        with file.open(encoding="utf-8", newline="") as handle:
            if fmt == "csv":
                header = next(csv.reader(handle), [])
            else:
                first = json.loads(handle.readline() or "{}")
                header = list(first) if isinstance(first, dict) else []
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, csv.Error) as error:
        return f"trace file {trace.file!r} cannot be read: {error}"
    missing = [c for c in needed if c not in header]
    if missing:
        return f"trace file {trace.file!r} lacks column(s) {', '.join(map(repr, missing))} (it has {', '.join(map(repr, header))})"
    return None


def _check_server(data: dict[str, Any], base_dir: Path, report: Report) -> set[str]:
    """Unique API key names and ports, the model repository folder, metrics paths; the API key names."""
    server = _mapping(data.get("server"))
    keys = [(i, k["name"]) for i, k in _entries(server.get("apiKeys")) if isinstance(k.get("name"), str)]
    _unique(((["server", "apiKeys", i, "name"], name) for i, name in keys), "API key name", report)
    listeners = _entries(server.get("listeners"))
    ports = [(i, port) for i, listener in listeners if isinstance(port := listener.get("port"), int) and port]
    _unique(((["server", "listeners", i, "port"], str(port)) for i, port in ports), "port", report)
    repository = _string(server.get("modelRepository"))
    if repository is not None and not (base_dir / repository).is_dir():
        report(["server", "modelRepository"], f"folder {repository!r} does not exist", "file")
    for i, raw in listeners:
        try:
            listener = TypeAdapter(Listener).validate_python(raw)
        except ValidationError:
            continue
        others = [p for p in listener.personalities if p.endswith("-metrics") and p != "dcgm-metrics"]
        if "dcgm-metrics" in listener.personalities and others:
            report(["server", "listeners", i, "personalities"],
                   f"dcgm-metrics and {others[0]} would both serve {listener.metrics_path}; "
                   "give dcgm-metrics a listener of its own (dcgm-exporter listens on :9400)", "reference")
    return {name for _, name in keys}


def _check_telemetry(data: dict[str, Any], report: Report) -> None:
    chosen = _mapping(_mapping(data.get("telemetry")).get("dcgm")).get("fields")
    for j, name in _strings(chosen):
        if name not in FIELDS:
            report(["telemetry", "dcgm", "fields", j], f"{name!r} is not a DCGM field aisim exports{suggest(name, FIELDS)}",
                   "reference")


def _check_plan(data: dict[str, Any], models: set[str], report: Report) -> None:
    """`plan.model` names a model of the scenario."""
    name = _string(_mapping(data.get("plan")).get("model"))
    if name is not None and name not in models:
        report(["plan", "model"], f"unknown model {name!r}{suggest(name, models)}", "reference")

"""Checks that need more than one part of the document: references, capacities, files.

They run on whatever parts of the document are valid on their own (`Parts`), so a scenario with
a broken GPU entry still gets its fault scopes and trace files checked in the same run.
"""

from __future__ import annotations

import csv
import difflib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from ..telemetry.fields import FIELDS
from .document import Scenario
from .faults import DcgmField, Fault
from .hardware import Gpu, expand_devices
from .models import Model
from .presets import GB, GIB
from .problems import PathPart, Problem
from .server import Server, Telemetry
from .source import Source
from .workload import PriorityClass, Trace
from .workload import Source as RequestSource

Report = Callable[[Sequence[PathPart], str, str], None]


@dataclass
class Parts:
    """The valid parts of a document; an invalid list item is None, so indices stay those of the file."""

    gpus: list[Gpu | None] = field(default_factory=list)
    models: list[Model | None] = field(default_factory=list)
    faults: list[Any] = field(default_factory=list)
    priority_classes: list[PriorityClass | None] = field(default_factory=list)
    sources: list[RequestSource | None] = field(default_factory=list)
    server: Server | None = None
    declared_gpus: set[str] = field(default_factory=set)
    """Every GPU id the document declares, valid entry or not (so a broken entry is not "unknown")."""
    declared_models: set[str] = field(default_factory=set)
    """Every model id and alias the document declares, valid entry or not."""
    telemetry: Telemetry | None = None

    @classmethod
    def of(cls, scenario: Scenario) -> Parts:
        """All parts of a valid scenario."""
        return cls(
            list(scenario.gpus),
            list(scenario.models),
            list(scenario.faults),
            list(scenario.priority_classes),
            list(scenario.workload.sources) if scenario.workload else [],
            scenario.server,
            set(scenario.gpu_devices()),
            {name for model in scenario.models for name in model.names},
            scenario.telemetry,
        )

    @classmethod
    def salvage(cls, data: Any) -> Parts:
        """The parts of an invalid document that validate on their own."""
        if not isinstance(data, dict):
            return cls()
        workload = data.get("workload")
        return cls(
            _each(data.get("gpus"), Gpu),
            _each(data.get("models"), Model),
            _each(data.get("faults"), Fault),
            _each(data.get("priorityClasses"), PriorityClass),
            _each(workload.get("sources") if isinstance(workload, dict) else None, RequestSource),
            _one(data.get("server", {}), Server),
            _declared(data.get("gpus"), _gpu_names),
            _declared(data.get("models"), _model_names),
            _one(data.get("telemetry", {}), Telemetry),
        )


def _declared(items: Any, names: Callable[[dict[str, Any]], list[Any]]) -> set[str]:
    """Names declared by raw list items, whatever else is wrong with them."""
    entries = [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []
    return {name for entry in entries for name in names(entry) if isinstance(name, str)}


def _gpu_names(entry: dict[str, Any]) -> list[Any]:
    count = entry.get("count", 1)
    gpu_id = entry.get("id")
    more = [f"{gpu_id}-{i}" for i in range(count)] if isinstance(count, int) and 1 < count <= 1024 else []
    return [gpu_id, *more]


def _model_names(entry: dict[str, Any]) -> list[Any]:
    aliases = entry.get("aliases")
    return [entry.get("id"), *(aliases if isinstance(aliases, list) else [])]


def _one(value: Any, kind: Any) -> Any:
    try:
        return TypeAdapter(kind).validate_python(value)
    except (ValidationError, TypeError, ValueError):
        return None


def _each(values: Any, kind: Any) -> list[Any]:
    return [_one(v, kind) for v in values] if isinstance(values, list) else []


def _present(items: Iterable[Any]) -> Iterable[tuple[int, Any]]:
    return ((i, item) for i, item in enumerate(items) if item is not None)


def _suggest(name: str, known: Iterable[str]) -> str:
    hint = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean {hint[0]!r}?" if hint else ""


def check(parts: Parts, source: Source, base_dir: Path) -> list[Problem]:
    """Every cross-reference problem of the document."""
    problems: list[Problem] = []

    def report(path: Sequence[PathPart], message: str, rule: str) -> None:
        problems.append(source.problem(path, message, rule))

    devices = _check_gpus(parts, report)
    _check_models(parts, devices, base_dir, report)
    _check_priority_classes(parts, devices, report)
    _check_faults(parts, parts.declared_gpus, parts.declared_models, report)
    _check_sources(parts, parts.declared_models, base_dir, report)
    _check_server(parts, base_dir, report)
    _check_dcgm_fields(parts, report)
    return problems


def _unique(names: Iterable[tuple[Sequence[PathPart], str]], what: str, report: Report) -> None:
    seen: set[str] = set()
    for path, name in names:
        if name in seen:
            report(path, f"duplicate {what} {name!r}", "unique")
        seen.add(name)


def _check_gpus(parts: Parts, report: Report) -> dict[str, Gpu]:
    devices: dict[str, Gpu] = {}
    for i, gpu in _present(parts.gpus):
        for device in {gpu.id, *gpu.device_ids()}:
            if device in devices:
                report(["gpus", i, "id"], f"duplicate GPU id {device!r}", "unique")
            devices[device] = gpu
        _unique(((["gpus", i, "streams", j, "name"], s.name) for j, s in enumerate(gpu.streams)), "stream", report)
        greatest = gpu.resolved().greatest_stream_priority
        for j, stream in enumerate(gpu.streams):
            if stream.priority < greatest:
                report(
                    ["gpus", i, "streams", j, "priority"],
                    f"priority {stream.priority} is out of range for {gpu.profile or gpu.id}: "
                    f"CUDA stream priorities run from 0 (lowest) to {greatest} (highest)",
                    "stream-priority",
                )
    return devices


def _check_models(parts: Parts, devices: dict[str, Gpu], base_dir: Path, report: Report) -> None:
    names: set[str] = set()
    shares: dict[str, list[tuple[str, float, int]]] = {}
    for i, model in _present(parts.models):
        for device in _placed_devices(model, devices):
            shares.setdefault(device, []).append((model.id, model.engine.gpu_memory_utilization, model.versions_at_once))
            total = sum(share * count for _, share, count in shares[device])
            if total > 1 + 1e-9:
                asked = ", ".join(f"{name} {share:g}" + (f" x {count} versions loaded at once" if count > 1 else "")
                                  for name, share, count in shares[device])
                report(
                    ["models", i, "engine", "gpuMemoryUtilization"],
                    f"GPU {device!r} is oversubscribed: gpuMemoryUtilization of the models placed on it adds up "
                    f"to {total:.2f} ({asked})",
                    "capacity",
                )
        for j, name in enumerate(model.names):
            if name in names:
                report(["models", i, *(("id",) if j == 0 else ("aliases", j - 1))], f"duplicate model name {name!r}", "unique")
            names.add(name)
        _check_placement(i, model, devices, parts.declared_gpus, report)
        arch = model.resolved()
        limit = model.engine.max_model_len
        if limit is not None and arch.max_position and limit > arch.max_position:
            report(
                ["models", i, "engine", "maxModelLen"],
                f"maxModelLen {limit} is greater than the model's maximum position {arch.max_position}",
                "max-model-len",
            )
        versions = [v.version for v in model.versions]
        _unique(((["models", i, "versions", j, "version"], v) for j, v in enumerate(versions)), "version", report)
        if model.lifecycle is not None:
            refs: list[tuple[list[PathPart], str | None]] = [
                (["models", i, "lifecycle", "initialVersion"], model.lifecycle.initial_version)
            ]
            refs += [(["models", i, "lifecycle", "schedule", j, "version"], a.version) for j, a in enumerate(model.lifecycle.schedule)]
            for path, version in refs:
                if version is not None and version not in versions:
                    report(path, f"unknown version {version!r} (versions: {', '.join(versions)})", "reference")
        if model.kserve is not None:
            for j, group in enumerate(model.kserve.instance_groups):
                for k, gpu in enumerate(group.gpus):
                    if gpu not in parts.declared_gpus:
                        report(["models", i, "kserve", "instanceGroups", j, "gpus", k], f"unknown GPU {gpu!r}{_suggest(gpu, parts.declared_gpus)}", "reference")
        content_file = getattr(model.content, "file", None)
        if content_file is not None and not (base_dir / content_file).is_file():
            report(["models", i, "content", "file"], f"file {content_file!r} does not exist", "file")


def _placed_devices(model: Model, devices: dict[str, Gpu]) -> list[str]:
    """The device ids a simulated model occupies (a multi-GPU entry's id stands for all its devices)."""
    if model.placement is None or model.mock or model.resolved_runtime() != "vllm":
        return []
    return expand_devices(model.placement.gpus, devices)


def _check_placement(i: int, model: Model, devices: dict[str, Gpu], declared: set[str], report: Report) -> None:
    placement = model.placement
    if placement is None:
        if not model.mock:
            report(["models", i], f"model {model.id!r} needs a placement (or a latency override for mock mode)", "placement")
        return
    placed: list[Gpu] = []
    count = 0
    for j, gpu_id in enumerate(placement.gpus):
        gpu = devices.get(gpu_id)
        if gpu is None:
            if gpu_id not in declared:
                report(["models", i, "placement", "gpus", j], f"unknown GPU {gpu_id!r}{_suggest(gpu_id, declared)}", "reference")
            continue
        placed.append(gpu)
        count += gpu.count if gpu_id == gpu.id else 1
        if placement.stream not in {s.name for s in gpu.streams}:
            report(["models", i, "placement", "stream"], f"GPU {gpu_id!r} has no stream {placement.stream!r}", "reference")
    if placed and placement.tensor_parallel > count:
        report(
            ["models", i, "placement", "tensorParallel"],
            f"tensorParallel {placement.tensor_parallel} needs {placement.tensor_parallel} GPUs, the placement has {count}",
            "placement",
        )
    if placed and not model.mock:
        weights = model.weight_bytes() / placement.tensor_parallel
        smallest = min(placed, key=lambda g: g.resolved().capacity)
        capacity = smallest.resolved().capacity
        if weights > capacity:
            where: list[PathPart] = ["models", i, "family"] if model.family else ["models", i, "architecture"]
            report(
                where,
                f"weights alone ({weights / GB:.1f} GB per GPU at tensorParallel {placement.tensor_parallel}) "
                f"exceed the memory of GPU {smallest.id!r} ({capacity / GIB:.2f} GiB)",
                "capacity",
            )


def _check_priority_classes(parts: Parts, devices: dict[str, Gpu], report: Report) -> None:
    classes = list(_present(parts.priority_classes))
    _unique(((["priorityClasses", i, "name"], c.name) for i, c in classes), "priority class", report)
    streams = {s.name for gpu in devices.values() for s in gpu.streams}
    for i, cls in classes:
        if cls.stream is not None and cls.stream not in streams:
            report(["priorityClasses", i, "stream"], f"no GPU has a stream {cls.stream!r}{_suggest(cls.stream, streams)}", "reference")


def _check_faults(parts: Parts, devices: set[str], models: set[str], report: Report) -> None:
    faults = list(_present(parts.faults))
    _unique(((["faults", i, "name"], f.name) for i, f in faults if f.name), "fault name", report)
    keys = {k.name for k in parts.server.api_keys} if parts.server else set()
    for i, fault in faults:
        scope = fault.scope
        for kind, known, values in (("model", models, scope.models), ("GPU", devices, scope.gpus), ("API key", keys, scope.api_keys)):
            field_name = {"model": "models", "GPU": "gpus", "API key": "apiKeys"}[kind]
            for j, name in enumerate(values):
                if name not in known:
                    report(["faults", i, "scope", field_name, j], f"unknown {kind} {name!r}{_suggest(name, known)}", "reference")


def _check_dcgm_fields(parts: Parts, report: Report) -> None:
    """DCGM field names must be fields aisim knows (injected ones numeric); dcgm-metrics has its metrics path alone."""
    known = [name for name, spec in FIELDS.items() if spec.dcgm_type != "s"]
    for i, fault in _present(parts.faults):
        if isinstance(fault, DcgmField) and fault.field not in known:
            why = "is a string field" if fault.field in FIELDS else "is not a DCGM field aisim simulates"
            report(["faults", i, "field"], f"{fault.field!r} {why}{_suggest(fault.field, known)}", "reference")
    for i, listener in enumerate(parts.server.listeners if parts.server else []):
        others = [p for p in listener.personalities if p.endswith("-metrics") and p != "dcgm-metrics"]
        if "dcgm-metrics" in listener.personalities and others:
            report(["server", "listeners", i, "personalities"],
                   f"dcgm-metrics and {others[0]} would both serve {listener.metrics_path}; "
                   "give dcgm-metrics a listener of its own (dcgm-exporter listens on :9400)", "reference")
    chosen = parts.telemetry.dcgm.fields if parts.telemetry else None
    for j, name in enumerate(chosen or []):
        if name not in FIELDS:
            report(["telemetry", "dcgm", "fields", j], f"{name!r} is not a DCGM field aisim exports{_suggest(name, FIELDS)}",
                   "reference")


def _check_sources(parts: Parts, models: set[str], base_dir: Path, report: Report) -> None:
    sources = list(_present(parts.sources))
    _unique(((["workload", "sources", i, "name"], s.name) for i, s in sources), "source name", report)
    classes = {c.name for _, c in _present(parts.priority_classes)}
    for i, source in sources:
        path: list[PathPart] = ["workload", "sources", i]
        refs = [([*path, "model"], source.model)] if source.model else []
        refs += [([*path, "mix", j, "model"], m.model) for j, m in enumerate(source.mix or [])]
        for ref_path, name in refs:
            if name not in models:
                report(ref_path, f"unknown model {name!r}{_suggest(name, models)}", "reference")
        if source.priority_class is not None and source.priority_class not in classes:
            report([*path, "priorityClass"], f"unknown priority class {source.priority_class!r}{_suggest(source.priority_class, classes)}", "reference")
        if isinstance(source.arrival, Trace):
            problem = trace_problem(source.arrival, base_dir)
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


def _check_server(parts: Parts, base_dir: Path, report: Report) -> None:
    server = parts.server
    if server is None:
        return
    _unique(((["server", "apiKeys", i, "name"], k.name) for i, k in enumerate(server.api_keys)), "API key name", report)
    _unique(((["server", "listeners", i, "port"], str(l.port)) for i, l in enumerate(server.listeners) if l.port), "port", report)
    if server.model_repository is not None and not (base_dir / server.model_repository).is_dir():
        report(["server", "modelRepository"], f"folder {server.model_repository!r} does not exist", "file")


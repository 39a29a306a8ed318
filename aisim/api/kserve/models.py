"""What a KServe v2 / Triton server does, whatever the wire: shared by the HTTP (`http`) and gRPC
(`grpc`) personalities, as Triton's two frontends share its core.

Model resolution (`KServeModels`: names, ready versions, declared tensors), metadata, configuration,
statistics, the repository index and load / unload, the log and trace settings, and the inference path
(`start_inference` submits a checked request to the model's Triton engine; `ended` turns the engine's end
into the outputs or Triton's error, and writes the request log). Each raises `KServeError` with Triton's
HTTP status and text; the gRPC frontend maps them to gRPC codes.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ...engine import QUEUE_FULL, Arrival, Call, ServedModel, State, TritonEngine
from ...scenario.models import KServe, Model, Tensor, Version
from ...scenario.repository import kserve_section
from ..link import RequestLog
from ..state import ServerState
from .config import model_config, model_config_types, platform_of
from .shared_memory import SharedMemory
from .state import KServeState
from .tensors import (
    InferRequest,
    KServeError,
    Signature,
    check_inputs,
    generate_outputs,
    shm_parameters,
)

TRITON_VERSION = "2.61.0"
EXTENSIONS = ["classification", "sequence", "model_repository", "model_repository(unload_dependents)",
              "schedule_policy", "model_configuration", "system_shared_memory", "cuda_shared_memory",
              "binary_tensor_data", "parameters", "statistics", "trace", "logging"]
TRITON_STATES = {State.READY: "READY", State.DEGRADED: "READY", State.LOADING: "LOADING",
                 State.UNLOADING: "UNLOADING", State.UNAVAILABLE: "UNAVAILABLE"}
"""aisim's lifecycle states as Triton names them (DEGRADED still serves: READY)."""

Outputs = list[tuple[Tensor, list[int], bytes]]


def model_version(text: str | None) -> str | None:
    """A version as Triton reads it (`GetModelVersionFromString`, a `std::stol`): leading blanks and a sign,
    then the longest run of ASCII digits (`01` and `1x` are version 1); no digits, or a number beyond 64 bits,
    is a 400 (`stol` is what libstdc++'s invalid-argument and out-of-range exceptions both say); "" is none.
    Only gRPC can send a version that is not all digits: the HTTP routes match digits only."""
    if not text:
        return None
    digits = STOL_PREFIX.match(text)
    number = int(digits.group(1)) if digits else None
    if number is None or not -(2**63) <= number < 2**63:
        raise KServeError(400, f"failed to get model version from specified version string '{text}' (details: stol), "
                               "version should be an integral value > 0")
    return str(number)


STOL_PREFIX = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")
"""What `std::stol` reads of a string: C `isspace` blanks, an optional sign and decimal digits."""


def ready_versions(served: ServedModel) -> list[str]:
    """Versions that answer requests, in the scenario's order."""
    return [v for v, life in served.lifecycle.lives.items()
            if TRITON_STATES.get(life.state) == "READY" and v in served.routers]


def version_of(model: Model, name: str) -> Version:
    return next(v for v in model.versions if v.version == name)


def unloaded(served: ServedModel) -> bool:
    lives = served.lifecycle.lives.values()
    return all(life.state is State.UNAVAILABLE and life.reason == "unloaded" or life.state is State.INIT for life in lives)


@dataclass
class KServeModels:
    """The scenario's models as a Triton frontend resolves them: names indexed once (the first model with a
    name wins, as `scenario.model_named`), each version's declared tensors indexed on its first request (the
    scenario's models do not change while the server runs)."""

    state: ServerState
    names: dict[str, Model] = field(init=False)
    signatures: dict[tuple[int, str], tuple[Model, Signature]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.names = {n: m for m in reversed(self.state.scenario.models) for n in m.names}

    def server_ready(self) -> bool:
        """Strict readiness: every model that should be loaded is READY (explicitly unloaded ones aside)."""
        return all(ready_versions(s) or unloaded(s) for s in self.state.sim.served_models)

    def served(self, name: str) -> ServedModel:
        model = self.names.get(name)
        if model is None:  # Triton's HTTP frontend answers 400, its gRPC one NOT_FOUND
            raise KServeError(400, f"Request for unknown model: '{name}' is not found", grpc="NOT_FOUND")
        return self.state.served(model)

    def ready_version(self, served: ServedModel, version: str | None) -> str:
        """The version a request goes to: the named one if READY, else the serving one (`http_server.cc`)."""
        name = served.model.id
        lives = served.lifecycle.lives
        active = served.lifecycle.active
        if version is None and active in lives and TRITON_STATES.get(lives[active].state) == "READY" \
                and active in served.routers:
            return active  # what the general case below answers when the serving version is ready
        if version is not None:
            if version not in lives:
                raise KServeError(404, f"Request for unknown model: '{name}' version {version} is not found")
            if TRITON_STATES.get(lives[version].state) != "READY" or version not in served.routers:
                raise KServeError(503, f"Request for unknown model: '{name}' version {version} is not at ready state")
            return version
        ready = ready_versions(served)
        if not ready:
            raise KServeError(404, f"Request for unknown model: '{name}' has no available versions")
        return served.lifecycle.active if served.lifecycle.active in ready else ready[-1]

    def signature(self, model: Model, version: str) -> Signature:
        known = self.signatures.get((id(model), version))
        if known is not None:
            return known[1]
        declared = version_of(model, version)
        signature = Signature.of(declared.inputs, declared.outputs, (model.kserve or KServe()).max_batch_size)
        self.signatures[(id(model), version)] = (model, signature)  # holding the model keeps its id its own
        return signature

    def model_ready(self, name: str, version: str | None) -> bool:
        """Model readiness: True, False for a known version that is not READY; an unknown one raises."""
        served = self.served(name)
        lives = served.lifecycle.lives
        if version is None:
            if not ready_versions(served):
                raise KServeError(404, f"Request for unknown model: '{name}' has no available versions")
        elif version not in lives:
            raise KServeError(404, f"Request for unknown model: '{name}' version {version} is not found")
        elif TRITON_STATES.get(lives[version].state) != "READY":
            return False
        return True

    def tensors(self, served: ServedModel, version: str | None) -> tuple[list[Tensor], list[Tensor]]:
        chosen = version_of(served.model, version or served.lifecycle.active)
        return chosen.inputs, chosen.outputs

    def metadata(self, name: str, version: str | None) -> dict[str, Any]:
        served = self.served(name)
        inputs, outputs = self.tensors(served, self.ready_version(served, version))
        return {"name": served.model.id, "versions": [version] if version is not None else ready_versions(served),
                "platform": platform_of(served.model),
                "inputs": [{"name": t.name, "datatype": t.datatype, "shape": t.shape} for t in inputs],
                "outputs": [{"name": t.name, "datatype": t.datatype, "shape": t.shape} for t in outputs]}

    def config(self, name: str, version: str | None) -> dict[str, Any]:
        served = self.served(name)
        self.ready_version(served, version)
        return model_config(served.model, self.tensors(served, version), self._device_indices(served))

    def _device_indices(self, served: ServedModel) -> list[list[int]]:
        devices = list(self.state.sim.gpus)
        kserve = served.model.kserve or KServe()
        placed = [d for g in served.model.placement.gpus for d in self.state.sim.devices[g].device_ids()] \
            if served.model.placement else []
        return [[devices.index(d) for d in (group.gpus or placed) if d in devices] for group in kserve.instance_groups]

    def stats(self, name: str | None, version: str | None) -> list[dict[str, Any]]:
        """The statistics extension's `model_stats` (server `docs/protocol/extension_statistics.md`): one model's
        (`name`), else every READY version's."""
        if name is None:
            return [model_stats(self.state, s, v) for s in self.state.sim.served_models for v in ready_versions(s)]
        served = self.served(name)
        if version is not None:
            self.ready_version(served, version)  # a named version resolves as for metadata
        elif not ready_versions(served):
            raise KServeError(400, f"requested model '{name}' is not available")
        listed = [version] if version is not None else ready_versions(served)
        return [model_stats(self.state, served, v) for v in listed]


def _engine(served: ServedModel, version: str) -> TritonEngine | None:
    engines = served.versions.get(version, [])
    return engines[0] if engines and isinstance(engines[0], TritonEngine) else None


def model_stats(state: ServerState, served: ServedModel, version: str) -> dict[str, Any]:
    """One entry of the statistics extension, from the version's engine."""
    engine = _engine(served, version)
    entry: dict[str, Any] = {"name": served.model.id, "version": version, "last_inference": 0,
                             "inference_count": 0, "execution_count": 0}
    names = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")
    durations = {n: {"count": 0, "ns": 0} for n in names}
    batches: list[dict[str, Any]] = []
    if engine is not None:
        stats = engine.triton
        entry["last_inference"] = state.epoch_ms(stats.last_inference_ns) if stats.last_inference_ns >= 0 else 0
        entry["inference_count"], entry["execution_count"] = stats.inference_count, stats.execution_count
        for n in names[:6]:
            part = getattr(stats, n)
            durations[n] = {"count": part.count, "ns": part.ns}
        for size, parts in sorted(stats.batches.items()):
            batches.append({"batch_size": size, **{key: {"count": p.count, "ns": p.ns} for key, p in
                                                   zip(("compute_input", "compute_infer", "compute_output"), parts)}})
    entry["inference_stats"] = durations
    entry["response_stats"] = {}
    entry["batch_stats"] = batches
    entry["memory_usage"] = []
    return entry


def repository_index(state: ServerState, ready_only: Any) -> list[dict[str, str]]:
    """`POST /v2/repository/index`: one entry per model version; a never-loaded model is its name alone."""
    if not isinstance(ready_only, bool):
        raise KServeError(400, "Invalid value for 'ready': expected a boolean")
    entries: list[dict[str, str]] = []
    for served in state.sim.served_models:
        lives = served.lifecycle.lives
        if all(life.state is State.INIT for life in lives.values()):
            if not ready_only:
                entries.append({"name": served.model.id})
            continue
        for version, life in lives.items():
            if life.state is State.INIT:
                continue
            triton_state = TRITON_STATES[life.state]
            if ready_only and triton_state != "READY":
                continue
            entry = {"name": served.model.id, "version": version, "state": triton_state}
            if triton_state == "UNAVAILABLE" and life.reason:
                entry["reason"] = life.reason
            entries.append(entry)
    return entries


async def repository_act(state: ServerState, repository: str | None, name: str, action: str,
                         parameters: dict[str, Any], elapsed_s: Callable[[], float]) -> None:
    """Load or unload a model (`action`), returning when its lifecycle has done it; `parameters` are the load's
    (a `config` override, `file:` contents); `elapsed_s` the request's time so far, for the request log."""
    if repository:
        raise KServeError(501, "'repository_name' specification is not supported")
    model = state.scenario.model_named(name)
    if model is None:
        if action == "unload":
            return  # Triton does not complain (`extension_model_repository.md` leaves it open)
        raise KServeError(500, f"failed to load '{name}', failed to poll from model repository")
    served = state.served(model)
    if action != "load":
        await _unload(state, served)
        return
    override = load_override(state, served, parameters)
    if override is not None and override != (served.model.kserve or KServe()):
        # a new config: the version is built again (unloaded, then loaded with it; Triton keeps the old
        # instances serving until the new ones are ready, aisim has the model unavailable meanwhile)
        def rebuild(done: Callable[[str], None]) -> None:
            served.reconfigure(override)
            served.request_load(done)

        await _unload(state, served)
        problem = await state.engine.act(rebuild)
    else:
        problem = await state.engine.act(served.request_load)
    if state.engine.log is not None:
        state.engine.log.load(model.id, served.lifecycle.active, elapsed_s(), problem)
    if problem:
        version = served.lifecycle.active
        raise KServeError(400, f"load failed for model '{name}': version {version} is at UNAVAILABLE state: "
                               f"{problem};\n")


async def _unload(state: ServerState, served: ServedModel) -> None:
    """Unload every loaded version, returning once they have drained."""
    unloaded_: Callable[[Callable[[bool], None]], None] = lambda done: served.request_unload(lambda: done(True))
    await state.engine.act(unloaded_)


def load_override(state: ServerState, served: ServedModel, parameters: dict[str, Any]) -> KServe | None:
    """A load's `config` override (server `docs/protocol/extension_model_repository.md`: a `ModelConfig` as a JSON
    string) as the model's new batching and instances, or None without one; `file:` overrides only need to decode (aisim
    serves no model files).

    Triton uses the override in place of `config.pbtxt`; aisim takes from it what it simulates, the fields
    the override names (`max_batch_size`, `dynamic_batching`, `instance_group`), and keeps the rest of the
    model as the scenario declares it. Triton's sources give no error texts here: these are aisim's."""
    files = [k for k in parameters if k.startswith("file:")]
    if files and "config" not in parameters:
        raise KServeError(400, "'file:' overrides need a 'config' parameter")
    for key in files:
        value = parameters[key]
        if isinstance(value, bytes):
            continue  # gRPC's bytes_param: the file's contents themselves
        try:
            base64.b64decode(value, validate=True)
        except (ValueError, TypeError):
            raise KServeError(400, f"failed to decode '{key}' as base64") from None
    text = parameters.get("config")
    if text is None:
        return None
    name = served.model.id
    from google.protobuf import json_format

    try:
        document = json.loads(text) if isinstance(text, str) else None
        if not isinstance(document, dict):
            raise TypeError("not a JSON object in a string")
        config = json_format.ParseDict(document, model_config_types().ModelConfig())
    except (ValueError, TypeError, json_format.ParseError) as error:
        raise KServeError(400, f"failed to load '{name}', the config override is not a ModelConfig: {error}") from None
    given = kserve_section(config, list(state.sim.gpus))
    current = (served.model.kserve or KServe()).model_dump(by_alias=True, exclude_none=True)
    named = {"max_batch_size": "maxBatchSize", "dynamic_batching": "dynamicBatching",
             "instance_group": "instanceGroups"}
    merged = {**current, **{key: given[key] for field_, key in named.items() if field_ in document and key in given}}
    if "dynamic_batching" in document and "dynamicBatching" not in given:
        merged.pop("dynamicBatching", None)
    try:
        return KServe.model_validate(merged)
    except ValidationError as error:
        raise KServeError(400, f"failed to load '{name}', the config override cannot be served: "
                               f"{error.errors(include_url=False)[0]['msg']}") from None


def update_logging(kserve: KServeState, body: dict[str, Any]) -> dict[str, Any]:
    """The log settings updated key by key, checked as Triton's `HandleLogging` checks them (a null leaves a key
    as it is; a value of the wrong JSON type is TritonJson's 500); returns them all."""
    body = {k: v for k, v in body.items() if v is not None}
    if "log_file" in body:
        raise KServeError(501, "log file location can not be updated through network protocol")
    for key in ("log_info", "log_warning", "log_error"):
        if key in body and not isinstance(body[key], bool):
            raise KServeError(500, "attempt to access JSON non-boolean as boolean")
    level = body.get("log_verbose_level", 0)
    if not isinstance(level, int) or isinstance(level, bool) or not 0 <= level < 2**64:
        raise KServeError(500, "attempt to access JSON non-unsigned-integer as unsigned-integer")
    log_format = body.get("log_format", "default")
    if not isinstance(log_format, str):
        raise KServeError(500, "attempt to access JSON non-string as string")
    if log_format not in ("default", "ISO8601"):
        raise KServeError(503, f"invalid argument for --log_format, got: {log_format}")
    for key, value in body.items():
        if key in kserve.logging:
            kserve.logging[key] = value
    return kserve.logging


TRACE_NUMBERS = {"trace_rate": (0, 2**32 - 1), "trace_count": (-1, 2**31 - 1), "log_frequency": (0, 2**32 - 1)}
"""Trace settings sent as numbers in strings, and the range Triton states when one is out of range."""


def _trace_setting(key: str, value: Any) -> Any:
    """One trace setting of an update as Triton's `HandleTrace` reads it; raises its error."""
    if key == "trace_level":
        if not isinstance(value, list):
            raise KServeError(500, "attempt to access JSON non-array as array")
        if not all(isinstance(level, str) for level in value):
            raise KServeError(500, "attempt to access JSON non-string as string")
        if "OFF" in value:
            if len(value) > 1:
                raise KServeError(400, "Expect only one trace level 'OFF' is specified")
            return ["OFF"]
        levels = [level for level in ("TIMESTAMPS", "TENSORS") if level in value]
        return levels or None  # Triton ignores names it does not know
    if not isinstance(value, str):
        raise KServeError(500, "attempt to access JSON non-string as string")
    low, high = TRACE_NUMBERS[key]
    number = re.match(r"\s*[+-]?\d+", value)  # what `std::stoi` reads
    if number is None:
        raise KServeError(400, f"Unable to parse '{key}', got: {value}")
    parsed = int(number.group())
    if not -2**31 <= parsed < 2**31:
        raise KServeError(400, f"Unable to parse '{key}', value is out of range [ {low}, {high} ], got: {value}")
    if key == "trace_count" and parsed < low:
        raise KServeError(400, f"Unable to parse 'trace_count'. Expecting value >= {low}, got:{value}")
    return str(parsed if key == "trace_count" else parsed % 2**32)


def trace_settings(models: KServeModels, name: str | None) -> dict[str, Any]:
    """The trace settings (a model's override over the global ones); a model must resolve and be ready."""
    state = models.state
    if name is not None and not ready_versions(models.served(name)):
        raise KServeError(404, f"Request for unknown model: '{name}' has no available versions")
    settings = dict(state.kserve.trace)
    settings.update(state.kserve.model_trace.get(name or "", {}))
    return settings


def update_trace(models: KServeModels, name: str | None, body: dict[str, Any]) -> dict[str, Any]:
    """Trace settings updated (a per-model override cleared by null); returns the settings now."""
    trace_settings(models, name)  # the model resolves before the body is read, as Triton does
    state = models.state
    if "trace_file" in body:
        raise KServeError(501, "trace file location can not be updated through network protocol")
    known = [key for key in ("trace_level", "trace_rate", "trace_count", "log_frequency") if key in body]
    updates = {key: None if body[key] is None else _trace_setting(key, body[key]) for key in known}
    target = state.kserve.model_trace.setdefault(name, {}) if name else state.kserve.trace
    for key, value in updates.items():
        if body[key] is None:
            if name:
                target.pop(key, None)  # null clears the model's override (server `docs/protocol/extension_trace.md`)
        elif value is not None:  # None: a level list with no name Triton knows, which changes nothing
            target[key] = value
    return trace_settings(models, name)


@dataclass(slots=True)
class Inference:
    """A checked inference request in the engine, and what its answer needs once the engine has ended it."""

    model: str
    version: str
    request: InferRequest
    batch: int
    outputs: Outputs
    log: RequestLog | None
    """The request log (None: not recording)."""
    call: Call
    shared: SharedMemory
    """The server's shared-memory regions (outputs asked into one are written there when the answer goes out)."""


def start_inference(models: KServeModels, name: str, version: str | None,
                    read: Callable[[str, Signature], InferRequest]) -> Inference:
    """Resolve the model version, read the request (`read`, given the model's id and the version's tensors), check it
    as Triton does, generate its outputs and submit it to the version's engine (dynamic batcher, instances)."""
    served = models.served(name)
    chosen = models.ready_version(served, version)
    model = served.model
    signature = models.signature(model, chosen)
    request = read(model.id, signature)
    shared = models.state.kserve.shared_memory
    for tensor in request.inputs:
        if tensor.shared_memory is not None:
            region, offset, size = tensor.shared_memory
            tensor.data = shared.read(region, offset, size)
    batch = check_inputs(request, model.id, signature)
    outputs = generate_outputs(request, signature, batch, model.id, chosen)
    priority = request.parameters.get("priority", 0)
    arrival = Arrival.api(model.id, max(batch, 1), 0, priority=int(priority) if isinstance(priority, int) else 0,
                          version=chosen, source="kserve")
    engine = models.state.engine
    call = engine.submit(arrival, live_tokens=False)
    return Inference(model.id, chosen, request, batch, outputs, engine.log, call, shared)


def ended(inference: Inference, ending: tuple[str, int], elapsed_s: float) -> bool:
    """An inference the engine has ended, written to the request log: True when it completed (its outputs are
    the answer), False when it was aborted (no one to answer); a failure raises Triton's error."""
    call, request, log = inference.call, inference.request, inference.log
    if ending[0] == "aborted":  # the client went away (or the server is stopping)
        if log is not None:
            log.infer(call, inference.model, inference.version, inference.batch, request.inputs, [], elapsed_s,
                      end="aborted")
        return False
    if ending[0] == "failed":
        reason = call.request.error if call.request is not None else call.error or "failed"
        error = KServeError(503, f"{request.label}{QUEUE_FULL}") if reason == QUEUE_FULL else KServeError(500, reason)
        if log is not None:
            log.infer(call, inference.model, inference.version, inference.batch, request.inputs, [], elapsed_s,
                      error.message)
        raise error
    _write_shared(inference)
    return True


def _write_shared(inference: Inference) -> None:
    """Outputs asked into a shared-memory region are written there (Triton's check of the room first)."""
    for requested in inference.request.outputs:
        parameters = requested.get("parameters") if isinstance(requested, dict) else None
        where = shm_parameters(parameters)
        if where is None:
            continue
        region, offset, size = where
        for tensor, _, data in inference.outputs:
            if tensor.name != requested.get("name"):
                continue
            if len(data) > size:
                raise KServeError(400, f"shared memory size specified with the request for output '{tensor.name}' "
                                       f"({size} bytes) should be at least {len(data)} bytes to hold the results")
            inference.shared.write(region, offset, data)


def record_answer(inference: Inference, elapsed_s: float) -> None:
    """Write a completed inference to the request log (after its answer went out)."""
    if inference.log is not None:
        inference.log.infer(inference.call, inference.model, inference.version, inference.batch,
                            inference.request.inputs, inference.outputs, elapsed_s)

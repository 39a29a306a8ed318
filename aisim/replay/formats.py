"""Request log formats: aisim's own JSONL log, the Azure LLM trace CSV, and a plain JSONL trace.

- **aisim** (`aisim serve --record FILE`, `aisim replay --output FILE`): JSON lines, each with a
  `type`. A `header` line (`format: aisim-request-log`, `version`, `scenario`, `speed`, ...), one
  `request` line per finished request (`arrival`: seconds since the server started at which the
  engine received it, `model`, `endpoint`, `stream`, `prompt_tokens`, `output_tokens` (asked of the
  engine), `status`, and when measured `ttft`, `itl` (a list), `e2e` in seconds from that arrival,
  `frontend`: seconds from the server reading the request to the engine receiving it, and a
  `priority` other than 0; KServe
  requests add `version`, `batch`, `inputs`, `outputs` as `{name, datatype, shape}`), `load` lines
  for model loads (`arrival`, `model`, `version`, `seconds`, `status`) and `memory` lines (`gpu`,
  `used_mib`) written at the end. Times are wall-clock as measured; a header `speed` other than 1
  scales them back to the server's clock.
- **azure** (`TIMESTAMP, ContextTokens, GeneratedTokens`): the Azure LLM inference trace 2023.
- **jsonl**: one object per line with `timestamp` (seconds, or `timestampUnit`; or a date-time),
  `input_length`, `output_length`, and optionally `model`, `ttft`, `itl`, `e2e` in seconds (the
  Mooncake trace's keys; timestamps in ms there).

Readers sort requests by arrival (stably). Trace arrivals count from the earliest row.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Literal

from ..engine import timestamp_ns
from ..errors import InputError
from .records import LoggedLoad, LoggedRequest, RequestLog, TensorShape

LOG_FORMAT = "aisim-request-log"
LOG_VERSION = 1
NS = 1_000_000_000
UNITS_NS = {"s": NS, "ms": 1_000_000, "us": 1_000}
Format = Literal["auto", "aisim", "azure", "jsonl"]


class LogError(InputError, ValueError):
    """A log that cannot be read: the file, the line and what is wrong."""


def read_log(path: str | Path, fmt: Format = "auto", timestamp_unit: str = "s") -> RequestLog:
    """Read a request log in any of the formats (`auto`: from the extension and the first line)."""
    path = Path(path)
    chosen = detect(path) if fmt == "auto" else fmt
    if chosen == "azure":
        log = _read_azure(path)
    elif chosen == "jsonl":
        log = _read_jsonl(path, UNITS_NS[timestamp_unit])
    else:
        log = _read_aisim(path)
    if not log.requests and not log.loads:  # an empty file, or another format's rows skipped as foreign
        label = {"aisim": "an aisim request log", "azure": "an Azure trace CSV", "jsonl": "a JSONL trace"}[chosen]
        raise LogError(f"{path}: no requests found, read as {label} (is the file empty, or in another format? "
                       "--format chooses it)")
    log.requests.sort(key=lambda r: r.arrival_ns)
    log.loads.sort(key=lambda r: r.arrival_ns)
    if chosen != "aisim" and log.requests and log.requests[0].arrival_ns:  # a trace counts from its earliest row
        first = log.requests[0].arrival_ns
        for request in log.requests:
            request.arrival_ns -= first
    return log


def detect(path: Path) -> Literal["aisim", "azure", "jsonl"]:
    """The format of a log file: CSV is the Azure trace; JSON lines with a `type` are aisim's."""
    if path.suffix.lower() == ".csv":
        return "azure"
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                first = _json(line, path, 1)
                return "aisim" if "type" in first else "jsonl"
    return "aisim"


def _json(line: str, path: Path, number: int) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as error:
        raise LogError(f"{path}:{number}: not a JSON line: {error}") from None
    if not isinstance(value, dict):
        raise LogError(f"{path}:{number}: expected a JSON object")
    return value


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                yield number, _json(line, path, number)


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)


def _read_aisim(path: Path) -> RequestLog:
    log = RequestLog([], source="aisim")
    speed = 1.0
    for number, row in _lines(path):
        kind = row.get("type")
        try:
            if kind == "header":
                if row.get("format") != LOG_FORMAT:
                    raise LogError(f"{path}:{number}: not an aisim request log (format {row.get('format')!r})")
                speed = float(row.get("speed") or 1.0)
                log.meta = {k: v for k, v in row.items() if k != "type"}
            elif kind == "request":
                log.requests.append(_request(row, speed))
            elif kind == "load":
                log.loads.append(LoggedLoad(round(float(row["arrival"]) * speed * NS), str(row["model"]),
                                            row.get("version"), _scaled(row.get("seconds"), speed),
                                            str(row.get("status", "ok")), str(row.get("error", ""))))
            elif kind == "memory":
                log.memory_mib[str(row["gpu"])] = float(row["used_mib"])
        except (KeyError, TypeError, ValueError) as error:
            if isinstance(error, LogError):
                raise
            raise LogError(f"{path}:{number}: {error!r} in a {kind!r} line") from None
    return log


def _scaled(value: Any, speed: float) -> float | None:
    return None if value is None else float(value) * speed


def _request(row: dict[str, Any], speed: float) -> LoggedRequest:
    itl = row.get("itl")
    shapes = {key: tuple(TensorShape.from_dict(t) for t in row[key]) if row.get(key) is not None else None
              for key in ("inputs", "outputs")}
    return LoggedRequest(
        arrival_ns=round(float(row["arrival"]) * speed * NS), model=row.get("model"),
        prompt_tokens=int(row.get("prompt_tokens", 0)), output_tokens=int(row.get("output_tokens", 0)),
        endpoint=str(row.get("endpoint", "")), stream=bool(row.get("stream", True)),
        status=str(row.get("status", "completed")), ttft=_scaled(row.get("ttft"), speed),
        itl=None if itl is None else [float(g) * speed for g in itl], e2e=_scaled(row.get("e2e"), speed),
        version=row.get("version"), batch=row.get("batch"), inputs=shapes["inputs"], outputs=shapes["outputs"],
        error=str(row.get("error", "")), frontend=_scaled(row.get("frontend"), speed),
        priority=int(row.get("priority", 0)),
    )


def _read_azure(path: Path) -> RequestLog:
    requests: list[LoggedRequest] = []
    first: int | None = None
    with path.open(encoding="utf-8", newline="") as handle:
        for number, row in enumerate(csv.DictReader(handle), 2):
            try:
                stamp = timestamp_ns(row["TIMESTAMP"], NS)
                prompt, output = int(row["ContextTokens"]), int(row["GeneratedTokens"])
            except (KeyError, TypeError, ValueError) as error:
                raise LogError(f"{path}:{number}: {error!r}: expected TIMESTAMP, ContextTokens, GeneratedTokens") from None
            first = stamp if first is None else first
            requests.append(LoggedRequest(stamp - first, None, prompt, output))
    return RequestLog(requests, source="azure-csv")


def _read_jsonl(path: Path, unit_ns: int) -> RequestLog:
    requests: list[LoggedRequest] = []
    first: int | None = None
    for number, row in _lines(path):
        try:
            stamp = timestamp_ns(row["timestamp"], unit_ns)
            itl = row.get("itl")
            request = LoggedRequest(0, row.get("model"), int(row["input_length"]), int(row["output_length"]),
                                    ttft=_seconds(row.get("ttft")), e2e=_seconds(row.get("e2e")),
                                    itl=None if itl is None else [float(g) for g in itl])
        except (KeyError, TypeError, ValueError) as error:
            raise LogError(f"{path}:{number}: {error!r}: expected timestamp, input_length, output_length") from None
        first = stamp if first is None else first
        request.arrival_ns = stamp - first
        requests.append(request)
    return RequestLog(requests, source="jsonl")


# -- writing -------------------------------------------------------------------------------------


def header_record(**fields: Any) -> dict[str, Any]:
    """The first line of an aisim log."""
    return {"type": "header", "format": LOG_FORMAT, "version": LOG_VERSION, **fields}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def request_record(request: LoggedRequest) -> dict[str, Any]:
    """A request as one aisim log line (seconds; microseconds are the resolution of measured times)."""
    record: dict[str, Any] = {
        "type": "request", "arrival": round(request.arrival_ns / NS, 9), "model": request.model,
        "endpoint": request.endpoint, "stream": request.stream, "prompt_tokens": request.prompt_tokens,
        "output_tokens": request.output_tokens, "status": request.status,
        "ttft": _round(request.ttft), "itl": None if request.itl is None else [round(g, 6) for g in request.itl],
        "e2e": _round(request.e2e),
    }
    if request.is_kserve:
        record.update(version=request.version, batch=request.batch,
                      inputs=[t.to_dict() for t in request.inputs or ()],
                      outputs=None if request.outputs is None else [t.to_dict() for t in request.outputs])
    if request.priority:
        record["priority"] = request.priority
    if request.frontend is not None:
        record["frontend"] = _round(request.frontend)
    if request.error:
        record["error"] = request.error
    return record


def load_record(load: LoggedLoad) -> dict[str, Any]:
    record: dict[str, Any] = {"type": "load", "arrival": round(load.arrival_ns / NS, 9), "model": load.model,
                              "version": load.version, "seconds": _round(load.seconds), "status": load.status}
    if load.error:
        record["error"] = load.error
    return record


def memory_records(memory_mib: dict[str, float]) -> list[dict[str, Any]]:
    return [{"type": "memory", "gpu": gpu, "used_mib": round(mib, 3)} for gpu, mib in memory_mib.items()]


def write_log(out: IO[str], log: RequestLog, **header: Any) -> int:
    """Write a log in aisim's format (its times taken as measured at speed 1); returns the lines written."""
    records = [header_record(**{**log.meta, "speed": 1.0, **header, "source": log.source})]
    records += [request_record(r) for r in log.requests]
    records += [load_record(load) for load in log.loads]
    records += memory_records(log.memory_mib)
    for record in records:
        out.write(json.dumps(record, separators=(",", ":")) + "\n")
    return len(records)

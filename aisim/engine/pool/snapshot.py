"""PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot()` pickles): read safely, or write one.

A snapshot is the dict `torch.cuda.memory._snapshot()` returns (pytorch/pytorch `torch/cuda/memory.py`): `segments` (the
allocator's state when the snapshot was taken), `device_traces` (per device index, the ring buffer of
allocator events: `alloc`, `free_requested`, `free_completed`, `segment_alloc`, `segment_free`,
`oom`, ...) and `allocator_settings`. It holds only dicts, lists, tuples, strings and numbers, so
`load_snapshot` unpickles it with an `Unpickler` whose `find_class` refuses every global: a pickle
that names a class or a function (the way a malicious pickle runs code) fails before anything is
called. The same structure written as JSON is accepted too (a file whose first byte is `{`), for
snapshots converted by other tools; JSON turns the `segment_pool_id` pair into a list, which is fine.

`snapshot_of(allocator)` goes the other way: the snapshot of a simulated caching allocator that
records its history, in the same format (https://pytorch.org/memory_viz opens it, `replay` reads it).
"""

from __future__ import annotations

import io
import json
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from ...errors import InputError
from .caching import CachingAllocator
from .rounding import BANDS, Divisions, divisions_for

EXPECTED = (
    "a PyTorch memory snapshot: a dict with 'segments' and 'device_traces', as pickled by "
    "torch.cuda.memory._dump_snapshot() after torch.cuda.memory._record_memory_history()"
)
STATE_NAMES = {"active_pending_free": "active_awaiting_free"}
"""The C++ pickler's spelling of the awaiting state, mapped to the Python `_snapshot()` one."""
MODEL_STATES = {"allocated": "active_allocated", "awaiting_free": "active_awaiting_free", "cached": "inactive"}


class SnapshotError(InputError, ValueError):
    """A file that is not a memory snapshot, or one this reader refuses to unpickle."""


class TraceEvent(NamedTuple):
    """One entry of a device trace; for `oom`, `addr` holds the entry's `device_free`."""

    action: str
    addr: int
    size: int
    stream: int
    time_us: int | None


@dataclass(frozen=True, slots=True)
class SnapshotBlock:
    """A block of a segment at snapshot time (`state` uses the Python `_snapshot()` names)."""

    address: int
    size: int
    requested_size: int
    state: str


@dataclass(frozen=True, slots=True)
class SnapshotSegment:
    """One `cudaMalloc` (or mapped range of an expandable segment) at snapshot time."""

    device: int
    address: int
    total_size: int
    stream: int
    segment_type: str
    is_expandable: bool
    blocks: tuple[SnapshotBlock, ...]


@dataclass(frozen=True)
class Snapshot:
    """A parsed snapshot: segments (None when the file has none), traces per device, settings."""

    segments: tuple[SnapshotSegment, ...] | None
    traces: tuple[tuple[TraceEvent, ...], ...]
    settings: dict[str, Any]

    def trace(self, device: int = 0) -> tuple[TraceEvent, ...]:
        """The events recorded for `device`; empty when it recorded none."""
        if device < 0:
            raise SnapshotError(f"device {device}: devices are numbered from 0")
        return self.traces[device] if device < len(self.traces) else ()

    def device_segments(self, device: int = 0) -> tuple[SnapshotSegment, ...] | None:
        """The segments of `device` at snapshot time, or None when the snapshot has no `segments`."""
        if self.segments is None:
            return None
        return tuple(s for s in self.segments if s.device == device)


class _RefusingUnpickler(pickle.Unpickler):
    """Unpickles plain data only: every class or function lookup is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise SnapshotError(
            f"refusing to load the global {module}.{name}: a memory snapshot holds only dicts, lists, strings "
            "and numbers, so this pickle is not one (unpickling it could run code)"
        )


def load_snapshot(path: str | Path) -> Snapshot:
    """Read a snapshot file (pickle, or the same structure as JSON); `SnapshotError` says what is wrong."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise SnapshotError(f"{path}: {error.strerror or error}") from error
    try:
        return parse_snapshot(loads_snapshot(data))
    except SnapshotError as error:
        raise SnapshotError(f"{path}: {error}") from None


def loads_snapshot(data: bytes) -> Any:
    """The raw object in `data`: JSON when it starts with `{`, else a pickle read without globals."""
    if data.lstrip()[:1] in (b"{", b"["):
        try:
            return json.loads(data)
        except (ValueError, RecursionError) as error:
            raise SnapshotError(f"not valid JSON ({error}); expected {EXPECTED}") from None
    try:
        return _RefusingUnpickler(io.BytesIO(data)).load()
    except SnapshotError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, KeyError, IndexError, TypeError, OverflowError) as error:
        raise SnapshotError(f"neither a pickle nor JSON ({type(error).__name__}: {error}); expected {EXPECTED}") from None


def parse_snapshot(raw: Any) -> Snapshot:
    """Check and convert the dict `torch.cuda.memory._snapshot()` returns."""
    if isinstance(raw, list):
        raise SnapshotError(
            f"a list, not a dict: torch.cuda.memory_snapshot() gives only segments, without a trace; expected {EXPECTED}"
        )
    if not isinstance(raw, Mapping):
        raise SnapshotError(f"a {type(raw).__name__}, not a dict; expected {EXPECTED}")
    if "device_traces" not in raw:
        keys = ", ".join(repr(k) for k in list(raw)[:8]) or "none"
        raise SnapshotError(f"no 'device_traces' key (keys: {keys}); expected {EXPECTED}")
    traces = raw["device_traces"]
    if not isinstance(traces, list):
        raise SnapshotError(f"'device_traces' is a {type(traces).__name__}, not a list of per-device lists")
    segments = raw.get("segments")
    if segments is not None and not isinstance(segments, list):
        raise SnapshotError(f"'segments' is a {type(segments).__name__}, not a list")
    settings = raw.get("allocator_settings") or {}
    return Snapshot(
        segments=None if segments is None else tuple(_segment(s, i) for i, s in enumerate(segments)),
        traces=tuple(_trace(t, d) for d, t in enumerate(traces)),
        settings=dict(settings) if isinstance(settings, Mapping) else {},
    )


def _int(entry: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = entry.get(key, default)
    if type(value) is not int:  # bool is not a size
        if value is None:
            raise SnapshotError(f"{where}: no {key!r}")
        raise SnapshotError(f"{where}: {key!r} is {value!r}, not an integer")
    return value


def _trace(entries: Any, device: int) -> tuple[TraceEvent, ...]:
    if not isinstance(entries, list):
        raise SnapshotError(f"device_traces[{device}] is a {type(entries).__name__}, not a list of trace entries")
    events: list[TraceEvent] = []
    append = events.append
    for index, entry in enumerate(entries):
        try:
            action = entry["action"]
            addr = entry["device_free"] if action == "oom" else entry["addr"]
            size = entry["size"]
            stream = entry.get("stream", 0)
            time_us = entry.get("time_us")
        except (KeyError, TypeError):
            where = f"device_traces[{device}][{index}]"
            if not isinstance(entry, Mapping):
                raise SnapshotError(f"{where} is a {type(entry).__name__}, not a trace entry dict") from None
            key = "device_free" if entry.get("action") == "oom" else "addr"
            missing = [k for k in ("action", key, "size") if k not in entry]
            raise SnapshotError(f"{where}: no {missing[0]!r}") from None
        if type(addr) is not int or type(size) is not int or type(stream) is not int or not isinstance(action, str):
            where = f"device_traces[{device}][{index}]"
            for key, value in (("addr", addr), ("size", size), ("stream", stream)):
                if type(value) is not int:
                    raise SnapshotError(f"{where}: {key!r} is {value!r}, not an integer")
            raise SnapshotError(f"{where}: 'action' is {action!r}, not a string")
        append(TraceEvent(action, addr, size, stream, time_us if type(time_us) is int else None))
    return tuple(events)


def _segment(entry: Any, index: int) -> SnapshotSegment:
    where = f"segments[{index}]"
    if not isinstance(entry, Mapping):
        raise SnapshotError(f"{where} is a {type(entry).__name__}, not a segment dict")
    blocks = entry.get("blocks") or []
    if not isinstance(blocks, list):
        raise SnapshotError(f"{where}: 'blocks' is not a list")
    parsed = []
    for number, block in enumerate(blocks):
        at = f"{where}.blocks[{number}]"
        if not isinstance(block, Mapping):
            raise SnapshotError(f"{at} is a {type(block).__name__}, not a block dict")
        state = str(block.get("state") or "inactive")
        parsed.append(
            SnapshotBlock(
                address=_int(block, "address", at),
                size=_int(block, "size", at),
                requested_size=_int(block, "requested_size", at, 0),
                state=STATE_NAMES.get(state, state),
            )
        )
    return SnapshotSegment(
        device=_int(entry, "device", where, 0),
        address=_int(entry, "address", where),
        total_size=_int(entry, "total_size", where),
        stream=_int(entry, "stream", where, 0),
        segment_type=str(entry.get("segment_type", "")),
        is_expandable=bool(entry.get("is_expandable", False)),
        blocks=tuple(parsed),
    )


def snapshot_of(allocator: CachingAllocator) -> dict[str, Any]:
    """The `_snapshot()` dict of a simulated caching allocator: its segments and its history.

    Call `allocator.record_history()` first, as PyTorch needs `_record_memory_history()`; times come
    from the allocator's clock (nanoseconds, written as `time_us`). Frames are empty: the simulator
    has no Python stacks.
    """
    device = allocator.device.index
    segments = []
    for view in allocator.state().segments:
        blocks = [
            {"address": b.address, "size": b.size, "requested_size": b.requested, "state": MODEL_STATES[b.state], "frames": []}
            for b in view.blocks
        ]
        active = [b for b in view.blocks if b.state != "cached"]
        segments.append({
            "device": device,
            "address": view.address,
            "total_size": view.size,
            "allocated_size": sum(b.size for b in view.blocks if b.state == "allocated"),
            "active_size": sum(b.size for b in active),
            "requested_size": sum(b.requested for b in active),
            "stream": view.stream,
            "segment_type": view.kind,
            "segment_pool_id": (0, 0),
            "is_expandable": view.expandable,
            "frames": [],
            "blocks": blocks,
        })
    trace = []
    for entry in allocator.history or ():
        record: dict[str, Any] = {"action": entry.action, "size": entry.size, "stream": entry.stream, "frames": []}
        record["device_free" if entry.action == "oom" else "addr"] = entry.addr
        if entry.time_ns is not None:
            record["time_us"] = entry.time_ns // 1000
        trace.append(record)
    config = allocator.config
    return {
        "segments": segments,
        "device_traces": [[] for _ in range(device)] + [trace],
        "allocator_settings": {
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True" if config.expandable_segments else "",
            "max_split_size": -1 if config.max_split_size is None else config.max_split_size,
            "garbage_collection_threshold": config.garbage_collection_threshold or 0.0,
            "expandable_segments": config.expandable_segments,
            "roundup_power2_divisions": divisions_setting(config.roundup_power2_divisions),
        },
    }


def divisions_setting(divisions: Divisions) -> dict[str, int]:
    """`roundup_power2_divisions` as the snapshot writes it: band size in MB (`"1"` ... `"32768"`) to divisions."""
    return {str(1 << band): divisions_for(1 << (band + 20), divisions) for band in range(BANDS)}


def divisions_from_setting(setting: Any) -> Divisions:
    """The inverse of `divisions_setting` (an int is one value for every band); None when off."""
    if type(setting) is int:
        return setting if setting > 1 else None
    if not isinstance(setting, Mapping):
        return None
    bands = [0] * BANDS
    for key, value in setting.items():
        try:
            band = int(key).bit_length() - 1
        except (TypeError, ValueError):
            continue
        if 0 <= band < BANDS and type(value) is int:
            bands[band] = value
    return tuple(bands) if any(d > 1 for d in bands) else None

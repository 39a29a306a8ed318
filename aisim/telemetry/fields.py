"""DCGM field values: injection (`lookup`, `coerce`) and rendering (blank sentinels, `render_value`).

The fields themselves are the scenario's list (`aisim.scenario.dcgm_fields`), which the scenario checks a document
against. Blank values: DCGM marks a value that a GPU does not have with sentinels, and the exporter writes no sample
line for them (NVIDIA/dcgm-exporter `internal/pkg/rendermetrics/render_metrics.go`). Injecting a sentinel therefore
hides a field, as on a real node.
"""

from __future__ import annotations

import math

from ..scenario.dcgm_fields import BY_ID, FIELDS, DcgmField

INT64_BLANK = 0x7FFFFFFFFFFFFFF0
"""`DCGM_INT64_BLANK`; +1 NOT_FOUND, +2 NOT_SUPPORTED, +3 NOT_PERMISSIONED."""
INT32_BLANK = 0x7FFFFFF0
FP64_BLANK = 140737488355328.0
"""`DCGM_FP64_BLANK` (2^47); values from it up are its NOT_FOUND / NOT_SUPPORTED / NOT_PERMISSIONED variants."""


class FieldError(ValueError):
    """A field that cannot be named or injected."""


def lookup(field: str | int) -> DcgmField:
    """A field by name or DCGM id (as `dcgmi test --inject -f` takes either)."""
    if isinstance(field, int) and not isinstance(field, bool) or isinstance(field, str) and field.isascii() \
            and field.isdigit():
        found = BY_ID.get(int(field))
    else:  # a name; anything but a string (a list, an object from a JSON body) names no field
        found = FIELDS.get(field) if isinstance(field, str) else None
    if found is None:
        raise FieldError(f"unknown DCGM field {field!r}")
    return found


def coerce(field: DcgmField, value: float | str) -> float | int:
    """The value as the field's DCGM type stores it (`atol` / `atof`); strings and labels are refused."""
    if field.dcgm_type == "s":
        raise FieldError(f"{field.name} is a string field: aisim injects numeric fields only")
    if isinstance(value, bool):
        raise FieldError(f"value {value!r} is not a number")
    if isinstance(value, int):
        return value if field.dcgm_type == "i" else float(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise FieldError(f"value {value!r} is not a number") from None
    if not math.isfinite(number):
        raise FieldError(f"value {value!r} is not a finite number")
    return int(number) if field.dcgm_type == "i" else number


def is_blank(value: float) -> bool:
    """Whether DCGM would mark `value` as blank or unsupported (no sample line is written)."""
    if isinstance(value, int):
        return value >= INT64_BLANK or INT32_BLANK <= value <= INT32_BLANK + 3
    return value >= FP64_BLANK


def render_value(field: DcgmField, value: float) -> str:
    """`%d` for int64 fields, `%f` for doubles (`gpu_collector.go` `toString`)."""
    return f"{value:f}" if field.dcgm_type == "d" else str(int(value))

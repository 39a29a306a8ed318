"""dcgm-exporter's text exposition, written by hand as its Go template writes it.

dcgm-exporter's (NVIDIA/dcgm-exporter `internal/pkg/rendermetrics/render_metrics.go`): per field a `# HELP` and a `#
TYPE` line, then one sample line per GPU; families in field-id order; labels in the exporter's order with no space after
commas; int64 values as `%d`, doubles as `%f`; blank values have no line (and a family with no line has no HELP / TYPE
either). `DCGM_FI_DEV_XID_ERRORS` carries `err_code` and `err_msg`, and `DCGM_FI_DRIVER_VERSION` is a label on every
line, never a series. `prometheus_client` is not used because it would add `_total` to counters and reformat the values;
the tests parse the output with its parser instead.

The text also serves headless runs (`aisim run --metrics out.prom`), with `series_csv` for the
whole sampled series (`--metrics out.csv`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..scenario.dcgm_fields import CATALOGUE, DcgmField
from .fields import is_blank, render_value
from .xid import Xid

if TYPE_CHECKING:
    from .board import Board

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"
XID_COUNT_FIELD = "DCGM_EXP_XID_ERRORS_COUNT"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _line(name: str, labels: Iterable[tuple[str, str]], value: str) -> str:
    inner = ",".join(f'{key}="{_escape(text)}"' for key, text in labels)
    return f"{name}{{{inner}}} {value}\n"


def render(fields: Sequence[DcgmField], boards: Sequence[tuple[Board, dict[str, float | int], dict[int, int]]],
           hostname_label: str, hostname: str, driver: str | None, xid_window_ns: int,
           attributes: Sequence[tuple[str, str]] = ()) -> str:
    """The exposition of `boards` (each with its values and its XID counts in the window). `attributes` are
    the Kubernetes labels (`container`, `namespace`, `pod`) that follow the CSV labels (`render_metrics.go`)."""
    out: list[str] = []
    for field in fields:
        if field.prom_type == "label":
            continue
        lines: list[str] = []
        for board, values, counts in boards:
            base = board.labels(hostname_label, hostname, driver or "")
            if driver is None:
                base = [pair for pair in base if pair[0] != "DCGM_FI_DRIVER_VERSION"]
            if field.name == XID_COUNT_FIELD:
                window = str(xid_window_ns // 1_000_000)
                lines += [_line(field.name, [*base, *sorted([*attributes, ("window_size_in_ms", window), ("xid", str(code))])],
                                str(count))
                          for code, count in sorted(counts.items())]
                continue
            value = values.get(field.name)
            if value is None or is_blank(value):
                continue
            labels = [*base, *attributes]
            if field.name == XID_FIELD:  # one map of attributes, written sorted by key
                code = int(value)
                labels = [*base, *sorted([*attributes, ("err_code", str(code)), ("err_msg", Xid(code).message)])]
            lines.append(_line(field.name, labels, render_value(field, value)))
        if lines:
            out.append(f"# HELP {field.name} {field.help}\n# TYPE {field.name} {field.prom_type}\n")
            out.extend(lines)
    return "".join(out)


def series_csv(records: Iterable[dict[str, Any]]) -> str:
    """The `gpu_sample` records of a timeline as CSV: `time_s`, `gpu`, then one column per field (in
    field-id order); a field a sample lacks (blank) is an empty cell."""
    samples = [r for r in records if r["type"] == "gpu_sample"]
    present = {name for r in samples for name in r["fields"]}
    columns = [f.name for f in CATALOGUE if f.name in present]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["time_s", "gpu", *columns])
    for record in samples:
        values = record["fields"]
        writer.writerow([f"{record['t_ns'] / 1e9:.9f}".rstrip("0").rstrip("."), record["gpu"],
                         *(_cell(values.get(name)) for name in columns)])
    return buffer.getvalue()


def _cell(value: float | None) -> str:
    if value is None:
        return ""
    return repr(value) if isinstance(value, float) else str(value)

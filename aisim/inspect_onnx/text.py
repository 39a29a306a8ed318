"""The readable `aisim inspect` report: the same figures as `OnnxReport.to_dict`, laid out for a terminal."""

from __future__ import annotations

from .model import OnnxReport, TensorInfo

SHOWN_UNKNOWN = 5
"""Nodes with unknown FLOPs listed before the rest are counted."""


def human_bytes(size: int) -> str:
    """Decimal units, as model cards quote sizes (102.4 MB)."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def human_flops(flops: int | None) -> str:
    """FLOPs with an SI prefix, or `unknown`."""
    if flops is None:
        return "unknown"
    for unit, scale in (("T", 10**12), ("G", 10**9), ("M", 10**6), ("K", 10**3)):
        if flops >= scale:
            return f"{flops / scale:.2f} {unit}"
    return str(flops)


def _dims(info: TensorInfo) -> str:
    if info.dims is None:
        return "rank unknown"
    return "[" + ", ".join("?" if d is None else str(d) for d in info.dims) + "]"


def _tensors(title: str, tensors: list[TensorInfo]) -> list[str]:
    width = max((len(t.name) for t in tensors), default=0)
    lines = [f"{title} ({len(tensors)})"]
    lines += [f"  {t.name:<{width}}  {t.datatype or t.onnx_type:<6}  {_dims(t)}" for t in tensors]
    return lines


def report_text(report: OnnxReport) -> str:
    """The report as lines of text."""
    opsets = ", ".join(f"{domain} {version}" for domain, version in report.opsets.items())
    lines = [report.file,
             f"  IR version {report.ir_version}, opsets {opsets}, producer {report.producer or '(none)'}"]
    lines += ["  checker: ok"] if report.valid else [f"  checker: INVALID: {e}" for e in report.checker_errors]
    inferred = f"  shape inference: {report.inferred_shapes} intermediate shapes ({report.declared_shapes} in the file)"
    lines.append(inferred if report.inference_error is None else f"  shape inference failed: {report.inference_error}")
    lines += ["", *_tensors("inputs", report.inputs), *_tensors("outputs", report.outputs), ""]
    w = report.weights
    lines.append(f"initializers: {w.initializers}, {human_bytes(w.initializer_bytes)} ({w.initializer_bytes:,} bytes)")
    if w.external:
        lines.append(f"  external data: {w.external} tensors, {human_bytes(w.external_bytes)} in "
                     f"{', '.join(w.external_files)} (sized from dims, not read)")
    if w.constant_nodes:
        lines.append(f"Constant nodes: {w.constant_nodes}, {human_bytes(w.constant_bytes)}")
    if w.implied:
        lines.append(f"ConstantOfShape fills (weights stored as shapes): {w.implied}, {human_bytes(w.implied_bytes)}")
    lines.append(f"weights in all: {human_bytes(w.total_bytes)} ({w.total_bytes:,} bytes)")
    lines.append(f"nodes: {report.nodes}" + (f" (+{report.subgraph_nodes} in subgraphs)" if report.subgraph_nodes else ""))
    costs = report.costs
    flops = f"FLOPs per inference: {human_flops(costs.flops)}; per sample: {human_flops(report.flops_per_sample)}"
    if report.not_estimated:
        flops += f" (not estimated: {', '.join(report.not_estimated)})"
    lines += [flops, *[f"  unknown: {u}" for u in costs.unknown[:SHOWN_UNKNOWN]]]
    if len(costs.unknown) > SHOWN_UNKNOWN:
        lines.append(f"  ... and {len(costs.unknown) - SHOWN_UNKNOWN} more")
    lines += ["", _row("op type", "count", "category", "fusable", "access", "FLOPs")]
    for row in report.ops:
        fusable = {True: "yes", False: "no", None: "unknown"}[row.behaviour.fusable]
        shown = human_flops(row.flops) if row.counted else "-"
        lines.append(_row(row.op, str(row.count), row.behaviour.category, fusable, row.behaviour.access, shown))
    return "\n".join(lines) + "\n"


def _row(op: str, count: str, category: str, fusable: str, access: str, flops: str) -> str:
    return f"  {op:<24} {count:>6}  {category:<14} {fusable:<8} {access:<15} {flops}".rstrip()

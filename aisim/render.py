"""Text renderings of run results for the terminal: the report table and a progress line."""

from __future__ import annotations

import sys
import time
from typing import Any

STATS = ("ttft", "itl", "e2e", "queue")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:,.1f}"


def _latency_rows(section: dict[str, Any]) -> list[str]:
    rows = [f"  {'latency (ms)':14} {'mean':>10} {'p50':>10} {'p90':>10} {'p99':>10} {'max':>10}"]
    for name in STATS:
        stats = section.get(name)
        if stats:
            cells = " ".join(f"{_ms(stats[k]):>10}" for k in ("mean", "p50", "p90", "p99", "max"))
            rows.append(f"  {name.upper():14} {cells}")
    return rows


def steady_text(steady: dict[str, Any]) -> str:
    """`steady state: reached after a 2.1 s warm-up, 5,230 requests over 118.0 s measured` or why not."""
    if steady["overloaded"]:
        return (f"steady state: never: overloaded from {steady['overloaded_from_s']:g} s (the waiting queue "
                "grows, arrivals outrun completions)")
    measured = f"{steady['measured_requests']:,} requests over {steady['measured_s']:,.1f} s measured"
    if steady["steady"]:
        return f"steady state: reached after a {steady['warmup_s']:,.1f} s warm-up, {measured}"
    return (f"steady state: not shown: {measured} after a {steady['warmup_s']:,.1f} s warm-up (too few, or shorter "
            f"than the slowest request's {steady['slowest_s']:,.1f} s)")


def _section(title: str, section: dict[str, Any]) -> list[str]:
    counts = section["requests"]
    lines = [title]
    lines.append("  requests: " + ", ".join(f"{v} {k}" for k, v in counts.items() if v or k in ("arrived", "completed")))
    if section.get("failure"):
        lines.append(f"  load failed: {section['failure']}")
    if section.get("crash"):
        lines.append(f"  engine died: {section['crash']}")
    versions = section.get("versions")
    if versions and (len(versions["states"]) > 1 or section["state"] != "READY" or versions["rollbacks"]
                     or versions["refused"]):
        lines.append(_versions_line(versions))
    if any(section.get(name) for name in STATS):
        lines += _latency_rows(section)
    steady = section.get("steady_state")
    if steady:
        lines.append("  " + steady_text(steady))
    throughput = section.get("throughput")
    if throughput:
        lines.append(f"  throughput: {throughput['requests_per_s']:.2f} req/s, "
                     f"{throughput['input_tokens_per_s']:,.0f} input tok/s, {throughput['output_tokens_per_s']:,.0f} output tok/s "
                     f"over the {throughput['span_s']:,.1f} s from the first arrival to the last completion")
    engine = section.get("engine")
    if engine and "instances" in engine:
        batch = "-" if engine["mean_batch"] is None else f"{engine['mean_batch']:.2f}"
        lines.append(f"  triton: {engine['instances']} instance(s) on {', '.join(engine['gpus'])}, max batch "
                     f"{engine['max_batch_size']}, {engine['executions']:,} executions, mean batch {batch}, "
                     f"busy {engine['busy_fraction'] * 100:.1f} %")
    elif engine:
        kv_tokens = engine["kv_cache_tokens"]
        lines.append(f"  engine: {engine['replicas']} replica(s) on {', '.join(engine['gpus'])}, "
                     f"KV cache {'none' if kv_tokens is None else f'{kv_tokens:,} tokens'}, {engine['steps']:,} steps, "
                     f"busy {engine['busy_fraction'] * 100:.1f} %"
                     + ("" if engine["calibrated_on_this_gpu"] else " (cost model extrapolated: no data for this GPU)"))
        kv = section["kv_usage"]
        memory = section["memory_gib"]
        usage = f"KV usage: peak {kv['peak'] * 100:.1f} %, mean {kv['mean'] * 100:.1f} %; " if kv else ""
        lines.append(f"  {usage}preemptions {section['preemptions']}; peak memory used {memory['peak_used']:.2f} of "
                     f"{memory['capacity']:.2f} GiB")
    return lines


def _versions_line(versions: dict[str, Any]) -> str:
    """Each version's state at the end (the serving one marked), rollbacks and refused switches."""
    states = ", ".join(f"{name} {state}" + (" (serving)" if name == versions["active"] else "")
                       for name, state in versions["states"].items())
    extra = [f"{versions['rollbacks']} rollback{'s' * (versions['rollbacks'] != 1)}"] if versions["rollbacks"] else []
    extra += [f"refused: {why}" for why in versions["refused"]]
    return f"  versions: {states}" + "".join(f"; {part}" for part in extra)


def _gpu_line(gpu: str, pool: dict[str, Any]) -> str:
    entered = ", ".join(f"{level} {count}x" for level, count in pool["entered"].items() if count) or "no threshold crossed"
    return (f"  {gpu} ({pool['allocator']}): peak reserved {pool['peak_reserved_gib']:.2f} GiB, allocated "
            f"{pool['peak_allocated_gib']:.2f} GiB of {pool['capacity_gib']:.2f}; at the end fragmentation "
            f"{pool['fragmentation'] * 100:.1f} %, external {pool['external_fragmentation'] * 100:.1f} %, inactive split "
            f"{pool['inactive_split_mib']:,.1f} MiB; {pool['num_alloc_retries']} retries, {pool['num_ooms']} OOMs; {entered}")


def _stream_lines(gpu: str, streams: dict[str, Any]) -> list[str]:
    lines = [f"  {gpu}: busy {streams['busy_fraction'] * 100:.1f} %, {streams['preemptions']:,} preemptions"]
    for name, stream in streams["by_stream"].items():
        lines.append(f"    {name} (priority {stream['priority']}): {stream['kernels']:,} kernels, "
                     f"{stream['gpu_share'] * 100:.1f} % of the GPU, {stream['stretch']:.2f}x their solo time, "
                     f"mean wait {stream['mean_wait_ms']:.3f} ms")
    return lines


def report_table(report: dict[str, Any], wall_seconds: float) -> str:
    """The report as a readable table."""
    simulated = report["simulated_seconds"]
    speed = simulated / wall_seconds if wall_seconds else float("inf")
    lines = [(f"scenario {report['scenario']} (seed {report['seed']}): {simulated:,.1f} simulated s in "
             f"{wall_seconds:.2f} wall s ({speed:,.0f}x real time), {report['events']:,} events"), ""]
    for name, section in report["models"].items():
        lines += _section(f"model {name} ({section['mode']})", section) + [""]
    if len(report["models"]) > 1:
        lines += _section("overall", report["overall"]) + [""]
    gpus = report.get("gpus") or {}
    if any("allocator" in gpu for gpu in gpus.values()):
        lines += ["GPU memory pools"] + [_gpu_line(name, gpu) for name, gpu in gpus.items() if "allocator" in gpu] + [""]
    if any("streams" in gpu for gpu in gpus.values()):
        lines += ["GPU streams"] + [line for name, gpu in gpus.items() if "streams" in gpu
                                    for line in _stream_lines(name, gpu["streams"])] + [""]
    if any("telemetry" in gpu for gpu in gpus.values()):
        lines += ["GPU telemetry (DCGM)"] + [_telemetry_line(name, gpu["telemetry"]) for name, gpu in gpus.items()
                                             if "telemetry" in gpu] + [""]
    if report.get("faults"):
        lines += ["faults"] + [_fault_line(name, fault) for name, fault in report["faults"].items()] + [""]
    return "\n".join(lines)


def _fault_line(name: str, fault: dict[str, Any]) -> str:
    """`memory-hog (oom): fired once at 40.0 s on gpu0: another process holds 2.26 GiB; 64 requests failed since`."""
    head = f"  {name} ({fault['kind']}): "
    if not fault["fired"]:
        return head + "never fired" + (f": {fault['unreachable']}" if "unreachable" in fault else "")
    when = (f"once at {fault['first_s']:,.1f} s" if fault["fired"] == 1 else
            f"{fault['fired']} times from {fault['first_s']:,.1f} s to {fault['last_s']:,.1f} s")
    effects = ", ".join(text if count == 1 else f"{count}x {text}" for text, count in fault["effects"].items())
    tail = "".join(f"; {fault[key]} {words}" for key, words in (("requests_failed", "requests failed since"),
                                                                ("requests_slowed", "requests in flight slowed"))
                   if key in fault)
    return f"{head}fired {when} on {', '.join(fault['on'])}: {effects}{tail}"


def _telemetry_line(name: str, t: dict[str, Any]) -> str:
    xids = f"; XIDs {', '.join(map(str, t['xids']))}" if t["xids"] else ""
    lost = f"; fell off the bus at {t['fell_off_bus_s']:,.1f} s" if t["fell_off_bus_s"] is not None else ""
    return (f"  {name} (gpu {t['dcgm_gpu']}): utilisation {t['mean_gpu_util'] * 100:.1f} %, energy {t['energy_j'] / 1000:,.2f} kJ, "
            f"peak {t['peak_gpu_temp_c']:.1f} C{xids}{lost}")


class Progress:
    """A one-line progress display on stderr, refreshed at most ten times a second."""

    def __init__(self, total_ns: int | None) -> None:
        self.total = total_ns
        self.started = time.perf_counter()
        self.shown = 0.0

    def update(self, now_ns: int) -> None:
        wall = time.perf_counter()
        if wall - self.shown < 0.1 or wall - self.started < 0.5:
            return
        self.shown = wall
        done = f" {now_ns / self.total * 100:5.1f} %" if self.total else ""
        sys.stderr.write(f"\r  simulating: {now_ns / 1e9:10,.1f} s{done}")
        sys.stderr.flush()

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\r" + " " * 40 + "\r")


def memory_lines(name: str, model: Any, gpu: Any, plan: Any, margin: float) -> str:
    """A memory plan in vLLM's own log words (vllm-project/vllm `vllm/v1/worker/gpu_worker.py`), then the verdict."""
    gib = 2**30
    arch = model.resolved()
    tp = model.placement.tensor_parallel if model.placement else 1
    need = plan.max_model_len * (1 + margin)
    fits = plan.fits(margin)
    kind = arch.dtype if not arch.quantization else f"{arch.dtype}, {arch.quantization}: " + ", ".join(
        f"{role} {arch.format_of(role)}" for role in ("attention", "dense", "experts") if arch.role_params(role))
    title = (f"model {name} ({kind}, {arch.params / 1e9:.2f}B parameters) on {gpu.name} "
             f"({plan.capacity / gib:.2f} GiB), tensor parallel {tp}")
    dp, ep = model.data_parallel_size(), model.expert_parallel_size()
    if dp > 1 or ep > 1:
        title += f", data parallel {dp}" + (f", expert parallel {ep}" if ep > 1 else "")
    if plan.weights > plan.capacity:  # vLLM never gets to its memory profile: loading the weights fails
        return "\n".join([
            title,
            (f"the weights ({plan.weights / gib:.2f} GiB per GPU) are larger than the GPU: loading them fails with "
             f"torch.OutOfMemoryError"),
            "fits: NO (the weights alone do not fit: more tensor parallelism, or a smaller dtype)",
        ]) + "\n"
    lines = [
        title,
        f"Model loading took {plan.weights / gib:.4f} GiB",
        (f"the current vLLM instance can use total_gpu_memory ({plan.capacity / gib:.2f}GiB) x gpu_memory_utilization "
        f"({model.engine.gpu_memory_utilization:.2f}) = {plan.requested / gib:.2f}GiB"),
        (f"model weights take {plan.weights / gib:.2f}GiB; non_torch_memory takes {plan.non_torch / gib:.2f}GiB; "
        f"PyTorch activation peak memory takes {plan.activation_peak / gib:.2f}GiB; the rest of the memory reserved "
        f"for KV Cache is {plan.kv_available / gib:.2f}GiB."),
        f"Available KV cache memory: {plan.kv_available / gib:.2f} GiB",
    ]
    if plan.has_kv and plan.kv_available <= 0:  # vLLM's own error at start-up
        lines += [
            ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
             "initializing the engine."),
            "fits: NO (nothing is left for the KV cache)",
        ]
    elif plan.has_kv:
        lines += [
            (f"GPU KV cache size: {plan.kv_tokens:,} tokens ({plan.num_blocks:,} blocks of {plan.block_size}, "
            f"{plan.kv_bytes_per_token:,} bytes per token" + (f", {plan.groups} KV cache groups of full and "
                                                               "sliding-window layers" if plan.groups > 1 else "")
             + ")"),
            f"Maximum concurrency for {plan.max_model_len:,} tokens per request: {plan.max_concurrency:.2f}x",
            (f"fits: {'yes' if fits else 'NO'} (needs room for one {plan.max_model_len:,}-token request plus "
            f"{margin:.0%}: {need:,.0f} tokens)"),
        ]
    else:
        lines.append("no KV cache (the model has no attention layers)")
    lines += [f"note: {note}" for note in arch.notes]
    return "\n".join(lines) + "\n"


def replay_table(snapshot: str, results: list[dict[str, Any]]) -> str:
    """`aisim replay-snapshot`: one row per allocator model against the recorded trace, then one sentence each."""
    from .engine import format_size

    first = results[0]
    actions = ", ".join(f"{count:,} {name}" for name, count in first["actions"].items())
    lines = [
        (f"{snapshot}: device {first['device']}, {first['events']:,} events ({actions or 'none'}); capacity "
         f"{format_size(first['capacity'])} ({first['capacity_source']}); {first['initial_blocks']:,} allocations "
         f"alive before the trace ({format_size(first['initial_bytes'])})"),
        "",
        (f"{'allocator':10} {'peak reserved':>14} {'recorded':>12} {'difference':>13} {'peak alloc':>12} "
         f"{'cudaMalloc':>15} {'OOMs':>7} {'frag mean/peak':>15}  first divergence"),
        (f"{'':10} {'(model)':>14} {'':>12} {'':>13} {'':>12} {'model / rec':>15} {'mod/rec':>7} {'':>15}  "
         f"(> {format_size(first['tolerance'])})"),
    ]
    for r in results:
        diff = r["peak_difference"]
        sign = "+" if diff > 0 else "-" if diff < 0 else ""
        first_div = r["first_divergence"]
        where = "none" if first_div is None else f"event {first_div['event']:,} ({first_div['action']})"
        lines.append(
            f"{r['allocator']:10} {format_size(r['peak_reserved']):>14} {format_size(r['recorded_peak_reserved']):>12} "
            f"{sign + format_size(abs(diff)):>13} {format_size(r['peak_allocated']):>12} "
            f"{r['segment_allocs']:>7,} /{r['recorded_segment_allocs']:>6,} {len(r['ooms']):>3} /{r['recorded_ooms']:>2} "
            f"{r['mean_fragmentation'] * 100:6.1f} /{r['peak_fragmentation'] * 100:5.1f} %  {where}"
        )
    lines.append("")
    for r in results:
        lines.append(r["summary"])
        if r["ooms"]:
            oom = r["ooms"][0]
            at = "before the trace" if oom["event"] < 0 else f"at event {oom['event']:,}"
            lines.append(f"  first model OOM {at}: torch.OutOfMemoryError: {oom['message']}")
        lines += [f"  note: {note}" for note in r["notes"]]
    return "\n".join(lines) + "\n"

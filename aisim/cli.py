"""The `aisim` command: a parser, and a dispatcher that reports any `AisimError` in one place.

Each command's handler returns its exit status, or raises an `AisimError` (`aisim.errors`): `main` writes
its report to stderr and exits with its status. Anything else that escapes a handler is a bug in aisim:
one line names it (set `AISIM_TRACEBACK=1` to see the traceback) and the status is 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from . import __version__
from .errors import (
    AisimError,
    InputError,
    ListenError,
    OutputError,
    ServeError,
    UsageError,
    within,
)
from .fleet import options as fleet_options
from .scenario import (
    DEFAULT_SCENARIO,
    ScenarioError,
    check_file,
    render_json,
    render_text,
    schema_text,
)

if TYPE_CHECKING:
    from .scenario import Scenario
    from .scenario.loader import Checked
    from .tui.main import Server

def _number(kind: type[int | float], low: float, high: float | None = None,
            low_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a number of `kind` in [low, high] (low excluded when `low_open`), so that a bad
    flag is a one-line usage error rather than a traceback from deep in the run."""
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if value < low or (low_open and value == low) or (high is not None and value > high):
            bounds = f"{'above' if low_open else 'at least'} {low}" + (f" and at most {high}" if high is not None else "")
            raise argparse.ArgumentTypeError(f"{text} is out of range: it must be {bounds}")
        return value
    return parse


SEED = _number(int, 0)
PORT = _number(int, 0, 65535)
POSITIVE = _number(float, 0, low_open=True)
API_SERVERS = _number(int, 0, 64)
COUNT = _number(int, 1)
FRACTION = _number(float, 0, 1, low_open=True)


def _validate(args: argparse.Namespace) -> int:
    results = [check_file(path) for path in args.files]
    if args.format == "json":
        sys.stdout.write(render_json({r.file: r.problems for r in results}))
    else:
        for result in results:
            sys.stdout.write(render_text(result.problems) + _verdict(result))
    return 0 if all(r.valid for r in results) else 1


def _scenario(path: str, *, warnings: bool = True, verdict: bool = False) -> tuple[Scenario, Path]:
    """The scenario in `path` and its folder, its warnings written to stderr; a `ScenarioError` with its
    problems (and, with `verdict`, `aisim validate`'s closing line) when it is not valid."""
    checked = check_file(path)
    shown = checked.problems if warnings else [p for p in checked.problems if p.severity == "error"]
    if checked.scenario is None:
        raise ScenarioError(shown, closing=_verdict(checked) if verdict else "")
    sys.stderr.write(render_text(shown))
    return checked.scenario, checked.base_dir


def _verdict(result: Checked) -> str:
    """The closing line of a file's problems: `x.yaml: invalid (2 errors), 1 warning`."""
    errors = sum(p.severity == "error" for p in result.problems)
    warnings = len(result.problems) - errors
    verdict = "valid" if result.valid else f"invalid ({errors} error{'s' * (errors != 1)})"
    extra = f", {warnings} warning{'s' * (warnings != 1)}" if warnings else ""
    return f"{result.file}: {verdict}{extra}\n"


def _run(args: argparse.Namespace) -> int:
    from .engine import Simulation, build_report, unreachable_faults
    from .render import Progress, report_table
    from .scenario.units import parse_duration

    scenario, base_dir = _scenario(args.scenario, verdict=True)
    with within("--until"):
        until = parse_duration(args.until) if args.until else None
    if args.report and args.report[0] != "inference-perf":
        raise UsageError(f"--report: unknown format {args.report[0]!r}; the one there is: inference-perf")
    sim = Simulation(scenario, base_dir, seed=args.seed, telemetry=True if args.metrics else None)
    for name, why in unreachable_faults(sim).items():
        sys.stderr.write(f"aisim run: warning: API fault {name!r} never fires headless: {why}\n")
    if args.report:
        sim.timeline.per_token = True  # inference-perf's inter-token latencies need every token's time
    stop = sim.stop_time(until)
    with contextlib.ExitStack() as files:
        try:  # opened before the run: a path that cannot be written fails now, not after a long simulation
            outputs = {flag: files.enter_context(open(path, "w", encoding="utf-8")) for flag, path in
                       (("--timeline", args.timeline), ("--chrome-trace", args.chrome_trace), ("--metrics", args.metrics))
                       if path}
        except OSError as error:
            raise OutputError(error) from None
        progress = Progress(stop) if sys.stderr.isatty() and not args.quiet else None
        started = time.perf_counter()
        sim.run(until, progress.update if progress else None)
        wall = time.perf_counter() - started
        if progress:
            progress.close()
        if "--timeline" in outputs:
            sim.timeline.write_jsonl(outputs["--timeline"])
        if "--chrome-trace" in outputs:
            sim.timeline.write_chrome_trace(outputs["--chrome-trace"])
        if "--metrics" in outputs:
            _write_metrics(sim, args.metrics, outputs["--metrics"])
    if args.report:
        from .engine import write_inference_perf

        try:
            write_inference_perf(sim, Path(args.report[1]))
        except OSError as error:
            raise OutputError(error, "--report") from None
    report = build_report(sim, wall if args.timing else None)
    if args.json:
        sys.stdout.write(json.dumps(report, indent=2, sort_keys=False) + "\n")
    else:
        sys.stdout.write(report_table(report, wall))
    return 0


def _workload_import(args: argparse.Namespace) -> int:
    from .scenario.benchmarks import dump_yaml, inference_perf_workload, read_yaml

    try:
        config = read_yaml(Path(args.config))
    except OSError as error:
        raise InputError(str(error)) from None
    workload = inference_perf_workload(config, args.model)
    text = f"# imported by aisim workload import inference-perf {args.config}\n" + dump_yaml({"workload": workload})
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


def _write_metrics(sim: object, path: str, out: TextIO) -> None:
    """`--metrics`: the sampled DCGM series as CSV (a `.csv` name), else the final dcgm-exporter exposition."""
    from .engine import Simulation
    from .telemetry.exposition import series_csv

    assert isinstance(sim, Simulation) and sim.telemetry is not None
    out.write(series_csv(sim.timeline.records()) if path.lower().endswith(".csv") else sim.telemetry.exposition())


SERVE_FLAGS = {"--api-server-count", "--port", "--port-offset", "--tokenizer", "--host", "--delay-ms", "--config", "--seed", "--speed", "--record", "-h", "--help"}
SERVE_FLAGS |= fleet_options.FLAGS | fleet_options.SWITCHES


def split_foreign_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """Separate flags `aisim serve` does not know (vLLM's, from a controller's command line) from its own.

    An unknown `--flag` takes the next word as its value unless that word is a flag or a scenario
    file (`.yaml`, `.yml`, `.json`), so `--tensor-parallel-size 2` and `--enable-prefix-caching` both go.
    """
    kept: list[str] = []
    foreign: list[str] = []
    words = iter(range(len(argv)))
    for index in words:
        word = argv[index]
        if not word.startswith("-") or word.split("=", 1)[0] in SERVE_FLAGS:
            kept.append(word)
            if word in SERVE_FLAGS - {"-h", "--help"} - fleet_options.SWITCHES and index + 1 < len(argv):
                kept.append(argv[index + 1])
                next(words, None)
            continue
        foreign.append(word)
        following = argv[index + 1] if index + 1 < len(argv) else None
        if "=" not in word and following is not None and not following.startswith("-") \
                and not following.endswith((".yaml", ".yml", ".json")):
            foreign.append(following)
            next(words, None)
    return kept, foreign


def _serve(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from pydantic import TypeAdapter, ValidationError

    from .api.http.loop import run as run_loop
    from .api.pod import PodIdentity
    from .api.server import local_state, serve
    from .collector import settle_garbage_collector
    from .scenario.distributions import DurationDistribution

    if args.foreign:
        sys.stderr.write(f"aisim serve: ignoring options it does not simulate: {' '.join(args.foreign)}\n")
    loaded, base_dir = _scenario(args.config or args.scenario or str(DEFAULT_SCENARIO))
    delay = None
    if args.delay_ms:
        try:
            delay = TypeAdapter(DurationDistribution).validate_python(args.delay_ms.replace(" ", "") + "ms")
        except ValidationError:
            raise UsageError(f"--delay-ms: {args.delay_ms!r} is not a number or a range like 120-350") from None

    try:
        scenario = fleet_options.apply(loaded, args)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if args.tokenizer:
        from .api.content.hf_tokenizer import load_tokenizer

        try:
            load_tokenizer(args.tokenizer)
        except (OSError, RuntimeError, ValueError) as error:  # (the tokenizers library raises a plain Exception too)
            raise InputError(str(error)) from None

    count = scenario.server.api_server_count if args.api_server_count is None else args.api_server_count
    if count:
        _probe_listeners(scenario, args.host, args.port, args.port_offset)  # named before any process starts
        from .api.multiproc.supervisor import Options
        from .api.multiproc.supervisor import serve as serve_split

        return serve_split(scenario, Options(count, base_dir, args.host, args.port,
                                             args.port_offset, args.seed, delay, args.speed, args.record,
                                             PodIdentity.from_env(), args.tokenizer))

    async def main() -> None:
        state = local_state(scenario, base_dir, seed=args.seed, network_delay=delay, speed=args.speed,
                            record=args.record, pod=PodIdentity.from_env(), tokenizer_path=args.tokenizer)
        bound = await serve(state, args.host, args.port, args.port_offset)
        settle_garbage_collector()
        for (host, port), listener in zip(bound, scenario.server.listeners):
            scheme = "grpc" if "kserve-grpc" in listener.personalities else "http"
            print(f"aisim serving {scenario.metadata.name} at {scheme}://{host}:{port} "
                  f"({', '.join(listener.personalities)})", flush=True)
        print(f"models: {', '.join(m.id for m in scenario.models)}", flush=True)
        stopping = asyncio.Event()

        def on_signal() -> None:  # the first signal drains; a second one ends the grace period now
            if stopping.is_set():
                state.hurry = True
            stopping.set()

        for signum in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(signum, on_signal)
        await stopping.wait()
        grace = scenario.server.shutdown_grace / 1e9
        sys.stderr.write(f"aisim serve: draining ({grace:g}s grace; signal again to end it now)\n")
        cut = await state.drain()
        if cut:
            sys.stderr.write(f"aisim serve: {cut} request(s) still running at the end of the grace period were ended\n")

    try:
        run_loop(main())
    except KeyboardInterrupt:
        pass
    except OSError as error:  # an address in use, say
        raise ServeError(str(error)) from None
    return 0


def _probe_listeners(scenario: Scenario, host: str | None, port: int | None, port_offset: int) -> None:
    """Raise ListenError naming the first listener address that cannot be bound now: for a server whose own bind
    happens where its error cannot be reported in one line (split processes, the TUI's serving)."""
    from .api.listen import probe
    from .api.server import listener_port

    try:
        for index, listener in enumerate(scenario.server.listeners):
            chosen = port if (index == 0 and port is not None) else listener_port(listener.port, port_offset)
            probe(host or scenario.server.host, chosen, "gRPC" if "kserve-grpc" in listener.personalities else "")
    except ListenError:
        raise
    except OSError as error:  # a port moved out of range by the offset
        raise ServeError(str(error)) from None


def _tokenizer(args: argparse.Namespace) -> int:
    """`aisim tokenizer save DIR`: the built-in tokenizer's counting as a Hugging Face tokenizer folder."""
    from .api.content.hf_tokenizer import save

    try:
        written = save(args.directory)
    except OSError as error:
        raise OutputError(error) from None
    sys.stdout.write("".join(f"{path}\n" for path in written))
    return 0


FIT_MARGIN = 0.15


def _memory(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from .engine import memory_plan
    from .render import memory_lines
    from .scenario.models import EngineLimits, Model
    from .scenario.presets import GPU_PROFILES, MODEL_FAMILIES, GpuProfile
    from .scenario.quantization import gpu_problem

    cases: list[tuple[str, Model, GpuProfile, EngineLimits]] = []
    if args.scenario:
        scenario, _ = _scenario(args.scenario, warnings=False)
        devices = scenario.gpu_devices()
        for model in scenario.models:
            if model.placement is None or model.mock:
                continue
            gpu = devices[model.placement.gpus[0]].resolved()
            cases.append((model.id, model, gpu, model.engine))
    else:
        if not (args.model or args.config) or not args.gpu:
            raise UsageError("give a SCENARIO, or --model (or --config) and --gpu")
        if (args.model and args.model not in MODEL_FAMILIES) or args.gpu not in GPU_PROFILES:
            unknown = args.gpu if args.gpu not in GPU_PROFILES else args.model
            known = ", ".join(GPU_PROFILES if args.gpu not in GPU_PROFILES else MODEL_FAMILIES)
            raise UsageError(f"unknown {unknown!r}; choose one of {known}")
        limits = {"max_num_seqs": args.max_num_seqs, "max_num_batched_tokens": args.max_num_batched_tokens,
                  "max_model_len": args.max_model_len, "gpu_memory_utilization": args.gpu_memory_utilization,
                  "block_size": args.block_size, "kv_cache_dtype": args.kv_cache_dtype,
                  "enable_expert_parallel": args.enable_expert_parallel or None}
        engine = EngineLimits.model_validate({k: v for k, v in limits.items() if v is not None})
        source = {"family": args.model} if args.model else {"config": args.config}
        placement = {"gpus": ["gpu"], "tensorParallel": args.tensor_parallel,
                     **({"dataParallel": args.data_parallel} if args.data_parallel else {})}
        try:
            model = Model.model_validate({"id": args.model or Path(args.config).name, **source,
                                          **({"quantization": args.quantization} if args.quantization else {}),
                                          "engine": engine.model_dump(exclude_unset=True), "placement": placement},
                                         context={"base_dir": Path.cwd()})
        except ValidationError as error:
            raise UsageError("; ".join(e["msg"].removeprefix("Value error, ") for e in error.errors())) from None
        split = model.tensor_parallel_problem()
        if split:
            raise UsageError(f"--tensor-parallel: {split}")
        problem = gpu_problem(model.resolved(), GPU_PROFILES[args.gpu].compute_capability, GPU_PROFILES[args.gpu].vendor)
        if problem:
            raise UsageError(f"{args.gpu} cannot run it: {problem}")
        cases.append((args.model or model.resolved().name, model, GPU_PROFILES[args.gpu], model.engine))
    results = []
    for name, model, gpu, engine in cases:
        result = memory_plan(model, gpu, engine)
        results.append((name, model, gpu, result))
    if args.json:
        payload = [{"model": name, "gpu": gpu.name, **_plan_dict(result)} for name, _, gpu, result in results]
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        for name, model, gpu, result in results:
            sys.stdout.write(memory_lines(name, model, gpu, result, FIT_MARGIN) + "\n")
    return 0 if all(r.fits(FIT_MARGIN) for *_, r in results) else 1


def _plan_dict(result: object) -> dict[str, object]:
    import dataclasses

    data = dataclasses.asdict(result)  # type: ignore[call-overload]
    data.update(kv_tokens=result.kv_tokens, max_concurrency=round(result.max_concurrency, 2),  # type: ignore[attr-defined]
                fits=result.fits(FIT_MARGIN))  # type: ignore[attr-defined]
    return data


def _plan(args: argparse.Namespace) -> int:
    from .plan.command import plan_command

    return plan_command(args)


def _replay_snapshot(args: argparse.Namespace) -> int:
    from .engine import ALLOCATORS, load_snapshot, replay_all
    from .render import replay_table
    from .scenario.units import parse_size

    capacity = parse_size(args.capacity) if args.capacity else None
    tolerance = parse_size(args.tolerance)
    names = ALLOCATORS if args.allocator == "all" else (args.allocator,)
    results = replay_all(load_snapshot(args.snapshot), names, device=args.device, capacity=capacity,
                         sample_every=args.sample_every, tolerance=tolerance)
    records = [result.to_dict() for result in results]
    if args.json:
        sys.stdout.write(json.dumps({"snapshot": args.snapshot, "results": records}, indent=2) + "\n")
    else:
        sys.stdout.write(replay_table(args.snapshot, records))
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from .inspect_onnx import inspect_model, report_text, scenario_block

    report = inspect_model(args.model)
    text = scenario_block(report, args.gpu) if args.scenario else None
    if not report.valid and (args.json or args.scenario):
        sys.stderr.write("".join(f"aisim inspect: checker: {e}\n" for e in report.checker_errors))
    if text is not None:
        sys.stdout.write(text)
    elif args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(report_text(report))
    return 0 if report.valid else 1


def _tui(args: argparse.Namespace) -> int:
    from .tui.main import run

    return run(args, _tui_server)


def _tui_server(scenario: Scenario, base_dir: Path, args: argparse.Namespace) -> Server:
    """`aisim tui --serve`: the server's simulation and clock, and how to start serving (returns the URLs)."""
    from .api.link import LocalEngine
    from .api.server import local_state, serve

    _probe_listeners(scenario, args.host, args.port, 0)  # (a bind error inside the TUI would end in its traceback)
    state = local_state(scenario, base_dir, seed=args.seed, speed=args.speed)
    assert isinstance(state.engine, LocalEngine)  # the engine runs in this process

    async def start() -> str:
        bound = await serve(state, args.host, args.port)
        return ", ".join(f"http://{host}:{port}" for host, port in bound)

    return state.sim, state.engine.clock, start


def _list(args: argparse.Namespace) -> int:
    from .scenario.listing import listing

    sys.stdout.write(listing(args.what, args.json))
    return 0


def _schema(args: argparse.Namespace) -> int:
    sys.stdout.write(schema_text())
    return 0


def _replay(args: argparse.Namespace) -> int:
    from .replay.commands import replay

    return replay(args)


def _calibrate(args: argparse.Namespace) -> int:
    from .replay.commands import calibrate

    return calibrate(args)


def _add_replay_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`aisim replay` and `aisim calibrate` (implemented in `aisim.replay.commands`)."""
    def log_options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("log", metavar="LOG", help="request log: aisim JSONL (serve --record), Azure trace CSV, "
                            "or JSONL of timestamp, input_length, output_length")
        parser.add_argument("--format", choices=("auto", "aisim", "azure", "jsonl"), default="auto", help="log format")
        parser.add_argument("--timestamp-unit", choices=("s", "ms", "us"), default="s", help="plain JSONL timestamps' unit")
        parser.add_argument("--count", type=COUNT, metavar="N", help="only the first N requests")
        parser.add_argument("--model", help="send every request to this model (default: the logged one, else the "
                            "workload's first)")
        parser.add_argument("--seed", type=SEED, help="override the scenario's seed")
        parser.add_argument("--speed", type=POSITIVE, default=1.0, help="replay arrivals X times faster (default 1)")

    replay = commands.add_parser("replay", help="replay a request log against a scenario or a live endpoint; report drift")
    log_options(replay)
    replay.add_argument("--scenario", metavar="S", help="replay on this scenario's simulation (virtual time)")
    replay.add_argument("--against", metavar="URL", help="replay against this live endpoint (real time); with "
                        "--scenario, compare it with the simulation")
    replay.add_argument("--concurrency", type=COUNT, default=64, help="live: requests in flight at most (default 64)")
    replay.add_argument("--api-key", help="live: bearer token")
    replay.add_argument("--threshold", action="append", metavar="[METRIC=]PCT",
                        help="pass when |p95 drift| is within PCT %% (default 10); per metric like itl=25; repeatable")
    replay.add_argument("--itl", action="store_true", help="simulation: measure every token even when the log has no latencies")
    replay.add_argument("--output", metavar="FILE", help="write the replayed requests as an aisim request log")
    replay.add_argument("--report", metavar="FILE", help="write the drift report as JSON")
    replay.add_argument("--plot", metavar="FILE.html", help="write recorded vs replayed latency over time (HTML, SVG)")
    replay.add_argument("--json", action="store_true", help="print the drift report as JSON")
    replay.set_defaults(handler=_replay)

    calibrate = commands.add_parser("calibrate", help="fit a scenario's cost-model constants to a request log")
    log_options(calibrate)
    calibrate.add_argument("--scenario", metavar="S", required=True, help="the scenario to fit")
    calibrate.add_argument("--output", metavar="FILE", help="updated scenario (default: S.calibrated.yaml beside S)")
    calibrate.add_argument("--max-evaluations", type=COUNT, default=400, help="replays the search may run (default 400)")
    calibrate.add_argument("--json", action="store_true", help="print constants and drift as JSON")
    calibrate.set_defaults(handler=_calibrate)


def _schedule(args: argparse.Namespace) -> int:
    """`aisim schedule`: the engine's scheduler on a trace, one vLLM step record per line."""
    import gzip

    from .engine import ScheduleLimits, read_schedule, replay_schedule

    opener = gzip.open if args.trace.endswith(".gz") else open
    limits = ScheduleLimits(args.num_gpu_blocks, args.block_size, args.max_num_seqs, args.max_num_batched_tokens,
                    not args.no_prefix_caching, args.async_scheduling, args.max_model_len)
    try:
        with within(args.trace), contextlib.ExitStack() as files:
            with opener(args.trace, "rt", encoding="utf-8") as trace:
                requests = read_schedule(trace)
            out = files.enter_context(open(args.steps, "w", encoding="utf-8")) if args.steps else None
            steps = preempted = hits = 0
            peak = 0.0
            for record in replay_schedule(requests, limits):
                if out is not None:
                    out.write(json.dumps(record) + "\n")
                steps += 1
                preempted += len(record["preempted"])
                hits += sum(record["prefix_hit_tokens"].values())
                peak = max(peak, record["kv_usage"])
    except OSError as error:
        raise UsageError(f"{error.filename}: {error.strerror}") from None
    sys.stdout.write(f"{len(requests)} requests in {steps} steps: {preempted} preemptions, {hits} prefix-hit tokens, "
                     f"peak KV usage {peak:.1%}\n")
    return 0


def _add_schedule_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`aisim schedule` (implemented in `aisim.engine.schedule_trace`)."""
    schedule = commands.add_parser(
        "schedule", help="step the engine's vLLM scheduler through a token trace; write vLLM's step records",
        description="Run aisim's own scheduler (the code the engine runs) on a trace, arrivals counted in steps "
        "and one token per decode, no cost model and no clock, and write one JSON step record per scheduler "
        "step, the format tools/record_vllm_schedule.py records from vLLM itself. TRACE: JSON lines "
        '{"req_id", "arrival_step", "prompt_token_ids", "max_tokens"} (.gz read as gzip). Step record: '
        '{"step", "arrived", "n_waiting", "n_running", "total_scheduled_tokens", "n_prefill_tokens", '
        '"n_decode_reqs", "scheduled": [[req_id, tokens, "P"|"D", "new"|"resumed"|"run", '
        'num_computed_tokens_before]], "prefix_hit_tokens": {req_id: n}, "preempted", "finished", "kv_usage", '
        '"free_blocks"}. Step k adds the requests whose arrival_step is k, then schedules; every decode samples '
        "token 0; with --async each step's output is applied after the next step is scheduled. "
        "tests/data/schedules/README.md has the details.")
    schedule.add_argument("trace", metavar="TRACE.jsonl", help="the trace (JSON lines; .gz for gzip)")
    schedule.add_argument("--num-gpu-blocks", type=_number(int, 2), required=True, metavar="N",
                          help="KV cache blocks, vLLM's null block included")
    schedule.add_argument("--block-size", type=COUNT, required=True, metavar="B", help="tokens per block")
    schedule.add_argument("--max-num-seqs", type=COUNT, required=True, metavar="S", help="sequences per step at most")
    schedule.add_argument("--max-num-batched-tokens", type=COUNT, required=True, metavar="T",
                          help="tokens per step at most")
    schedule.add_argument("--no-prefix-caching", action="store_true", help="prefix caching off (default on)")
    schedule.add_argument("--async", dest="async_scheduling", action="store_true",
                          help="async scheduling: two batches in flight, as a GPU server's default")
    schedule.add_argument("--max-model-len", type=COUNT, default=32768, metavar="L",
                          help="context length (default 32768, the recorder's model)")
    schedule.add_argument("--steps", metavar="OUT.jsonl", help="write the step records here")
    schedule.set_defaults(handler=_schedule)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="aisim", description="AI inference service simulator.")
    parser.add_argument("--version", action="version", version=f"aisim {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    validate = commands.add_parser("validate", help="check scenario files and report every problem")
    validate.add_argument("files", nargs="+", metavar="FILE", help="scenario files (YAML or JSON)")
    validate.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    validate.set_defaults(handler=_validate)

    run = commands.add_parser("run", help="run a scenario headless on the virtual clock and report")
    run.add_argument("scenario", nargs="?", default=str(DEFAULT_SCENARIO), metavar="SCENARIO",
                     help="scenario file (default: the built-in default scenario)")
    run.add_argument("--json", action="store_true", help="print the report as JSON")
    run.add_argument("--timeline", metavar="FILE", help="write the timeline as JSON lines")
    run.add_argument("--chrome-trace", metavar="FILE", help="write a Chrome trace (opens in Perfetto)")
    run.add_argument("--metrics", metavar="FILE",
                     help="sample the GPUs and write the final DCGM exposition (FILE.prom) or the sampled series (FILE.csv)")
    run.add_argument("--seed", type=SEED, help="override the scenario's seed")
    run.add_argument("--until", metavar="DURATION", help="stop at this simulated time, like 10m")
    run.add_argument("--timing", action="store_true", help="add wall seconds and speed to the JSON report")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--report", nargs=2, metavar=("FORMAT", "DIR"),
                     help="also write the client's per-stage report; FORMAT inference-perf: its "
                     "stage_N_lifecycle_metrics.json and summary_lifecycle_metrics.json")
    run.set_defaults(handler=_run)

    workload = commands.add_parser("workload", help="work with workloads: import a benchmark client's configuration")
    actions = workload.add_subparsers(dest="action", metavar="ACTION", required=True)
    imported = actions.add_parser("import", help="write the scenario workload equivalent to a benchmark config")
    imported.add_argument("client", choices=("inference-perf",), help="the benchmark client")
    imported.add_argument("config", metavar="CONFIG.yaml", help="the client's configuration file")
    imported.add_argument("--model", help="the scenario model the requests go to (default: the config's model name)")
    imported.add_argument("-o", "--output", metavar="FILE", help="write the workload here (default: stdout)")
    imported.set_defaults(handler=_workload_import, command="workload import")  # errors: "aisim workload import: ..."

    serve = commands.add_parser("serve", help="serve a scenario's APIs in real time (OpenAI, vLLM, metrics)")
    serve.add_argument("scenario", nargs="?", metavar="SCENARIO", help="scenario file (default: the built-in default)")
    serve.add_argument("--config", metavar="FILE", help="scenario file (same as SCENARIO)")
    serve.add_argument("--port", type=PORT, help="port of the first listener (default: the scenario's, 8080)")
    serve.add_argument("--tokenizer", metavar="DIR",
                       help="count and /tokenize with this Hugging Face tokenizer: a folder with tokenizer.json, or a "
                            "model id in the local cache (vLLM's flag; default: aisim's built-in tokenizer)")
    serve.add_argument("--port-offset", type=int, default=0, metavar="N",
                       help="add N to every listener's port (--port still sets the first one): two servers of one "
                            "scenario side by side")
    serve.add_argument("--host", help="interface to bind (default: the scenario's, 127.0.0.1)")
    serve.add_argument("--delay-ms", metavar="MS", help="network delay added to every request: 200 or 120-350")
    serve.add_argument("--seed", type=SEED, help="override the scenario's seed")
    serve.add_argument("--speed", type=POSITIVE, default=1.0, help="virtual seconds per wall second (default 1)")
    serve.add_argument("--record", metavar="FILE", help="write every request to this JSONL request log (aisim replay reads it)")
    fleet_options.add_arguments(serve)
    serve.add_argument("--api-server-count", type=API_SERVERS, metavar="N",
                       help="N API-server processes and an engine core, as vLLM V1 runs (default: the "
                            "scenario's server.apiServerCount, 0: one process; docs/split-server.md)")
    serve.set_defaults(handler=_serve, foreign=[])

    tokenizer = commands.add_parser("tokenizer", help="the built-in tokenizer as a Hugging Face tokenizer folder")
    tokenizer_commands = tokenizer.add_subparsers(dest="action", required=True)
    save = tokenizer_commands.add_parser("save", help="write tokenizer.json and tokenizer_config.json that count as "
                                                      "aisim serve does (for guidellm --processor, aiperf --tokenizer)")
    save.add_argument("directory", metavar="DIR", help="the folder to write (created if missing)")
    save.set_defaults(handler=_tokenizer)

    memory = commands.add_parser("memory", help="predict weights, activations and KV-cache capacity, as vLLM sizes them")
    memory.add_argument("scenario", nargs="?", metavar="SCENARIO", help="a scenario: every simulated model in it")
    memory.add_argument("--model", help="a model family (llama-3-8b, ...)")
    memory.add_argument("--config", metavar="PATH", help="a Hugging Face config.json, or a folder holding one")
    memory.add_argument("--quantization", help="vLLM's --quantization (fp8 on an unquantized checkpoint, ...)")
    memory.add_argument("--gpu", help="a GPU profile (H100-SXM, ...)")
    memory.add_argument("--tensor-parallel", type=COUNT, default=1, metavar="N",
                        help="vLLM's --tensor-parallel-size: GPUs the weights are split over (default 1)")
    memory.add_argument("--data-parallel", type=COUNT, help="vLLM's --data-parallel-size (MoE: ranks share the experts)")
    memory.add_argument("--enable-expert-parallel", action="store_true", help="vLLM's --enable-expert-parallel")
    memory.add_argument("--max-num-seqs", type=COUNT, metavar="N",
                        help="vLLM's --max-num-seqs: sequences per step, which sizes the profiling run")
    memory.add_argument("--max-num-batched-tokens", type=COUNT, metavar="N",
                        help="vLLM's --max-num-batched-tokens: tokens per step, which sizes the activations")
    memory.add_argument("--max-model-len", type=COUNT, metavar="N",
                        help="vLLM's --max-model-len (default: the model's context length)")
    memory.add_argument("--gpu-memory-utilization", type=FRACTION, metavar="F",
                        help="vLLM's --gpu-memory-utilization: the share of GPU memory vLLM may use (default 0.9)")
    memory.add_argument("--block-size", type=COUNT, metavar="N", help="vLLM's --block-size: tokens per KV block (default 16)")
    memory.add_argument("--kv-cache-dtype", choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2"),
                        help="vLLM's --kv-cache-dtype (default auto: the model's dtype)")
    memory.add_argument("--json", action="store_true", help="print the figures as JSON")
    memory.set_defaults(handler=_memory)

    plan = commands.add_parser("plan", help="capacity planning: the cheapest deployment that meets the scenario's SLO")
    plan.add_argument("scenario", metavar="SCENARIO", help="a scenario with a plan: section")
    plan.add_argument("--json", action="store_true", help="print the whole result as JSON")
    plan.add_argument("--out", metavar="DIR", help="write plan.json, plan.csv, report.html, pareto.svg, pareto.png, "
                      "winner.yaml and vllm-serve.txt there")
    plan.add_argument("--jobs", type=COUNT, help="processes (default: every core; 1 runs serially)")
    plan.add_argument("--ray", metavar="ADDRESS", help="run one Ray task per configuration on this cluster "
                      "('local' starts one here; needs pip install 'aisim[ray]')")
    plan.add_argument("--cache", metavar="DIR", help="evaluation cache (default: ~/.cache/aisim/plan)")
    plan.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    plan.add_argument("--survive", type=_number(int, 0), help="override plan.survive")
    plan.add_argument("--requests", type=_number(int, 20), help="override plan.search.requests")
    plan.add_argument("--goal", choices=("cheapest", "goodput_per_gpu", "goodput_per_dollar"), help="override plan.goal")
    plan.add_argument("--target-rate", metavar="RATE", help="override plan.targetRate, like 20/s")
    plan.add_argument("--quiet", action="store_true", help="no progress bar")
    plan.add_argument("--all", action="store_true", help="evaluate every configuration, also those that cannot "
                      "rank first even at their throughput ceiling (pruned by default)")
    plan.set_defaults(handler=_plan)

    replay = commands.add_parser("replay-snapshot", help="replay a PyTorch memory snapshot through the allocator models")
    replay.add_argument("snapshot", metavar="SNAPSHOT",
                        help="torch.cuda.memory._dump_snapshot() pickle (or the same structure as JSON)")
    replay.add_argument("--allocator", choices=("caching", "buddy", "slab", "all"), default="all",
                        help="allocator model (default: all three)")
    replay.add_argument("--device", type=_number(int, 0), default=0, help="which device trace to replay (default 0)")
    replay.add_argument("--capacity", metavar="SIZE",
                        help="GPU memory, like 80GiB (default: from a recorded oom, else 80GiB)")
    replay.add_argument("--tolerance", metavar="SIZE", default="20MiB",
                        help="reserved memory difference that counts as a divergence (default 20MiB)")
    replay.add_argument("--sample-every", type=COUNT, metavar="N", help="events between samples (default: 200 samples)")
    replay.add_argument("--json", action="store_true", help="print the results as JSON")
    replay.set_defaults(handler=_replay_snapshot)

    inspect = commands.add_parser("inspect", help="read an ONNX model: ops, weights, shapes, FLOPs, a scenario block")
    inspect.add_argument("model", metavar="MODEL.onnx", help="ONNX model file (needs: pip install 'aisim[inspect]')")
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")
    inspect.add_argument("--scenario", action="store_true", help="print only a scenario `models:` block for it")
    inspect.add_argument("--gpu", default="gpu0", metavar="ID", help="GPU id the block places the model on (default gpu0)")
    inspect.set_defaults(handler=_inspect)

    tui = commands.add_parser("tui", help="watch a scenario's simulation live in a terminal UI (or attach to a server)")
    tui.add_argument("scenario", nargs="?", metavar="SCENARIO",
                     help="scenario file (default: the built-in default scenario)")
    tui.add_argument("--speed", type=POSITIVE, help="virtual seconds per wall second (default 10; with --serve 1, "
                                                    "the pace of aisim serve)")
    tui.add_argument("--paused", action="store_true", help="start paused (space resumes, n steps)")
    tui.add_argument("--seed", type=SEED, help="override the scenario's seed")
    tui.add_argument("--fps", type=POSITIVE, default=30.0, help="frames per second (default 30)")
    tui.add_argument("--serve", action="store_true", help="also serve the scenario's APIs while the TUI shows them")
    tui.add_argument("--workload", action="store_true",
                     help="with --serve: also run the scenario's workload, as background traffic beside the clients'")
    tui.add_argument("--screenshot-dir", metavar="DIR",
                     help="where the screenshot key (s) writes its SVG (default: the working directory)")
    tui.add_argument("--port", type=PORT, help="with --serve: port of the first listener")
    tui.add_argument("--host", help="with --serve: interface to bind")
    tui.add_argument("--attach", metavar="URL", help="watch a running `aisim serve` through its /admin/events stream")
    tui.add_argument("--token", help="with --attach: the server's admin token")
    tui.set_defaults(handler=_tui)

    _add_replay_commands(commands)
    _add_schedule_command(commands)

    schema = commands.add_parser("schema", help="print the JSON Schema of the scenario language")
    schema.set_defaults(handler=_schema)

    listing = commands.add_parser("list", help="list the GPU profiles or the model families a scenario can name")
    listing.add_argument("what", choices=("gpus", "models"), help="gpus: GPU profiles with their memory; models: model "
                         "families with their task and shipped config")
    listing.add_argument("--json", action="store_true", help="print the rows as JSON")
    listing.set_defaults(handler=_list)
    _explain_commands(parser)
    return parser


class _ExampleFormatter(argparse.HelpFormatter):
    """argparse's formatter, but an `example:` epilog keeps its lines (the description is still wrapped)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("example:"):
            return "".join(indent + line + "\n" for line in text.splitlines()).rstrip("\n")
        return super()._fill_text(text, width, indent)


EXAMPLES = {
    "validate": "aisim validate scenarios/default.yaml scenarios/oom.yaml",
    "run": "aisim run scenarios/default.yaml --until 2m --json",
    "workload": "aisim workload import inference-perf config.yml --model llama -o workload.yaml",
    "workload import": "aisim workload import inference-perf config.yml --model llama -o workload.yaml",
    "serve": "aisim serve scenarios/default.yaml --port 8000",
    "tokenizer": "aisim tokenizer save ./aisim-tokenizer",
    "tokenizer save": "aisim tokenizer save ./aisim-tokenizer",
    "memory": "aisim memory --model llama-3-8b --gpu H100-SXM --max-model-len 8192",
    "plan": "aisim plan scenarios/plan-llama3-8b.yaml --out plan-out",
    "replay-snapshot": "aisim replay-snapshot snapshot.pickle --allocator caching",
    "inspect": "aisim inspect model.onnx --scenario",
    "tui": "aisim tui scenarios/oom.yaml",
    "replay": "aisim replay requests.jsonl --scenario scenarios/default.yaml",
    "calibrate": "aisim calibrate requests.jsonl --scenario scenarios/default.yaml",
    "schedule": "aisim schedule trace.jsonl --num-gpu-blocks 512 --block-size 16 --max-num-seqs 64 "
                "--max-num-batched-tokens 2048",
    "schema": "aisim schema > scenario.schema.json",
    "list": "aisim list gpus",
}
"""One example command line per subcommand, shown at the foot of its --help (tests/test_cli_help.py checks that
every subcommand has one)."""


def _explain_commands(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """Give every subcommand (nested ones too) its one-line help as description, unless it has a longer one, and its
    example as epilog."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help for choice in action._choices_actions}
        for name, sub in action.choices.items():
            full = f"{prefix}{name}"
            if not sub.description and helps.get(name):
                text = str(helps[name])
                sub.description = text[0].upper() + text[1:] + "."
            if full in EXAMPLES:
                sub.epilog = f"example:\n  {EXAMPLES[full]}"
                sub.formatter_class = _ExampleFormatter
            _explain_commands(sub, f"{full} ")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    foreign: list[str] = []
    if words[:1] == ["serve"]:
        kept, foreign = split_foreign_flags(words[1:])
        words = ["serve", *kept]
    args = parser.parse_args(words)
    if foreign:
        args.foreign = foreign
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args))
    except AisimError as error:
        sys.stderr.write(error.report(args.command))
        return error.exit_status
    except KeyboardInterrupt:
        sys.stderr.write(f"aisim {args.command}: interrupted\n")
        return 130
    except Exception as error:
        if os.environ.get("AISIM_TRACEBACK"):
            raise
        text = str(error).strip().splitlines()
        sys.stderr.write(f"aisim {args.command}: unexpected {type(error).__name__}{': ' + text[0] if text else ''} "
                         "(a bug in aisim; AISIM_TRACEBACK=1 shows where)\n")
        return 1

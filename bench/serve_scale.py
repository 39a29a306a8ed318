"""`aisim serve` split across processes against one process and a bare Tornado handler, in the same run.

Part 1, throughput: non-streaming chat (`bench/scenarios/throughput.yaml`) and KServe infer (`kserve.yaml`), each
served by a bare Tornado handler returning aisim's answer, by single-process `aisim serve`, and by `aisim serve
--api-server-count N`; `wrk` (Debian package `wrk`) on the load core, interleaved rounds. Printed per round and
as medians: requests/s and the CPU microseconds per request of every process (each API server, the engine
core; the supervisor does nothing per request), from /proc.
Targets (issue 17): the engine core's CPU per request <= 0.35x the bare handler's (what does not scale out), and
the split server's total <= 1.8x.
The KServe part also loads each aisim server's gRPC listener (`kserve-grpc`, ModelInfer) with `bench/grpc_load.py`
over 4 connections (a Python client: it can be the bottleneck, so the CPU per request is what to read); there is
no bare gRPC handler, so single and split are compared with each other.

Part 2, streams: 500 concurrent streams x 200 tokens at 50 tokens/s (`streams.yaml`), Node's node:http client
(`bench/stream_client.mjs`) on the load core, single-process and split: p99 |emitted gap - simulated 20 ms|
after each stream's first 10 tokens (target <= 5 ms) and over all gaps (<= 10 ms), tokens/s against the asked
(>= 95 %), peak RSS and CPU of every process.

    python bench/serve_scale.py [--api-servers 2] [--server-cores 0] [--load-core 1] [--seconds 3] [--rounds 3]

On this 2-core machine the server's processes share `--server-cores` (all of them on core 0 by default, the
load on core 1), so requests/s here is what one core gives; the CPU per request is what decides how far N API
servers on N cores scale.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
from http_load import ROOT, cpu_seconds, free_port, stolen_seconds

CHAT = {"model": "bench", "messages": [{"role": "user", "content": "Say something."}], "max_tokens": 12}
INFER = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 16], "data": [0.5] * 16}]}
GAP_S = 0.020
WARMUP = 10


@dataclass
class Server:
    """One server under test and its processes (name -> pid)."""

    name: str
    process: subprocess.Popen[str]
    url: str
    pids: dict[str, int] = field(default_factory=dict)
    grpc: str = ""
    """The gRPC listener's host:port, if the scenario has one."""

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.process.kill()


def start_aisim(scenario: str, cores: str, api_servers: int) -> Server:
    port = free_port()
    command = ["taskset", "-c", cores, sys.executable, "-m", "aisim", "serve", str(ROOT / "bench" / "scenarios" / scenario),
               "--port", str(port), "--api-server-count", str(api_servers)]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline() if process.stdout else ""
    if "serving" not in line:
        raise RuntimeError(f"aisim did not start: {process.stderr.read() if process.stderr else ''}")
    server = Server(f"split x{api_servers}" if api_servers else "single", process, f"http://127.0.0.1:{port}")
    while line and not line.startswith("models:"):  # the other listeners' lines, then the models'
        found = re.search(r"grpc://(\S+)", line)
        server.grpc = found.group(1) if found else server.grpc
        line = process.stdout.readline() if process.stdout else ""
    if not api_servers:
        server.pids = {"aisim": process.pid}
        return server
    while True:  # the supervisor names its processes on stderr once they all serve
        text = process.stderr.readline() if process.stderr else ""
        found = re.search(r"engine core pid (\d+), \d+ API server\(s\) pids ([\d ]+)", text)
        if found:
            break
        if not text:
            raise RuntimeError("no process line from aisim serve --api-server-count")
    server.pids = {"engine core": int(found.group(1))}
    for rank, pid in enumerate(found.group(2).split()):
        server.pids[f"api {rank}"] = int(pid)
    return server


def start_bare(cores: str, url: str, path: str, body: object) -> Server:
    answer = httpx.post(url + path, json=body)
    answer.raise_for_status()
    with tempfile.NamedTemporaryFile("wb", delete=False) as body_file:
        body_file.write(answer.content)
    port = free_port()
    process = subprocess.Popen(["taskset", "-c", cores, sys.executable, str(ROOT / "bench" / "bare_server.py"), str(port),
                                body_file.name, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if process.stdout is None or not process.stdout.readline():
        raise RuntimeError("the bare server did not start")
    return Server("bare", process, f"http://127.0.0.1:{port}", {"bare": process.pid})


def wrk(server: Server, path: str, body: object, seconds: int, connections: int, core: str) -> tuple[float, dict[str, float], float]:
    """requests/s, CPU us per request of each of the server's processes, share of the server core stolen."""
    before = {name: cpu_seconds(pid) for name, pid in server.pids.items()}
    stolen = stolen_seconds()
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                     f"wrk.body = {json.dumps(json.dumps(body))}\n")
    out = subprocess.run(["taskset", "-c", core, "wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s", script.name,
                          server.url + path], capture_output=True, text=True, check=True).stdout
    if re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        raise RuntimeError(f"failed responses:\n{out}")
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    cpu = {name: (cpu_seconds(pid) - before[name]) / requests * 1e6 for name, pid in server.pids.items()}
    return rate, cpu, (stolen_seconds() - stolen) / seconds


def grpc_load(server: Server, request: str, seconds: int, connections: int, core: str) -> tuple[float, dict[str, float]]:
    """requests/s and the CPU us per request of each of the server's processes, for ModelInfer over gRPC."""
    before = {name: cpu_seconds(pid) for name, pid in server.pids.items()}
    out = subprocess.run(["taskset", "-c", core, sys.executable, str(ROOT / "bench" / "grpc_load.py"), server.grpc, request,
                          str(seconds), str(connections), "4"], capture_output=True, text=True, check=True).stdout
    result = json.loads(out.splitlines()[-1])
    if result["errors"]:
        raise RuntimeError(f"{result['errors']} failed gRPC calls")
    cpu = {name: (cpu_seconds(pid) - before[name]) / result["requests"] * 1e6 for name, pid in server.pids.items()}
    return result["requests"] / result["seconds"], cpu


def grpc_rounds(servers: list[Server], args: argparse.Namespace) -> None:
    """ModelInfer over gRPC against each aisim server, interleaved rounds; medians of the CPU per request."""
    from tritonclient.grpc import service_pb2

    message = service_pb2.ModelInferRequest(model_name="bench")
    message.inputs.add(name="x", datatype="FP32", shape=[1, 16])
    message.raw_input_contents.append(np.full(16, 0.5, dtype="<f4").tobytes())
    with tempfile.NamedTemporaryFile("wb", suffix=".bin", delete=False) as file:
        file.write(message.SerializeToString())
    rows: dict[str, list[tuple[float, dict[str, float]]]] = {s.name: [] for s in servers}
    for server in servers:
        grpc_load(server, file.name, 1, args.connections, args.load_core)
    for round_ in range(args.rounds):
        for server in servers:
            rate, cpu = grpc_load(server, file.name, args.seconds, args.connections, args.load_core)
            rows[server.name].append((rate, cpu))
            print(f"grpc   round {round_ + 1} {server.name:<9} {rate:8,.0f} requests/s; CPU us per request: "
                  f"{', '.join(f'{n} {c:.0f}' for n, c in cpu.items())} (total {sum(cpu.values()):.0f})", flush=True)
    for name, results in rows.items():
        cpu = {p: statistics.median(c[p] for _, c in results) for p in results[0][1]}
        print(f"grpc   median  {name:<9} {statistics.median(r for r, _ in results):8,.0f} requests/s; CPU us per request "
              f"{', '.join(f'{n} {c:.0f}' for n, c in cpu.items())}; total {sum(cpu.values()):.0f}", flush=True)


def throughput(args: argparse.Namespace) -> None:
    for label, scenario, path, body in (("chat", "throughput.yaml", "/v1/chat/completions", CHAT),
                                        ("kserve", "kserve.yaml", "/v2/models/bench/infer", INFER)):
        single = start_aisim(scenario, args.server_cores, 0)
        split = start_aisim(scenario, args.server_cores, args.api_servers)
        bare = start_bare(args.server_cores, single.url, path, body)
        servers = [bare, single, split]
        results: dict[str, list[tuple[float, dict[str, float]]]] = {s.name: [] for s in servers}
        try:
            time.sleep(0.3)
            for server in servers:  # warm up (imports, caches, the first connections)
                wrk(server, path, body, 1, args.connections, args.load_core)
            for round_ in range(args.rounds):
                for server in servers:
                    rate, cpu, stolen = wrk(server, path, body, args.seconds, args.connections, args.load_core)
                    results[server.name].append((rate, cpu))
                    each = ", ".join(f"{n} {c:.0f}" for n, c in cpu.items())
                    print(f"{label:<6} round {round_ + 1} {server.name:<9} {rate:8,.0f} requests/s; CPU us per request: "
                          f"{each} (total {sum(cpu.values()):.0f}); {stolen:.0%} stolen", flush=True)
            if single.grpc:
                grpc_rounds([single, split], args)
        finally:
            for server in servers:
                server.stop()
        medians = {name: (statistics.median(r for r, _ in rows),
                          {p: statistics.median(c[p] for _, c in rows) for p in rows[0][1]}) for name, rows in results.items()}
        bare_cpu = medians["bare"][1]["bare"]
        for name, (rate, cpu) in medians.items():
            total = sum(cpu.values())
            print(f"{label:<6} median  {name:<9} {rate:8,.0f} requests/s; CPU us per request "
                  f"{', '.join(f'{n} {c:.0f}' for n, c in cpu.items())}; total {total:.0f} = {total / bare_cpu:.2f}x bare")
        split_cpu = medians[split.name][1]
        engine = split_cpu["engine core"] / bare_cpu
        total = sum(split_cpu.values()) / bare_cpu
        print(f"{label:<6} target  engine core {engine:.2f}x bare (<= 0.35: {'PASS' if engine <= 0.35 else 'FAIL'}); "
              f"split total {total:.2f}x bare (<= 1.8: {'PASS' if total <= 1.8 else 'FAIL'})", flush=True)


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def streams(args: argparse.Namespace) -> None:
    for count in (0, args.api_servers):
        server = start_aisim("streams.yaml", args.server_cores, count)
        try:
            time.sleep(0.3)
            cpu = {name: cpu_seconds(pid) for name, pid in server.pids.items()}
            started = time.perf_counter()
            out = subprocess.run(["taskset", "-c", args.load_core, "node", str(ROOT / "bench" / "stream_client.mjs"),
                                  server.url + "/v1/chat/completions", str(args.streams), str(args.tokens)],
                                 capture_output=True, text=True, check=True)
            wall = time.perf_counter() - started
            rss = {name: peak_rss_mb(pid) for name, pid in server.pids.items()}
            cpu = {name: cpu_seconds(pid) - cpu[name] for name, pid in server.pids.items()}
        finally:
            server.stop()
        results = [[ms / 1000 for ms in stamps] for stamps in json.loads(out.stdout)["stamps"]]
        stray = np.abs(np.concatenate([np.diff(s) for s in results if len(s) > 1]) - GAP_S) * 1000
        steady = np.abs(np.concatenate([np.diff(s[WARMUP:]) for s in results if len(s) > WARMUP + 1]) - GAP_S) * 1000
        tokens = sum(len(s) for s in results)
        spans = [s[-1] - s[0] for s in results if len(s) > 1]
        asked = args.streams / GAP_S
        rate = tokens / float(np.median(spans)) if spans else 0.0
        p99_all, p99_steady = np.percentile(stray, 99), np.percentile(steady, 99)
        print(f"streams {server.name:<9} {args.streams} x {args.tokens}: {tokens:,} chunks in {wall:.1f} s; "
              f"|gap - 20 ms| p99 {p99_steady:.2f} ms after {WARMUP} tokens (<= 5: {'PASS' if p99_steady <= 5 else 'FAIL'}), "
              f"{p99_all:.2f} ms over all (<= 10: {'PASS' if p99_all <= 10 else 'FAIL'}), max {stray.max():.1f} ms; "
              f"{rate:,.0f} tokens/s = {rate / asked:.1%} of asked (>= 95 %: {'PASS' if rate >= 0.95 * asked else 'FAIL'})")
        print(f"streams {server.name:<9} peak RSS MB: {', '.join(f'{n} {v:.0f}' for n, v in rss.items())}; CPU s: "
              f"{', '.join(f'{n} {v:.2f}' for n, v in cpu.items())}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api-servers", type=int, default=2)
    parser.add_argument("--server-cores", default="0", help="taskset list for every server process (default 0)")
    parser.add_argument("--load-core", default="1", help="taskset list for the load (default 1)")
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--part", choices=("all", "throughput", "streams"), default="all")
    args = parser.parse_args()
    if args.part in ("all", "throughput"):
        throughput(args)
    if args.part in ("all", "streams"):
        streams(args)


if __name__ == "__main__":
    main()

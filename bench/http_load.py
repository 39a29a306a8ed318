"""What the server benchmarks share: free ports, waiting for a server to start, and `wrk` runs."""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Protocol

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(process: subprocess.Popen[str]) -> None:
    """Wait for the server's first line on stdout (its startup line)."""
    line = process.stdout.readline() if process.stdout else ""
    if not line:
        raise RuntimeError(f"server did not start: {process.stderr.read() if process.stderr else ''}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux `/proc/PID/stat`, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stolen_seconds(core: int = 0) -> float:
    """Time the hypervisor has given a core's turn to other guests so far (`/proc/stat`, the steal column):
    on a shared VM, the noise that makes one run of the same server slower than the next."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{core} "):
            return int(line.split()[8]) / os.sysconf("SC_CLK_TCK")
    return 0.0


def wrk(url: str, body: object, seconds: int, connections: int, pid: int) -> tuple[float, float, float]:
    """Requests per second of `wrk` POSTing `body` (JSON) to `url`, the CPU microseconds the server process
    `pid` (on core 0) spent per request meanwhile, and the share of core 0 the host stole; fails on any
    non-2xx answer."""
    used, stolen = cpu_seconds(pid), stolen_seconds()
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                     f"wrk.body = {json.dumps(json.dumps(body))}\n")
    out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s", script.name, url],
                         capture_output=True, text=True, check=True).stdout
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"{errors.group(1)} failed responses:\n{out}")
    used, stolen = cpu_seconds(pid) - used, stolen_seconds() - stolen
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    return rate, used / requests * 1e6, stolen / seconds


class ExtraLoad(Protocol):
    """A second wire measured on the same aisim server in the same rounds (`compare(..., extra=)`)."""

    name: str

    def start(self, server: subprocess.Popen[str]) -> None:
        """Read what the load needs from the server once it has started (its other listeners' lines)."""

    def run(self, seconds: int, connections: int, pid: int) -> tuple[float, float, float]:
        """(requests/s, the server's CPU microseconds per request, the share of its core stolen), as `wrk`."""
        ...


def compare(scenario: Path, path: str, body: object, target: float, what: str, description: str,
            extra: ExtraLoad | None = None) -> None:
    """Requests/s of `aisim serve SCENARIO` against a bare Tornado handler that returns the body aisim
    answered, both pinned to one core, under the same `wrk` load, in alternating rounds (a shared machine's
    speed drifts by 10-20 % between runs of a few seconds: one run of each gave ratios from 0.55 to 0.70
    for the same build); prints each round (with each server's CPU time per request and the share of its core the host stole)
    and the median of the rounds' ratios."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args()
    aisim_port, bare_port = free_port(), free_port()
    aisim = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-m", "aisim", "serve", str(scenario),
                              "--port", str(aisim_port)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(aisim)
        if extra is not None:
            extra.start(aisim)
        url = f"http://127.0.0.1:{aisim_port}{path}"
        answer = httpx.post(url, json=body)
        answer.raise_for_status()
        with tempfile.NamedTemporaryFile("wb", delete=False) as body_file:
            body_file.write(answer.content)
        bare = subprocess.Popen(["taskset", "-c", "0", sys.executable, str(ROOT / "bench" / "bare_server.py"),
                                 str(bare_port), body_file.name, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        try:
            wait_ready(bare)
            time.sleep(0.2)
            rounds = []
            extras: list[tuple[float, float, float, float]] = []
            for _ in range(args.rounds):
                baseline, bare_cpu, bare_stolen = wrk(f"http://127.0.0.1:{bare_port}{path}", body, args.seconds,
                                                      args.connections, bare.pid)
                measured, aisim_cpu, aisim_stolen = wrk(url, body, args.seconds, args.connections, aisim.pid)
                rounds.append((baseline, measured))
                print(f"round     bare {baseline:,.0f} requests/s ({bare_cpu:.0f} us CPU each, {bare_stolen:.0%} stolen), "
                      f"aisim {measured:,.0f} requests/s ({aisim_cpu:.0f} us CPU each, {aisim_stolen:.0%} stolen): "
                      f"{measured / baseline:.2f}", flush=True)
                if extra is not None:
                    other, other_cpu, other_stolen = extra.run(args.seconds, args.connections, aisim.pid)
                    extras.append((measured, aisim_cpu, other, other_cpu))
                    print(f"          aisim over {extra.name} {other:,.0f} requests/s ({other_cpu:.0f} us CPU each, "
                          f"{other_stolen:.0%} stolen): {other / measured:.2f} of HTTP's", flush=True)
        finally:
            bare.terminate()
    finally:
        aisim.terminate()
    ratio = statistics.median(measured / baseline for baseline, measured in rounds)
    print(f"baseline  bare Tornado handler, same body: {statistics.median(b for b, _ in rounds):,.0f} requests/s")
    print(f"aisim     aisim serve, {what}: {statistics.median(m for _, m in rounds):,.0f} requests/s")
    print(f"ratio     aisim / bare, median of {len(rounds)} rounds: {ratio:.2f} "
          f"(target >= {target}: {'PASS' if ratio >= target else 'FAIL'})")
    if extra is not None and extras:
        print(f"{extra.name:<9} aisim serve over {extra.name}: {statistics.median(o for _, _, o, _ in extras):,.0f} requests/s, "
              f"{statistics.median(o / m for m, _, o, _ in extras):.2f} of HTTP's (median of rounds); server CPU per "
              f"request {statistics.median(c for _, _, _, c in extras):.0f} us against HTTP's "
              f"{statistics.median(c for _, c, _, _ in extras):.0f} us")

"""Non-streaming chat throughput of `aisim serve` against a bare Tornado handler, measured in the same run.

Both servers run in their own process on one core and answer `POST /v1/chat/completions`; the
bare handler returns a body captured from aisim's answer, so the difference is everything aisim
does per request (parsing, validation, the fault book, token counting, content, the engine's
events, metrics). The load is `wrk` (Debian package `wrk`) with 32 connections for 5 s each.
Target (issue 4): ratio >= 0.7.

    python bench/serve_throughput.py [--seconds 5] [--connections 32]
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
BODY = {"model": "bench", "messages": [{"role": "user", "content": "Say something."}], "max_tokens": 12}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(process: subprocess.Popen[str]) -> None:
    line = process.stdout.readline() if process.stdout else ""
    if not line:
        raise RuntimeError(f"server did not start: {process.stderr.read() if process.stderr else ''}")


def wrk(url: str, seconds: int, connections: int) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                     f"wrk.body = {json.dumps(json.dumps(BODY))}\n")
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s", script.name, url],
                         capture_output=True, text=True, check=True).stdout
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"{errors.group(1)} failed responses:\n{out}")
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args()
    aisim_port, bare_port = free_port(), free_port()
    aisim = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-m", "aisim", "serve",
                              str(ROOT / "bench" / "scenarios" / "throughput.yaml"), "--port", str(aisim_port)],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(aisim)
        url = f"http://127.0.0.1:{aisim_port}/v1/chat/completions"
        sample = httpx.post(url, json=BODY).content
        with tempfile.NamedTemporaryFile("wb", delete=False) as body_file:
            body_file.write(sample)
        bare = subprocess.Popen(["taskset", "-c", "0", sys.executable, str(ROOT / "bench" / "bare_server.py"),
                                 str(bare_port), body_file.name], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_ready(bare)
            time.sleep(0.2)
            baseline = wrk(f"http://127.0.0.1:{bare_port}/v1/chat/completions", args.seconds, args.connections)
            measured = wrk(url, args.seconds, args.connections)
        finally:
            bare.terminate()
    finally:
        aisim.terminate()
    print(f"baseline  bare Tornado handler, same body: {baseline:,.0f} requests/s")
    print(f"aisim     aisim serve, mock model answering at once: {measured:,.0f} requests/s")
    print(f"ratio     aisim / bare: {measured / baseline:.2f} (target >= 0.7: {'PASS' if measured / baseline >= 0.7 else 'FAIL'})")


if __name__ == "__main__":
    main()

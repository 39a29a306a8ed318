"""A mixed soak of `aisim serve --api-server-count N --record`: does every process's memory reach a plateau?

Workers send a seeded mix of operations for `--seconds` (default 300): chat, completions and Responses requests
streamed and not (a local route and a passed-on one), `/tokenize`, `/metrics` scrapes, and clients that go away
mid-stream or before the first byte on both kinds of route. Responses are sent with `store: false`: the store of
responses is bounded by design (10,000, `openai.store`), and filling it is not what this looks for. Every `--every` seconds the resident memory (VmRSS from
/proc/PID/status) of each process (the supervisor, the engine core, each API server) is sampled. Printed: per
process, RSS after the warm-up, in the middle and at the end, the slope of a line fitted to the second half
(MiB/min) and whether it plateaus (the last quarter's mean within max(2 MiB, 3 %) of the second quarter's); then
the operations, their errors, the exit status and the request log's records (each request once, no negative
`frontend`).

    python bench/split_soak.py [--seconds 300] [--api-servers 2] [--workers 8] [--every 2] [--timeline-window 10000]

A serving simulation keeps a rolling window of its timeline (`engine.simulation.ROLLING_RECORDS`, 100,000 records of
each kind: about 110 MiB of step runs once full, after some 10 minutes of a busy server): bounded, but 5 minutes do
not fill it, so the engine core's RSS would still climb for that reason alone. The soak shrinks the window to
`--timeline-window` records (`AISIM_TIMELINE_WINDOW`; 0: the server's own), which fill in about a minute here: what
grows after that grows per request.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "bench" / "scenarios" / "soak.yaml"
USER = [{"role": "user", "content": "Say something about memory."}]
OPS = {  # name: weight
    "chat-stream": 20, "chat": 15, "completions": 8, "responses-stream": 10, "responses": 10, "tokenize": 6,
    "metrics": 4, "chat-gone-mid-stream": 8, "responses-gone-mid-stream": 8, "chat-gone-before-first-byte": 5,
    "responses-gone-before-first-byte": 6,
}
GENERATING = {"chat-stream", "chat", "completions", "responses-stream", "responses", "chat-gone-mid-stream",
              "responses-gone-mid-stream", "chat-gone-before-first-byte", "responses-gone-before-first-byte"}


def rss_mib(pid: int) -> float:
    found = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(found.group(1)) / 1024 if found else 0.0


async def one(client: httpx.AsyncClient, url: str, op: str, rng: np.random.Generator) -> str:
    """Run one operation; returns 'ok' or what went wrong."""
    tokens = int(rng.integers(4, 40))
    quick = {"model": "quick", "max_tokens": tokens}
    long_chat = {"model": "llama", "messages": USER, "max_tokens": 2000, "ignore_eos": True}
    long_resp = {"model": "llama", "input": "Say something.", "max_output_tokens": 2000, "ignore_eos": True,
                 "store": False}
    if op in ("chat-stream", "chat"):
        body, path = {**quick, "messages": USER, "stream": op == "chat-stream"}, "/v1/chat/completions"
    elif op == "completions":
        body, path = {**quick, "prompt": "Once upon a time"}, "/v1/completions"
    elif op in ("responses-stream", "responses"):
        body = {"model": "quick", "input": "Say something.", "max_output_tokens": tokens, "store": False,
                "stream": op == "responses-stream"}
        path = "/v1/responses"
    elif op == "tokenize":
        body, path = {"model": "quick", "prompt": "lorem ipsum " * tokens}, "/tokenize"
    elif op == "metrics":
        response = await client.get(url + "/metrics")
        return "ok" if response.status_code == 200 else f"status {response.status_code}"
    elif op.endswith("mid-stream"):
        body = {**(long_chat if op.startswith("chat") else long_resp), "stream": True}
        path = "/v1/chat/completions" if op.startswith("chat") else "/v1/responses"
        async with client.stream("POST", url + path, json=body) as response:
            if response.status_code != 200:
                return f"status {response.status_code}"
            lines = 0
            async for _ in response.aiter_lines():
                lines += 1
                if lines >= 4:
                    return "ok"  # leaves the block: the connection closes mid-stream
        return "ended before it was left"
    else:  # gone before the first byte: a client whose read timeout is shorter than the answer
        body = long_chat if op.startswith("chat") else long_resp
        path = "/v1/chat/completions" if op.startswith("chat") else "/v1/responses"
        try:
            await client.post(url + path, json=body, timeout=httpx.Timeout(10, read=0.2))
        except httpx.ReadTimeout:
            return "ok"
        return "answered before the client left"
    if body.get("stream"):
        async with client.stream("POST", url + path, json=body) as response:
            async for _ in response.aiter_lines():
                pass
            return "ok" if response.status_code == 200 else f"status {response.status_code}"
    response = await client.post(url + path, json=body)
    return "ok" if response.status_code == 200 else f"status {response.status_code}"


async def load(url: str, seconds: float, workers: int, seed: int, counts: collections.Counter[str],
               errors: collections.Counter[str]) -> None:
    names, weights = list(OPS), np.array(list(OPS.values()), dtype=float)
    deadline = time.monotonic() + seconds

    async def worker(index: int) -> None:
        rng = np.random.default_rng([seed, index])
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_keepalive_connections=2)) as client:
            while time.monotonic() < deadline:
                op = names[rng.choice(len(names), p=weights / weights.sum())]
                try:
                    result = await one(client, url, op, rng)
                except httpx.HTTPError as error:
                    result = type(error).__name__
                counts[op] += 1
                if result != "ok":
                    errors[f"{op}: {result}"] += 1

    await asyncio.gather(*(worker(i) for i in range(workers)))


async def sample(pids: dict[str, int], every: float, until: float, samples: dict[str, list[float]]) -> None:
    while time.monotonic() < until:
        for name, pid in pids.items():
            try:
                samples[name].append(rss_mib(pid))
            except OSError:
                pass
        await asyncio.sleep(every)


def verdict(values: list[float]) -> tuple[float, float, float, float, bool]:
    """(RSS after warm-up, middle, end, slope over the second half in MiB/min per sample period, plateau?)."""
    settled = values[len(values) // 5:]  # the first fifth warms up (allocator arenas, caches)
    n = len(settled)
    second, last = settled[n // 4:n // 2], settled[3 * n // 4:]
    half = settled[n // 2:]
    slope = float(np.polyfit(np.arange(len(half)), half, 1)[0]) if len(half) > 1 else 0.0
    grew = float(np.mean(last) - np.mean(second))
    return settled[0], settled[n // 2], settled[-1], slope, grew <= max(2.0, 0.03 * float(np.mean(second)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--api-servers", type=int, default=2)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--every", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--timeline-window", type=int, default=10000)
    args = parser.parse_args()
    env = dict(os.environ)
    if args.timeline_window:
        env["AISIM_TIMELINE_WINDOW"] = str(args.timeline_window)
    log = Path(tempfile.mkdtemp(prefix="aisim-soak-")) / "requests.jsonl"
    process = subprocess.Popen([sys.executable, "-m", "aisim", "serve", str(SCENARIO), "--port", "0", "--record",
                                str(log), "--api-server-count", str(args.api_servers)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    assert process.stdout is not None and process.stderr is not None
    found = re.search(r"at (http://\S+)", process.stdout.readline())
    if found is None:
        sys.stderr.write(f"aisim serve did not start: {process.stderr.read()}\n")
        return 1
    url = found.group(1)
    started = process.stderr.readline()
    pids_line = re.search(r"engine core pid (\d+), \d+ API server\(s\) pids ([\d ]+)", started)
    assert pids_line, started
    pids = {"supervisor": process.pid, "engine core": int(pids_line.group(1))}
    pids.update({f"API server {i}": int(p) for i, p in enumerate(pids_line.group(2).split())})
    samples: dict[str, list[float]] = {name: [] for name in pids}
    counts: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()

    async def run() -> None:
        until = time.monotonic() + args.seconds
        await asyncio.gather(load(url, args.seconds, args.workers, args.seed, counts, errors),
                             sample(pids, args.every, until, samples))

    began = time.monotonic()
    asyncio.run(run())
    took = time.monotonic() - began
    process.send_signal(signal.SIGTERM)
    status = process.wait(timeout=60)
    stderr = process.stderr.read()
    print(f"split_soak: {args.seconds:g}s, {args.api_servers} API servers, {args.workers} workers, seed {args.seed}, "
          f"timeline window {args.timeline_window or 'the default'}, RSS every {args.every:g}s "
          f"({min(map(len, samples.values()))} samples)")
    print(f"{'process':<14} {'pid':>7} {'warm MiB':>9} {'mid MiB':>8} {'end MiB':>8} {'slope MiB/min':>14}  plateau")
    plateaus = []
    for name, values in samples.items():
        first, middle, end, slope, flat = verdict(values)
        plateaus.append(flat)
        print(f"{name:<14} {pids[name]:>7} {first:>9.1f} {middle:>8.1f} {end:>8.1f} "
              f"{slope * 60 / args.every:>14.2f}  {'yes' if flat else 'NO'}")
    total = sum(counts.values())
    print(f"operations: {total} in {took:.0f}s ({total / took:.1f}/s); errors: {sum(errors.values())}")
    for op, count in sorted(counts.items()):
        print(f"  {op:<34} {count:>6}")
    for what, count in errors.most_common(10):
        print(f"  error: {what} x{count}")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    requests = [r for r in records if r["type"] == "request"]
    generating = sum(counts[op] for op in GENERATING)
    statuses = collections.Counter(r["status"] for r in requests)
    negative = sum(1 for r in requests if r["frontend"] < 0)
    print(f"request log: {len(requests)} request records for {generating} generating requests sent "
          f"({dict(statuses)}); negative frontend: {negative}")
    print(f"exit status {status}; tracebacks in stderr: {stderr.count('Traceback')}")
    print("every process plateaus" if all(plateaus) else "NOT every process plateaus")
    return 0 if all(plateaus) and status == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

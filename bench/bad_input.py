"""The three timings of issue 21, each against a baseline measured in the same run:

1. a 2 KB YAML alias bomb (nine aliases nested eight deep) through `aisim validate`'s checker, against
   the checker on the shipped default scenario;
2. a chat request whose `json_schema` asks for `minLength: 1000000` (and one with `minItems: 100000`), against
   the same request with a small schema, with `/health` polled every 2 ms meanwhile;
3. a gzip bomb (1 GiB of zeros in about 1 MB) posted to KServe inference, with the server's peak RSS
   (`VmHWM`, `aisim serve` in its own process) before and after.

    python bench/bad_input.py [--bomb-gib 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from aisim.scenario import check_file, check_text

ROOT = Path(__file__).resolve().parent.parent


def alias_bomb(width: int = 9, depth: int = 8) -> str:
    """Nine aliases nested eight deep, with anchor names long enough to make about 2 KB."""
    lines = ["apiVersion: aisim/v1", "kind: Scenario", "metadata: {name: bomb}",
             "lol: &alias_of_level_00 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"l{d}: &alias_of_level_{d:02} [" + ", ".join([f"*alias_of_level_{d - 1:02}"] * width) + "]"
              for d in range(1, depth + 1)]
    return "\n".join([*lines, "models: [{id: m, latency: {ttft: 1ms}}]", ""])


def best_of(runs: int, work: object) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        work()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


def bench_alias_bomb() -> None:
    text = alias_bomb()
    checked = check_text(text, "bomb.yaml")
    problem = checked.problems[0]
    bomb = best_of(5, lambda: check_text(text, "bomb.yaml"))
    default = best_of(5, lambda: check_file(ROOT / "scenarios" / "default.yaml"))
    print(f"alias bomb: {len(text)} bytes, rejected in {bomb * 1e3:.1f} ms ({bomb / default:.2f}x the default "
          f"scenario's {default * 1e3:.1f} ms): {problem.file}:{problem.line}:{problem.column} {problem.message} "
          f"({problem.rule})")


@contextmanager
def serve(scenario: Path) -> Iterator[tuple[str, int]]:
    """`aisim serve SCENARIO --port 0` in its own process: (base URL, pid)."""
    process = subprocess.Popen([sys.executable, "-m", "aisim", "serve", str(scenario), "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        found = re.search(r"at (http://\S+)", process.stdout.readline())
        assert found, "aisim serve did not start"
        yield found.group(1), process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


def peak_rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"VmHWM:\s+(\d+) kB", status)
    return int(found.group(1)) / 1024 if found else float("nan")


async def timed_with_health(url: str, body: dict[str, object]) -> tuple[float, list[float], dict[str, object]]:
    """The request's wall time, `/health` latencies meanwhile, and the answer."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        await client.get("/health")
        done = asyncio.Event()
        latencies: list[float] = []

        async def poll() -> None:
            while not done.is_set():
                start = time.perf_counter()
                await client.get("/health")
                latencies.append(time.perf_counter() - start)
                await asyncio.sleep(0.002)

        poller = asyncio.create_task(poll())
        start = time.perf_counter()
        answer = await client.post("/v1/chat/completions", json=body)
        elapsed = time.perf_counter() - start
        await asyncio.sleep(0.02)
        done.set()
        await poller
        return elapsed, latencies, answer.json()


def bench_schema_requests() -> None:
    with serve(ROOT / "tests" / "scenarios" / "serve" / "fuzz-openai.yaml") as (url, _):
        def chat(schema: dict[str, object]) -> dict[str, object]:
            return {"model": "quick", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16,
                    "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}

        idle = asyncio.run(timed_with_health(url, {"model": "quick", "messages": [{"role": "user", "content": "hi"}],
                                                     "max_tokens": 1}))[1]
        print(f"/health beside a 1-token request: {len(idle)} probes, median {statistics.median(idle) * 1e3:.2f} ms, "
              f"max {max(idle) * 1e3:.2f} ms (the baseline for the latencies below)")
        small = {"type": "array", "items": {"type": "string"}, "minItems": 8}
        baseline = min(asyncio.run(timed_with_health(url, chat(small)))[0] for _ in range(5))
        for name, schema in (("minLength: 1000000", {"type": "string", "minLength": 1_000_000}),
                             ("minItems: 100000", {"type": "array", "items": {"type": "object", "properties": {
                                 "a": {"type": "string"}}, "required": ["a"]}, "minItems": 100_000})):
            runs = [asyncio.run(timed_with_health(url, chat(schema))) for _ in range(5)]
            elapsed = [r[0] for r in runs]
            health = [h for r in runs for h in r[1]]
            answer = runs[0][2]
            reason = answer["choices"][0]["finish_reason"]  # type: ignore[index]
            print(f"{name} (max_tokens 16): answered in median {statistics.median(elapsed) * 1e3:.1f} ms, max "
                  f"{max(elapsed) * 1e3:.1f} ms ({statistics.median(elapsed) / baseline:.2f}x a small schema's "
                  f"{baseline * 1e3:.1f} ms), finish_reason {reason}; /health meanwhile: {len(health)} probes, "
                  f"median {statistics.median(health) * 1e3:.2f} ms, max {max(health) * 1e3:.2f} ms")


def gzip_bomb(gib: float) -> bytes:
    """`gib` GiB of zeros, gzip-compressed a MiB at a time (never the whole thing in memory)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(2**20)
    parts = [packer.compress(zeros) for _ in range(int(gib * 1024))]
    return b"".join(parts) + packer.flush()


def bench_gzip_bomb(gib: float) -> None:
    bomb = gzip_bomb(gib)
    with serve(ROOT / "tests" / "scenarios" / "serve" / "triton.yaml") as (url, pid):
        httpx.get(url + "/v2/health/ready")
        before = peak_rss_mib(pid)
        start = time.perf_counter()
        answer = httpx.post(url + "/v2/models/simple/infer", content=bomb, timeout=120,
                            headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
        elapsed = time.perf_counter() - start
        after = peak_rss_mib(pid)
        alive = httpx.get(url + "/v2/health/live").status_code
    limit_mib = 32
    print(f"gzip bomb: {len(bomb) / 2**20:.2f} MiB inflating to {gib:g} GiB: {answer.status_code} "
          f"{json.dumps(answer.json())} in {elapsed * 1e3:.0f} ms; server peak RSS {before:.0f} -> {after:.0f} MiB "
          f"(+{after - before:.0f} MiB; body limit {limit_mib} MiB, {(after - before) / (gib * 1024):.3f}x the "
          f"inflated size); /v2/health/live after: {alive}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bomb-gib", type=float, default=1.0)
    args = parser.parse_args()
    bench_alias_bomb()
    bench_schema_requests()
    bench_gzip_bomb(args.bomb_gib)


if __name__ == "__main__":
    main()

"""Hostile clients at the issue's sizes, longer than CI runs them: what `tests/test_api_hostile.py` does in
seconds, here for `--seconds` each with the numbers of the issue (1,000 slowloris connections, 200 bodies that
never finish, 1,100 clients under `prlimit --nofile=1024`, eight parallel 60 MB bodies, a 10,000-prompt
completion, a 2,048-input embedding), against `aisim serve` with its default timeouts (10 s header, 60 s
body) unless `--short` uses the test scenario's 1 s ones. For each case it prints `/health`'s p50 / p99 / max
from a separate process (with its p99 alone just before, as a baseline measured in the same run), the
server's RSS growth and the bytes it logged.

    python bench/hostile_clients.py [--seconds 60] [--short]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.test_api_hostile import HOSTILE, PROBE, Served  # noqa: E402 - the checkout first on sys.path


def probe(port: int, seconds: float, during: Callable[[], Awaitable[object]] | None = None) -> dict[str, float]:
    process = subprocess.Popen([sys.executable, "-c", PROBE, str(port), str(seconds)], stdout=subprocess.PIPE, text=True)
    if during is not None:
        asyncio.run(during())
    report = json.loads(process.communicate(timeout=seconds + 60)[0])
    latencies = sorted(report["latencies"]) or [float("nan")]
    pick = lambda q: latencies[min(len(latencies) - 1, int(len(latencies) * q))] * 1000
    return {"p50_ms": pick(0.5), "p99_ms": pick(0.99), "max_ms": latencies[-1] * 1000, "failures": report["failures"]}


def case(name: str, scenario: Path, seconds: float, attack: Callable[[int], Awaitable[object]], nofile: int | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = Served(scenario, Path(tmp), nofile)
        try:
            alone = probe(server.port, 2)
            rss = server.rss_mb()
            loaded = probe(server.port, seconds, lambda: attack(server.port))
            growth = server.rss_mb() - rss
            log = server.stop()
        finally:
            server.process.kill()
    print(f"{name:28s} /health p50 {loaded['p50_ms']:6.1f} ms  p99 {loaded['p99_ms']:6.1f} ms (alone {alone['p99_ms']:5.1f})"
          f"  max {loaded['max_ms']:7.1f}  failures {loaded['failures']:3.0f}  RSS +{growth:5.1f} MB  log {len(log.encode())} B"
          f"  tracebacks {log.count('Traceback')}", flush=True)


async def hold(port: int, count: int, seconds: float, head: bytes, trickle: bool = False) -> None:
    async def one() -> None:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(head)
            for _ in range(int(seconds)):
                await asyncio.sleep(1)
                if trickle:
                    writer.write(b"X")
            writer.close()
        except OSError:
            pass

    await asyncio.gather(*(one() for _ in range(count)))


async def bodies(port: int) -> None:
    """Eight clients sending 60 MB each: each gets the 413 as soon as its headers are in, or, when it is still
    sending once the server has stopped reading (2 s later), a closed connection."""
    async def one() -> str:
        async with httpx.AsyncClient(timeout=60) as http:
            try:
                answer = await http.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                                         json={"model": "quick", "messages": [{"role": "user", "content": "x" * (60 * 10**6)}]})
            except httpx.TransportError as error:
                return type(error).__name__
            return str(answer.status_code)

    print("  8 x 60 MB bodies:", sorted(await asyncio.gather(*(one() for _ in range(8)))), flush=True)


async def batches(port: int) -> None:
    async with httpx.AsyncClient(timeout=120) as http:
        await http.post(f"http://127.0.0.1:{port}/v1/completions", json={"model": "quick", "prompt": ["hi there"] * 10_000})
        await http.post(f"http://127.0.0.1:{port}/v1/completions", json={"model": "quick", "prompt": ["hi there " * 20] * 2048,
                                                                          "max_tokens": 2})
        await http.post(f"http://127.0.0.1:{port}/v1/embeddings", json={"model": "quick", "encoding_format": "base64",
                                                                         "input": ["the quick brown fox " * 30] * 2048})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--short", action="store_true", help="the test scenario's 1 s timeouts")
    args = parser.parse_args()
    text = HOSTILE.read_text()
    if not args.short:
        text = text.replace("connections: {headerTimeout: 1s, idleTimeout: 1s, bodyTimeout: 1s, maxHeaderSize: 8KiB}",
                            "connections: {}")
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "bench.yaml"
        scenario.write_text(text.replace("maxBodySize: 4MiB", "maxBodySize: 32MiB"))
        s = args.seconds
        slow = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
        stalled = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   b"Content-Length: 100000\r\n\r\n{")
        case("1,000 slowloris", scenario, s, lambda port: hold(port, 1000, s, slow, trickle=True))
        case("200 stalled bodies", scenario, s, lambda port: hold(port, 200, s, stalled))
        case("1,100 idle under nofile 1024", scenario, s, lambda port: hold(port, 1100, s, b""), nofile=1024)
        case("8 x 60 MB bodies", scenario, min(s, 20), bodies)
        case("10,000 prompts / 2,048 emb.", scenario, min(s, 30), batches)


if __name__ == "__main__":
    main()

"""Before / after in the same run: `aisim serve` from another checkout (`--base`, e.g. a `git archive` of the
branch a change starts from) against this one, beside the bare Tornado handler, in interleaved rounds.

For each of `bench/serve_scale.py`'s throughput parts (non-streaming chat, KServe infer): the bare handler,
base and this tree's single process, base and this tree's `--api-server-count N`; `wrk` on the load core;
printed: per-round CPU us per request (all processes together) and the medians as a ratio to the bare
handler's, so that a change's gain is read off one run on a noisy machine (the order of the aisim servers
flips every round, so that neither tree always runs after the other).

    git archive integ | tar -x -C /tmp/base
    python bench/serve_ab.py --base /tmp/base [--rounds 3] [--seconds 3] [--api-servers 2]

The base runs with this checkout's interpreter and packages (its own `aisim` package comes first on the path).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import serve_scale
from serve_scale import CHAT, INFER, Server, start_aisim, start_bare, wrk


def start_from(root: Path, scenario: str, cores: str, api_servers: int, tag: str) -> Server:
    """`start_aisim` run in `root` (its `aisim` package, its bench scenarios)."""
    saved = serve_scale.ROOT
    serve_scale.ROOT = root
    try:
        server = start_aisim(scenario, cores, api_servers)
    finally:
        serve_scale.ROOT = saved
    server.name = f"{tag} {server.name}"
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the checkout to compare against")
    parser.add_argument("--api-servers", type=int, default=2)
    parser.add_argument("--server-cores", default="0")
    parser.add_argument("--load-core", default="1")
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args()
    for label, scenario, path, body in (("chat", "throughput.yaml", "/v1/chat/completions", CHAT),
                                        ("kserve", "kserve.yaml", "/v2/models/bench/infer", INFER)):
        servers = []
        try:
            for tag, root in (("base", args.base.resolve()), ("new", serve_scale.ROOT)):
                servers.append(start_from(root, scenario, args.server_cores, 0, tag))
                servers.append(start_from(root, scenario, args.server_cores, args.api_servers, tag))
            servers.insert(0, start_bare(args.server_cores, servers[-1].url, path, body))
            totals: dict[str, list[float]] = {s.name: [] for s in servers}
            time.sleep(0.3)
            for server in servers:
                wrk(server, path, body, 1, args.connections, args.load_core)
            for round_ in range(args.rounds):  # base first in odd rounds, this tree first in even ones
                for server in servers[:1] + (servers[1:] if round_ % 2 == 0 else servers[:0:-1]):
                    rate, cpu, _ = wrk(server, path, body, args.seconds, args.connections, args.load_core)
                    totals[server.name].append(sum(cpu.values()))
                    print(f"{label:<6} round {round_ + 1} {server.name:<14} {rate:8,.0f} requests/s; "
                          f"CPU {sum(cpu.values()):.0f} us per request", flush=True)
        finally:
            for server in servers:
                server.stop()
        bare = statistics.median(totals["bare"])
        for name, rows in totals.items():
            print(f"{label:<6} median {name:<14} {statistics.median(rows):6.0f} us = "
                  f"{statistics.median(rows) / bare:.2f}x bare", flush=True)


if __name__ == "__main__":
    main()

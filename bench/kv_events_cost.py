"""What publishing vLLM's KV-cache events costs the server (issue 26): two `aisim serve` processes of
tests/scenarios/serve/fleet.yaml, one with `server.fleet.kvEvents` (token ids hashed, events encoded and sent)
and one without, in interleaved rounds of the same chat requests (distinct prompts, so every request stores
blocks and the small cache evicts); the server CPU time (utime + stime from /proc) per request of each and
their ratio, measured in the same run.

    python bench/kv_events_cost.py [--rounds 5] [--requests 40]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "tests" / "scenarios" / "serve" / "fleet.yaml"
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def start(scenario: Path) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen([sys.executable, "-m", "aisim", "serve", str(scenario), "--port", "0"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    match = re.search(r"at (http://[\d.]+:\d+)", process.stdout.readline())  # type: ignore[union-attr]
    assert match, "server did not start"
    return process, match.group(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=40)
    args = parser.parse_args()
    yaml = YAML()
    document = yaml.load(SCENARIO.read_text())
    del document["server"]["fleet"]
    with tempfile.TemporaryDirectory() as folder:
        plain = Path(folder) / "plain.yaml"
        with plain.open("w") as out:
            yaml.dump(document, out)
        servers = {"events": start(SCENARIO), "none": start(plain)}
        spent: dict[str, list[float]] = {name: [] for name in servers}
        try:
            with httpx.Client(timeout=60) as client:
                for round_ in range(args.rounds):
                    for name, (process, url) in servers.items():
                        before = cpu_s(process.pid)
                        for i in range(args.requests):
                            text = f"round {round_} request {i}: " + "tell me about the weather in Lisbon " * 8
                            answer = client.post(url + "/v1/chat/completions", json={
                                "model": "llama", "messages": [{"role": "user", "content": text}], "max_tokens": 16})
                            assert answer.status_code == 200
                        spent[name].append((cpu_s(process.pid) - before) / args.requests)
        finally:
            for process, _ in servers.values():
                process.terminate()
                process.wait(timeout=15)
    events, none = statistics.median(spent["events"]), statistics.median(spent["none"])
    print(f"{args.rounds} rounds x {args.requests} chat requests per server")
    print(f"server CPU per request, KV events on:  {events * 1e3:.2f} ms")
    print(f"server CPU per request, KV events off: {none * 1e3:.2f} ms")
    print(f"ratio on/off: {events / none:.3f}")


if __name__ == "__main__":
    main()

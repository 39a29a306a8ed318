"""The decode side's TTFT with and without a KV transfer (issue 26): a prefill pod and a decode pod (two
`aisim serve` processes, --kv-role prefill / decode, the link at --bandwidth), in interleaved rounds of
  local:  a 1600-token prompt prefilled on the decode pod itself (the baseline of the same run);
  remote: a 1600-token prompt prefilled on the prefill pod, its 100 KV blocks read by the decode pod.
Prints the client-measured medians, the modelled transfer (blocks x 16 tokens x 128 KiB over the link) and
remote - local, which should be close to it.

    python bench/pd_ttft.py [--rounds 5] [--bandwidth 1GB/s]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "tests" / "scenarios" / "serve" / "pd.yaml"
KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # Llama-3-8B, 16-bit
PROMPT = 1600


def start(*flags: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen([sys.executable, "-m", "aisim", "serve", str(SCENARIO), *flags], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    match = re.search(r"at (http://[\d.]+:\d+)", process.stdout.readline())  # type: ignore[union-attr]
    assert match, "server did not start"
    return process, match.group(1)


def ttft(url: str, body: dict) -> float:
    start_s = time.monotonic()
    first = None
    with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}, timeout=60) as response:
        for line in response.iter_lines():
            if first is None and line.startswith("data: {") and '"text": ""' not in line:
                first = time.monotonic() - start_s
    assert first is not None
    return first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bandwidth", default="1GB/s")
    args = parser.parse_args()
    number, unit = re.fullmatch(r"([\d.]+)\s*([KMGT]?B)/s", args.bandwidth).groups()  # type: ignore[union-attr]
    link = float(number) * {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[unit]
    prefill, prefill_url = start("--kv-role", "prefill")
    decode, decode_url = start("--kv-role", "decode", "--kv-link-bandwidth", args.bandwidth)
    local, remote = [], []
    try:
        for round_ in range(args.rounds):
            ids = list(range(100_000 * (round_ + 1), 100_000 * (round_ + 1) + PROMPT))
            other = [i + 50_000 for i in ids]
            answer = httpx.post(prefill_url + "/v1/completions", timeout=60, json={
                "model": "llama", "prompt": ids, "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}})
            params = answer.json()["kv_transfer_params"]
            local.append(ttft(decode_url, {"model": "llama", "prompt": other, "max_tokens": 4}))
            remote.append(ttft(decode_url, {"model": "llama", "prompt": ids, "max_tokens": 4,
                                            "kv_transfer_params": params}))
    finally:
        for process in (prefill, decode):
            process.terminate()
            process.wait(timeout=15)
    blocks = PROMPT // 16
    transfer = blocks * 16 * KV_BYTES_PER_TOKEN / link
    print(f"rounds {args.rounds}, link {args.bandwidth}: modelled transfer {transfer * 1e3:.0f} ms ({blocks} blocks)")
    print(f"decode TTFT, local prefill:  median {statistics.median(local) * 1e3:.0f} ms")
    print(f"decode TTFT, remote prefill: median {statistics.median(remote) * 1e3:.0f} ms")
    print(f"remote - local: {(statistics.median(remote) - statistics.median(local)) * 1e3:.0f} ms "
          f"(= transfer - the decode pod's own prefill, which the remote request skips)")


if __name__ == "__main__":
    main()

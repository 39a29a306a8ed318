"""guidellm and aiperf against `aisim serve`, offline, sizing and counting with `aisim tokenizer save DIR`.

Each client runs a short benchmark (10-12 requests of 64 prompt and 32 output tokens, `ignore_eos`) against the
built-in default scenario on `/v1/completions` (no chat template, so the client's count of the prompt is
the whole prompt); the script then compares, request by request, the token counts each client reports
(prompt and output) with the server's `usage` (guidellm's report) or with the built-in tokenizer's count
of the text it sent (aiperf's export), and prints how long each client took. A client that is not
installed is skipped (both need Python >= 3.10; `pip install guidellm aiperf` in a venv of their own).

    python bench/client_tokenizer.py [--guidellm PATH] [--aiperf PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from http_load import ROOT, free_port, wait_ready

MODEL = "llama3-8b-sim"


def run(command: list[str], env: dict[str, str]) -> float:
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, check=False)
    if done.returncode:
        raise RuntimeError(f"{command[0]} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return time.monotonic() - started


def guidellm(binary: str, url: str, tokenizer: Path, out: Path, env: dict[str, str]) -> list[tuple[int, int, int, int]]:
    """(prompt tokens the client reports, the server's count of the prompt, output reported, server's output)."""
    from aisim.api.content.tokenizer import default_tokenizer

    report = out / "guidellm.json"
    seconds = run([binary, "run", "--backend", f"kind=openai_http,target={url},model={MODEL},request_format=/v1/completions",
                   "--profile", "kind=synchronous", "--constraint", "kind=max_requests,count=10",
                   "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
                   "--data", "kind=synthetic_text,prompt_tokens=64,output_tokens=32",
                   "--output", f"kind=json,path={report}", "--disable-console-interactive"], env)
    print(f"guidellm: {seconds:.0f} s")
    count = default_tokenizer().count
    rows = []
    for request in json.loads(report.read_text())["benchmarks"][0]["requests"]["successful"]:
        body = json.loads(request["request_args"])["body"]
        rows.append((request["input_metrics"]["text_tokens"], count(body["prompt"]),
                     request["output_metrics"]["text_tokens"], count(request["output"])))
    return rows


def aiperf(binary: str, url: str, tokenizer: Path, out: Path, env: dict[str, str]) -> list[tuple[int, int, int, int]]:
    """(prompt tokens aiperf sized, the server's usage, output tokens aiperf counted, the server's usage)."""
    seconds = run([binary, "profile", "--model", MODEL, "--url", url, "--endpoint-type", "completions", "--streaming",
                   "--tokenizer", str(tokenizer), "--request-count", "12", "--concurrency", "4",
                   "--synthetic-input-tokens-mean", "64", "--synthetic-input-tokens-stddev", "0",
                   "--output-tokens-mean", "32", "--output-tokens-stddev", "0", "--extra-inputs", "ignore_eos:true",
                   "--artifact-dir", str(out / "aiperf"), "--ui-type", "none"], env)
    print(f"aiperf: {seconds:.0f} s")
    rows = []
    for line in (out / "aiperf" / "profile_export.jsonl").read_text().splitlines():
        metrics = json.loads(line)["metrics"]
        rows.append(tuple(metrics[name]["value"] for name in ("input_sequence_length", "usage_prompt_tokens",
                                                               "output_sequence_length", "usage_completion_tokens")))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--guidellm", default=shutil.which("guidellm"))
    parser.add_argument("--aiperf", default=shutil.which("aiperf"))
    args = parser.parse_args()
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "aisim", "serve", "--port", str(port)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(server)
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder)
            tokenizer = out / "tokenizer"
            subprocess.run([sys.executable, "-m", "aisim", "tokenizer", "save", str(tokenizer)], check=True,
                           capture_output=True)
            url = f"http://127.0.0.1:{port}"
            for name, client, env in (("guidellm", guidellm, {"HF_HUB_OFFLINE": "1"}), ("aiperf", aiperf, {})):
                binary = getattr(args, name)
                if not binary:
                    print(f"{name}: not installed, skipped")
                    continue
                rows = client(binary, url, tokenizer, out, {**os.environ, **env})
                equal = sum(1 for p, sp, o, so in rows if p == sp and o == so)
                print(f"{name}: {equal} of {len(rows)} requests count prompt and output as the server "
                      f"(prompt {rows[0][0]} / {rows[0][1]}, output {rows[0][2]} / {rows[0][3]} for the first)")
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()

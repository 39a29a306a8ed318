"""Size and cold start-up of the one-file executable, against `python -m aisim` in the same run.

Goal (issue 20): from exec to a served `/health` in under 2 s. Start-up is measured from starting
the process to the first 200 on `/health` of `aisim serve --port 0` (the default scenario), `--runs`
times each, alternating the executable and the package so that machine load hits both alike; each start
is cold as far as aisim goes (a new process; the one-file executable unpacks itself into a new folder
under TMPDIR every time), though the OS's page cache keeps the files warm. Printed: the executable's
size, the median and worst start-up of each (the executable unpacking under a TMPDIR on disk, and in
memory, /dev/shm, as the Kubernetes manifests mount /tmp), and their ratios to the package's.

    python bench/executable.py [EXECUTABLE] [--runs 5]     # without EXECUTABLE: scripts/build-executable first
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def start_up(command: list[str], env: dict[str, str]) -> float:
    """Seconds from starting `COMMAND serve --port 0` to its first 200 on /health."""
    started = time.perf_counter()
    process = subprocess.Popen([*command, "serve", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True, env=env)
    try:
        found = re.search(r"at (http://\S+)", process.stdout.readline())  # type: ignore[union-attr]
        if found is None:
            raise RuntimeError(f"{command[0]} did not start")
        while True:
            try:
                with urllib.request.urlopen(found.group(1) + "/health", timeout=5) as reply:
                    if reply.status == 200:
                        return time.perf_counter() - started
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.005)
    finally:
        process.terminate()
        process.wait(timeout=20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("executable", nargs="?", type=Path, help="a built aisim executable")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        executable = args.executable
        if executable is None:
            started = time.perf_counter()
            subprocess.run([str(ROOT / "scripts" / "build-executable"), scratch], check=True)
            print(f"build: {time.perf_counter() - started:.0f} s")
            executable = Path(scratch) / "aisim"
        empty = Path(scratch) / "empty"
        empty.mkdir()
        bare = {"PATH": str(empty), "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8"}
        print(f"size: {executable.stat().st_size / 2**20:.1f} MiB")
        memory = Path("/dev/shm")  # where the Kubernetes manifests put /tmp: an emptyDir in memory
        runs: dict[str, list[float]] = {"executable, TMPDIR on disk": [], "python -m aisim": []}
        if memory.is_dir():
            runs["executable, TMPDIR in memory"] = []
        with tempfile.TemporaryDirectory(dir=memory if memory.is_dir() else None) as in_memory:
            for _ in range(args.runs):
                runs["executable, TMPDIR on disk"].append(start_up([str(executable.resolve())], bare))
                runs["python -m aisim"].append(start_up([sys.executable, "-m", "aisim"], {**os.environ}))
                if memory.is_dir():
                    runs["executable, TMPDIR in memory"].append(
                        start_up([str(executable.resolve())], {**bare, "TMPDIR": in_memory}))
    package = runs["python -m aisim"]
    for name, times in runs.items():
        print(f"start-up to /health, {name}: median {statistics.median(times):.2f} s, worst {max(times):.2f} s "
              f"({args.runs} runs)")
    for name, times in runs.items():
        if name != "python -m aisim":
            print(f"{name} / package: {statistics.median(times) / statistics.median(package):.2f}x")


if __name__ == "__main__":
    main()

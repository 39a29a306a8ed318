"""The README's quick start, followed literally: its blocks are read from README.md (so they cannot drift from
what is tested) and run as a new user runs them, `aisim` being this checkout's `python -m aisim`: the server
from a subprocess on a free port, curl, the OpenAI SDK in a fresh interpreter, the TUI in a pseudo-terminal and
the plan. None may end in a traceback. (Every shipped scenario run and served with the base install alone:
tests/test_extras.py.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import ROOT
from .terminal import run_tui_until_drawn

README_URL = "http://127.0.0.1:8080"


def quickstart(name: str) -> str:
    """The body of the fenced block after `<!-- quickstart: NAME -->` in README.md."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(rf"<!-- quickstart: {name} -->\n```\w*\n(.*?)```\n", text, re.DOTALL)
    assert found, f"README.md has no quickstart block {name!r}"
    return found.group(1)


def commands(block: str) -> list[str]:
    """The block's shell commands, continuation lines joined."""
    return [c.strip() for c in block.replace("\\\n", " ").splitlines() if c.strip() and not c.startswith("#")]


def aisim_argv(command: str) -> list[str]:
    """`aisim ARGS` as this checkout runs it."""
    words = command.split("#", 1)[0].split()
    assert words[0] == "aisim", command
    return [sys.executable, "-m", "aisim", *words[1:]]


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    """`aisim serve` as the quick start starts it, on a free port instead of 8080; its banner is the README's."""
    block = quickstart("serve")
    command, *banner = [line for line in block.splitlines() if line.strip()]
    process = subprocess.Popen([*aisim_argv(command.removeprefix("$ ")), "--port", "0"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        printed = [process.stdout.readline().rstrip("\n") for _ in banner]  # type: ignore[union-attr]
        url = re.search(r"http://127\.0\.0\.1:\d+", printed[0])
        assert url, printed
        assert [line.replace(url.group(0), README_URL) for line in printed] == banner
        yield url.group(0)
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
        assert process.returncode == 0 and "Traceback" not in err, err


@pytest.mark.skipif(shutil.which("curl") is None, reason="no curl on this machine")
def test_the_curl_commands(served: str) -> None:
    chat, stream, embeddings = [subprocess.run(["bash", "-c", command.replace(README_URL, served)], capture_output=True,
                                               text=True, timeout=60, check=True).stdout
                                for command in commands(quickstart("curl"))]
    reply = json.loads(chat)
    assert reply["object"] == "chat.completion" and reply["choices"][0]["message"]["content"]
    events = [line.removeprefix("data: ") for line in stream.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and len(events) > 3
    assert "".join(json.loads(e)["choices"][0]["delta"].get("content") or "" for e in events[:-1])
    vectors = json.loads(embeddings)
    assert vectors["object"] == "list" and len(vectors["data"][0]["embedding"]) == 1024


def test_the_openai_sdk_snippet(served: str) -> None:
    pytest.importorskip("openai")
    code = quickstart("python").replace(README_URL, served)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    lines = done.stdout.splitlines()
    assert "completion_tokens=" in lines[0] and lines[1]  # the chat answer with its usage, then the streamed text
    assert lines[-1] == "2 embeddings of 1024 dimensions"


def test_the_tui_on_the_oom_scenario() -> None:
    """`aisim tui scenarios/oom.yaml` in a terminal: it draws the scenario's GPU and quits on `q`."""
    (command,) = commands(quickstart("tui"))
    screen = run_tui_until_drawn(aisim_argv(command), ROOT, dict(os.environ), timeout=90)
    assert b"gpu0" in screen and b"Traceback" not in screen


def test_the_plan(tmp_path: Path) -> None:
    """The README's plan line as it stands (its own cache under a fresh XDG_CACHE_HOME): an answer and a winner."""
    (command,) = commands(quickstart("plan"))
    done = subprocess.run(aisim_argv(command), cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "144 configurations" in done.stdout
    assert re.search(r"winner as a vLLM command:\n  vllm serve meta-llama/Meta-Llama-3-8B ", done.stdout), done.stdout

"""The one-file executable, as someone without Python uses it.

`scripts/build-executable` builds it once per test session from a clean copy of the checkout (the files
git tracks or would track: no virtual environment, no build output), in the script's own virtual
environment; the result is cached in pytest's cache under a hash of those files, so a second run of an
unchanged tree reuses it. Each test runs the executable from a folder outside the checkout with a PATH
that holds no Python and no PYTHONPATH, and compares what it prints with what `python -m aisim` prints
for the same command, or serves the OpenAI SDK from it. The build time, the size and the start-up time
to a served `/health` are printed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from .conftest import ROOT, SCENARIOS, TEST_SCENARIOS
from .terminal import run_tui_until_drawn

BUILD_TIMEOUT_S = 1200
"""A bound on the build (measured on a 2-core machine shared with other work: 185-280 s, of which
PyInstaller about 50-95 s and the rest pip); a build past it fails the tests instead of hanging the run."""


def checkout_files() -> list[str]:
    """The files a clean checkout of this tree has (git's tracked and not-ignored files)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode()
    return sorted(name for name in listed.split("\0") if name and os.path.lexists(ROOT / name))


def tree_hash(files: list[str]) -> str:
    """A hash of what the executable is built from: the package, the build scripts and the project file
    (not the README, which only the wheel's metadata holds)."""
    digest = hashlib.sha256()
    for name in files:
        if name.startswith(("aisim/", "scripts/")) or name == "pyproject.toml":
            path = ROOT / name
            digest.update(name.encode() + b"\0" + (os.readlink(path).encode() if path.is_symlink() else path.read_bytes()))
    return digest.hexdigest()[:16]


def say(config: pytest.Config, line: str) -> None:
    """Print past pytest's capture (the figures belong in CI's log)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None:
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            reporter.write_line(f"[executable] {line}")


def build(config: pytest.Config, scratch: Path) -> Path:
    """Build into the cache (or reuse the build of the same tree); returns the executable's path."""
    files = checkout_files()
    cache = config.cache.mkdir("aisim-executable") if config.cache is not None else scratch / "cache"
    key = tree_hash(files)
    built = cache / key / "aisim"
    if built.exists():
        say(config, f"reused the build of this tree ({key})")
        return built
    for old in cache.glob("*"):  # one build kept: each is tens of MiB
        shutil.rmtree(old, ignore_errors=True)
    checkout = scratch / "checkout"
    for name in files:
        target = checkout / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target, follow_symlinks=False)
    started = time.perf_counter()
    done = subprocess.run(["bash", str(checkout / "scripts" / "build-executable"), str(scratch / "dist")], check=False,
                          cwd=checkout, env={**os.environ, "PYTHON": sys.executable}, capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_S)
    assert done.returncode == 0, f"build failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    built.parent.mkdir(parents=True)
    shutil.move(scratch / "dist" / "aisim", built)
    say(config, f"built from a clean copy of the checkout in {time.perf_counter() - started:.0f} s")
    return built


@pytest.fixture(scope="session")
def executable(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The executable, copied alone into a folder outside the checkout (AISIM_EXECUTABLE: test that one)."""
    given = os.environ.get("AISIM_EXECUTABLE")
    source = Path(given) if given else build(pytestconfig, tmp_path_factory.mktemp("build"))
    place = tmp_path_factory.mktemp("bin") / "aisim"
    shutil.copy2(source, place)
    say(pytestconfig, f"size {place.stat().st_size / 2**20:.1f} MiB")
    return place


@pytest.fixture
def bare(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A working folder holding copies of the shipped scenarios, and an environment with no Python."""
    empty = tmp_path / "empty-path"
    empty.mkdir()
    env = {"PATH": str(empty), "HOME": str(tmp_path), "TMPDIR": str(tmp_path), "LANG": "C.UTF-8"}
    assert not any(shutil.which(name, path=env["PATH"]) for name in ("python", "python3", "pip"))
    shutil.copytree(SCENARIOS, tmp_path / "sc")
    shutil.copy(TEST_SCENARIOS / "invalid" / "duplicate-key-and-more.yaml", tmp_path / "broken.yaml")
    return tmp_path, env


COMMANDS = {
    "validate": ["validate", "sc/default.yaml", "sc/triton.yaml", "sc/oom.yaml"],
    "validate-errors": ["validate", "broken.yaml", "--format", "json"],
    "run-default": ["run", "--json"],
    "memory": ["memory", "sc/default.yaml", "--json"],
    "replay": ["replay", "sc/data/azure-llm-2023-conv.csv", "--scenario", "sc/default.yaml", "--count", "40", "--json"],
    "schema": ["schema"],
}


@pytest.mark.parametrize("command", COMMANDS.values(), ids=COMMANDS.keys())
def test_the_executable_answers_as_the_package_does(executable: Path, bare: tuple[Path, dict[str, str]],
                                                    command: list[str]) -> None:
    folder, env = bare
    frozen = subprocess.run([str(executable), *command], check=False, cwd=folder, env=env, capture_output=True, text=True,
                            timeout=120)
    source = subprocess.run([sys.executable, "-m", "aisim", *command], check=False, cwd=folder, capture_output=True, text=True,
                            timeout=120)
    assert (frozen.returncode, frozen.stdout) == (source.returncode, source.stdout), frozen.stderr
    assert frozen.stdout  # something was compared


def test_the_commands_left_out_say_which_extra_they_need(executable: Path, bare: tuple[Path, dict[str, str]]) -> None:
    folder, env = bare
    (folder / "model.onnx").write_bytes(b"not read: onnx is not in the executable")
    done = subprocess.run([str(executable), "inspect", "model.onnx"], check=False, cwd=folder, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr == ("aisim inspect: reading an ONNX model needs onnx, which is not installed: "
                           "pip install 'aisim[inspect]'\n")


@pytest.fixture
def serving(executable: Path, bare: tuple[Path, dict[str, str]],
            pytestconfig: pytest.Config) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`aisim serve --port 0` from the executable as a pod; yields its URL once `/health` answers."""
    folder, env = bare
    started = time.perf_counter()
    process = subprocess.Popen([str(executable), "serve", "--port", "0"], cwd=folder, text=True,
                               env={**env, "POD_NAME": "aisim-exe-0", "POD_NAMESPACE": "ci"},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        found = re.search(r"at (http://\S+)", process.stdout.readline())  # type: ignore[union-attr]
        assert found, process.stderr.read()  # type: ignore[union-attr]
        url = found.group(1)
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.01)
        say(pytestconfig, f"cold start-up to a served /health: {time.perf_counter() - started:.2f} s (goal: under 2 s)")
        yield url, process
    finally:
        process.terminate()
        process.wait(timeout=20)


def test_the_executable_serves_the_openai_sdk(serving: tuple[str, subprocess.Popen[str]]) -> None:
    url, process = serving
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="aisim", max_retries=0)
    assert {"gpt-4-turbo-mock", "llama3-8b-sim"} <= {m.id for m in client.models.list()}
    raw = client.chat.completions.with_raw_response.create(
        model="llama3-8b-sim", messages=[{"role": "user", "content": "hello"}], max_tokens=8)
    answer = raw.parse()
    assert raw.headers["x-inference-pod"] == "aisim-exe-0"
    assert answer.usage is not None and answer.usage.completion_tokens == 8 and answer.choices[0].message.content
    stream = client.chat.completions.create(model="gpt-4-turbo-mock", messages=[{"role": "user", "content": "hi"}],
                                            max_tokens=5, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5
    process.terminate()
    assert process.wait(timeout=20) == 0  # SIGTERM reaches the frozen program and it stops cleanly


def test_the_executable_runs_the_tui(executable: Path, bare: tuple[Path, dict[str, str]]) -> None:
    """`aisim tui` in a terminal (a pseudo-terminal here): it draws the scenario's GPU and quits on `q`."""
    folder, env = bare
    screen = run_tui_until_drawn([str(executable), "tui", "sc/default.yaml", "--speed", "50"], folder, env)
    assert b"gpu0" in screen

"""A fresh install: every shipped scenario runs and serves with the base install alone, and a command that needs
an extra says which, in one line, before it does any work. The extras' modules are hidden from a subprocess
(`sys.modules[name] = None`, which makes their import fail as an absent package's does)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import httpx
import pytest

from aisim.extras import EXTRAS
from aisim.scenario import load_scenario
from aisim.testing import free_port_offset

from .conftest import ROOT, SCENARIOS

BLOCKED = sorted(module for modules in EXTRAS.values() for module in modules)
"""What the base install lacks: every extra's modules."""

WITHOUT_EXTRAS = (f"import sys\nfor name in {BLOCKED!r}: sys.modules[name] = None\n"
                  "from aisim.cli import main\nsys.exit(main())")
"""`python -c WITHOUT_EXTRAS ARGS...` runs `aisim ARGS...` as the base install would."""


def aisim_without_extras(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS, *args], cwd=ROOT, capture_output=True, text=True, check=False,
                          timeout=120)


@pytest.mark.parametrize(("args", "message"), [
    (["inspect", "absent.onnx"],
     "aisim inspect: reading an ONNX model needs onnx, which is not installed: pip install 'aisim[inspect]'"),
    (["serve", "--tokenizer", "absent-folder"],
     "aisim serve --tokenizer needs tokenizers, which is not installed: pip install 'aisim[tokenizer]'"),
    (["calibrate", "absent.jsonl", "--scenario", "absent.yaml"],
     "aisim calibrate needs scipy, which is not installed: pip install 'aisim[calibrate]'"),
    (["plan", "absent.yaml", "--out", "plan-out"],
     "aisim plan --out needs plotly and matplotlib, which are not installed: pip install 'aisim[plan]'"),
    (["plan", "absent.yaml", "--ray", "local"],
     "aisim plan --ray needs ray, which is not installed: pip install 'aisim[ray]'"),
], ids=["inspect", "serve-tokenizer", "calibrate", "plan-out", "plan-ray"])
def test_a_command_that_needs_an_extra_names_it_in_one_line(args: list[str], message: str) -> None:
    """The files do not exist: the check comes before any work, so the extra is what the user hears of first."""
    done = aisim_without_extras(*args)
    assert (done.returncode, done.stderr, done.stdout) == (1, message + "\n", "")


SHIPPED = sorted(SCENARIOS.glob("*.yaml"))


def test_every_shipped_scenario_runs_with_the_base_install() -> None:
    runs = {path.stem: subprocess.Popen([sys.executable, "-c", WITHOUT_EXTRAS, "run", str(path), "--quiet"], cwd=ROOT,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for path in SHIPPED}
    for name, process in runs.items():
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0 and "Traceback" not in err, f"{name}: {err}"
        assert out.startswith(f"scenario {name} ("), f"{name}: {out[:200]}"


def test_every_shipped_scenario_serves_with_the_base_install() -> None:
    """`aisim serve SCENARIO` answers its health check on the first listener, and a signal ends it cleanly."""
    servers: dict[str, subprocess.Popen[str]] = {}
    for path in SHIPPED:
        later = [listener.port for listener in load_scenario(path).server.listeners[1:]]
        offset = free_port_offset(later) if later else 0
        servers[path.stem] = subprocess.Popen(
            [sys.executable, "-c", WITHOUT_EXTRAS, "serve", str(path), "--port", "0", "--port-offset", str(offset)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for name, process in servers.items():
            first = process.stdout.readline()  # type: ignore[union-attr]
            match = re.match(r"aisim serving \S+ at (http://[\d.]+:\d+) \((.*)\)", first)
            assert match, f"{name}: {first!r} {process.stderr.read() if process.poll() is not None else ''}"  # type: ignore[union-attr]
            health = "/v2/health/live" if "kserve" in match.group(2).split(", ") else "/health"
            assert httpx.get(match.group(1) + health, timeout=30).status_code == 200, name
    finally:
        for process in servers.values():
            process.send_signal(signal.SIGINT)
        failures = []
        for name, process in servers.items():
            _, err = process.communicate(timeout=60)
            if process.returncode != 0 or "Traceback" in err:
                failures.append(f"{name}: exit {process.returncode}\n{err}")
    assert not failures, "\n".join(failures)


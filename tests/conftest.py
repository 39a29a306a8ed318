"""Shared paths and helpers for the tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from aisim.scenario import Scenario

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
TEST_SCENARIOS = Path(__file__).resolve().parent / "scenarios"


@pytest.fixture
def python() -> str:
    """The interpreter running the tests, for subprocess checks."""
    return sys.executable


def on_free_ports(scenario: Scenario) -> Scenario:
    """`scenario` with every listener on a free port of the loopback (a test must not take a fixed port
    that another run may hold); `ServerUrl.listeners` keeps the scenario's order."""
    listeners = [listener.model_copy(update={"port": 0}) for listener in scenario.server.listeners]
    server = scenario.server.model_copy(update={"host": "127.0.0.1", "listeners": listeners})
    return scenario.model_copy(update={"server": server})


SERVE_MODES = [pytest.param(0, id="single"), pytest.param(2, id="split2")]
"""The server's two modes, as a fixture's `params`: one process (the engine in it), and `aisim serve
--api-server-count 2` (two API-server processes and an engine core): the same tests must pass in both."""


@pytest.fixture(params=SERVE_MODES)
def serve_mode(request: pytest.FixtureRequest) -> int:
    """The server's mode for one test (`api_server_count`), each test run in both."""
    return int(request.param)

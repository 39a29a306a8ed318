"""Shared paths and helpers for the tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
TEST_SCENARIOS = Path(__file__).resolve().parent / "scenarios"


@pytest.fixture
def python() -> str:
    """The interpreter running the tests, for subprocess checks."""
    return sys.executable

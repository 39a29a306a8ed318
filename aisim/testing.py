"""Test helpers: run aisim in-process on a free port and point clients at it.

    from aisim.testing import running_server

    with running_server("scenarios/rate-limit.yaml") as base_url:
        client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="sk-team-a")

As a pytest plugin (registered through the `pytest11` entry point), the fixture `aisim_server`
yields the base URL of the built-in default scenario, served for the whole session.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .api.runner import ServerUrl


def running_server(*args: Any, **kwargs: Any) -> AbstractContextManager[ServerUrl]:
    """See `aisim.api.runner.running_server` (imported lazily, so the plugin costs nothing at start-up)."""
    from .api.runner import running_server as start

    return start(*args, **kwargs)


@pytest.fixture(scope="session")
def aisim_server() -> Iterator[str]:
    """The base URL of an aisim server running the built-in default scenario."""
    with running_server() as url:
        yield url

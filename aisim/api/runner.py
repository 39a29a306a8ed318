"""Running a server: in the foreground (`aisim serve`) or in a background thread (tests, embedding)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

from ..scenario import Scenario, load_scenario
from ..scenario.distributions import DurationDistribution
from .http.loop import new_event_loop
from .pod import PodIdentity
from .server import local_state, serve
from .state import ServerState

DEFAULT_SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "default.yaml"


class ServerUrl(str):
    """The base URL of a running server's first listener (a plain string to clients), carrying the
    server's state for tests that look inside (`url.state.sim.timeline`) and every listener's URL
    (`url.listeners`, in the scenario's order)."""

    state: ServerState
    listeners: list[str]
    processes: Any
    """Split across processes (`api_server_count`): the `multiproc.supervisor.Started` (its pids); there is no
    `state` in this process then."""


class _Started(TypedDict, total=False):
    """What the server thread hands back to `running_server`: its state and bound listeners, or the
    error that stopped it."""

    state: ServerState
    bound: list[tuple[str, int]]
    error: BaseException


@contextlib.contextmanager
def running_server(scenario: Scenario | str | Path | None = None, *, seed: int | None = None,
                   network_delay: DurationDistribution | None = None, host: str = "127.0.0.1",
                   port: int = 0, speed: float = 1.0, record: str | Path | None = None,
                   pod: PodIdentity | None = None, port_offset: int = 0,
                   tokenizer: str | None = None, api_server_count: int = 0) -> Iterator[ServerUrl]:
    """Serve a scenario (the built-in default when None) in a background thread on a free port;
    yields the base URL of its first listener, like `http://127.0.0.1:54321`. `speed` runs the
    simulated clock faster than the wall clock (as `aisim serve --speed`); `record` writes the
    request log there (as `aisim serve --record`), complete once the block exits; `pod` serves it as that
    Kubernetes pod (as `POD_NAME` / `POD_NAMESPACE` do); `port_offset` moves the other listeners' ports (as
    `aisim serve --port-offset`); `tokenizer` counts with a Hugging Face tokenizer (as `aisim serve --tokenizer`);
    `api_server_count` N > 0 serves it as `aisim serve --api-server-count N` does (N API-server processes and an
    engine core, started from a fresh interpreter; the URL then has no `state`)."""
    path = Path(scenario) if isinstance(scenario, (str, Path)) else None
    loaded = load_scenario(path or DEFAULT_SCENARIO) if not isinstance(scenario, Scenario) else scenario
    base_dir = (path or DEFAULT_SCENARIO).parent if path or scenario is None else Path(".")
    if api_server_count:
        from .multiproc.supervisor import Options, running

        options = Options(api_server_count, base_dir.resolve(), host, port, port_offset, seed, network_delay, speed,
                          None if record is None else str(record), pod, tokenizer, quiet=True)
        with running(loaded, options) as started:
            url = ServerUrl(f"http://{started.bound[0][1]}:{started.bound[0][2]}")
            url.listeners = [f"http://{h}:{p}" for _, h, p in started.bound]
            url.processes = started
            yield url
        return
    ready = threading.Event()
    box: _Started = {}
    loop = new_event_loop()

    async def start() -> None:
        state = local_state(loaded, base_dir, seed=seed, network_delay=network_delay, speed=speed, record=record,
                            pod=pod, tokenizer_path=tokenizer)
        box["state"] = state
        box["bound"] = await serve(state, host, port, port_offset)
        ready.set()

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(start())
        except BaseException as error:  # noqa: BLE001 - reported to the caller below
            box["error"] = error
            ready.set()
            return
        loop.run_forever()

    thread = threading.Thread(target=run, name="aisim-server", daemon=True)
    thread.start()
    ready.wait()
    if "error" in box:
        raise RuntimeError(f"aisim server failed to start: {box['error']}") from box["error"]
    bound_host, bound_port = box["bound"][0]
    url = ServerUrl(f"http://{bound_host}:{bound_port}")
    url.state = box["state"]
    url.listeners = [f"http://{h}:{p}" for h, p in box["bound"]]
    try:
        yield url
    finally:
        state = box["state"]
        asyncio.run_coroutine_threadsafe(state.stop(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)

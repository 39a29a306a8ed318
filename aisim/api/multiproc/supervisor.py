"""`aisim serve --api-server-count N`: bind the listeners, start the engine core and N API servers, watch them.

The supervisor binds every HTTP listener once and forks the API servers, which all accept on those sockets
(the kernel spreads the connections). A crashed API server is replaced (its requests are aborted in the
engine, which frees their KV blocks); one that keeps crashing, or an engine core that dies, stops the whole
server with the reason, and the API servers fail what they still wait for, so no client hangs. SIGTERM or
SIGINT drains as the single process does: the API servers finish or cut their requests within
`server.shutdownGrace` (a second signal ends it now), then the engine core aborts what is left, completes
the request log and stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import multiprocessing
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import tornado.netutil

from ...collector import settle_garbage_collector
from ...errors import AisimError
from ...scenario import Scenario
from ...scenario.distributions import DurationDistribution
from ..http.loop import run as run_loop
from ..pod import PodIdentity
from ..server import (
    LISTEN_BACKLOG,
    RefusedToStart,
    check_admin,
    listener_port,
    local_state,
    make_app,
    open_listener,
    start_grpc,
)
from .core import EngineCore, serve_private
from .frontend import api_server_state
from .relay import relay

HEARTBEAT_S = 0.5
"""How often each child tells the supervisor that its event loop turns (a byte on its pipe)."""
HEARTBEAT_TIMEOUT_S = 10.0
"""A child whose heartbeat stops this long is hung (paused, stuck): an API server is killed and replaced, an engine
core stops the server with that reason (`AISIM_HEARTBEAT_TIMEOUT_S` overrides it)."""
RESTARTS = 3
"""Crashes of one API server within `RESTART_WINDOW_S` that stop the server instead of replacing it again."""
RESTART_WINDOW_S = 30.0
START_TIMEOUT_S = 60.0


@dataclass
class Options:
    """How to serve (`aisim serve`'s options)."""

    count: int
    base_dir: Path = Path(".")
    host: str | None = None
    port: int | None = None
    port_offset: int = 0
    seed: int | None = None
    network_delay: DurationDistribution | None = None
    speed: float = 1.0
    record: str | None = None
    pod: PodIdentity | None = None
    tokenizer: str | None = None
    quiet: bool = False
    """Print no serving lines (an embedding caller reads `Started` instead)."""
    heartbeat_timeout_s: float = field(
        default_factory=lambda: float(os.environ.get("AISIM_HEARTBEAT_TIMEOUT_S", HEARTBEAT_TIMEOUT_S)))


@dataclass
class Started:
    """What the server bound: (scheme, host, port) per listener, and the processes."""

    bound: list[tuple[str, str, int]]
    engine_pid: int
    api_pids: list[int] = field(default_factory=list)


def _die_with_parent() -> None:
    """Linux: this process gets SIGKILL when the supervisor dies (no orphans if it is killed)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _beat(loop: asyncio.AbstractEventLoop, pipe: int) -> None:
    """Write the heartbeat on `pipe` every `HEARTBEAT_S` while this loop turns (a paused or stuck loop stops it)."""
    try:
        os.write(pipe, b".")
    except BlockingIOError:
        pass  # the supervisor reads late: it saw the earlier beats
    except OSError:
        return  # the supervisor is gone
    loop.call_later(HEARTBEAT_S, _beat, loop, pipe)


def _engine(scenario: Scenario, options: Options, address: str, exit_file: Path, host: str, ready: int) -> None:
    """The engine core process's body. SIGUSR1 (the server drains) drains its private listeners as one process
    does, while its engine goes on serving the API servers' requests; SIGUSR2 (they have exited) stops it. It
    ignores SIGTERM and SIGINT: the supervisor says what to do."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        state = local_state(scenario, options.base_dir, seed=options.seed, network_delay=options.network_delay,
                            speed=options.speed, record=options.record, pod=options.pod,
                            tokenizer_path=options.tokenizer)
        core = EngineCore(state, address)
        await core.start()
        ports = await serve_private(state, host)
        clock = loop.create_task(state.engine.run())
        stop = asyncio.Event()
        clock.add_done_callback(lambda _: stop.set())
        loop.add_signal_handler(signal.SIGUSR2, stop.set)
        draining: list[asyncio.Task[int]] = []

        def on_term() -> None:  # the passed-on requests end within the grace period (a second signal: now)
            if draining:
                state.hurry = True
            else:
                draining.append(loop.create_task(state.finish_requests()))

        loop.add_signal_handler(signal.SIGUSR1, on_term)
        settle_garbage_collector()
        os.write(ready, (json.dumps({"ports": ports}) + "\n").encode())
        os.set_blocking(ready, False)
        _beat(loop, ready)
        await stop.wait()
        if clock.done() and clock.exception() is not None:
            raise cast(BaseException, clock.exception())
        await core.close()
        await state.stop()
        await clock

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor says when to drain (SIGUSR1) and stop (SIGUSR2)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        run_loop(main())
    except BaseException as error:  # noqa: BLE001 - reported to the supervisor, which stops the server
        if not isinstance(error, AisimError):  # an error for the user (a bad dataset) needs no traceback
            traceback.print_exc()
        exit_file.write_text(f"{type(error).__name__}: {error}")
        os._exit(1)
    os._exit(0)


def _api(scenario: Scenario, options: Options, rank: int, address: str, sockets: dict[int, list[socket.socket]],
         ports: list[int], exit_file: Path, ready: int) -> None:
    """An API-server process's body."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        state, client = api_server_state(scenario, options.base_dir, address, rank, seed=options.seed,
                                         network_delay=options.network_delay, speed=options.speed,
                                         recording=options.record is not None, pod=options.pod,
                                         tokenizer_path=options.tokenizer)
        await client.connect()
        server = scenario.server
        host = options.host or server.host
        for index, listener in enumerate(server.listeners):
            personalities = tuple(listener.personalities)
            if "kserve-grpc" in personalities:  # gRPC binds its own socket to the port held (with SO_REUSEPORT)
                # grpcio is an optional extra, imported for a scenario that serves gRPC
                from .grpc_relay import GrpcForward

                port = sockets[index][0].getsockname()[1]
                for held in sockets[index]:
                    held.close()
                await start_grpc(state, host, port, GrpcForward(f"127.0.0.1:{ports[index]}", client))
                continue
            app = make_app(state, personalities, listener.metrics_path,
                           relay(f"http://127.0.0.1:{ports[index]}", client))
            open_listener(state, app, personalities, host).add_sockets(_listening(sockets[index]))
        stopping = asyncio.Event()

        def on_term() -> None:
            if stopping.is_set():
                state.hurry = True
            stopping.set()

        def on_engine_gone() -> None:
            reason = exit_file.read_text() if exit_file.exists() else "it exited"
            client.engine_gone(reason)
            state.hurry = True
            stopping.set()

        loop.add_signal_handler(signal.SIGTERM, on_term)
        loop.add_signal_handler(signal.SIGUSR1, on_engine_gone)
        settle_garbage_collector()
        os.write(ready, b"ready\n")
        os.set_blocking(ready, False)
        _beat(loop, ready)
        await stopping.wait()
        cut = await state.drain(0 if client.gone else None)
        await client.closed()
        if cut:
            sys.stderr.write(f"aisim serve: API server {rank}: {cut} request(s) still running at the end of the grace "
                             "period were ended\n")

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor forwards one SIGTERM per signal it gets
    try:
        run_loop(main())
    except BaseException:  # noqa: BLE001 - the supervisor sees the status and replaces this process
        traceback.print_exc()
        os._exit(1)
    os._exit(0)


REUSE_PORT = hasattr(socket, "SO_REUSEPORT")


def _reserve(port: int, host: str, backlog: int) -> list[socket.socket]:
    """The supervisor's hold on a listener's port. With `SO_REUSEPORT` (Linux) a bound socket that does not
    listen: each API server then listens on a socket of its own bound to the same port, and the kernel spreads
    new connections over them evenly (one shared listening socket let whichever process woke first accept a
    whole burst of connections: wrk's 32 all went to one API server). Elsewhere one listening socket that the
    API servers inherit and all accept on."""
    if not REUSE_PORT:
        return tornado.netutil.bind_sockets(port, host, backlog=backlog)
    family, kind, proto, _, address = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)[0]
    if port:  # a port another server holds, even with SO_REUSEPORT (another split aisim), is refused as in one process
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    held = socket.socket(family, kind, proto)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    held.bind(address)
    return [held]


def _listening(held: list[socket.socket]) -> list[socket.socket]:
    """An API server's listening sockets for a listener the supervisor holds (`_reserve`)."""
    if not REUSE_PORT:
        return held
    host, port = held[0].getsockname()[:2]
    sockets = tornado.netutil.bind_sockets(port, host, backlog=LISTEN_BACKLOG, reuse_port=True)
    for sock in held:
        sock.close()  # this process's copy of the supervisor's hold
    return sockets


def _fork(body: Any, *args: Any) -> tuple[int, int]:
    """Fork a child running `body(*args, ready_fd)`; returns (pid, the read end of its ready pipe)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.setpgid(0, 0)  # a terminal's Ctrl-C reaches the supervisor alone, which says what to do
        _die_with_parent()
        body(*args, write)
        os._exit(0)
    os.close(write)
    return pid, read


def _wait_ready(read: int, pid: int) -> str:
    """The line a child writes when it serves; raises if it dies or takes too long first."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        readable, _, _ = select.select([read], [], [], 0.1)
        if readable:
            line = os.read(read, 65536).decode()
            if line:
                return line.split("\n", 1)[0]  # the heartbeats that follow are not part of it
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            raise RuntimeError(f"exited with status {os.waitstatus_to_exitcode(status)} while starting")
    raise RuntimeError(f"did not start within {START_TIMEOUT_S:g}s")


class Supervisor:
    """The parent process: it binds, forks and watches; it serves nothing itself."""

    def __init__(self, scenario: Scenario, options: Options) -> None:
        self.scenario = scenario
        self.options = options
        self.tmp = Path(tempfile.mkdtemp(prefix="aisim-serve-"))
        self.address = str(self.tmp / "engine.sock")
        self.exit_file = self.tmp / "engine-exit"
        self.sockets: dict[int, list[socket.socket]] = {}
        self.ports: list[int] = []
        self.engine_pid = 0
        self.api: dict[int, int] = {}
        """rank -> pid of the API servers running."""
        self.crashes: dict[int, list[float]] = {}
        self.signals = 0
        self.beats: dict[int, tuple[int, float]] = {}
        """pid -> (the read end of its heartbeat pipe, when it last beat)."""

    def start(self) -> Started:
        """Bind, start the engine core, then the API servers; returns what is served."""
        server = self.scenario.server
        options = self.options
        host = options.host or server.host
        check_admin(server, host)
        for index, listener in enumerate(server.listeners):
            chosen = options.port if (index == 0 and options.port is not None) else listener_port(listener.port, options.port_offset)
            self.sockets[index] = _reserve(chosen, host, LISTEN_BACKLOG)
        self.engine_pid, read = _fork(_engine, self.scenario, options, self.address, self.exit_file, host)
        try:
            self.ports = json.loads(_wait_ready(read, self.engine_pid))["ports"]
        except RuntimeError as error:
            os.close(read)
            raise RuntimeError(f"the engine core {error}: {self._engine_reason()}") from None
        self._watch_beats(self.engine_pid, read)
        for rank in range(options.count):
            self._start_api(rank)
        bound = [("grpc" if "kserve-grpc" in listener.personalities else "http", host,
                  self.sockets[index][0].getsockname()[1]) for index, listener in enumerate(server.listeners)]
        return Started(bound, self.engine_pid, list(self.api.values()))

    def _start_api(self, rank: int) -> None:
        pid, read = _fork(_api, self.scenario, self.options, rank, self.address, self.sockets, self.ports,
                          self.exit_file)
        self.api[rank] = pid
        try:
            _wait_ready(read, pid)
        except RuntimeError as error:
            os.close(read)
            raise RuntimeError(f"API server {rank} {error}") from None
        self._watch_beats(pid, read)

    def _watch_beats(self, pid: int, read: int) -> None:
        os.set_blocking(read, False)
        self.beats[pid] = (read, time.monotonic())

    def _forget(self, pid: int) -> None:
        beat = self.beats.pop(pid, None)
        if beat is not None:
            os.close(beat[0])

    def listen(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for heartbeats; kill a child whose heartbeat stopped `heartbeat_timeout_s` ago
        (an API server: replaced as if it had crashed; the engine core: the server stops, with that reason)."""
        fds = {fd: pid for pid, (fd, _) in self.beats.items()}
        readable, _, _ = select.select(list(fds), [], [], timeout_s) if fds else ([], [], [])
        now = time.monotonic()
        for fd in readable:
            try:
                os.read(fd, 4096)
            except OSError:
                pass
            self.beats[fds[fd]] = (fd, now)
        limit = self.options.heartbeat_timeout_s
        for pid, (_, last) in list(self.beats.items()):
            if now - last <= limit:
                continue
            self.beats[pid] = (self.beats[pid][0], float("inf"))  # killed once
            if pid == self.engine_pid:
                self.exit_file.write_text(f"it stopped answering (no heartbeat for {limit:g}s): killed")
                sys.stderr.write(f"aisim serve: the engine core (pid {pid}) stopped answering for {limit:g}s: "
                                 "killed\n")
            else:
                rank = next((r for r, p in self.api.items() if p == pid), None)
                sys.stderr.write(f"aisim serve: API server {rank} (pid {pid}) stopped answering for {limit:g}s: "
                                 "killed\n")
            _kill(pid, signal.SIGKILL)

    def _engine_reason(self) -> str:
        return self.exit_file.read_text() if self.exit_file.exists() else "no reason given (see its output above)"

    # -- watching ----------------------------------------------------------------------------------

    def on_signal(self, _signum: int, _frame: Any) -> None:
        """Per signal one SIGTERM to every API server and one SIGUSR1 to the engine core, first (the first drains, a
        second ends the grace): its private listeners drain the requests the API servers passed on, at the same
        deadline as theirs."""
        self.signals += 1
        if self.engine_pid:
            _kill(self.engine_pid, signal.SIGUSR1)
        for pid in self.api.values():
            _kill(pid, signal.SIGTERM)

    def watch(self) -> int:
        """Run until a signal or the engine core's end; returns the exit status."""
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)
        status = 0
        while not self.signals:
            pid, code = _reap()
            if pid == 0:
                self.listen(0.05)
                continue
            self._forget(pid)
            if pid == self.engine_pid:
                self.engine_pid = 0
                reason = f"{self._engine_reason()} (status {code})"
                sys.stderr.write(f"aisim serve: the engine core stopped: {reason}; stopping the server\n")
                self.exit_file.write_text(reason)
                for api_pid in self.api.values():
                    _kill(api_pid, signal.SIGUSR1)
                status = 1
                break
            rank = next((r for r, p in self.api.items() if p == pid), None)
            if rank is None:
                continue
            del self.api[rank]
            now = time.monotonic()
            recent = [t for t in self.crashes.get(rank, []) if now - t < RESTART_WINDOW_S] + [now]
            self.crashes[rank] = recent
            if len(recent) > RESTARTS:
                sys.stderr.write(f"aisim serve: API server {rank} exited {len(recent)} times within "
                                 f"{RESTART_WINDOW_S:g}s (status {code}); stopping the server\n")
                for api_pid in self.api.values():
                    _kill(api_pid, signal.SIGTERM)
                status = 1
                break
            sys.stderr.write(f"aisim serve: API server {rank} (pid {pid}) exited with status {code}; starting another\n")
            try:
                self._start_api(rank)
            except RuntimeError as error:
                sys.stderr.write(f"aisim serve: {error}; stopping the server\n")
                status = 1
                break
        if self.signals:
            grace = self.scenario.server.shutdown_grace / 1e9
            sys.stderr.write(f"aisim serve: draining ({grace:g}s grace; signal again to end it now)\n")
        self.shutdown()
        return status

    def abandon_start(self) -> None:
        """Starting failed: stop what did start (the API servers at once, then the engine core)."""
        for pid in self.api.values():
            _kill(pid, signal.SIGTERM)
        self.shutdown()

    def shutdown(self) -> None:
        """The API servers end first (their requests finished or cut), then the engine core (the log completed)."""
        grace = self.scenario.server.shutdown_grace / 1e9
        _wait_all(self.api, grace + 10)
        if self.engine_pid:
            _kill(self.engine_pid, signal.SIGUSR2)
            _wait_all({0: self.engine_pid}, 15)
            self.engine_pid = 0
        for listening in self.sockets.values():
            for sock in listening:
                sock.close()
        for pid in list(self.beats):
            self._forget(pid)
        shutil.rmtree(self.tmp, ignore_errors=True)


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _reap() -> tuple[int, int]:
    try:
        pid, status = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return 0, 0
    return pid, (os.waitstatus_to_exitcode(status) if pid else 0)


def _wait_all(pids: dict[int, int], timeout_s: float) -> None:
    """Wait for these children to exit; SIGKILL those still running after `timeout_s`."""
    left = set(pids.values())
    deadline = time.monotonic() + timeout_s
    while left and time.monotonic() < deadline:
        for pid in list(left):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                left.discard(pid)
        time.sleep(0.02)
    for pid in left:
        sys.stderr.write(f"aisim serve: process {pid} did not stop in time: killed\n")
        _kill(pid, signal.SIGKILL)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    pids.clear()


def serve(scenario: Scenario, options: Options) -> int:
    """`aisim serve --api-server-count N` in the foreground: print the listeners, run until a signal."""
    supervisor = Supervisor(scenario, options)
    try:
        started = supervisor.start()
    except (OSError, RuntimeError, RefusedToStart) as error:
        sys.stderr.write(f"aisim serve: {error}\n")
        supervisor.abandon_start()
        return 1
    if not options.quiet:
        for (scheme, host, port), listener in zip(started.bound, scenario.server.listeners):
            print(f"aisim serving {scenario.metadata.name} at {scheme}://{host}:{port} "
                  f"({', '.join(listener.personalities)})", flush=True)
        print(f"models: {', '.join(m.id for m in scenario.models)}", flush=True)
    sys.stderr.write(f"aisim serve: engine core pid {started.engine_pid}, {options.count} API server(s) pids "
                     f"{' '.join(map(str, started.api_pids))}\n")
    return supervisor.watch()


def _supervise(scenario: Scenario, options: Options, conn: Any) -> None:
    """The body of `running`'s supervisor process: start, report what is bound (or the error), watch."""
    supervisor = Supervisor(scenario, options)
    try:
        started = supervisor.start()
    except Exception as error:  # noqa: BLE001 - handed to the caller, which raises it
        supervisor.abandon_start()
        conn.send(f"{type(error).__name__}: {error}")
        return
    conn.send(started)
    sys.exit(supervisor.watch())


@contextlib.contextmanager
def running(scenario: Scenario, options: Options) -> Iterator[Started]:
    """Serve split across processes from a fresh interpreter (the caller may have threads, which a fork must
    not copy); yields what is bound. On exit the server gets SIGTERM and must stop cleanly within its grace."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_supervise, args=(scenario, options, child), name="aisim-supervisor")
    process.start()
    try:
        if not parent.poll(START_TIMEOUT_S):
            raise RuntimeError("aisim serve --api-server-count did not start in time")
        started = parent.recv()
        if isinstance(started, str):
            raise RuntimeError(f"aisim server failed to start: {started}")  # noqa: TRY004 - an error text, not a type
        yield started
    finally:
        if process.pid is not None:
            _kill(process.pid, signal.SIGTERM)
        process.join(timeout=options_grace(scenario) + 20)
        if process.is_alive():
            process.kill()
            process.join()


def options_grace(scenario: Scenario) -> float:
    return scenario.server.shutdown_grace / 1e9

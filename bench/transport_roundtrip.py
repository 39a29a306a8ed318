"""What a message between an API server and the engine core costs: ZeroMQ against a plain Unix socket.

Two processes pinned to one core (as `bench/serve_scale.py` pins the split server) exchange N small messages
in ping-pong over a ZeroMQ DEALER/ROUTER pair on `ipc://` (vLLM's transport; needs `pip install pyzmq`) and
over a Unix stream socket (aisim's, `aisim/api/multiproc/wire.py`); prints the wall time per round trip and the
CPU time per round trip of each side (every thread of the process: ZeroMQ's I/O thread included).

    taskset -c 0 python bench/transport_roundtrip.py [--messages 20000]
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import tempfile
import time
from collections.abc import Callable


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _measure(name: str, serve: Callable[[], None], client: Callable[[], None], count: int) -> None:
    pid = os.fork()
    if pid == 0:
        serve()
        os._exit(0)
    time.sleep(0.3)
    started, used = time.perf_counter(), _cpu(resource.RUSAGE_SELF)
    client()
    wall, used = time.perf_counter() - started, _cpu(resource.RUSAGE_SELF) - used
    _, _, child = os.wait4(pid, 0)
    served = child.ru_utime + child.ru_stime
    print(f"{name:<12} {wall / count * 1e6:6.1f} us wall per round trip; CPU per round trip: client "
          f"{used / count * 1e6:5.1f} us, server {served / count * 1e6:5.1f} us", flush=True)


def unix(count: int, payload: bytes) -> None:
    here, there = socket.socketpair()

    def serve() -> None:
        here.close()
        for _ in range(count):
            there.sendall(there.recv(65536))

    def client() -> None:
        for _ in range(count):
            here.sendall(payload)
            here.recv(65536)

    _measure("unix socket", serve, client, count)
    here.close()
    there.close()


def zeromq(count: int, payload: bytes) -> None:
    try:
        import zmq
    except ImportError:
        print("zeromq       (pyzmq is not installed: pip install pyzmq)")
        return
    address = f"ipc://{tempfile.mkdtemp()}/roundtrip"

    def serve() -> None:
        context = zmq.Context()
        router = context.socket(zmq.ROUTER)
        router.bind(address)
        for _ in range(count):
            router.send_multipart(router.recv_multipart())
        router.close(linger=1000)
        context.term()

    def client() -> None:
        context = zmq.Context()
        dealer = context.socket(zmq.DEALER)
        dealer.connect(address)
        for _ in range(count):
            dealer.send(payload)
            dealer.recv()
        dealer.close()
        context.term()

    _measure("zeromq", serve, client, count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000)
    args = parser.parse_args()
    payload = b"x" * 60  # about a Submit's size
    zeromq(args.messages, payload)
    unix(args.messages, payload)


if __name__ == "__main__":
    main()

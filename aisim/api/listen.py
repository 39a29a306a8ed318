"""Whether a listener's address can be bound, asked before a server binds it, so that a port in use is reported
with its host and port (`cannot listen on 127.0.0.1:8080: Address already in use`) rather than as the operating
system's bare `[Errno 98]`, or as gRPC's log line and RuntimeError."""

from __future__ import annotations

import socket

from ..errors import ListenError


def probe(host: str, port: int, what: str = "") -> None:
    """Raise ListenError when `host:port` cannot be bound now (port 0, any free port, always can)."""
    if not port:
        return
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, 0,
                                                             socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as held:
            held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            held.bind(address)
    except OSError as error:
        raise ListenError(host, port, error, what) from None

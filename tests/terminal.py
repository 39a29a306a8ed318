"""A program in a pseudo-terminal, as a user's terminal runs it: what `aisim tui` draws, and whether `q` ends it."""

from __future__ import annotations

import os
import select
import subprocess
import time
from pathlib import Path


def run_tui_until_drawn(argv: list[str], cwd: Path, env: dict[str, str], drawn: bytes = b"gpu0",
                        timeout: float = 60) -> bytes:
    """Start `argv` in a 120x40 pseudo-terminal, press `q` (each second) once `drawn` is on screen, and return what
    it wrote; fails unless it exits 0 by itself."""
    import fcntl
    import struct
    import termios

    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    process = subprocess.Popen(argv, cwd=cwd, env={**env, "TERM": "xterm-256color"},
                               stdin=follower, stdout=follower, stderr=follower)
    os.close(follower)
    screen, deadline, asked = b"", time.monotonic() + timeout, 0.0
    try:
        while process.poll() is None and time.monotonic() < deadline:
            if select.select([leader], [], [], 0.1)[0]:
                try:
                    screen += os.read(leader, 1 << 16)
                except OSError:
                    break
            if drawn in screen and time.monotonic() - asked > 1:  # drawn: ask it to quit until it does
                os.write(leader, b"q")
                asked = time.monotonic()
        assert process.wait(timeout=10) == 0
    finally:
        process.kill()
        os.close(leader)
    return screen

"""Writing a request log while a server runs, without blocking it.

The server hands each finished request to `LogWriter.write`, which only puts the record on a
queue; a writer thread turns records into JSON lines and writes them. `close` writes the last
records (the GPUs' memory), drains the queue, flushes and closes the file, so nothing is lost on
exit. Serialisation happens on the writer thread too, off the event loop.
"""

from __future__ import annotations

import json
import queue
import threading
from pathlib import Path
from typing import Any

from .formats import header_record

_STOP = None


class LogWriter:
    """JSON lines appended by a background thread, in the order `write` was called."""

    def __init__(self, path: str | Path, **header: Any) -> None:
        self.path = Path(path)
        self._handle = self.path.open("w", encoding="utf-8")
        self._queue: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._drain, name="aisim-record", daemon=True)
        self.written = 0
        self.closed = False
        self._queue.put(header_record(**header))
        self._thread.start()

    def write(self, record: dict[str, Any]) -> None:
        """Queue one record (returns at once)."""
        if not self.closed:
            self._queue.put(record)

    def _drain(self) -> None:
        handle = self._handle
        while True:
            record = self._queue.get()
            if record is _STOP:
                break
            handle.write(json.dumps(record, separators=(",", ":")) + "\n")
            self.written += 1
            if self._queue.empty():
                handle.flush()  # a reader tailing the file sees each burst once it is written
        handle.flush()
        handle.close()

    def close(self, *last: dict[str, Any]) -> None:
        """Write `last` after everything queued, then flush and close the file (idempotent)."""
        if self.closed:
            return
        for record in last:
            self._queue.put(record)
        self.closed = True
        self._queue.put(_STOP)
        self._thread.join()

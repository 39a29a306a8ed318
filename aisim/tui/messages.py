"""Messages of the TUI."""

from __future__ import annotations

from textual.message import Message

from .board import Frame


class FrameReady(Message):
    """A new frame for the views. A newer one replaces one not yet handled, so a busy UI skips to the
    latest state instead of falling behind (and never holds the engine up)."""

    def __init__(self, frame: Frame) -> None:
        super().__init__()
        self.frame = frame

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, FrameReady)

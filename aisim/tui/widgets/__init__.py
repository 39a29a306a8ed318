"""The TUI's views: one widget per tab, each drawing the latest `Frame`."""

from .log import LogView
from .memory import MemoryView
from .requests import RequestsView
from .states import StatesView
from .streams import StreamsView

__all__ = ["LogView", "MemoryView", "RequestsView", "StatesView", "StreamsView"]

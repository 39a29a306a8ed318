"""The Textual app: a status line, five views in tabs, the key bindings.

Every `1 / fps` seconds the app polls its source (cheap: only what is new), folds the records into
the board and posts one `FrameReady`; a frame not yet drawn when the next comes is replaced, so the
UI stays current however slow a terminal is. With `fps=0` nothing ticks: tests call `tick()`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

from rich.markup import escape
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Footer, Static, TabbedContent, TabPane

from .board import NS, Board, Frame
from .messages import FrameReady
from .screens import FaultScreen, HelpScreen
from .source import Source
from .widgets import LogView, MemoryView, RequestsView, StatesView, StreamsView

VIEWS = (("memory", "Memory", MemoryView), ("streams", "Streams", StreamsView), ("states", "States", StatesView),
         ("requests", "Requests", RequestsView), ("log", "Log", LogView))


class AisimTui(App[None]):
    """Watch (and steer) a simulation."""

    TITLE = "aisim"
    CSS = """
    #status { height: 1; background: $panel; padding: 0 1; }
    #views { height: 1fr; }
    #views ContentSwitcher { height: 1fr; }
    TabPane { padding: 0 1; height: 1fr; }
    TabPane VerticalScroll { height: 1fr; }
    """
    BINDINGS: ClassVar[list[Binding | tuple[str, str] | tuple[str, str, str]]] = [
        Binding("space", "pause", "pause"),
        Binding("n", "step", "step"),
        Binding("plus,equals_sign", "speed(1)", "faster"),
        Binding("minus", "speed(0)", "slower"),
        Binding("f", "fault", "fault"),
        Binding("s", "screenshot", "screenshot"),
        Binding("question_mark,h", "help", "help"),
        Binding("q", "quit", "quit"),
        *(Binding(str(i + 1), f"view('{name}')", title, show=False) for i, (name, title, _) in enumerate(VIEWS)),
    ]

    def __init__(self, source: Source, fps: float = 30.0, view: str = "memory", screenshots: Path = Path(".")) -> None:
        """`fps=0`: no frame timer (tests draw with `tick`); `view`: the tab shown first; `screenshots`: the folder
        the screenshot key and the command palette's "Save screenshot" write to."""
        super().__init__()
        self.screenshots = screenshots
        self.source = source
        self.fps = fps
        self.view = view
        self.board = Board()
        self.frames = 0
        """Frames drawn so far."""
        self.last_frame: Frame | None = None
        self.notice = ""
        self._fps_window: tuple[float, int] = (time.monotonic(), 0)
        self.measured_fps = 0.0

    def compose(self) -> ComposeResult:
        yield Static(id="status")
        with TabbedContent(id="views", initial=self.view):
            for name, title, view in VIEWS:
                with TabPane(title, id=name), VerticalScroll():
                    yield view(id=f"{name}-view")
        yield Footer()

    async def on_mount(self) -> None:
        await self.source.start()
        self.tick()
        if self.fps > 0:
            self.set_interval(1 / self.fps, self.tick)

    async def on_unmount(self) -> None:
        await self.source.stop()

    def tick(self) -> None:
        """Poll the source and post a frame."""
        records: list[dict[str, Any]] = self.source.poll()
        self.board.apply(records)
        self.board.now_ns = max(self.board.now_ns, self.source.now())
        self.post_message(FrameReady(self.board.frame()))

    def on_frame_ready(self, message: FrameReady) -> None:
        frame = message.frame
        self.last_frame = frame
        self.frames += 1
        log = self.query_one("#log-view", LogView)
        tailing = log.parent is not None and isinstance(log.parent, VerticalScroll) and \
            log.parent.scroll_y >= log.parent.max_scroll_y - 1
        for name, _, view in VIEWS:
            self.query_one(f"#{name}-view", view).frame = frame
        if tailing and isinstance(log.parent, VerticalScroll):  # a log scrolled to its end follows new lines
            log.parent.call_after_refresh(log.parent.scroll_end, animate=False)
        self._status(frame)

    def _status(self, frame: Frame) -> None:
        now = time.monotonic()
        started, count = self._fps_window
        if now - started >= 1.0:
            self.measured_fps = (self.frames - count) / (now - started)
            self._fps_window = (now, self.frames)
        source = self.source
        if not source.controllable:
            mode = "attached"
        elif source.ended:
            mode = "ended"
        else:
            mode = "paused" if source.paused else f"x{source.speed:g}"
        parts = [f"[b]{source.label}[/b]", f"t={frame.now_ns / NS:8.3f}s", mode]
        if self.fps > 0:
            parts.append(f"{self.measured_fps:4.1f} fps")
        if frame.ooms:
            parts.append("[b red]OOM[/]")
        if self.notice:
            parts.append(self.notice)
        error = getattr(source, "error", "")
        if error:
            parts.append(f"[b red]{escape(error)}[/]")
        self.query_one("#status", Static).update("  ".join(parts))

    # -- actions -------------------------------------------------------------------------

    def _controls(self) -> bool:
        if not self.source.controllable:
            self.notify("attached to a server: it keeps its own clock and faults", severity="warning")
            return False
        return True

    def action_pause(self) -> None:
        if self._controls():
            self.source.toggle_pause()
            self._tell_if_ended()
            self.tick()

    def action_step(self) -> None:
        if self._controls():
            self.source.step()
            self._tell_if_ended()
            self.tick()

    def _tell_if_ended(self) -> None:
        """A run that has ended stays where it ended (the source neither resumes nor steps it): say why."""
        if self.source.ended:
            self.notify("the run has ended: its final state stays on screen", severity="information")

    def action_speed(self, up: int) -> None:
        if self._controls():
            self.source.faster(bool(up))
            self.tick()

    def deliver_screenshot(self, filename: str | None = None, path: str | None = None,
                           time_format: str | None = None) -> str | None:
        """Textual saves to the user's Downloads folder, which may not exist: here the screenshots folder (made
        when missing)."""
        folder = Path(path) if path is not None else self.screenshots
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            self.notify(f"cannot write screenshots to {folder}: {error.strerror}", severity="error")
            return None
        return super().deliver_screenshot(filename, str(folder), time_format)

    def action_view(self, name: str) -> None:
        self.query_one("#views", TabbedContent).active = name

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_fault(self) -> None:
        if self._controls():
            self.push_screen(FaultScreen(list(self.board.faults)), self._inject)

    def _inject(self, name: str | None) -> None:
        if name is None:
            return
        self.source.fire(name)
        self.notice = f"[yellow]injected {name}[/]"
        self.tick()

"""The `admin` personality: inject DCGM field values and XID errors into the running simulation.

Served only when `server.admin.enabled` is true, on listeners that list `admin`. Every call needs
`Authorization: Bearer <server.admin.token>`: without credentials the answer is 401 (with
`WWW-Authenticate: Bearer`), with a wrong token 403. The server refuses to start an admin listener without a
token unless `server.admin.insecure` is true and it is bound to a loopback address (`server.check_admin`).
Bodies are JSON (a `POST` needs `Content-Type: application/json`); errors are
`{"error": {"message", "type", "param", "code"}}` like the other personalities'.

    POST   /admin/dcgm/inject   {"gpu", "field", "value", "duration"?}   inject (dcgmInjectFieldValue)
    GET    /admin/dcgm/inject                                            the injections active now
    DELETE /admin/dcgm/inject?gpu=<gpu>[&field=<field>]                  clear
    POST   /admin/dcgm/clear    {"gpu", "field"?}                        clear (same, with a body)
    POST   /admin/xid           {"gpu", "code"}                          an XID error now
    GET    /admin/events[?interval=<s>][&count=<n>]                      the TUI's records, as SSE

`/admin/events` is a server-sent event stream: every `interval` seconds (default 0.05) one event whose
data is a JSON list of the records `aisim.engine.feed.Feed` produces (what `aisim tui --attach` folds);
the first list starts with a `hello` record. `count` ends the stream after that many events.

`gpu` is the scenario's device id (`gpu0`, `node-3`) or the DCGM index (an integer, as `dcgmi
--gpuid` takes); `field` a DCGM field name or id; `duration` a duration string (`30s`) or a number
of seconds, the injection lasting until cleared without one. Each call acts at the simulation's
current instant and leaves a timeline record (`dcgm_inject`, `dcgm_clear`, `xid`).
"""

from __future__ import annotations

import asyncio
import json
import math
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import tornado.iostream

from ...engine import Feed
from ...scenario.units import QuantityError, parse_duration
from ...telemetry.fields import FieldError, coerce, lookup
from ...telemetry.sampler import GpuTelemetry
from ...telemetry.xid import Xid
from ..http.credentials import bearer_token
from .errors import ErrorAnswer
from .handlers import SSE_HEADERS, BaseHandler

T = TypeVar("T")
INJECTED = "Successfully injected field info."
"""What `dcgmi test --inject` prints on success."""


def _bad(message: str, param: str | None = None) -> ErrorAnswer:
    return ErrorAnswer(400, message, "invalid_request_error", param)


class AdminHandler(BaseHandler):
    """Token check, JSON bodies and error answers shared by the admin endpoints."""

    access = "admin"

    def prepare(self) -> None:
        token = self.state.scenario.server.admin.token
        header = self.request.headers.get("Authorization", "")
        if token is None:
            pass  # `insecure` on loopback (`server.check_admin`)
        elif not header:
            self.set_header("WWW-Authenticate", 'Bearer realm="aisim-admin"')
            self.fail(ErrorAnswer(401, "Admin endpoints need a bearer token.", "authentication_error"))
            return
        elif (given := bearer_token(header)) is None or not secrets.compare_digest(given.encode(), token.encode()):
            self.fail(ErrorAnswer(403, "The admin token is not valid.", "permission_error"))
            return
        if self.request.method == "POST":
            try:
                self.require_json()
            except ErrorAnswer as error:
                self.fail(error)

    @property
    def telemetry(self) -> GpuTelemetry:
        telemetry = self.state.sim.telemetry
        assert telemetry is not None, "an admin listener turns telemetry on (wants_telemetry)"
        return telemetry

    def body(self) -> dict[str, Any]:
        body = self.json_body()
        if not isinstance(body, dict):
            raise _bad("The body must be a JSON object.")
        return body

    def gpu(self, value: Any) -> str:
        """The device id of a `gpu` parameter (device id or DCGM index)."""
        if isinstance(value, str) and value.isascii() and value.isdigit():  # `int("¹")` raises
            value = int(value)
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            raise _bad("`gpu` must be a device id or a DCGM GPU index.", "gpu")
        try:
            return self.telemetry.board(value).identity.device
        except KeyError as error:
            raise ErrorAnswer(404, str(error.args[0]), "invalid_request_error", "gpu", "gpu_not_found") from None

    async def act(self, work: Callable[[], T]) -> T:
        """Run `work` at the simulation's current instant and return its result (at once: the clock runs an
        action injected from outside its own run before it returns)."""
        return await self.state.engine.act(lambda done: done(work()))

    def answer(self, payload: dict[str, Any]) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(payload))

    async def run_guarded(self, work: Callable[[], Awaitable[None]]) -> None:
        try:
            await work()
        except ErrorAnswer as error:
            self.fail(error)
        except FieldError as error:
            self.fail(_bad(str(error), "field"))


class InjectHandler(AdminHandler):
    """`POST`, `GET` and `DELETE /admin/dcgm/inject`."""

    async def post(self) -> None:
        async def work() -> None:
            body = self.body()
            gpu = self.gpu(body.get("gpu"))
            if "field" not in body or "value" not in body:
                raise _bad("`field` and `value` are required.", "field" if "field" not in body else "value")
            spec = lookup(body["field"])
            value = coerce(spec, body["value"])
            duration = self._duration(body.get("duration"))
            override = await self.act(lambda: self.telemetry.inject(gpu, spec.name, value, duration, source="admin"))
            self.answer({"message": INJECTED, "gpu": gpu, "dcgm_gpu": self.telemetry.board(gpu).identity.index,
                         "field": spec.name, "field_id": spec.id, "value": override.value, "since_ns": override.since,
                         "until_ns": override.until})

        await self.run_guarded(work)

    @staticmethod
    def _duration(value: Any) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float, str)) or \
                not isinstance(value, str) and not (math.isfinite(value) and abs(value) < 1e9):
            raise _bad("`duration` must be a number of seconds or a duration such as `30s`.", "duration")
        try:
            ns = int(value * 1e9) if isinstance(value, (int, float)) else parse_duration(value)
        except QuantityError as error:
            raise _bad(f"`duration`: {error}", "duration") from None
        if ns <= 0:
            raise _bad("`duration` must be positive.", "duration")
        return ns

    def get(self) -> None:
        now = self.state.sim.kernel.now
        active = [{"gpu": device, "field": name, "value": o.value, "since_ns": o.since, "until_ns": o.until,
                   "source": o.source}
                  for device, board in self.telemetry.boards.items()
                  for name, o in board.overrides.items() if o.active(now)]
        self.answer({"injections": active})

    async def delete(self) -> None:
        await self.run_guarded(lambda: self._clear(self.get_query_argument("gpu", None),
                                                   self.get_query_argument("field", None)))

    async def _clear(self, gpu_value: Any, field: Any) -> None:
        if gpu_value is None:
            raise _bad("`gpu` is required.", "gpu")
        gpu = self.gpu(gpu_value)
        name = None if field is None else lookup(field).name
        cleared = await self.act(lambda: self.telemetry.clear(gpu, name, source="admin"))
        self.answer({"gpu": gpu, "cleared": cleared})


class ClearHandler(InjectHandler):
    """`POST /admin/dcgm/clear`: clear with a JSON body."""

    async def post(self) -> None:
        async def work() -> None:
            body = self.body()
            await self._clear(body.get("gpu"), body.get("field"))

        await self.run_guarded(work)


class XidHandler(AdminHandler):
    """`POST /admin/xid`: an XID error on a GPU now."""

    async def post(self) -> None:
        async def work() -> None:
            body = self.body()
            gpu = self.gpu(body.get("gpu"))
            code = body.get("code")
            if not isinstance(code, int) or isinstance(code, bool) or not 1 <= code <= 1023:
                raise _bad("`code` must be an XID number from 1 to 1023.", "code")
            sim = self.state.sim
            killed = await self.act(lambda: sim.xid(gpu, code))
            xid = Xid(code)
            self.answer({"gpu": gpu, "code": code, "message": xid.message, "effect": xid.effect, "killed": killed})

        await self.run_guarded(work)


class EventsHandler(AdminHandler):
    """`GET /admin/events`: the live records of the simulation as server-sent events. An in-flight request of the
    server (`ServerState.handlers`): the drain ends it at the end of the grace period with a complete answer."""

    def shut_down(self) -> None:
        self.cut.set()

    async def get(self) -> None:
        try:
            interval = float(self.get_query_argument("interval", "0.05"))
            count = int(self.get_query_argument("count", "0"))
        except ValueError:
            self.fail(_bad("`interval` must be a number of seconds and `count` an integer."))
            return
        if not 0.005 <= interval <= 60:
            self.fail(_bad("`interval` must be between 0.005 and 60 seconds.", "interval"))
            return
        for name, value in SSE_HEADERS.items():
            self.set_header(name, value)
        self.cut = asyncio.Event()
        self.state.handlers.add(self)
        try:
            await self._watch(interval, count)
        finally:
            self.state.handlers.discard(self)

    async def _watch(self, interval: float, count: int) -> None:
        feed = Feed(self.state.sim)
        sent = 0
        while not self.gone and not self.cut.is_set() and (count <= 0 or sent < count):
            records = feed.poll(self.state.engine.now())
            self.write(b"data: " + json.dumps(records, separators=(",", ":")).encode() + b"\n\n")
            sent += 1
            try:
                await self.flush()
            except tornado.iostream.StreamClosedError:
                return
            if count <= 0 or sent < count:
                try:
                    await asyncio.wait_for(self.cut.wait(), interval)
                except TimeoutError:
                    pass
        if not self.gone:
            self.finish()


def routes() -> list[Any]:
    return [
        (r"/admin/events", EventsHandler),
        (r"/admin/dcgm/inject", InjectHandler),
        (r"/admin/dcgm/clear", ClearHandler),
        (r"/admin/xid", XidHandler),
    ]

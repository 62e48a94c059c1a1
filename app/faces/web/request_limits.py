"""Input limits at the door, before any route runs (ASGI middleware): the size of a request
body (413), the nesting depth of a JSON body (422), and ids in the path that no database row
can have (a number above 2^63-1 on SQLite, 2^31-1 on PostgreSQL, is no session, no candidate,
no question: 404). What a body may hold field by field is the schemas' business
(app/domain/schemas.py, app/store/input_limits.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.faces.web.hosts import ConnectionMiddleware
from app.settings import Settings
from app.store.database import engine_url, largest_integer
from app.store.input_limits import MAX_DEPTH, human_bytes, json_depth_ok

TRACE_UPLOAD_PATHS = ("/traces/import",)
FORM_OVERHEAD = 64 * 1024  # multipart framing around an uploaded trace; the route checks the file itself


def body_limit(settings: Settings, path: str) -> int:
    if path in TRACE_UPLOAD_PATHS:
        return settings.trace_max_bytes + FORM_OVERHEAD
    return settings.request_max_bytes


BODIES_PER_CLIENT = 32  # bodies one address may be sending at once


def slow_message(timeout: float) -> str:
    return f"the request body did not arrive within {timeout:g} s (SOCRATIC_BODY_TIMEOUT_S)"


def too_large_message(limit: int) -> str:
    return f"the request body is larger than {human_bytes(limit)}, the most this server accepts here"


def id_out_of_range(path: str, largest: int) -> bool:
    """A number in the path beyond what the database's integer columns hold (2^63-1 on SQLite,
    2^31-1 on PostgreSQL): no row has it."""
    return any(part.isdigit() and len(part) > 9 and int(part) > largest for part in path.split("/"))


class InputLimits(ConnectionMiddleware):
    """Also: a body must arrive within SOCRATIC_BODY_TIMEOUT_S (408), so a client sending a
    byte a second holds nothing for long; and one address has at most BODIES_PER_CLIENT bodies
    arriving at once (429)."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        super().__init__(app, settings)
        self.arriving: dict[str, int] = {}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if id_out_of_range(path, largest_integer(engine_url(self.settings.database_url).get_backend_name())):
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008, "reason": "no such session"})
                return
            await JSONResponse({"detail": "there is nothing at this address (an id beyond any the "
                                          "database can hold)"}, status_code=404)(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        limit = body_limit(self.settings, path)
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await _refuse(scope, receive, send, 413, too_large_message(limit))
            return
        if scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, _counting(receive, limit, self.settings.body_timeout_s), send)
            return
        client = scope["client"][0] if scope.get("client") else "?"
        if self.arriving.get(client, 0) >= BODIES_PER_CLIENT:
            await _refuse(scope, receive, send, 429, f"{BODIES_PER_CLIENT} requests from this address are still "
                                                     "sending their bodies; finish those first")
            return
        self.arriving[client] = self.arriving.get(client, 0) + 1
        released = False

        def arrived() -> None:
            nonlocal released
            if not released:
                released = True
                self.arriving[client] -= 1
                if not self.arriving[client]:
                    del self.arriving[client]

        try:
            await self._with_body(scope, receive, send, headers, limit, arrived)
        finally:
            arrived()

    async def _with_body(self, scope: Scope, receive: Receive, send: Send, headers: Headers, limit: int,
                         arrived: Callable[[], None]) -> None:
        timeout = self.settings.body_timeout_s
        if "json" in headers.get("content-type", "").lower():  # application/JSON is JSON too
            try:
                body = await _read_all(receive, limit, timeout)
            except TimeoutError:
                await _refuse(scope, receive, send, 408, slow_message(timeout))
                return
            finally:
                arrived()
            if body is None:
                await _refuse(scope, receive, send, 413, too_large_message(limit))
                return
            if not json_depth_ok(body, MAX_DEPTH):
                await _refuse(scope, receive, send, 422, f"the JSON body is nested more than {MAX_DEPTH} levels deep")
                return
            await self.app(scope, _replay(body, receive), send)
            return
        await self.app(scope, _counting(receive, limit, timeout, arrived), send)


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, message: str) -> None:
    body = {"detail": message, "message": message}
    await JSONResponse(body, status_code=status)(scope, receive, send)


async def _read_all(receive: Receive, limit: int, timeout: float) -> bytes | None:
    """The whole body, or None past `limit` bytes; TimeoutError when it takes over `timeout` s."""
    chunks: list[bytes] = []
    size = 0
    deadline = time.monotonic() + timeout
    while True:
        message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body already read, then the connection's own messages (its disconnect)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def _counting(receive: Receive, limit: int, timeout: float, arrived: Callable[[], None] = lambda: None) -> Receive:
    """A receive that stops a body (sent without a Content-Length) once it passes `limit`, or
    once it has taken `timeout` seconds (408). After the body's last part it only passes messages
    on (a streaming response waits on it for the disconnect, however long)."""
    size = 0
    deadline = time.monotonic() + timeout
    done = False

    async def counted() -> Message:
        nonlocal size, done
        if done:
            return await receive()
        try:
            message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise HTTPException(408, slow_message(timeout)) from None
        if message["type"] == "http.request":
            size += len(message.get("body", b""))
            if size > limit:
                raise HTTPException(413, too_large_message(limit))
        if message["type"] != "http.request" or not message.get("more_body", False):
            done = True
            arrived()
        return message

    return counted

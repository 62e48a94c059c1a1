"""Input limits at the door, before any route runs (ASGI middleware): the size of a request
body (413), the nesting depth of a JSON body (422), and ids in the path that no database row
can have (a number above 2^63-1 on SQLite, 2^31-1 on PostgreSQL, is no session, no candidate,
no question: 404). What a body may hold field by field is the schemas' business
(app/schemas.py, app/limits.py)."""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import Message, Receive, Scope, Send

from app.db import engine_url, largest_integer
from app.limits import MAX_DEPTH, human_bytes, json_depth_ok
from app.settings import Settings
from app.web.hosts import ConnectionMiddleware

TRACE_UPLOAD_PATHS = ("/traces/import",)
FORM_OVERHEAD = 64 * 1024  # multipart framing around an uploaded trace; the route checks the file itself


def body_limit(settings: Settings, path: str) -> int:
    if path in TRACE_UPLOAD_PATHS:
        return settings.trace_max_bytes + FORM_OVERHEAD
    return settings.request_max_bytes


def too_large_message(limit: int) -> str:
    return f"the request body is larger than {human_bytes(limit)}, the most this server accepts here"


def id_out_of_range(path: str, largest: int) -> bool:
    """A number in the path beyond what the database's integer columns hold (2^63-1 on SQLite,
    2^31-1 on PostgreSQL): no row has it."""
    return any(part.isdigit() and len(part) > 9 and int(part) > largest for part in path.split("/"))


class InputLimits(ConnectionMiddleware):
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
        if "json" in headers.get("content-type", "") and scope.get("method") in ("POST", "PUT", "PATCH"):
            body = await _read_all(receive, limit)
            if body is None:
                await _refuse(scope, receive, send, 413, too_large_message(limit))
                return
            if not json_depth_ok(body, MAX_DEPTH):
                await _refuse(scope, receive, send, 422, f"the JSON body is nested more than {MAX_DEPTH} levels deep")
                return
            await self.app(scope, _replay(body, receive), send)
            return
        await self.app(scope, _counting(receive, limit), send)


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, message: str) -> None:
    body = {"detail": message, "message": message}
    await JSONResponse(body, status_code=status)(scope, receive, send)


async def _read_all(receive: Receive, limit: int) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
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


def _counting(receive: Receive, limit: int) -> Receive:
    """A receive that stops a body (sent without a Content-Length) once it passes `limit`."""
    size = 0

    async def counted() -> Message:
        nonlocal size
        message = await receive()
        if message["type"] == "http.request":
            size += len(message.get("body", b""))
            if size > limit:
                raise HTTPException(413, too_large_message(limit))
        return message

    return counted


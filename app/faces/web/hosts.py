"""Host and Origin checks on every request and websocket: the defence against DNS rebinding
(a web page whose name resolves to 127.0.0.1 is another origin to the browser, so it could
read and drive a loopback server that answered any Host). The server answers only to the
names in Settings.allowed_host_names (loopback names, the bound host, SOCRATIC_ALLOWED_HOSTS);
a request naming another host gets 421. A state-changing request or a websocket whose Origin
is not this server gets 403 (browsers send Origin on those; a page elsewhere cannot forge it).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from app.settings import Settings, is_loopback

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def host_name(host_header: str) -> str:
    """The name part of a Host header ("[::1]:8000" -> "::1", "Example.org:80" -> "example.org")."""
    value = host_header.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


# A Host header is a name or an address, then an optional port: nothing else (no user info,
# no second colon after a name, no path). "localhost:evil" and "127.0.0.1:80@evil.example" are not hosts.
HOST_SYNTAX = re.compile(r"(?:\[[0-9a-f:.]+\]|[a-z0-9](?:[a-z0-9.-]{0,252}[a-z0-9])?)(?::[0-9]{1,5})?")


def host_allowed(settings: Settings, host_header: str | None) -> bool:
    if not host_header or not HOST_SYNTAX.fullmatch(host_header.strip().lower()):
        return False
    allowed = settings.allowed_host_names
    name = host_name(host_header)
    return "*" in allowed or name in allowed or is_loopback(name)


def origin_matches(origin: str, host: str, scheme: str) -> bool:
    """Whether an Origin header names this server: the same host and port, and the scheme the
    request came in on (an https page is not the origin of a plain-http request, nor the other way)."""
    parts = urlsplit(origin)
    own = {"ws": "http", "wss": "https"}.get(scheme, scheme)
    return parts.scheme.lower() == own and parts.netloc.lower() == host.lower() and not parts.path.strip("/")


def origin_allowed(headers: Headers, scheme: str = "http") -> bool:
    """True when the request carries no Origin (not sent by a page) or this server's own."""
    origin = headers.get("origin")
    if origin is None:
        return headers.get("sec-fetch-site", "same-origin") in ("same-origin", "none")
    if origin == "null":
        return False
    return origin_matches(origin, headers.get("host", ""), scheme)


class ConnectionMiddleware:
    """An ASGI middleware that looks at HTTP requests and websockets (`handle`) and passes
    everything else (lifespan) through."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            await self.handle(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError


class HostOriginGuard(ConnectionMiddleware):
    """421 for a Host this server does not answer to, 403 for a foreign Origin on a
    state-changing request or a websocket."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        websocket = scope["type"] == "websocket"
        if not host_allowed(self.settings, headers.get("host")):
            if websocket:
                await send({"type": "websocket.close", "code": 1008, "reason": "unknown host"})
                return
            names = ", ".join(sorted(self.settings.allowed_host_names))
            response = JSONResponse(
                {"detail": f"this server does not answer to the host {headers.get('host', '')!r} (it answers "
                           f"to loopback and {names}; SOCRATIC_ALLOWED_HOSTS adds names)"}, status_code=421)
            await response(scope, receive, send)
            return
        if (websocket or scope.get("method") in UNSAFE_METHODS) and not origin_allowed(headers, scope.get("scheme",
                                                                                                         "http")):
            if websocket:
                await send({"type": "websocket.close", "code": 1008, "reason": "cross-origin"})
                return
            response = JSONResponse({"detail": "cross-origin request refused"}, status_code=403)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

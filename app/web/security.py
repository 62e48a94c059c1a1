"""Access control. On loopback without a token the server is open to this machine only;
with a token (required off loopback) every page, API call and websocket must present it:
`Authorization: Bearer <token>`, the cookie set by /login, or `?token=` on a websocket.
State-changing requests and websockets from another origin are refused (a web page on
another site must not drive a local server)."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from app.settings import Settings

COOKIE = "socratic_token"
# /mcp checks its own per-session tokens (app/web/mcp.py).
OPEN_PATHS = ("/login", "/static/", "/api/health", "/mcp")
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def presented_token(conn: HTTPConnection) -> str | None:
    auth = conn.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return conn.cookies.get(COOKIE) or conn.query_params.get("token")


def check_token(settings: Settings, given: str | None) -> bool:
    expected = settings.token_value
    if expected is None:
        return True
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def token_ok(settings: Settings, conn: HTTPConnection) -> bool:
    return check_token(settings, presented_token(conn))


def same_origin(conn: HTTPConnection) -> bool:
    """True when the request carries no Origin (not a browser page) or its own."""
    origin = conn.headers.get("origin")
    if not origin or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == conn.headers.get("host", "")


def make_middleware(settings: Settings) -> Callable[[Request, Callable[[Request], Awaitable[Response]]],
                                                     Awaitable[Response]]:
    async def guard(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        path = request.url.path
        if request.method in UNSAFE_METHODS and not same_origin(request):
            return JSONResponse({"detail": "cross-origin request refused"}, status_code=403)
        if not any(path.startswith(p) for p in OPEN_PATHS) and not token_ok(settings, request):
            if path.startswith("/api/") or path in ("/openapi.json",):
                return JSONResponse({"detail": "a token is required: Authorization: Bearer <token>"},
                                    status_code=401, headers={"WWW-Authenticate": "Bearer"})
            return RedirectResponse(f"/login?next={path}", status_code=303)
        response = await call_next(request)
        # Pages render agent text; forbid framing and inline script injection paths.
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault(
            "Content-Security-Policy",
            "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; connect-src 'self' ws: wss:; frame-ancestors 'none'",
        )
        return response

    return guard

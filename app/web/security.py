"""Access control. On loopback without a token the server is open to this machine only;
with a token (required off loopback) every page, API call and websocket must present it:
`Authorization: Bearer <token>`, the cookie set by /login (an HMAC of the token, never the
token itself; httpOnly, SameSite=Strict), or `?token=` on a websocket handshake only (and
access logs redact it). Comparisons are constant-time; /login allows a few wrong tokens per
client a minute. State-changing requests and websockets from another origin are refused (a
web page on another site must not drive a local server); app/web/hosts.py checks Host too."""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import time
from collections import deque
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
    """The token in the Authorization header, or in `?token=` on a websocket handshake (a
    browser cannot set headers there); never from the query of a page or API call."""
    auth = conn.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    if conn.scope.get("type") == "websocket":
        return conn.query_params.get("token")
    return None


def cookie_value(settings: Settings) -> str:
    """What the sign-in cookie holds: derived from the token, so a leaked cookie (or log of
    one) is not the token, and it changes when the token does."""
    key = (settings.token_value or "").encode()
    return hmac.new(key, b"socratic-cookie-v1", hashlib.sha256).hexdigest()


def check_token(settings: Settings, given: str | None) -> bool:
    expected = settings.token_value
    if expected is None:
        return True
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def token_ok(settings: Settings, conn: HTTPConnection) -> bool:
    if settings.token_value is None:
        return True
    given = presented_token(conn)
    if given is not None:
        return check_token(settings, given)
    cookie = conn.cookies.get(COOKIE)
    return cookie is not None and hmac.compare_digest(cookie.encode(), cookie_value(settings).encode())


class LoginLimiter:
    """At most `per_minute` wrong tokens per client address in any 60 seconds."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self.failures: dict[str, deque[float]] = {}

    def _recent(self, client: str) -> deque[float]:
        now = time.monotonic()
        times = self.failures.setdefault(client, deque())
        while times and now - times[0] > 60:
            times.popleft()
        if not times:
            del self.failures[client]
            return deque()
        return times

    def blocked(self, client: str) -> bool:
        return len(self._recent(client)) >= self.per_minute

    def failed(self, client: str) -> None:
        self._recent(client)
        self.failures.setdefault(client, deque()).append(time.monotonic())
        if len(self.failures) > 10_000:  # many addresses: forget the oldest
            self.failures.pop(next(iter(self.failures)))


TOKEN_IN_QUERY = re.compile(r"((?:^|[?&])token=)[^&\s\"]*", re.IGNORECASE)


def redact(text: str) -> str:
    return TOKEN_IN_QUERY.sub(r"\1[redacted]", text)


class RedactTokens(logging.Filter):
    """Log filter: `token=...` in a logged URL (a websocket handshake's query) becomes
    `token=[redacted]`."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        if isinstance(record.msg, str) and "token=" in record.msg.lower():
            record.msg = redact(record.msg)
        return True


def install_log_redaction() -> None:
    """Add RedactTokens to uvicorn's loggers (after uvicorn has configured logging)."""
    for name in ("uvicorn.access", "uvicorn.error", "uvicorn"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactTokens) for f in logger.filters):
            logger.addFilter(RedactTokens())


def same_origin(conn: HTTPConnection) -> bool:
    """True when the request carries no Origin (not a browser page) or its own."""
    origin = conn.headers.get("origin")
    if not origin or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == conn.headers.get("host", "")


def make_middleware(settings: Settings) -> Callable[[Request, Callable[[Request], Awaitable[Response]]],
                                                     Awaitable[Response]]:
    limiter = LoginLimiter(settings.login_attempts_per_minute)

    async def guard(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        path = request.url.path
        if request.method in UNSAFE_METHODS and not same_origin(request):
            return JSONResponse({"detail": "cross-origin request refused"}, status_code=403)
        if path == "/login" and request.method == "POST" and settings.token_value is not None:
            client = request.client.host if request.client else "?"
            if limiter.blocked(client):
                return JSONResponse({"detail": "too many wrong tokens from this address; wait a minute"},
                                    status_code=429, headers={"Retry-After": "60"})
            response = await call_next(request)
            if response.status_code == 401:
                limiter.failed(client)
            return _secured(response)
        if not any(path.startswith(p) for p in OPEN_PATHS) and not token_ok(settings, request):
            if path.startswith("/api/") or path in ("/openapi.json",):
                return JSONResponse({"detail": "a token is required: Authorization: Bearer <token>"},
                                    status_code=401, headers={"WWW-Authenticate": "Bearer"})
            return RedirectResponse(f"/login?next={path}", status_code=303)
        return _secured(await call_next(request))

    return guard


def _secured(response: Response) -> Response:
    """Pages render agent text; forbid framing and inline script injection paths."""
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault(
        "Content-Security-Policy",
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self' ws: wss:; frame-ancestors 'none'",
    )
    return response

"""Access control. On loopback without a token the server is open to this machine only;
with a token (required off loopback) every page, API call and websocket must present it:
`Authorization: Bearer <token>`, the cookie set by /login (issued at a time and signed with
the token, never the token itself; httpOnly, SameSite=Strict, Secure over https, it expires,
is reissued as it ages and is revoked by /logout), or `?token=` on a websocket handshake only
(and logs never show it). Comparisons are constant-time. Every wrong credential, whichever door
it came through (header, cookie, websocket, /login, /mcp), counts against one limit per client
address (`Guesses`). State-changing requests and websockets from another origin are refused;
app/faces/web/hosts.py checks Host too."""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from urllib.parse import quote, unquote, unquote_plus

from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from app.faces.guesses import Guesses, too_many
from app.faces.web.hosts import origin_matches
from app.settings import Settings

COOKIE = "socratic_token"
# /mcp checks its own per-session tokens (app/faces/mcp.py), counting wrong ones here too.
OPEN_PATHS = ("/login", "/logout", "/static/", "/api/health", "/mcp")
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def client_address(conn: HTTPConnection) -> str:
    """The key of a client's guesses: the connection's address (uvicorn replaces it with the
    X-Forwarded-For address only from a proxy named in SOCRATIC_FORWARDED_ALLOW_IPS)."""
    return conn.client.host if conn.client else "?"


def presented_token(conn: HTTPConnection) -> str | None:
    """The token in the Authorization header, or in `?token=` on a websocket handshake (a
    browser cannot set headers there); never from the query of a page or API call."""
    auth = conn.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    if conn.scope.get("type") == "websocket":
        return conn.query_params.get("token")
    return None


def _cookie_mac(settings: Settings, issued: int) -> str:
    key = (settings.token_value or "").encode()
    return hmac.new(key, f"socratic-cookie-v2:{issued}".encode(), hashlib.sha256).hexdigest()


def cookie_value(settings: Settings, issued: int | None = None) -> str:
    """What the sign-in cookie holds: when it was issued and an HMAC of that under the token, so
    a leaked cookie (or log of one) is not the token, it expires, and it changes when the token does."""
    issued = int(time.time()) if issued is None else issued
    return f"{issued}.{_cookie_mac(settings, issued)}"


def cookie_issued(settings: Settings, value: str | None) -> int | None:
    """When a genuine, unexpired cookie was issued; None for anything else."""
    if not value or "." not in value:
        return None
    stamp, _, mac = value.partition(".")
    if not stamp.isdigit() or len(stamp) > 12:
        return None
    issued = int(stamp)
    if not hmac.compare_digest(mac.encode(), _cookie_mac(settings, issued).encode()):
        return None
    age = time.time() - issued
    return issued if -60 <= age <= settings.cookie_max_age_s else None


def check_token(settings: Settings, given: str | None) -> bool:
    expected = settings.token_value
    if expected is None:
        return True
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


# The verdicts on a connection's credential.
OPEN, GOOD, MISSING, WRONG, BLOCKED = "open", "good", "missing", "wrong", "blocked"


def credential(settings: Settings, guesses: Guesses, conn: HTTPConnection) -> str:
    """What a request or websocket presents: OPEN (no token configured), GOOD, MISSING, WRONG
    (counted against its address) or BLOCKED (its address guessed too often; nothing is checked)."""
    if settings.token_value is None:
        return OPEN
    given = presented_token(conn)
    cookie = conn.cookies.get(COOKIE)
    if given is None and cookie is None:
        return MISSING
    client = client_address(conn)
    if guesses.blocked(client):
        return BLOCKED
    if given is not None:
        ok = check_token(settings, given)
    else:
        ok = cookie_issued(settings, cookie) is not None and not guesses.is_revoked(cookie or "")
    if not ok:
        guesses.failed(client)
        return WRONG
    return GOOD


def set_sign_in_cookie(response: Response, request: Request, settings: Settings) -> None:
    response.set_cookie(COOKIE, cookie_value(settings), max_age=int(settings.cookie_max_age_s), httponly=True,
                        samesite="strict", secure=request.url.scheme == "https", path="/")


def _rotate(request: Request, response: Response, settings: Settings) -> None:
    """A cookie past half its life is reissued, so that one in use never expires mid-work (the
    old value stays valid until its own expiry: requests in flight may still carry it)."""
    issued = cookie_issued(settings, request.cookies.get(COOKIE))
    if issued is not None and time.time() - issued > settings.cookie_max_age_s / 2 \
            and presented_token(request) is None:
        set_sign_in_cookie(response, request, settings)


# -- log redaction ------------------------------------------------------------------------------


def _redact_query(query: str) -> str:
    """Each `name=value` whose name, decoded as Starlette decodes it (percent escapes, `+`), is
    `token` in any case gets its value replaced."""
    parts = []
    for part in query.split("&"):
        name = part.partition("=")[0]
        parts.append(f"{name}=[redacted]" if unquote_plus(name).strip().lower() == "token" else part)
    return "&".join(parts)


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """`text` with the value of every `token` query parameter (however its name is encoded)
    replaced, and any of `secrets` (the token itself, raw or percent-encoded) masked wherever it is."""
    if "?" in text:
        head, _, rest = text.partition("?")
        query, space, tail = rest.partition(" ")
        quote_at = query.find('"')
        if quote_at >= 0:
            query, tail, space = query[:quote_at], query[quote_at:] + space + tail, ""
        text = f"{head}?{_redact_query(query)}{space}{tail}"
    for secret in secrets:
        text = text.replace(secret, "[redacted]")
        for decode in (unquote, unquote_plus):  # the token spelled with percent escapes, however many
            decoded = decode(text)
            if secret in decoded:
                text = decoded.replace(secret, "[redacted]")
    return text


class RedactTokens(logging.Filter):
    """Log filter: a token in a logged URL's query (however encoded), or the token anywhere in
    a log message, becomes `[redacted]`."""

    def __init__(self, secrets: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.secrets = tuple(s for s in secrets if s)

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(redact(a, self.secrets) if isinstance(a, str) else a for a in record.args)
        if isinstance(record.msg, str):
            record.msg = redact(record.msg, self.secrets)
        return True


def install_log_redaction(secret: str | None = None) -> None:
    """Add RedactTokens to uvicorn's loggers (after uvicorn has configured logging)."""
    for name in ("uvicorn.access", "uvicorn.error", "uvicorn", ""):
        logger = logging.getLogger(name)
        for f in [f for f in logger.filters if isinstance(f, RedactTokens)]:
            logger.removeFilter(f)
        logger.addFilter(RedactTokens((secret,) if secret else ()))


def same_origin(conn: HTTPConnection) -> bool:
    """True when the request carries no Origin (not a browser page) or its own (scheme, host, port)."""
    origin = conn.headers.get("origin")
    if not origin or origin == "null":
        return origin is None
    return origin_matches(origin, conn.headers.get("host", ""), conn.scope.get("scheme", "http"))


def make_middleware(settings: Settings, guesses: Guesses
                    ) -> Callable[[Request, Callable[[Request], Awaitable[Response]]], Awaitable[Response]]:
    async def guard(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        path = request.url.path
        if request.method in UNSAFE_METHODS and not same_origin(request):
            return JSONResponse({"detail": "cross-origin request refused"}, status_code=403)
        if path == "/login" and request.method == "POST" and settings.token_value is not None:
            client = client_address(request)
            if guesses.blocked(client):
                return _secured(too_many())
            response = await call_next(request)
            if response.status_code == 401:
                guesses.failed(client)
            return _secured(response)
        if not any(path.startswith(p) for p in OPEN_PATHS):
            verdict = credential(settings, guesses, request)
            if verdict == BLOCKED:
                return _secured(too_many())
            if verdict in (MISSING, WRONG):
                if path.startswith("/api/") or path in ("/openapi.json",):
                    return _secured(JSONResponse({"detail": "a token is required: Authorization: Bearer <token>"},
                                                 status_code=401, headers={"WWW-Authenticate": "Bearer"}))
                return _secured(RedirectResponse(f"/login?next={quote(path)}", status_code=303))
        response = await call_next(request)
        if settings.token_value is not None:
            _rotate(request, response, settings)
        return _secured(response)

    return guard


CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'self'; object-src 'none'; frame-ancestors 'none'")


def _secured(response: Response) -> Response:
    """Pages render agent text; forbid framing, inline script, other hosts for connections
    (websockets included: 'self' covers ws: of this host), a <base> and forms posting elsewhere."""
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("X-Frame-Options", "DENY")
    # same-origin, not no-referrer: under no-referrer Chromium sends `Origin: null` on form posts,
    # which the Origin check refuses. Other origins still learn no URL of this server.
    response.headers.setdefault("Referrer-Policy", "same-origin")
    response.headers.setdefault("Content-Security-Policy", CSP)
    return response

"""The MCP endpoint (/mcp, streamable HTTP, the `mcp` SDK's low-level server): an outside
agent such as Claude Code drives a session whose agent is `mcp` through the same workspace
tools Claude uses (the table in app/engine/tools/table.py). Calls go through the session's bridge to its
runner (app/engine/agents/mcp_agent.py), so pauses, steering and the judge apply to them.

One token per session: `Authorization: Bearer <token>` names the session. Tokens are an HMAC
of the session number under the server's secret (its SOCRATIC_TOKEN, or a random secret kept
in the data folder), so they can be shown again and need no table. GET
/api/sessions/{id}/mcp gives the URL, the token and a `claude mcp add` line."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
from fastapi import APIRouter, Request
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from app.domain.lifecycle import FINAL_STATES
from app.domain.sessions import NotFound, get_session
from app.engine.agents.mcp_agent import bridge_for, drop_all_bridges
from app.engine.engine import Engine
from app.engine.tools.table import WORKSPACE_TOOL_NAMES, WORKSPACE_TOOL_SPECS
from app.faces.guesses import Guesses, too_many
from app.services.context import ServerContext
from app.settings import Settings, is_loopback
from app.store.database import private_dir
from app.store.models import INTERRUPTED, PAUSED

PATH = "/mcp"
AGENT = "mcp"
SCOPE_KEY = "socratic.session_id"
TOKEN_PREFIX = "sk-socratic-"
SECRET_FILE = "mcp_secret"
STATUS_EVERY_S = 2.0  # how often a waiting call looks at its session
PROGRESS_EVERY_S = 15.0  # how often it tells the client why it waits
INSTRUCTIONS = (
    "You are the agent of a Socratic session: improve the session's kernel with these tools. read_kernel shows "
    "your working copy, edit_kernel/write_kernel change it, evaluate runs the harness (the only numbers that count). "
    "People steer you: their messages arrive inside tool results; a call that would act is not run until you "
    "have read them. While the session is paused your calls wait."
)


def server_secret(settings: Settings) -> bytes:
    if settings.token_value:
        return hashlib.sha256(f"socratic-mcp:{settings.token_value}".encode()).digest()
    path = settings.data_dir / SECRET_FILE
    if not path.is_file():
        private_dir(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return path.read_text().strip().encode()


def session_token(secret: bytes, session_id: int) -> str:
    mac = hmac.new(secret, f"session:{session_id}".encode(), hashlib.sha256).hexdigest()[:40]
    return f"{TOKEN_PREFIX}{session_id}-{mac}"


def session_of_token(secret: bytes, token: str) -> int | None:
    if not token.startswith(TOKEN_PREFIX):
        return None
    number, _, _ = token[len(TOKEN_PREFIX):].partition("-")
    if not number.isdigit():
        return None
    expected = session_token(secret, int(number))
    return int(number) if hmac.compare_digest(token.encode(), expected.encode()) else None


def _result(text: str, ok: bool = True) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=not ok)


class McpEndpoint:
    """The low-level MCP server, its streamable-HTTP session manager, and the token check."""

    def __init__(self, settings: Settings, guesses: Guesses | None = None) -> None:
        self.settings = settings
        self.guesses = guesses or Guesses(settings.login_attempts_per_minute)
        self._ctx: ServerContext | None = None
        self._secret: bytes | None = None
        self.server: Server[Any] = Server(
            "socratic", version="0.1.0", instructions=INSTRUCTIONS,
            on_list_tools=self.list_tools, on_call_tool=self.call_tool,
        )
        # DNS-rebinding protection on loopback; off loopback the server requires a token anyway.
        loopback = is_loopback(settings.host)
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=loopback,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost", "testserver",
                           *settings.allowed_hosts, *(f"{h}:*" for h in settings.allowed_hosts)],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*",
                             *(f"http://{h}:*" for h in settings.allowed_hosts)],
        )
        self.sessions = StreamableHTTPSessionManager(app=self.server, security_settings=security,
                                                     max_sessions=settings.mcp_sessions_max)
        self.asgi = StreamableHTTPASGIApp(self.sessions)

    @property
    def ctx(self) -> ServerContext:
        assert self._ctx is not None, "the MCP endpoint runs inside the app's lifespan"
        return self._ctx

    @property
    def secret(self) -> bytes:
        if self._secret is None:
            self._secret = server_secret(self.settings)
        return self._secret

    def token(self, session_id: int) -> str:
        return session_token(self.secret, session_id)

    @asynccontextmanager
    async def running(self, engine: Engine) -> AsyncIterator[None]:
        self._ctx = engine.ctx
        try:
            async with self.sessions.run():
                yield
        finally:
            drop_all_bridges("the server is shutting down")

    def route(self) -> Route:
        return Route(PATH, endpoint=_TokenGuard(self), methods=["GET", "POST", "DELETE"])

    def open_sessions(self) -> int:
        return len(getattr(self.sessions, "_server_instances", {}))

    async def authenticated(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass a request with a valid session token to the transport. A wrong token counts
        against the client's address like any wrong credential (app/faces/web/security.py); an
        address that guessed too often, and a new MCP session beyond SOCRATIC_MCP_SESSIONS_MAX,
        get 429."""
        headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
        client = scope["client"][0] if scope.get("client") else "?"
        if self.guesses.blocked(client):
            await too_many()(scope, receive, send)
            return
        auth = headers.get("authorization", "")
        token = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        session_id = session_of_token(self.secret, token) if token else None
        if session_id is None:
            if token:
                self.guesses.failed(client)
            response = JSONResponse({"detail": "an MCP session token is required: Authorization: Bearer <token> "
                                               "(GET /api/sessions/{id}/mcp shows it)"},
                                    status_code=401, headers={"WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        if "mcp-session-id" not in headers and self.open_sessions() >= self.settings.mcp_sessions_max:
            await JSONResponse({"detail": f"{self.settings.mcp_sessions_max} MCP sessions are open, the most this "
                                          "server keeps (SOCRATIC_MCP_SESSIONS_MAX); close one or wait for one to "
                                          "time out"}, status_code=429, headers={"Retry-After": "60"})(
                scope, receive, send)
            return
        scope[SCOPE_KEY] = session_id
        await self.asgi(scope, receive, send)

    # -- MCP handlers -----------------------------------------------------------------------

    async def list_tools(self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
                         ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=t["name"], description=t["description"],
                       input_schema={k: v for k, v in t["input_schema"].items() if k != "cache_control"})
            for t in WORKSPACE_TOOL_SPECS
        ])

    async def call_tool(self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
                        ) -> types.CallToolResult:
        request = ctx.request
        session_id = request.scope.get(SCOPE_KEY) if request is not None else None
        if session_id is None:
            return _result("no session: connect with the session's token", ok=False)
        if params.name not in WORKSPACE_TOOL_NAMES:
            return _result(f"unknown tool {params.name!r}", ok=False)
        problem = self._refusal(session_id)
        if problem:
            return _result(problem, ok=False)
        bridge = bridge_for(session_id)
        pending = bridge.submit(params.name, dict(params.arguments or {}))
        waited = 0.0
        try:
            while True:
                try:
                    reply = await asyncio.wait_for(asyncio.shield(pending.reply), timeout=STATUS_EVERY_S)
                    return _result(reply.text, reply.ok)
                except TimeoutError:
                    waited += STATUS_EVERY_S
                problem = self._refusal(session_id)
                if problem and not pending.reply.done():
                    pending.withdrawn = True
                    return _result(problem, ok=False)
                if waited % PROGRESS_EVERY_S < STATUS_EVERY_S:
                    await ctx.session.report_progress(waited, None, self._why_waiting(session_id))
        except asyncio.CancelledError:
            pending.withdrawn = True  # the client went away; the runner skips the call
            raise

    def _refusal(self, session_id: int) -> str:
        with self.ctx.database.session() as db:
            try:
                session = get_session(db, session_id)
            except NotFound:
                return f"there is no session {session_id}"
            if session.read_only:
                return (f"session {session_id} was imported from a trace and is read-only: it takes no calls "
                        "(fork it to continue its work)")
            if session.agent != AGENT:
                return f"session {session_id}'s agent is {session.agent!r}; only an 'mcp' session takes MCP calls"
            if session.status in FINAL_STATES:
                return f"session {session_id} is {session.status}: {session.detail}"
        return ""

    def _why_waiting(self, session_id: int) -> str:
        with self.ctx.database.session() as db:
            session = get_session(db, session_id)
        if session.status == PAUSED:
            return f"the session is paused ({session.detail}); your call runs when a person resumes it"
        if session.status == INTERRUPTED:
            return "the server restarted; your call runs when a person resumes the session"
        if session.status == "created":
            return "the session has not been started yet"
        return session.detail or "the runner is busy"


class _TokenGuard:
    """The /mcp route's ASGI app (an object, so that Starlette hands it the raw scope)."""

    def __init__(self, endpoint: McpEndpoint) -> None:
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.endpoint.authenticated(scope, receive, send)


router = APIRouter(prefix="/api")


@router.get("/sessions/{session_id}/mcp", tags=["agents"])
async def mcp_access(session_id: int, request: Request) -> dict[str, Any]:
    """How an outside agent connects to this session: the /mcp URL, the session's token and a
    command line for Claude Code."""
    ctx: ServerContext = request.app.state.engine.ctx
    endpoint: McpEndpoint = request.app.state.mcp
    with ctx.database.session() as db:
        session = get_session(db, session_id)
    url = str(request.base_url).rstrip("/") + PATH
    token = endpoint.token(session_id)
    return {
        "session_id": session_id, "agent": session.agent, "url": url, "token": token,
        "accepts_calls": session.agent == AGENT,
        "claude_code": f"claude mcp add --transport http socratic-{session_id} {url} "
                       f"--header \"Authorization: Bearer {token}\"",
    }

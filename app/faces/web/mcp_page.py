"""The page that tells a person how an outside agent connects to a session over MCP
(`/sessions/{id}/mcp`, linked from the session page): the /mcp URL and the ready `claude mcp add`
line, with the session's token left out of the HTML. "Show token" fetches it from the JSON API
(`GET /api/sessions/{id}/mcp`, app/faces/mcp.py) with the page's own credentials, so the token
is on screen only when asked for, never in a page's source, a screenshot of the page as loaded
or the browser's history."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.domain.sessions import get_session
from app.faces.mcp import AGENT, PATH
from app.faces.web import render
from app.faces.web.deps import Db

router = APIRouter(include_in_schema=False)
TOKEN_PLACEHOLDER = "<token: Show token>"


@router.get("/sessions/{session_id}/mcp", response_class=HTMLResponse)
async def mcp_page(request: Request, session_id: int, db: Db) -> HTMLResponse:
    session = get_session(db, session_id)
    url = str(request.base_url).rstrip("/") + PATH
    command = (f"claude mcp add --transport http socratic-{session_id} {url} "
               f"--header \"Authorization: Bearer {TOKEN_PLACEHOLDER}\"")
    return render.TEMPLATES.TemplateResponse(request, "mcp.html", {
        "s": session, "url": url, "command": command, "accepts_calls": session.agent == AGENT,
        "api": f"/api/sessions/{session_id}/mcp"})

"""Compare and fork on the web: /compare (2-4 sessions side by side), a candidate's fork form
and its JSON twin. Routes translate only: compare reads AuditRecords and hands them to
app/domain/audit/compare.py; fork makes one domain call (app/engine/fork.py) through deps.Steer."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request, status
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from app.domain.audit.compare import MAX_SESSIONS, compare
from app.domain.audit.record import load_record
from app.domain.schemas import BudgetIn, SessionPublic, ThresholdsIn
from app.domain.sessions import Invalid, get_session, list_sessions, public_session
from app.engine.fork import ForkCreate, fork_session, source_candidate
from app.faces.web import render
from app.faces.web.deps import Ctx, Db, Steer
from app.faces.web.identity import author_of
from app.faces.web.pages import form_number

router = APIRouter(include_in_schema=False)
api_router = APIRouter(prefix="/api", tags=["sessions"])


@router.get("/favicon.ico", include_in_schema=False)
def favicon() -> FileResponse:
    """Browsers ask for it whatever the pages link: the same icon, no 404 in every log."""
    return FileResponse(render.STATIC_DIR / "favicon.svg", media_type="image/svg+xml")


@router.get("/compare", response_class=HTMLResponse)
def compare_page(request: Request, db: Db, s: list[int] = Query(default=[]),  # noqa: B008
                 a: int = 0, b: int = 1) -> HTMLResponse:
    chosen = sorted(set(s))  # by id: the same sessions give the same page whatever order they were ticked in
    if len(chosen) > MAX_SESSIONS:
        raise Invalid(f"compare at most {MAX_SESSIONS} sessions, not {len(chosen)}", "s")
    records = [load_record(db, sid, reports=True) for sid in chosen]
    comparison = compare(records, a, b) if len(records) >= 2 else None
    return render.TEMPLATES.TemplateResponse(request, "compare.html", {
        "sessions": list_sessions(db), "chosen": chosen, "cmp": comparison, "a": a, "b": b,
        "max_sessions": MAX_SESSIONS,
        "error": "pick at least two sessions" if len(chosen) == 1 else ""})


@router.get("/sessions/{session_id}/candidates/{number}/fork", response_class=HTMLResponse)
def fork_form(request: Request, session_id: int, number: int, db: Db) -> HTMLResponse:
    return _fork_page(request, db, session_id, number, {}, "")


def _fork_page(request: Request, db: Any, session_id: int, number: int, form: dict[str, str], error: str,
               status_code: int = 200) -> HTMLResponse:
    from app.engine.agents.registry import available_agents

    source, c = source_candidate(db, session_id, number)
    minutes = source.budget_seconds / 60 if source.budget_seconds else None
    defaults = {"title": f"{source.title} · fork of #{number}", "agent": source.agent,
                "goal_target": source.goal_target or "", "budget_steps": source.budget_steps or "",
                "budget_minutes": f"{minutes:g}" if minutes else "",
                "plateau_window": source.thresholds.get("plateau_window", ThresholdsIn().plateau_window),
                "seed": source.agent_config.get("seed", ""), "focus": source.agent_config.get("focus", ""),
                "model": source.agent_config.get("model", ""), "script": source.agent_config.get("script", ""),
                "start": "1"}
    return render.TEMPLATES.TemplateResponse(request, "fork.html", {
        "source": source, "c": c, "agents": available_agents(), "form": {**defaults, **form}, "error": error,
    }, status_code=status_code)


def fork_from_form(form: dict[str, str], agent_config: dict[str, Any]) -> ForkCreate:
    """The fork form as a ForkCreate (raises ValidationError or Invalid)."""

    def number(key: str, cast: type[int] | type[float]) -> Any:
        return form_number(form, key, cast)

    minutes = number("budget_minutes", float)
    if minutes is not None and minutes <= 0:
        raise Invalid(f"the budget in minutes must be more than 0, not {minutes:g}", "budget_minutes")
    window = number("plateau_window", int)
    config = dict(agent_config)
    for key, cast in (("seed", int),):
        value = number(key, cast)
        if value is not None:
            config[key] = value
    for key in ("focus", "model", "script"):
        if form.get(key, "").strip():
            config[key] = form[key].strip()
    return ForkCreate(
        title=form.get("title", "").strip() or None, agent=form.get("agent") or None, agent_config=config,
        goal_target=number("goal_target", float),
        thresholds=ThresholdsIn(plateau_window=window) if window is not None else None,
        budget=BudgetIn(steps=number("budget_steps", int), seconds=minutes * 60 if minutes else None),
        start=form.get("start") == "1")


@router.post("/sessions/{session_id}/candidates/{number}/fork", response_class=HTMLResponse)
async def fork_submit(request: Request, session_id: int, number: int, ctx: Ctx, steer: Steer, db: Db) -> Response:
    form = {k: str(v) for k, v in (await request.form()).items()}
    source, _ = source_candidate(db, session_id, number)
    same_agent = form.get("agent", source.agent) == source.agent
    try:
        change = fork_from_form(form, source.agent_config if same_agent else {})
        author = author_of(request)
        session = steer.act(None, lambda u: fork_session(u, ctx.settings, session_id, number, change, author))
    except ValidationError as exc:
        message = "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors())
        return _fork_page(request, db, session_id, number, form, message, 422)
    except Invalid as exc:
        return _fork_page(request, db, session_id, number, form, str(exc), 422)
    return RedirectResponse(f"/sessions/{session.id}", status_code=303)


@api_router.post("/sessions/{session_id}/candidates/{number}/fork", response_model=SessionPublic,
                 status_code=status.HTTP_201_CREATED, summary="Fork a session from one of its candidates")
async def fork_api(request: Request, session_id: int, number: int, change: ForkCreate, ctx: Ctx,
                   steer: Steer) -> dict[str, Any]:
    """A new session with the source session's settings (those given here replace them) and the
    candidate as its starting leader. Works for imported sessions too."""
    author = author_of(request, change.author)
    session = steer.act(None, lambda u: fork_session(u, ctx.settings, session_id, number, change, author))
    return steer.read(lambda db: public_session(db, get_session(db, session.id or 0)))

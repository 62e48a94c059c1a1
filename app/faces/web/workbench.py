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
from app.domain.steering import goal as goals
from app.engine.agents.claude_config import DEFAULT_MODEL
from app.engine.agents.scripts import BUILTIN_SCRIPTS
from app.engine.fork import ForkCreate, continued_config, fork_session, source_candidate
from app.faces.web import render
from app.faces.web.deps import Ctx, Db, Steer
from app.faces.web.identity import author_of
from app.faces.web.pages import agent_config_from_form, form_number
from app.store.models import SteeringSession
from kernels.attention.family.space import LAYERS as FAMILY_LAYERS

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
def fork_form(request: Request, session_id: int, number: int, db: Db, ctx: Ctx) -> HTMLResponse:
    return _fork_page(request, db, ctx, session_id, number, None, "")


def _shown(value: Any) -> str:
    """A setting as a form field shows it (empty: not set)."""
    if value is None:
        return ""
    return f"{value:g}" if isinstance(value, float) else str(value)


def fork_defaults(source: SteeringSession, number: int) -> dict[str, str]:
    """The fork form's values: the source session's settings in the new-session form's fields; a
    threshold at its default stays empty, as on the new-session form (the placeholder names it)."""
    config, defaults = source.agent_config, ThresholdsIn()
    shown = {key: _shown(source.thresholds.get(key)) for key in ("plateau_window", "suspicious_jump")
             if source.thresholds.get(key) not in (None, getattr(defaults, key))}
    minutes = source.budget_seconds / 60 if source.budget_seconds else None
    return {"title": f"{source.title} · fork of #{number}", "agent": source.agent,
            "model": _shown(config.get("model")), "seed": _shown(config.get("seed")),
            "focus": _shown(config.get("focus")), "script": _shown(config.get("script")),
            "suite_filter": source.suite_filter or "", "goal_metric": source.goal_metric,
            "goal_target": _shown(source.goal_target), **shown,
            "budget_steps": _shown(source.budget_steps), "budget_minutes": _shown(minutes),
            "budget_tokens": _shown(source.budget_tokens), "budget_cost_usd": _shown(source.budget_cost_usd),
            "start": "1"}


def _fork_page(request: Request, db: Any, ctx: Any, session_id: int, number: int, form: dict[str, str] | None,
               error: str, status_code: int = 200) -> HTMLResponse:
    from app.engine.agents.registry import available_agents

    source, c = source_candidate(db, session_id, number)
    shown = fork_defaults(source, number)
    if form is not None:  # what was posted, with the fields a fork keeps fixed
        shown = {**form, "suite_filter": shown["suite_filter"], "goal_metric": shown["goal_metric"],
                 "start": form.get("start", "")}
    scripts = [s for s in BUILTIN_SCRIPTS.values() if s.candidate_kind == source.candidate_kind]
    config = continued_config("offline", {}, c, False)
    return render.TEMPLATES.TemplateResponse(request, "fork.html", {
        "source": source, "c": c, "agents": available_agents(), "form": shown, "error": error,
        "default_model": DEFAULT_MODEL, "layers": FAMILY_LAYERS, "scripts": scripts,
        "default_script": scripts[0].name if scripts else "", "metrics": goals.GOAL_METRICS,
        "thresholds": ThresholdsIn(), "setting": config.get("start", ""),
    }, status_code=status_code)


# the new-session form's fields that set the agent's options (app/faces/web/pages.py agent_config_from_form)
FORM_OPTIONS = ("seed", "focus", "model", "script")


def fork_from_form(form: dict[str, str], source: SteeringSession) -> ForkCreate:
    """The fork form as a ForkCreate (raises ValidationError or Invalid): the new-session form's
    fields read the same way (an empty field: the default), over the source's settings the form
    does not show (its other thresholds; for the same agent, its other options, less `start`:
    the fork starts from the candidate)."""

    def number(key: str, cast: type[int] | type[float]) -> Any:
        return form_number(form, key, cast)

    minutes = number("budget_minutes", float)
    if minutes is not None and minutes <= 0:
        raise Invalid(f"budget, minutes running: must be more than 0 minutes, not {minutes:g}", "budget_minutes")
    agent = form.get("agent") or source.agent
    kept = {k: v for k, v in source.agent_config.items() if k not in (*FORM_OPTIONS, "start")}
    config = {**(kept if agent == source.agent else {}), **agent_config_from_form(agent, form, number)}
    thresholds = {k: v for k, v in source.thresholds.items() if k in ThresholdsIn.model_fields}
    for key, cast in (("plateau_window", int), ("suspicious_jump", float)):
        value = number(key, cast)
        if value is None:
            thresholds.pop(key, None)  # the default, as on the new-session form
        else:
            thresholds[key] = value
    return ForkCreate(
        title=form.get("title", "").strip() or None, agent=agent, agent_config=config,
        goal_target=number("goal_target", float), thresholds=ThresholdsIn(**thresholds),
        budget=BudgetIn(steps=number("budget_steps", int), seconds=minutes * 60 if minutes is not None else None,
                        tokens=number("budget_tokens", int), cost_usd=number("budget_cost_usd", float)),
        start=form.get("start") == "1")


@router.post("/sessions/{session_id}/candidates/{number}/fork", response_class=HTMLResponse)
async def fork_submit(request: Request, session_id: int, number: int, ctx: Ctx, steer: Steer, db: Db) -> Response:
    form = {k: str(v) for k, v in (await request.form()).items()}
    source, _ = source_candidate(db, session_id, number)
    try:
        change = fork_from_form(form, source)
        author = author_of(request)
        session = steer.act(None, lambda u: fork_session(u, ctx.settings, session_id, number, change, author))
    except ValidationError as exc:
        message = "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors())
        return _fork_page(request, db, ctx, session_id, number, form, message, 422)
    except Invalid as exc:
        return _fork_page(request, db, ctx, session_id, number, form, str(exc), 422)
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

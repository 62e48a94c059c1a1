"""Server-rendered pages: the dashboard (sessions and the new-session form), the session view
(live over the websocket), the candidate view, sign-in, and the API index. Forms post to the
same domain functions the JSON API uses, through the same act / wake / read helper
(app/faces/web/deps.py)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from app.domain.audit.diff_view import diff_rows
from app.domain.audit.ratios import evaluation_view
from app.domain.profiles import candidate_profile
from app.domain.schemas import ActionIn, BudgetIn, SessionCreate, ThresholdsIn
from app.domain.sessions import (
    Invalid,
    candidate_by_number,
    evaluations_of,
    parent_of,
    resume,
    session_view,
)
from app.domain.steering import goal as goals
from app.engine.agents.claude_config import DEFAULT_MODEL
from app.engine.agents.registry import available_agents
from app.engine.agents.scripts import BUILTIN_SCRIPTS
from app.engine.new_session import open_session, refuse_unavailable
from app.faces.web import render
from app.faces.web.deps import Ctx, Steer, get_ctx
from app.faces.web.first_run import example_traces
from app.faces.web.security import COOKIE
from app.faces.web.session_list import filters_of, session_list
from app.store.events import events_after
from kernels.attention.family.space import LAYERS as FAMILY_LAYERS

router = APIRouter(include_in_schema=False)

TRACE_ON_PAGE = 2000  # events rendered with the page; older ones stay in the API


def page(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    return render.TEMPLATES.TemplateResponse(request, name, context, status_code=status_code)


@router.get("/", response_class=HTMLResponse)
async def dashboard(request: Request) -> HTMLResponse:
    return await _dashboard(request)


async def _dashboard(request: Request, form: dict[str, Any] | None = None, error: str = "",
                     status_code: int = 200) -> HTMLResponse:
    ctx = get_ctx(request)
    with ctx.database.session() as db:  # grouped by campaign, filtered, sorted (app/faces/web/session_list.py)
        listing = session_list(db, filters_of(request.query_params))
    scripts = [s for s in BUILTIN_SCRIPTS.values()
               if s.candidate_kind == "cuda" or ctx.settings.allow_python_candidates]
    gpu = await ctx.devices.gpu_available()
    return page(request, "dashboard.html", status_code, **listing, agents=available_agents(), scripts=scripts,
                default_agent=ctx.settings.default_agent, layers=FAMILY_LAYERS, default_model=DEFAULT_MODEL,
                metrics=goals.GOAL_METRICS, thresholds=ThresholdsIn(), form=form or {}, error=error,
                default_script="gpu-demo" if gpu or not ctx.settings.allow_python_candidates else "cpu-demo",
                gpu=gpu, examples=[p.name for p in example_traces()],
                cpu_demo=ctx.settings.allow_python_candidates)


def form_number(form: dict[str, str], key: str, cast: type[int] | type[float]) -> Any:
    """A form field as a number; None when empty; Invalid naming the field otherwise."""
    raw = form.get(key, "").strip()
    if not raw:
        return None
    try:
        return cast(raw)
    except ValueError as exc:
        raise Invalid(f"{key.replace('_', ' ')}: {raw!r} is not a number", key) from exc


def session_spec_from_form(form: dict[str, str], default_agent: str) -> SessionCreate:
    """The new-session form as a SessionCreate (raises ValidationError or Invalid)."""

    def number(key: str, cast: type[int] | type[float]) -> Any:
        return form_number(form, key, cast)

    thresholds: dict[str, Any] = {}
    for key, cast in (("plateau_window", int), ("suspicious_jump", float)):
        value = number(key, cast)
        if value is not None:
            thresholds[key] = value
    minutes = number("budget_minutes", float)
    if minutes is not None and minutes <= 0:
        raise Invalid(f"budget, minutes running: must be more than 0 minutes, not {minutes:g}", "budget_minutes")
    agent = form.get("agent") or default_agent
    return SessionCreate(
        title=form.get("title", ""),
        agent=agent,
        agent_config=agent_config_from_form(agent, form, number),
        suite_filter=form.get("suite_filter", "").strip() or None,
        goal_metric=form.get("goal_metric", "vs_baseline"),
        goal_target=number("goal_target", float),
        thresholds=ThresholdsIn(**thresholds),
        budget=BudgetIn(steps=number("budget_steps", int), seconds=minutes * 60 if minutes is not None else None,
                        tokens=number("budget_tokens", int), cost_usd=number("budget_cost_usd", float)),
    )


def agent_config_from_form(agent: str, form: dict[str, str], number: Any) -> dict[str, Any]:
    """The options of the chosen agent; fields of the other agents are ignored."""
    config: dict[str, Any] = {}
    if agent == "scripted":
        config["script"] = form.get("script", "gpu-demo")
    elif agent == "claude":
        if form.get("model", "").strip():
            config["model"] = form["model"].strip()
    elif agent == "offline":
        seed = number("seed", int)
        if seed is not None:
            config["seed"] = seed
        if form.get("focus", "").strip():
            config["focus"] = form["focus"].strip()
    return config


@router.post("/sessions", response_class=HTMLResponse)
async def create_from_form(request: Request, ctx: Ctx, steer: Steer) -> Response:
    form = {k: str(v) for k, v in (await request.form()).items()}
    try:
        spec = session_spec_from_form(form, ctx.settings.default_agent)
        refuse_unavailable(spec, ctx.settings)  # an agent that cannot start: the reason now, nothing stored
        session = steer.act(None, lambda u: open_session(u, spec, ctx.settings))
    except ValidationError as exc:
        message = "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors())
        return await _dashboard(request, form, message, 422)
    except Invalid as exc:
        return await _dashboard(request, form, str(exc), 422)
    return RedirectResponse(f"/sessions/{session.id}", status_code=303)


@router.post("/sessions/{session_id}/resume")
async def resume_from_form(session_id: int, steer: Steer) -> Response:
    """The dashboard's one-click resume of an interrupted (or paused) session."""
    steer.act(session_id, lambda u: resume(u, session_id, ActionIn().author))
    return RedirectResponse(f"/sessions/{session_id}", status_code=303)


@router.get("/sessions/{session_id}", response_class=HTMLResponse)
async def session_page(request: Request, session_id: int) -> HTMLResponse:
    ctx = get_ctx(request)
    with ctx.database.session() as db:
        view = session_view(db, session_id)
        last_seq = view.session.last_seq
        events = list(events_after(db, session_id, max(0, last_seq - TRACE_ON_PAGE)))
        last_seq = events[-1].seq if events else last_seq
        context = render.panel_context(db, view)
    return page(request, "session.html", **context, events=events, last_seq=last_seq, oob=False)


@router.get("/sessions/{session_id}/candidates/{number}", response_class=HTMLResponse)
async def candidate_page(request: Request, session_id: int, number: int) -> HTMLResponse:
    ctx = get_ctx(request)
    with ctx.unit() as u:  # a unit: the profile is kept the first time it is computed
        db = u.db
        view = session_view(db, session_id)
        c = candidate_by_number(db, session_id, number)
        parent = parent_of(db, c)
        evaluations = [evaluation_view(e) for e in evaluations_of(db, c.id or 0)]
        profile = candidate_profile(db, c)
    diff = diff_rows(parent.source, c.source) if parent else []
    retime = next((v for v in reversed(evaluations) if v.purpose == "retime"), None)
    return page(request, "candidate.html", s=view.session, c=c, parent=parent, evaluations=evaluations, diff=diff,
                profile=profile, retime=retime)


@router.get("/api", response_class=HTMLResponse)
async def api_index(request: Request) -> HTMLResponse:
    """The JSON API's routes from its OpenAPI document (served at /openapi.json)."""
    spec = request.app.openapi()
    routes = []
    for path, methods in spec.get("paths", {}).items():
        for method, op in methods.items():
            routes.append({"method": method.upper(), "path": path, "summary": op.get("summary", ""),
                           "description": op.get("description", ""), "tags": op.get("tags", [])})
    return page(request, "api.html", routes=routes)


@router.get("/login", response_class=HTMLResponse)
async def login_form(request: Request, next: str = "/") -> HTMLResponse:
    return page(request, "login.html", next=next if next.startswith("/") else "/", error="")


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    from app.faces.web.security import check_token, set_sign_in_cookie

    ctx = get_ctx(request)
    form = await request.form()
    token = str(form.get("token", ""))
    target = str(form.get("next", "/"))
    target = target if target.startswith("/") and not target.startswith("//") else "/"
    expected = ctx.settings.token_value
    if expected is not None and not check_token(ctx.settings, token):
        return page(request, "login.html", 401, next=target, error="That token is not right.")
    response = RedirectResponse(target, status_code=303)
    if expected is not None:
        set_sign_in_cookie(response, request, ctx.settings)
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    """Sign out: this browser's cookie is revoked (refused from now on, even if copied) and deleted."""
    cookie = request.cookies.get(COOKIE)
    if cookie:
        request.app.state.guesses.revoke(cookie)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


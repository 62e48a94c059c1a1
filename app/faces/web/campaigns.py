"""Campaigns on the web: the JSON API (/api/campaigns...) and the pages (/campaigns, the
campaign page and its live fragment). Routes translate only: they validate, make one domain
call (app/domain/campaigns/) in a unit of work, wake the member sessions' runners, and read back."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, UploadFile, status
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from pydantic import ValidationError

from app.domain.audit.trace_io import TraceAlreadyImported, TraceFormatError, TraceTooLarge, trace_text
from app.domain.campaigns import board
from app.domain.campaigns.actions import ACTIONS, act_on_campaign
from app.domain.campaigns.members import get_campaign, member_session_ids
from app.domain.campaigns.schemas import CampaignCreate
from app.domain.campaigns.trace import campaign_trace_limit, export_campaign, import_campaign
from app.domain.campaigns.views import campaign_view, list_campaigns
from app.domain.sessions import Conflict, Invalid
from app.engine.campaigns import create_campaign
from app.faces.web import render
from app.faces.web.campaign_tree import tree_layout
from app.faces.web.deps import Ctx, Db, Steer
from app.faces.web.page_check import campaign_pages, session_pages

api = APIRouter(prefix="/api/campaigns", tags=["campaigns"])
pages = APIRouter(include_in_schema=False)


def _create(spec: CampaignCreate, ctx: Ctx, steer: Steer) -> int:
    campaign = steer.act(None, lambda u: create_campaign(u, spec, ctx.settings))
    cid = campaign.id or 0
    for sid in steer.read(lambda db: member_session_ids(db, cid)):
        steer.wake(sid)
    return cid


# -- JSON API ---------------------------------------------------------------------------------


@api.get("")
async def campaigns_index(db: Db) -> list[dict[str, Any]]:
    return [{"id": c.id, "title": c.title, "mode": c.mode, "status": c.status, "evaluations": c.evaluations,
             "budget_evaluations": c.budget_evaluations, "leader_speedup": c.leader_speedup,
             "read_only": c.read_only} for c in list_campaigns(db)]


@api.post("", status_code=status.HTTP_201_CREATED)
async def create(spec: CampaignCreate, ctx: Ctx, steer: Steer) -> dict[str, Any]:
    cid = _create(spec, ctx, steer)
    return steer.read(lambda db: campaign_view(db, cid).to_dict())


@api.get("/{campaign_id}")
async def show(campaign_id: int, db: Db) -> dict[str, Any]:
    return campaign_view(db, campaign_id).to_dict()


@api.get("/{campaign_id}/board")
async def read_board(campaign_id: int, db: Db, layer: Annotated[str | None, Query()] = None,
                     category: Annotated[str | None, Query()] = None,
                     outcome: Annotated[str | None, Query()] = None) -> list[dict[str, Any]]:
    if outcome is not None and outcome not in board.OUTCOMES:
        raise Invalid(f"must be one of {', '.join(board.OUTCOMES)}", "outcome")
    c = get_campaign(db, campaign_id)
    return [board.entry_dict(e) for e in board.read(db, c, layer=layer, category=category, outcome=outcome)]


@api.post("/{campaign_id}/{action}")
async def act(campaign_id: int, action: str, steer: Steer) -> dict[str, Any]:
    if action not in ACTIONS:
        raise Invalid(f"must be one of {', '.join(ACTIONS)}", "action")
    changed = steer.act(None, lambda u: act_on_campaign(u, campaign_id, action, "person"))
    for sid in changed:
        steer.wake(sid)
    return {"changed": changed}


@api.get("/{campaign_id}/export")
async def export(campaign_id: int, db: Db) -> PlainTextResponse:
    return PlainTextResponse(export_campaign(db, campaign_id), media_type="application/x-ndjson", headers={
        "Content-Disposition": f'attachment; filename="campaign-{campaign_id}.jsonl"'})


@api.post("/import", status_code=status.HTTP_201_CREATED)
async def import_file(file: UploadFile, ctx: Ctx) -> dict[str, Any]:
    limit = campaign_trace_limit(ctx.settings.trace_max_bytes)
    data = await file.read(limit + 1)
    try:
        text = await asyncio.to_thread(trace_text, data, limit)  # not on the event loop
    except TraceTooLarge as exc:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, str(exc)) from exc
    except TraceFormatError as exc:
        raise Invalid(str(exc), "file") from exc
    name = (file.filename or "")[:200]

    def store() -> int:
        with ctx.database.session() as db:
            campaign = import_campaign(db, text, name, session_pages, campaign_pages)
            db.commit()
            return campaign.id or 0

    try:
        campaign_id = await asyncio.to_thread(store)  # a large campaign must not hold up the event loop
    except TraceAlreadyImported as exc:
        raise Conflict(str(exc)) from exc
    except TraceFormatError as exc:
        raise Invalid(str(exc), "file") from exc
    return {"id": campaign_id, "read_only": True}


# -- pages ------------------------------------------------------------------------------------


@pages.get("/campaigns", response_class=HTMLResponse)
async def campaigns_index_page(request: Request, ctx: Ctx) -> HTMLResponse:
    return await campaigns_page(request, ctx)


async def campaigns_page(request: Request, ctx: Ctx, form: dict[str, str] | None = None, error: str = "",
                         status_code: int = 200) -> HTMLResponse:
    with ctx.database.session() as db:
        rows = list_campaigns(db)
    return render.TEMPLATES.TemplateResponse(request, "campaigns.html", {
        "campaigns": rows, "form": form or {}, "error": error}, status_code=status_code)


def spec_from_form(form: dict[str, str]) -> CampaignCreate:
    def number(key: str) -> int | None:
        return int(form[key]) if form.get(key, "").strip() else None

    data: dict[str, Any] = {"title": form.get("title", ""), "mode": form.get("mode", "board"),
                            "agents": number("agents") or 4, "policy": form.get("policy", "autonomous"),
                            "seed": number("seed") or 0, "budget_evaluations": number("budget_evaluations"),
                            "memory_k": number("memory_k"), "plateau_window": number("plateau_window") or 6,
                            "islands": number("islands") or 1}
    if form.get("suite_filter", "").strip():
        data["suite_filter"] = form["suite_filter"].strip()
    if form.get("goal_target", "").strip():
        data["goal_target"] = float(form["goal_target"])
    return CampaignCreate.model_validate(data)


@pages.post("/campaigns", response_class=HTMLResponse)
async def create_from_form(request: Request, ctx: Ctx, steer: Steer) -> Response:
    form = {k: str(v) for k, v in (await request.form()).items()}
    try:
        cid = _create(spec_from_form(form), ctx, steer)
    except ValidationError as exc:
        message = "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors())
        return await campaigns_page(request, ctx, form, message, 422)
    except (Invalid, ValueError) as exc:
        return await campaigns_page(request, ctx, form, str(exc), 422)
    return RedirectResponse(f"/campaigns/{cid}", status_code=303)


@pages.post("/campaigns/{campaign_id}/{action}")
async def act_from_form(campaign_id: int, action: str, steer: Steer) -> Response:
    if action not in ACTIONS:
        raise Invalid(f"must be one of {', '.join(ACTIONS)}", "action")
    for sid in steer.act(None, lambda u: act_on_campaign(u, campaign_id, action, "person")):
        steer.wake(sid)
    return RedirectResponse(f"/campaigns/{campaign_id}", status_code=303)


@pages.get("/campaigns/{campaign_id}", response_class=HTMLResponse)
async def campaign_page(request: Request, campaign_id: int, db: Db) -> HTMLResponse:
    view = campaign_view(db, campaign_id)
    return render.TEMPLATES.TemplateResponse(request, "campaign.html",
                                             {"v": view, "tree": tree_layout(view.tree)})


@pages.get("/campaigns/{campaign_id}/live", response_class=HTMLResponse)
async def campaign_live(request: Request, campaign_id: int, db: Db) -> HTMLResponse:
    view = campaign_view(db, campaign_id)
    return render.TEMPLATES.TemplateResponse(request, "fragments/campaign_live.html",
                                             {"v": view, "tree": tree_layout(view.tree)})

"""Lessons' pages: /lessons (search as you type, filters, the table, JSON Lines and YAML export
and import), a lesson's page /lessons/{id} (its evidence, linked into the sessions' audits;
retire, activate, promote to a bank question), and the pause panel's "Lessons that fit" (loaded
into a paused session's banner by htmx; send one as a message, promote one). Everything a
lesson holds came from traces: the templates autoescape it all (app/faces/web/lessons_views.py
turns it into plain texts and numbers first)."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.domain.lesson_actions import (
    lesson_or_404,
    promote_lesson,
    promoted_question,
    send_lesson,
    session_lessons,
)
from app.domain.sessions import Conflict, NotFound, get_session
from app.faces.web import render
from app.faces.web.bank_pages import MAX_IMPORT_BYTES
from app.faces.web.deps import Ctx, Db, Steer
from app.faces.web.identity import author_of
from app.faces.web.lessons_api import STATUSES, import_text, ranked, scenario_categories, statuses_of
from app.faces.web.lessons_views import lesson_view
from app.services.context import ServerContext
from app.store.models import PAUSED
from kernels.attention.family.space import LAYERS as FAMILY_LAYERS
from lessons.models import Lesson, LessonError, Status
from lessons.search import Filters
from lessons.store import FORMATS, export_lessons, list_lessons, set_status
from question_bank import curation

router = APIRouter(include_in_schema=False)

PAUSE_LESSONS = 4  # lessons the pause panel shows
STATUS_CHOICES = ("", *STATUSES, "all")  # "": proposed and active


def page(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    return render.TEMPLATES.TemplateResponse(request, name, context, status_code=status_code)


def _filters(request: Request) -> dict[str, str]:
    p = request.query_params
    out = {name: p.get(name, "")[:64].strip() for name in ("arch", "category", "layer", "knob")}
    out["q"] = p.get("q", "")[:500]
    out["status"] = p.get("status", "")
    if out["status"] not in STATUS_CHOICES:
        out["status"] = ""
    if out["layer"] not in ("", *FAMILY_LAYERS):
        out["layer"] = ""
    return out


def _facets(lessons: list[Lesson]) -> dict[str, list[str]]:
    """The values the filters offer: those the stored lessons hold."""
    archs: set[str] = set()
    categories: set[str] = set()
    knobs: set[str] = set()
    for x in lessons:
        archs.add(str(x.arch))
        effect = x.effect if isinstance(x.effect, dict) else {}
        if isinstance(effect.get("category"), dict):
            categories.update(str(c) for c in effect["category"])
        changes = (x.action or {}).get("changes") if isinstance(x.action, dict) else None
        if isinstance(changes, dict):
            knobs.update(str(k) for k in changes)
    return {"archs": sorted(a for a in archs if a), "categories": sorted(categories), "knobs": sorted(knobs),
            "layers": list(FAMILY_LAYERS)}


async def _results(ctx: ServerContext, f: dict[str, str]) -> dict[str, Any]:
    filters = Filters(arch=f["arch"], category=f["category"], layer=f["layer"], knob=f["knob"],
                      statuses=statuses_of(f["status"] or None))
    with ctx.database.session() as db:
        hits = await ranked(ctx, db, f["q"], filters, 500)
        everything = list_lessons(db, None)
    return {"views": [lesson_view(h.lesson, h) for h in hits], "filters": f, "count": len(hits),
            "total": len(everything), "facets": _facets(everything)}


async def _lessons_page(request: Request, ctx: ServerContext, *, import_errors: list[str] | None = None,
                        status_code: int = 200) -> HTMLResponse:
    context = await _results(ctx, _filters(request))
    return page(request, "lessons.html", status_code, **context, formats=FORMATS,
                notice=request.query_params.get("notice", "")[:300], import_errors=import_errors or [])


@router.get("/lessons", response_class=HTMLResponse)
async def lessons_page(request: Request, ctx: Ctx) -> HTMLResponse:
    return await _lessons_page(request, ctx)


@router.get("/lessons/results", response_class=HTMLResponse)
async def lessons_results(request: Request, ctx: Ctx) -> HTMLResponse:
    """The table alone, swapped in by htmx as the person types or changes a filter."""
    return page(request, "fragments/lessons_results.html", **await _results(ctx, _filters(request)))


@router.get("/lessons/export.{fmt}")
async def export_file(fmt: str, db: Db) -> Response:
    if fmt not in FORMATS:
        raise NotFound(f"lessons export as {', '.join(FORMATS)}: /lessons/export.jsonl or /lessons/export.yaml")
    return Response(export_lessons(db, fmt), media_type="application/x-ndjson" if fmt == "jsonl" else
                    "application/yaml", headers={"Content-Disposition": f'attachment; filename="lessons.{fmt}"'})


@router.post("/lessons/import", response_class=HTMLResponse)
async def import_from_form(request: Request, ctx: Ctx) -> Response:
    form = await request.form()
    upload = form.get("file")
    text = str(form.get("text", ""))
    fmt = str(form.get("format", ""))
    source = "the pasted text"
    if upload is not None and not isinstance(upload, str) and upload.filename:
        raw = await upload.read(MAX_IMPORT_BYTES + 1)
        if len(raw) > MAX_IMPORT_BYTES:
            return await _lessons_page(request, ctx, import_errors=[f"the file is larger than {MAX_IMPORT_BYTES} "
                                                                    "bytes"], status_code=400)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return await _lessons_page(request, ctx, import_errors=["the file is not UTF-8 text"], status_code=400)
        source = upload.filename
        if not fmt:
            fmt = "yaml" if source.lower().endswith((".yaml", ".yml")) else "jsonl"
    fmt = fmt or "jsonl"
    if not text.strip():
        return await _lessons_page(request, ctx, import_errors=["choose a JSON Lines or YAML file, or paste one"],
                                   status_code=400)
    try:
        result = await asyncio.to_thread(import_text, ctx, text, fmt)
    except LessonError as exc:
        return await _lessons_page(request, ctx, import_errors=[f"{source}: {exc}"], status_code=400)
    notice = (f"Imported {source}: {result.created} new, {result.updated} updated, "
              f"{result.unchanged} unchanged.")
    return RedirectResponse(f"/lessons?{urlencode({'notice': notice})}", status_code=303)


@router.get("/lessons/{lesson_id}", response_class=HTMLResponse)
async def lesson_page(request: Request, lesson_id: int, db: Db) -> HTMLResponse:
    lesson = lesson_or_404(db, lesson_id)
    return page(request, "lesson.html", v=lesson_view(lesson, evidence=True), question=promoted_question(db, lesson),
                notice=request.query_params.get("notice", "")[:300])


@router.post("/lessons/{lesson_id}/status", response_class=HTMLResponse)
async def status_from_form(request: Request, lesson_id: int, db: Db) -> Response:
    form = await request.form()
    wanted = str(form.get("status", ""))
    lesson_or_404(db, lesson_id)
    try:
        set_status(db, lesson_id, wanted)
        db.commit()
        notice = {Status.RETIRED.value: "Retired: never shown to a model, never revived by the distiller.",
                  Status.ACTIVE.value: "Active: a model's prompt may carry it."}.get(wanted, f"Now {wanted}.")
    except LessonError as exc:
        notice = f"Not changed: {exc}"
    return RedirectResponse(f"/lessons/{lesson_id}?{urlencode({'notice': notice})}", status_code=303)


@router.post("/lessons/{lesson_id}/promote", response_class=HTMLResponse)
async def promote_from_form(request: Request, lesson_id: int, db: Db) -> Response:
    """From a lesson's page: to the new question's page. From the pause panel (htmx): a line."""
    try:
        done = promote_lesson(db, lesson_id)
    except curation.BankValidationError as exc:
        message, q = f"The bank refused it: {exc}", None
    else:
        q = done.question
        message = "Added to the bank as" if done.created else "The bank already holds it as"
    if request.headers.get("hx-request"):
        return page(request, "fragments/lesson_status.html", message=message, question=q, error=q is None)
    if q is None:
        return RedirectResponse(f"/lessons/{lesson_id}?{urlencode({'notice': message})}", status_code=303)
    return RedirectResponse(f"/bank/questions/{q.id}?{urlencode({'notice': f'{message} {q.key!r}.'})}",
                            status_code=303)


@router.get("/sessions/{session_id}/lessons/fit", response_class=HTMLResponse)
async def lessons_that_fit(request: Request, session_id: int, db: Db) -> HTMLResponse:
    """The pause panel's "Lessons that fit" (loaded into the banner of a paused session)."""
    s = get_session(db, session_id)
    hits = session_lessons(db, session_id, scenario_categories(db, session_id), limit=PAUSE_LESSONS)
    return page(request, "fragments/lessons_fit.html", s=s, views=[lesson_view(h.lesson, h) for h in hits],
                can_send=s.status == PAUSED and not s.read_only)


@router.post("/sessions/{session_id}/lessons/{lesson_id}/send", response_class=HTMLResponse)
async def send_from_panel(request: Request, session_id: int, lesson_id: int, steer: Steer) -> HTMLResponse:
    """Send the lesson as an information message (it waits for the person's Resume, like a
    message sent with "resume if paused" unticked); the session's panels show it at once."""
    author = author_of(request, None)
    try:
        item = steer.act(session_id, lambda u: send_lesson(u, session_id, lesson_id, author=author))
    except Conflict as exc:
        # 200: htmx swaps only successful answers, and the person must read why
        return page(request, "fragments/lesson_status.html", message=str(exc), question=None, error=True)
    return page(request, "fragments/lesson_status.html", message=f"Sent as message {item.id}; it reaches the agent "
                "when the session resumes.", question=None, error=False)

"""The question bank's pages: /bank (search as you type, add, edit, retire, merge duplicates,
promote a session message, evidence, YAML import and export), a question's page, the promote
form, and the session page's auto-ask control. Forms validate through the same rules as the
JSON API (app/faces/web/bank_schemas.py, question_bank/curation.py)."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError
from sqlmodel import Session

from app.domain.audit.evidence import silent_control
from app.domain.bank_actions import answered_trigger, promotable, promote, session_message, set_auto_ask
from app.domain.sessions import Invalid, NotFound, get_session
from app.faces.web import render
from app.faces.web.bank_api import embedder_for, question_or_404
from app.faces.web.bank_evidence import use_rows
from app.faces.web.bank_schemas import AutoAskIn, PromoteIn
from app.faces.web.deps import Ctx, Db, Steer
from app.faces.web.identity import author_of
from app.services.context import ServerContext
from app.store.models import Intervention, SteeringSession
from question_bank import curation
from question_bank.auto_ask import AutoAskMode, AutoAskPolicy, get_policy
from question_bank.bank_file import LAYERS, MAX_FILE_BYTES, TRIGGERS, BankFileError
from question_bank.evidence import evidence_table, question_evidence, uses_of_question
from question_bank.models import BankQuestion, Status
from question_bank.search import search
from question_bank.semantic import Embedder
from question_bank.store import export_bank_text, get_question, import_bank_text, list_questions
from question_bank.store import merged_into as questions_merged_into

router = APIRouter(include_in_schema=False)

MAX_IMPORT_BYTES = MAX_FILE_BYTES  # question_bank/bank_file.py: the CLI reads the same at most


def page(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    return render.TEMPLATES.TemplateResponse(request, name, {"triggers": TRIGGERS, "layers": LAYERS, **context},
                                             status_code=status_code)


def _filters(request: Request) -> dict[str, str]:
    p = request.query_params
    out = {"q": p.get("q", "")[:500], "status": p.get("status", "active"), "kind": p.get("kind", ""),
           "trigger": p.get("trigger", ""), "layer": p.get("layer", "")}
    if out["status"] not in ("active", "retired", "all"):
        out["status"] = "active"
    if out["kind"] not in ("", "question", "information"):
        out["kind"] = ""
    if out["trigger"] not in ("", *TRIGGERS):
        out["trigger"] = ""
    if out["layer"] not in ("", *LAYERS):
        out["layer"] = ""
    return out


def _results(db: Session, f: dict[str, str], embedder: Embedder | None) -> dict[str, Any]:
    hits = search(db, f["q"], status=None if f["status"] == "all" else f["status"], kind=f["kind"] or None,
                  trigger=f["trigger"] or None, layer=f["layer"] or None, embedder=embedder, limit=200)
    return {"hits": hits, "evidence": question_evidence(db), "filters": f, "semantic": embedder is not None}


def _bank_page(request: Request, ctx: ServerContext, *, notice: str = "", errors: dict[str, str] | None = None,
               form: dict[str, Any] | None = None, import_errors: list[str] | None = None,
               status_code: int = 200) -> HTMLResponse:
    f = _filters(request)
    embedder = embedder_for(ctx) if f["q"].strip() else None
    with ctx.database.session() as db:
        context = _results(db, f, embedder)
        table = evidence_table(db)
        control = silent_control(db)
        # each evidence row's uses as a table (the knob record a campaign's instruction carries as lines)
        row_uses = {r.last_use_id: use_rows(db, r.uses, r.text) for r in (*table.rows, *table.unbanked)}
        recent = promotable(db)
        active = list_questions(db, status=Status.ACTIVE.value)
    return page(request, "bank.html", status_code, **context, table=table, control=control, row_uses=row_uses,
                recent=recent,
                active=active,
                notice=notice or request.query_params.get("notice", "")[:300], errors=errors or {},
                form=form or {}, import_errors=import_errors or [])


@router.get("/bank", response_class=HTMLResponse)
async def bank_page(request: Request, ctx: Ctx) -> HTMLResponse:
    return await asyncio.to_thread(_bank_page, request, ctx)


@router.get("/bank/results", response_class=HTMLResponse)
async def bank_results(request: Request, ctx: Ctx) -> HTMLResponse:
    """The result list alone, swapped in by htmx as the person types or changes a filter."""
    f = _filters(request)
    embedder = await asyncio.to_thread(embedder_for, ctx) if f["q"].strip() else None
    with ctx.database.session() as db:
        context = _results(db, f, embedder)
    return page(request, "fragments/bank_results.html", **context)


def _form_draft(form: Any) -> curation.QuestionDraft:
    archs = [a for a in str(form.get("archs", "")).replace(",", " ").split() if a]
    return curation.QuestionDraft(
        text=str(form.get("text", "")), kind=str(form.get("kind", "question")),
        triggers=[str(t) for t in form.getlist("triggers")], layers=[str(x) for x in form.getlist("layers")],
        problem=str(form.get("problem", "")) or None, archs=archs, hypothesis=str(form.get("hypothesis", "")),
        check=str(form.get("check", "")), provenance=str(form.get("provenance", "")),
        key=str(form.get("key", "")) or None,
    )


def _draft_form(d: curation.QuestionDraft) -> dict[str, Any]:
    return {"text": d.text, "kind": d.kind, "triggers": list(d.triggers), "layers": list(d.layers),
            "problem": d.problem or "", "archs": " ".join(d.archs), "hypothesis": d.hypothesis, "check": d.check,
            "provenance": d.provenance, "key": d.key or ""}


def _back(notice: str, anchor: str = "") -> RedirectResponse:
    return RedirectResponse(f"/bank?{urlencode({'notice': notice})}{anchor}", status_code=303)


@router.post("/bank/questions", response_class=HTMLResponse)
async def add_from_form(request: Request, ctx: Ctx) -> Response:
    form = await request.form()
    draft = _form_draft(form)
    if not draft.provenance:
        draft.provenance = "added on the bank page"
    try:
        with ctx.database.session() as db:
            q = curation.add_question(db, draft)
    except curation.BankValidationError as exc:
        return _bank_page(request, ctx, errors=exc.errors, form=_draft_form(draft), status_code=422)
    return _back(f"Added '{q.key}'.")


@router.get("/bank/questions/{question_id}", response_class=HTMLResponse)
async def question_page(request: Request, question_id: int, ctx: Ctx) -> HTMLResponse:
    with ctx.database.session() as db:
        q = question_or_404(db, question_id)
        return _question_page(request, db, q)


def _question_page(request: Request, db: Session, q: BankQuestion, *, errors: dict[str, str] | None = None,
                   form: dict[str, Any] | None = None, status_code: int = 200) -> HTMLResponse:
    uses = use_rows(db, uses_of_question(db, q.id or 0), q.text)
    merged_into = get_question(db, q.merged_into_id) if q.merged_into_id else None
    merged_from = questions_merged_into(db, q.id or 0)
    stats = question_evidence(db).get(q.id or 0)
    control = silent_control(db)
    fields = form or {**q.to_dict(), "archs": " ".join(q.archs), "problem": q.problem or ""}
    return page(request, "bank_question.html", status_code, q=q, uses=uses, stats=stats, control=control,
                form=fields,
                errors=errors or {}, merged_into=merged_into, merged_from=merged_from)


@router.post("/bank/questions/{question_id}", response_class=HTMLResponse)
async def edit_from_form(request: Request, question_id: int, ctx: Ctx) -> Response:
    form = await request.form()
    draft = _form_draft(form)
    with ctx.database.session() as db:
        q = question_or_404(db, question_id)
        draft.key = draft.key or q.key
        try:
            q = curation.edit_question(db, question_id, draft)
        except curation.BankValidationError as exc:
            return _question_page(request, db, q, errors=exc.errors, form=_draft_form(draft), status_code=422)
    return RedirectResponse(f"/bank/questions/{question_id}?{urlencode({'notice': 'Saved.'})}", status_code=303)


@router.post("/bank/questions/{question_id}/status", response_class=HTMLResponse)
async def status_from_form(request: Request, question_id: int, ctx: Ctx) -> Response:
    form = await request.form()
    wanted = str(form.get("status", ""))
    with ctx.database.session() as db:
        q = question_or_404(db, question_id)
        try:
            curation.set_status(db, question_id, wanted)
        except curation.BankValidationError as exc:
            return _back(f"'{q.key}' was not changed: {exc}")
    verb = "Retired" if wanted == Status.RETIRED.value else "Reactivated"
    return _back(f"{verb} '{q.key}'.")


@router.post("/bank/merge", response_class=HTMLResponse)
async def merge_from_form(request: Request, ctx: Ctx) -> Response:
    form = await request.form()
    try:
        keep = int(str(form.get("keep_id", "")))
        dupes = [int(str(x)) for x in form.getlist("duplicate_ids")]
    except ValueError:
        return _back("Merge: choose the question to keep and at least one duplicate.", "#merge")
    with ctx.database.session() as db:
        for qid in (keep, *dupes):
            question_or_404(db, qid)
        try:
            kept = curation.merge_questions(db, keep, dupes)
        except curation.BankValidationError as exc:
            return _back(f"Nothing merged: {exc}", "#merge")
    return _back(f"Merged {len([d for d in dupes if d != keep])} question(s) into '{kept.key}'.")


@router.get("/bank/promote", response_class=HTMLResponse)
async def promote_form(request: Request, ctx: Ctx, session: int, message: int) -> HTMLResponse:
    """The form that puts a message sent in a session into the bank, prefilled from the message."""
    with ctx.database.session() as db:
        s = get_session(db, session)
        item = session_message(db, session, message)
        trigger = answered_trigger(db, item)
        form = {"text": item.text, "kind": item.kind, "problem": s.problem, "archs": "",
                "triggers": [trigger.kind] if trigger is not None and trigger.kind in TRIGGERS else [],
                "layers": [], "hypothesis": "", "check": ""}
        return _promote_page(request, s, item, form)


def _promote_page(request: Request, s: SteeringSession, item: Intervention, form: dict[str, Any],
                  errors: dict[str, str] | None = None, status_code: int = 200) -> HTMLResponse:
    return page(request, "bank_promote.html", status_code, s=s, item=item, form=form, errors=errors or {})


@router.post("/bank/promote", response_class=HTMLResponse)
async def promote_from_form(request: Request, ctx: Ctx) -> Response:
    form = await request.form()
    try:
        session_id, message_id = int(str(form.get("session_id", ""))), int(str(form.get("intervention_id", "")))
    except ValueError as exc:
        raise NotFound("the message to promote was not named") from exc
    draft = _form_draft(form)
    errors: dict[str, str] = {}
    try:
        data: PromoteIn | None = PromoteIn.model_validate({
            "session_id": session_id, "intervention_id": message_id, "text": draft.text, "kind": draft.kind,
            "triggers": list(draft.triggers), "layers": list(draft.layers), "problem": draft.problem,
            "archs": list(draft.archs), "hypothesis": draft.hypothesis, "check": draft.check,
            "promoted_by": author_of(request, str(form.get("promoted_by", ""))),
        })
    except ValidationError as exc:
        errors = {".".join(str(x) for x in e["loc"]) or "form": str(e["msg"]) for e in exc.errors()}
        data = None
    with ctx.database.session() as db:
        s = get_session(db, session_id)
        item = session_message(db, session_id, message_id)
        if data is None:
            return _promote_page(request, s, item, _draft_form(draft), errors, 422)
        try:
            result = promote(db, session_id, message_id, data.draft(), data.promoted_by)
        except curation.BankValidationError as exc:
            return _promote_page(request, s, item, _draft_form(draft), exc.errors, 422)
    q = result.question
    notice = f"Added '{q.key}' to the bank." if result.created else f"The bank already holds this as '{q.key}'."
    return RedirectResponse(f"/bank/questions/{q.id}?{urlencode({'notice': notice})}", status_code=303)


@router.get("/bank/export.yaml")
async def export_file(db: Db) -> Response:
    return Response(export_bank_text(db), media_type="application/yaml",
                    headers={"Content-Disposition": 'attachment; filename="question-bank.yaml"'})


@router.post("/bank/import", response_class=HTMLResponse)
async def import_from_form(request: Request, ctx: Ctx) -> Response:
    form = await request.form()
    upload = form.get("file")
    text = str(form.get("text", ""))
    source = "the pasted text"
    if upload is not None and not isinstance(upload, str) and upload.filename:
        raw = await upload.read(MAX_IMPORT_BYTES + 1)
        if len(raw) > MAX_IMPORT_BYTES:
            return _bank_page(request, ctx, import_errors=[f"the file is larger than {MAX_IMPORT_BYTES} bytes"],
                              status_code=422)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return _bank_page(request, ctx, import_errors=["the file is not UTF-8 text"], status_code=422)
        source = upload.filename
    if not text.strip():
        return _bank_page(request, ctx, import_errors=["choose a YAML file or paste one"], status_code=422)
    def store() -> Any:
        with ctx.database.session() as db:
            return import_bank_text(db, text, source=source)

    try:
        result = await asyncio.to_thread(store)  # a large file must not hold up the event loop
    except BankFileError as exc:
        return _bank_page(request, ctx, import_errors=[f"{source}:{i}" for i in exc.issues], status_code=422)
    return _back(f"Imported {source}: {result.summary()}.")


@router.post("/sessions/{session_id}/auto-ask", response_class=HTMLResponse)
async def auto_ask_from_form(request: Request, session_id: int, steer: Steer) -> Response:
    form = await request.form()
    try:
        data = AutoAskIn.model_validate({"mode": str(form.get("mode", AutoAskMode.OFF.value)),
                                         "idle_seconds": str(form.get("idle_seconds", "")) or 120,
                                         "max_in_a_row": str(form.get("max_in_a_row", "")) or 3})
    except ValidationError as exc:
        raise Invalid("; ".join(str(e["msg"]) for e in exc.errors()), "mode") from exc
    policy = AutoAskPolicy(data.mode, data.idle_seconds, data.max_in_a_row)
    steer.act(session_id, lambda u: set_auto_ask(u, session_id, policy))
    return RedirectResponse(f"/sessions/{session_id}", status_code=303)


@router.get("/sessions/{session_id}/auto-ask", response_class=HTMLResponse)
async def auto_ask_fragment(request: Request, session_id: int, db: Db) -> HTMLResponse:
    """The auto-ask control of the session page (loaded into it by htmx)."""
    get_session(db, session_id)
    return page(request, "fragments/bank_auto_ask.html", session_id=session_id, policy=get_policy(db, session_id))

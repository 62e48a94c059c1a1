"""The question bank on the web: the curation page (/bank: search as you type, add, edit,
retire, merge duplicates, promote a session message, evidence, YAML import and export) and its
JSON API (/api/bank/..., and per session /api/sessions/{id}/bank/... and .../auto-ask).
Routes only translate: parse, call question_bank with the request's database session, render."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Body, Query, Request, status
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from sqlmodel import Session, col, select

from app.models import Intervention, SteeringSession, Trigger
from app.schemas import InputModel
from app.sessions import Invalid, NotFound, get_session
from app.web import render
from app.web.api import Ctx, Db
from question_bank import agent_tool, curation
from question_bank.auto_ask import AutoAskMode, AutoAskPolicy, get_policy, set_policy
from question_bank.bank_file import LAYERS, MAX_FILE_BYTES, TRIGGERS, BankFileError
from question_bank.evidence import EvidenceStats, evidence_table, question_evidence
from question_bank.models import PAUSE_TRIGGERS, BankQuestion, BankUse, Kind, Status, normalize_text
from question_bank.search import search
from question_bank.semantic import Embedder, default_embedder
from question_bank.store import export_bank_text, get_question, import_bank_text, list_questions

api_router = APIRouter(prefix="/api", tags=["bank"])
pages_router = APIRouter(include_in_schema=False)

MAX_IMPORT_BYTES = MAX_FILE_BYTES  # question_bank/bank_file.py: the CLI reads the same at most
RECENT_MESSAGES = 30  # messages from sessions offered for promotion on the bank page


# -- schemas -------------------------------------------------------------------------------


class QuestionIn(InputModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(max_length=2000)
    kind: Literal["question", "information"] = "question"
    triggers: list[str] = Field(description=f"some of: {', '.join(TRIGGERS)}")
    layers: list[str] = Field(description=f"some of: {', '.join(LAYERS)}")
    problem: str | None = Field(None, description="scope: the problem (e.g. attention-forward); none for any")
    archs: list[str] = Field(default_factory=list, description="scope: GPU archs such as sm_90; empty for any")
    hypothesis: str = Field("", description="for curators: what the question makes the agent consider")
    check: str = Field("", description="for curators: the measurement that answers it")
    provenance: str = ""
    key: str | None = Field(None, description="stable name in YAML files; derived from the text if absent")

    def draft(self) -> curation.QuestionDraft:
        return curation.QuestionDraft(**self.model_dump())


class QuestionPatch(InputModel):
    model_config = ConfigDict(extra="forbid")

    text: str | None = Field(None, max_length=2000)
    kind: Literal["question", "information"] | None = None
    triggers: list[str] | None = None
    layers: list[str] | None = None
    problem: str | None = None
    archs: list[str] | None = None
    hypothesis: str | None = None
    check: str | None = None
    provenance: str | None = None
    key: str | None = None


class Evidence(BaseModel):
    uses: int
    credited: int
    geomean_gain: float
    hit_rate: float
    best_gain: float


class QuestionPublic(BaseModel):
    id: int
    key: str
    text: str
    kind: str
    triggers: list[str]
    layers: list[str]
    problem: str | None
    archs: list[str]
    hypothesis: str
    check: str
    provenance: str
    status: str
    merged_into_id: int | None
    evidence: Evidence
    score: float | None = None
    reasons: list[str] = []


class MergeIn(InputModel):
    model_config = ConfigDict(extra="forbid")

    keep_id: int
    duplicate_ids: list[int] = Field(min_length=1)


class PromoteIn(InputModel):
    """A message sent in a session, into the bank. Text and kind default to the message's own."""

    model_config = ConfigDict(extra="forbid")

    session_id: int
    intervention_id: int
    text: str | None = Field(None, max_length=2000)
    kind: Literal["question", "information"] | None = None
    triggers: list[str]
    layers: list[str]
    problem: str | None = None
    archs: list[str] = Field(default_factory=list)
    hypothesis: str = ""
    check: str = ""
    promoted_by: str = Field("person", min_length=1, max_length=80)


class PromotePublic(BaseModel):
    question: QuestionPublic
    created: bool
    uses_linked: int


class ImportPublic(BaseModel):
    created: list[str]
    updated: list[str]
    unchanged: list[str]


class EvidenceRowPublic(BaseModel):
    question_id: int | None
    key: str | None
    text: str
    kind: str
    status: str | None
    sessions: int
    evidence: Evidence


class EvidencePublic(BaseModel):
    overall: dict[str, Evidence]
    by_author: list[dict[str, Any]]
    questions: list[EvidenceRowPublic]
    unbanked: list[EvidenceRowPublic]


class AutoAskIn(InputModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["off", "after_idle", "at_once"]
    idle_seconds: float = Field(120.0, gt=0, le=86400)
    max_in_a_row: int = Field(3, ge=1, le=20, description="bank questions in a row without a person's message")


class AutoAskPublic(BaseModel):
    session_id: int
    mode: str
    idle_seconds: float
    max_in_a_row: int
    description: str

    @classmethod
    def of(cls, session_id: int, policy: AutoAskPolicy) -> AutoAskPublic:
        return cls(session_id=session_id, mode=policy.mode, idle_seconds=policy.idle_seconds,
                   max_in_a_row=policy.max_in_a_row, description=policy.describe())


class ConsultIn(InputModel):
    """The agent's tool over HTTP (for external agents): a situation in, a few questions out."""

    model_config = ConfigDict(extra="forbid")

    situation: str = Field(min_length=1, max_length=agent_tool.MAX_SITUATION)
    trigger: Literal["plateau", "declared_limit", "suspicious_win", "budget", "manual"] = "manual"
    layers_tried: list[str] = Field(default_factory=list)
    limit: int = Field(3, ge=1, le=5)
    session_id: int | None = None


# -- helpers -------------------------------------------------------------------------------


def _evidence(stats: EvidenceStats | None) -> Evidence:
    s = stats or EvidenceStats(0, 0, 1.0, 0.0, 1.0, 0.0)
    return Evidence(uses=s.uses, credited=s.credited, geomean_gain=s.geomean_gain, hit_rate=s.hit_rate,
                    best_gain=s.best_gain)


def public(q: BankQuestion, stats: EvidenceStats | None = None, score: float | None = None,
           reasons: tuple[str, ...] | list[str] = ()) -> QuestionPublic:
    d = q.to_dict()
    return QuestionPublic(**d, evidence=_evidence(stats), score=score, reasons=list(reasons))


def invalid(errors: dict[str, str]) -> JSONResponse:
    detail = [{"loc": ["body", field], "msg": msg, "type": "value_error"} for field, msg in errors.items()]
    message = "; ".join(f"{field}: {msg}" for field, msg in errors.items())
    return JSONResponse({"detail": detail, "message": message}, status_code=422)


def file_invalid(exc: BankFileError) -> JSONResponse:
    detail = [{"loc": ["body", "line", i.line], "msg": i.message, "type": "value_error"} for i in exc.issues]
    return JSONResponse({"detail": detail, "message": str(exc)}, status_code=422)


def _question(db: Session, question_id: int) -> BankQuestion:
    q = get_question(db, question_id)
    if q is None:
        raise NotFound(f"no bank question {question_id}")
    return q


def embedder_for(ctx: Any) -> Embedder | None:
    return default_embedder(enabled=bool(ctx.settings.bank_semantic_search))


def _intervention(db: Session, session_id: int, intervention_id: int) -> Intervention:
    item = db.get(Intervention, intervention_id)
    if item is None or item.session_id != session_id:
        raise NotFound(f"session {session_id} has no message {intervention_id}")
    return item


def _promote(db: Session, data: PromoteIn) -> curation.Promotion:
    session = get_session(db, data.session_id)
    item = _intervention(db, data.session_id, data.intervention_id)
    answered = db.get(Trigger, item.trigger_id) if item.trigger_id is not None else None
    triggers = list(data.triggers)
    if answered is not None and answered.kind in triggers:  # the pause it was asked at comes first
        triggers.remove(answered.kind)
        triggers.insert(0, answered.kind)
    draft = curation.QuestionDraft(
        text=data.text or item.text, kind=data.kind or item.kind, triggers=triggers, layers=data.layers,
        problem=data.problem if data.problem is not None else session.problem, archs=data.archs,
        hypothesis=data.hypothesis, check=data.check,
    )
    return curation.promote_message(db, draft, session_ref=data.session_id, message_ref=data.intervention_id,
                                    promoted_by=data.promoted_by)


# -- JSON API ------------------------------------------------------------------------------


@api_router.get("/bank/questions", response_model=list[QuestionPublic])
async def api_list(
    ctx: Ctx, db: Db,
    q: Annotated[str, Query(max_length=500, description="search as a person types")] = "",
    status_: Annotated[Literal["active", "retired"] | None, Query(alias="status")] = None,
    kind: Literal["question", "information"] | None = None,
    trigger: Annotated[str | None, Query(description=f"one of {', '.join(TRIGGERS)}")] = None,
    layer: Annotated[str | None, Query(description=f"one of {', '.join(LAYERS)}")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[QuestionPublic]:
    """Bank questions, filtered; with `q`, ranked by keyword (and meaning, where the packaged
    embedding model is installed)."""
    embedder = await asyncio.to_thread(embedder_for, ctx) if q.strip() else None
    hits = search(db, q, status=status_, kind=kind, trigger=trigger, layer=layer, embedder=embedder, limit=limit)
    evidence = question_evidence(db)
    return [public(h.question, evidence.get(h.question.id or 0), h.score if q.strip() else None) for h in hits]


@api_router.post("/bank/questions", response_model=QuestionPublic, status_code=status.HTTP_201_CREATED,
                 responses={422: {"description": "a field is invalid; nothing was written"}})
async def api_add(data: QuestionIn, db: Db) -> Any:
    try:
        return public(curation.add_question(db, data.draft()))
    except curation.BankValidationError as exc:
        return invalid(exc.errors)


@api_router.get("/bank/questions/{question_id}", response_model=QuestionPublic)
async def api_read(question_id: int, db: Db) -> QuestionPublic:
    q = _question(db, question_id)
    return public(q, question_evidence(db).get(question_id))


@api_router.patch("/bank/questions/{question_id}", response_model=QuestionPublic,
                  responses={422: {"description": "a field is invalid; nothing was written"}})
async def api_edit(question_id: int, change: QuestionPatch, db: Db) -> Any:
    q = _question(db, question_id)
    current = {k: v for k, v in q.to_dict().items() if k in QuestionIn.model_fields}
    merged = {**current, **change.model_dump(exclude_unset=True)}
    try:
        draft = curation.QuestionDraft(**{k: v for k, v in merged.items() if v is not None or k == "problem"})
        return public(curation.edit_question(db, question_id, draft), question_evidence(db).get(question_id))
    except curation.BankValidationError as exc:
        return invalid(exc.errors)
    except curation.NotFound as exc:
        raise NotFound(str(exc)) from exc


@api_router.post("/bank/questions/{question_id}/retire", response_model=QuestionPublic)
async def api_retire(question_id: int, db: Db) -> Any:
    _question(db, question_id)
    return public(curation.retire_question(db, question_id), question_evidence(db).get(question_id))


@api_router.post("/bank/questions/{question_id}/activate", response_model=QuestionPublic,
                 responses={422: {"description": "a merged question cannot be reactivated"}})
async def api_activate(question_id: int, db: Db) -> Any:
    _question(db, question_id)
    try:
        return public(curation.set_status(db, question_id, Status.ACTIVE.value),
                      question_evidence(db).get(question_id))
    except curation.BankValidationError as exc:
        return invalid(exc.errors)


@api_router.post("/bank/merge", response_model=QuestionPublic,
                 responses={422: {"description": "nothing to merge; nothing was written"}})
async def api_merge(data: MergeIn, db: Db) -> Any:
    """Fold duplicates into `keep_id`: it gains their triggers, layers and evidence; they retire."""
    for qid in (data.keep_id, *data.duplicate_ids):
        _question(db, qid)
    try:
        kept = curation.merge_questions(db, data.keep_id, data.duplicate_ids)
    except curation.BankValidationError as exc:
        return invalid(exc.errors)
    return public(kept, question_evidence(db).get(data.keep_id))


@api_router.post("/bank/promote", response_model=PromotePublic, status_code=status.HTTP_201_CREATED,
                 responses={422: {"description": "a field is invalid; nothing was written"}})
async def api_promote(data: PromoteIn, db: Db) -> Any:
    """Put a message sent in a session into the bank; its earlier uses become the question's."""
    try:
        result = _promote(db, data)
    except curation.BankValidationError as exc:
        return invalid(exc.errors)
    q = result.question
    return PromotePublic(question=public(q, question_evidence(db).get(q.id or 0)), created=result.created,
                         uses_linked=len(result.uses_linked))


@api_router.get("/bank/evidence", response_model=EvidencePublic)
async def api_evidence(db: Db) -> EvidencePublic:
    """Leader gain after each message over the next K evaluations: questions against information,
    overall, per author, per bank question, and for typed messages not in the bank."""
    table = evidence_table(db)

    def row(r: Any) -> EvidenceRowPublic:
        return EvidenceRowPublic(question_id=r.question_id, key=r.key, text=r.text, kind=r.kind, status=r.status,
                                 sessions=r.sessions, evidence=_evidence(r.stats))

    return EvidencePublic(
        overall={k: _evidence(v) for k, v in table.overall.items()},
        by_author=[{"kind": k, "author": a, **_evidence(v).model_dump()} for (k, a), v in table.by_author.items()],
        questions=[row(r) for r in table.rows], unbanked=[row(r) for r in table.unbanked],
    )


@api_router.get("/bank/export", response_class=PlainTextResponse)
async def api_export(db: Db, include_retired: bool = True) -> PlainTextResponse:
    """The bank as a YAML file (the format of question_bank/starter_bank.yaml)."""
    return PlainTextResponse(export_bank_text(db, include_retired=include_retired), media_type="application/yaml")


@api_router.post("/bank/import", response_model=ImportPublic,
                 responses={422: {"description": "the file has problems, each with its line; nothing was imported"}})
async def api_import(db: Db, text: Annotated[str, Body(media_type="application/yaml")]) -> Any:
    """Import a YAML bank file: questions are created or updated by key, all or nothing."""
    try:
        result = import_bank_text(db, text, source="upload")
    except BankFileError as exc:
        return file_invalid(exc)
    return ImportPublic(created=result.created, updated=result.updated, unchanged=result.unchanged)


@api_router.post("/bank/consult")
async def api_consult(data: ConsultIn, ctx: Ctx, db: Db) -> Any:
    """The agent's tool: a situation in, a few questions out (texts only)."""
    if data.session_id is not None:
        get_session(db, data.session_id)
    arguments = data.model_dump(exclude={"session_id"})
    try:
        return agent_tool.consult_bank(db, arguments, session_ref=data.session_id,
                                       embedder=await asyncio.to_thread(embedder_for, ctx))
    except agent_tool.ToolInputError as exc:
        return invalid({"body": str(exc)})


@api_router.get("/sessions/{session_id}/bank/suggestions", response_model=list[QuestionPublic])
async def api_suggestions(
    session_id: int, db: Db,
    trigger: Annotated[str | None, Query(description="default: the trigger the session is paused on")] = None,
    limit: Annotated[int, Query(ge=1, le=50)] = 5,
) -> Any:
    """The bank's ranking for this session's pause, with the reasons for each place."""
    from app.steering.bank import ranked_for_trigger

    session = get_session(db, session_id)
    if trigger is None:
        open_trigger = db.get(Trigger, session.open_trigger_id) if session.open_trigger_id else None
        trigger = open_trigger.kind if open_trigger is not None else "manual"
    if trigger not in PAUSE_TRIGGERS:
        return invalid({"trigger": f"must be one of {', '.join(PAUSE_TRIGGERS)}"})
    return [public(r.question, r.evidence, r.score, r.reasons) for r in ranked_for_trigger(db, session_id, trigger,
                                                                                           limit)]


@api_router.get("/sessions/{session_id}/auto-ask", response_model=AutoAskPublic)
async def api_auto_ask(session_id: int, db: Db) -> AutoAskPublic:
    get_session(db, session_id)
    return AutoAskPublic.of(session_id, get_policy(db, session_id))


@api_router.put("/sessions/{session_id}/auto-ask", response_model=AutoAskPublic)
async def api_set_auto_ask(session_id: int, data: AutoAskIn, ctx: Ctx) -> AutoAskPublic:
    """The session's auto-ask policy: off, after_idle (the bank asks after `idle_seconds` without
    a person during a pause), or at_once. The bank's question is an intervention by `bank`."""
    with ctx.database.session() as db:
        get_session(db, session_id)
        policy = set_policy(db, session_id, AutoAskPolicy(data.mode, data.idle_seconds, data.max_in_a_row))
    ctx.manager.changed(session_id)  # a paused runner looks at the new policy now
    return AutoAskPublic.of(session_id, policy)


# -- pages ---------------------------------------------------------------------------------


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


def _recent_messages(db: Session) -> list[dict[str, Any]]:
    """Messages people sent in sessions whose text is not in the bank: the ones to promote."""
    banked = {normalize_text(q.text) for q in list_questions(db)}
    items = db.exec(select(Intervention).order_by(col(Intervention.id).desc()).limit(RECENT_MESSAGES * 4)).all()
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    for item in items:
        text = normalize_text(item.text)
        if item.author == "bank" or text in banked or text in seen:
            continue
        seen.add(text)
        out.append({"item": item})
        if len(out) >= RECENT_MESSAGES:
            break
    gains = {u.intervention_ref: u.gain for u in db.exec(select(BankUse).where(
        col(BankUse.intervention_ref).in_([str(o["item"].id) for o in out])))}
    for o in out:
        o["gain"] = gains.get(str(o["item"].id))
    return out


def _bank_page(request: Request, ctx: Any, *, notice: str = "", errors: dict[str, str] | None = None,
               form: dict[str, Any] | None = None, import_errors: list[str] | None = None,
               status_code: int = 200) -> HTMLResponse:
    f = _filters(request)
    embedder = embedder_for(ctx) if f["q"].strip() else None
    with ctx.database.session() as db:
        context = _results(db, f, embedder)
        table = evidence_table(db)
        recent = _recent_messages(db)
        active = list_questions(db, status=Status.ACTIVE.value)
    return page(request, "bank.html", status_code, **context, table=table, recent=recent, active=active,
                notice=notice or request.query_params.get("notice", "")[:300], errors=errors or {},
                form=form or {}, import_errors=import_errors or [])


@pages_router.get("/bank", response_class=HTMLResponse)
async def bank_page(request: Request, ctx: Ctx) -> HTMLResponse:
    return await asyncio.to_thread(_bank_page, request, ctx)


@pages_router.get("/bank/results", response_class=HTMLResponse)
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


@pages_router.post("/bank/questions", response_class=HTMLResponse)
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


@pages_router.get("/bank/questions/{question_id}", response_class=HTMLResponse)
async def question_page(request: Request, question_id: int, ctx: Ctx) -> HTMLResponse:
    with ctx.database.session() as db:
        q = _question(db, question_id)
        return _question_page(request, db, q)


def _question_page(request: Request, db: Session, q: BankQuestion, *, errors: dict[str, str] | None = None,
                   form: dict[str, Any] | None = None, status_code: int = 200) -> HTMLResponse:
    uses = db.exec(select(BankUse).where(BankUse.question_id == q.id).order_by(col(BankUse.id).desc())
                   .limit(200)).all()
    merged_into = get_question(db, q.merged_into_id) if q.merged_into_id else None
    merged_from = db.exec(select(BankQuestion).where(BankQuestion.merged_into_id == q.id)).all()
    stats = question_evidence(db).get(q.id or 0)
    fields = form or {**q.to_dict(), "archs": " ".join(q.archs), "problem": q.problem or ""}
    return page(request, "bank_question.html", status_code, q=q, uses=uses, stats=stats, form=fields,
                errors=errors or {}, merged_into=merged_into, merged_from=merged_from)


@pages_router.post("/bank/questions/{question_id}", response_class=HTMLResponse)
async def edit_from_form(request: Request, question_id: int, ctx: Ctx) -> Response:
    form = await request.form()
    draft = _form_draft(form)
    with ctx.database.session() as db:
        q = _question(db, question_id)
        draft.key = draft.key or q.key
        try:
            q = curation.edit_question(db, question_id, draft)
        except curation.BankValidationError as exc:
            return _question_page(request, db, q, errors=exc.errors, form=_draft_form(draft), status_code=422)
    return RedirectResponse(f"/bank/questions/{question_id}?{urlencode({'notice': 'Saved.'})}", status_code=303)


@pages_router.post("/bank/questions/{question_id}/status", response_class=HTMLResponse)
async def status_from_form(request: Request, question_id: int, ctx: Ctx) -> Response:
    form = await request.form()
    wanted = str(form.get("status", ""))
    with ctx.database.session() as db:
        q = _question(db, question_id)
        try:
            curation.set_status(db, question_id, wanted)
        except curation.BankValidationError as exc:
            return _back(f"'{q.key}' was not changed: {exc}")
    verb = "Retired" if wanted == Status.RETIRED.value else "Reactivated"
    return _back(f"{verb} '{q.key}'.")


@pages_router.post("/bank/merge", response_class=HTMLResponse)
async def merge_from_form(request: Request, ctx: Ctx) -> Response:
    form = await request.form()
    try:
        keep = int(str(form.get("keep_id", "")))
        dupes = [int(str(x)) for x in form.getlist("duplicate_ids")]
    except ValueError:
        return _back("Merge: choose the question to keep and at least one duplicate.", "#merge")
    with ctx.database.session() as db:
        for qid in (keep, *dupes):
            _question(db, qid)
        try:
            kept = curation.merge_questions(db, keep, dupes)
        except curation.BankValidationError as exc:
            return _back(f"Nothing merged: {exc}", "#merge")
    return _back(f"Merged {len([d for d in dupes if d != keep])} question(s) into '{kept.key}'.")


@pages_router.get("/bank/promote", response_class=HTMLResponse)
async def promote_form(request: Request, ctx: Ctx, session: int, message: int) -> HTMLResponse:
    """The form that puts a message sent in a session into the bank, prefilled from the message."""
    with ctx.database.session() as db:
        s = get_session(db, session)
        item = _intervention(db, session, message)
        trigger = db.get(Trigger, item.trigger_id) if item.trigger_id else None
        form = {"text": item.text, "kind": item.kind, "problem": s.problem, "archs": "",
                "triggers": [trigger.kind] if trigger is not None and trigger.kind in TRIGGERS else [],
                "layers": [], "hypothesis": "", "check": ""}
        return _promote_page(request, s, item, form)


def _promote_page(request: Request, s: SteeringSession, item: Intervention, form: dict[str, Any],
                  errors: dict[str, str] | None = None, status_code: int = 200) -> HTMLResponse:
    return page(request, "bank_promote.html", status_code, s=s, item=item, form=form, errors=errors or {})


@pages_router.post("/bank/promote", response_class=HTMLResponse)
async def promote_from_form(request: Request, ctx: Ctx) -> Response:
    form = await request.form()
    try:
        session_id, message_id = int(str(form.get("session_id", ""))), int(str(form.get("intervention_id", "")))
    except ValueError as exc:
        raise NotFound("the message to promote was not named") from exc
    draft = _form_draft(form)
    data = PromoteIn.model_construct(
        session_id=session_id, intervention_id=message_id, text=draft.text, kind=draft.kind,
        triggers=list(draft.triggers), layers=list(draft.layers), problem=draft.problem, archs=list(draft.archs),
        hypothesis=draft.hypothesis, check=draft.check, promoted_by=str(form.get("promoted_by", "")) or "person",
    )
    with ctx.database.session() as db:
        s = get_session(db, session_id)
        item = _intervention(db, session_id, message_id)
        if draft.kind not in (Kind.QUESTION.value, Kind.INFORMATION.value):
            return _promote_page(request, s, item, _draft_form(draft), {"kind": "must be question or information"},
                                 422)
        try:
            result = _promote(db, data)
        except curation.BankValidationError as exc:
            return _promote_page(request, s, item, _draft_form(draft), exc.errors, 422)
    q = result.question
    notice = f"Added '{q.key}' to the bank." if result.created else f"The bank already holds this as '{q.key}'."
    return RedirectResponse(f"/bank/questions/{q.id}?{urlencode({'notice': notice})}", status_code=303)


@pages_router.get("/bank/export.yaml")
async def export_file(db: Db) -> Response:
    return Response(export_bank_text(db), media_type="application/yaml",
                    headers={"Content-Disposition": 'attachment; filename="question-bank.yaml"'})


@pages_router.post("/bank/import", response_class=HTMLResponse)
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
    try:
        with ctx.database.session() as db:
            result = import_bank_text(db, text, source=source)
    except BankFileError as exc:
        return _bank_page(request, ctx, import_errors=[f"{source}:{i}" for i in exc.issues], status_code=422)
    return _back(f"Imported {source}: {result.summary()}.")


@pages_router.post("/sessions/{session_id}/auto-ask", response_class=HTMLResponse)
async def auto_ask_from_form(request: Request, session_id: int, ctx: Ctx) -> Response:
    form = await request.form()
    mode = str(form.get("mode", AutoAskMode.OFF.value))
    try:
        policy = AutoAskPolicy(mode, float(str(form.get("idle_seconds", "")) or 120),
                               int(str(form.get("max_in_a_row", "")) or 3))
    except ValueError as exc:
        raise Invalid(str(exc), "mode") from exc
    with ctx.database.session() as db:
        get_session(db, session_id)
        set_policy(db, session_id, policy)
    ctx.manager.changed(session_id)
    return RedirectResponse(f"/sessions/{session_id}", status_code=303)



@pages_router.get("/sessions/{session_id}/auto-ask", response_class=HTMLResponse)
async def auto_ask_fragment(request: Request, session_id: int, db: Db) -> HTMLResponse:
    """The auto-ask control of the session page (loaded into it by htmx)."""
    get_session(db, session_id)
    return page(request, "fragments/bank_auto_ask.html", session_id=session_id, policy=get_policy(db, session_id))

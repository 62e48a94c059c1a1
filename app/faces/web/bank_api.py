"""The question bank's JSON API (/api/bank/..., and per session /api/sessions/{id}/bank/...
and .../auto-ask). Routes only translate: validate (app/faces/web/bank_schemas.py), make one call
into question_bank or app/domain/steering/, answer."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Query, status
from fastapi.responses import JSONResponse, PlainTextResponse
from sqlmodel import Session

from app.domain.audit.evidence import silent_control
from app.domain.bank_actions import promote, set_auto_ask, suggestions
from app.domain.sessions import Invalid, NotFound, check_writable, get_session
from app.faces.web.bank_schemas import (
    AutoAskIn,
    AutoAskPublic,
    ConsultIn,
    ControlPublic,
    EvidencePublic,
    EvidenceRowPublic,
    ImportPublic,
    MergeIn,
    PromoteIn,
    PromotePublic,
    QuestionIn,
    QuestionPatch,
    QuestionPublic,
    evidence_of,
    public,
)
from app.faces.web.deps import Ctx, Db, Steer
from app.services.context import ServerContext
from question_bank import agent_tool, curation
from question_bank.auto_ask import AutoAskPolicy, get_policy
from question_bank.bank_file import LAYERS, TRIGGERS, BankFileError
from question_bank.evidence import evidence_table, question_evidence
from question_bank.models import BankQuestion, Status
from question_bank.search import search
from question_bank.semantic import Embedder, default_embedder
from question_bank.store import export_bank_text, get_question, import_bank_text

router = APIRouter(prefix="/api", tags=["bank"])


def invalid(errors: dict[str, str]) -> JSONResponse:
    detail = [{"loc": ["body", field], "msg": msg, "type": "value_error"} for field, msg in errors.items()]
    message = "; ".join(f"{field}: {msg}" for field, msg in errors.items())
    return JSONResponse({"detail": detail, "message": message}, status_code=422)


def file_invalid(exc: BankFileError) -> JSONResponse:
    detail = [{"loc": ["body", "line", i.line], "msg": i.message, "type": "value_error"} for i in exc.issues]
    return JSONResponse({"detail": detail, "message": str(exc)}, status_code=422)


def question_or_404(db: Session, question_id: int) -> BankQuestion:
    q = get_question(db, question_id)
    if q is None:
        raise NotFound(f"no bank question {question_id}")
    return q


def embedder_for(ctx: ServerContext) -> Embedder | None:
    return default_embedder(enabled=bool(ctx.settings.bank_semantic_search))


@router.get("/bank/questions", response_model=list[QuestionPublic])
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


@router.post("/bank/questions", response_model=QuestionPublic, status_code=status.HTTP_201_CREATED,
                 responses={422: {"description": "a field is invalid; nothing was written"}})
async def api_add(data: QuestionIn, db: Db) -> Any:
    try:
        return public(curation.add_question(db, data.draft()))
    except curation.BankValidationError as exc:
        return invalid(exc.errors)


@router.get("/bank/questions/{question_id}", response_model=QuestionPublic)
async def api_read(question_id: int, db: Db) -> QuestionPublic:
    q = question_or_404(db, question_id)
    return public(q, question_evidence(db).get(question_id))


@router.patch("/bank/questions/{question_id}", response_model=QuestionPublic,
                  responses={422: {"description": "a field is invalid; nothing was written"}})
async def api_edit(question_id: int, change: QuestionPatch, db: Db) -> Any:
    q = question_or_404(db, question_id)
    current = {k: v for k, v in q.to_dict().items() if k in QuestionIn.model_fields}
    merged = {**current, **change.model_dump(exclude_unset=True)}
    try:
        draft = curation.QuestionDraft(**{k: v for k, v in merged.items() if v is not None or k == "problem"})
        return public(curation.edit_question(db, question_id, draft), question_evidence(db).get(question_id))
    except curation.BankValidationError as exc:
        return invalid(exc.errors)
    except curation.NotFound as exc:
        raise NotFound(str(exc)) from exc


@router.post("/bank/questions/{question_id}/retire", response_model=QuestionPublic)
async def api_retire(question_id: int, db: Db) -> Any:
    question_or_404(db, question_id)
    return public(curation.retire_question(db, question_id), question_evidence(db).get(question_id))


@router.post("/bank/questions/{question_id}/activate", response_model=QuestionPublic,
                 responses={422: {"description": "a merged question cannot be reactivated"}})
async def api_activate(question_id: int, db: Db) -> Any:
    question_or_404(db, question_id)
    try:
        return public(curation.set_status(db, question_id, Status.ACTIVE.value),
                      question_evidence(db).get(question_id))
    except curation.BankValidationError as exc:
        return invalid(exc.errors)


@router.post("/bank/merge", response_model=QuestionPublic,
                 responses={422: {"description": "nothing to merge; nothing was written"}})
async def api_merge(data: MergeIn, db: Db) -> Any:
    """Fold duplicates into `keep_id`: it gains their triggers, layers and evidence; they retire."""
    for qid in (data.keep_id, *data.duplicate_ids):
        question_or_404(db, qid)
    try:
        kept = curation.merge_questions(db, data.keep_id, data.duplicate_ids)
    except curation.BankValidationError as exc:
        return invalid(exc.errors)
    return public(kept, question_evidence(db).get(data.keep_id))


@router.post("/bank/promote", response_model=PromotePublic, status_code=status.HTTP_201_CREATED,
                 responses={422: {"description": "a field is invalid; nothing was written"}})
async def api_promote(data: PromoteIn, db: Db) -> Any:
    """Put a message sent in a session into the bank; its earlier uses become the question's."""
    try:
        result = promote(db, data.session_id, data.intervention_id, data.draft(), data.promoted_by)
    except curation.BankValidationError as exc:
        return invalid(exc.errors)
    q = result.question
    return PromotePublic(question=public(q, question_evidence(db).get(q.id or 0)), created=result.created,
                         uses_linked=len(result.uses_linked))


@router.get("/bank/evidence", response_model=EvidencePublic)
async def api_evidence(db: Db) -> EvidencePublic:
    """Leader gain after each message over the next K evaluations: questions against information,
    overall, per author, per bank question, and for typed messages not in the bank; and the
    silent control (pauses resumed without a message, measured the same way)."""
    table = evidence_table(db)
    control = silent_control(db)

    def row(r: Any) -> EvidenceRowPublic:
        return EvidenceRowPublic(question_id=r.question_id, key=r.key, text=r.text, kind=r.kind, status=r.status,
                                 sessions=r.sessions, evidence=evidence_of(r.stats))

    return EvidencePublic(
        overall={k: evidence_of(v) for k, v in table.overall.items()},
        control=ControlPublic(sessions=control.sessions, evidence=evidence_of(control.stats)),
        by_author=[{"kind": k, "author": a, **evidence_of(v).model_dump()} for (k, a), v in table.by_author.items()],
        questions=[row(r) for r in table.rows], unbanked=[row(r) for r in table.unbanked],
    )


@router.get("/bank/export", response_class=PlainTextResponse)
async def api_export(db: Db, include_retired: bool = True) -> PlainTextResponse:
    """The bank as a YAML file (the format of question_bank/starter_bank.yaml)."""
    return PlainTextResponse(export_bank_text(db, include_retired=include_retired), media_type="application/yaml")


@router.post("/bank/import", response_model=ImportPublic,
                 responses={422: {"description": "the file has problems, each with its line; nothing was imported"}})
async def api_import(ctx: Ctx, text: Annotated[str, Body(media_type="application/yaml")]) -> Any:
    """Import a YAML bank file: questions are created or updated by key, all or nothing."""

    def store() -> Any:
        with ctx.database.session() as db:
            return import_bank_text(db, text, source="upload")

    try:
        result = await asyncio.to_thread(store)  # a large file must not hold up the event loop
    except BankFileError as exc:
        return file_invalid(exc)
    return ImportPublic(created=result.created, updated=result.updated, unchanged=result.unchanged)


@router.post("/bank/consult")
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


@router.get("/sessions/{session_id}/bank/suggestions", response_model=list[QuestionPublic])
async def api_suggestions(
    session_id: int, db: Db,
    trigger: Annotated[str | None, Query(description="default: the trigger the session is paused on")] = None,
    limit: Annotated[int, Query(ge=1, le=50)] = 5,
) -> Any:
    """The bank's ranking for this session's pause, with the reasons for each place."""
    try:
        ranked = suggestions(db, session_id, trigger, limit)
    except Invalid as exc:
        return invalid({exc.field or "body": str(exc)})
    return [public(r.question, r.evidence, r.score, r.reasons) for r in ranked]


@router.get("/sessions/{session_id}/auto-ask", response_model=AutoAskPublic)
async def api_auto_ask(session_id: int, db: Db) -> AutoAskPublic:
    get_session(db, session_id)
    return AutoAskPublic.of(session_id, get_policy(db, session_id))


@router.put("/sessions/{session_id}/auto-ask", response_model=AutoAskPublic)
async def api_set_auto_ask(session_id: int, data: AutoAskIn, steer: Steer) -> AutoAskPublic:
    """The session's auto-ask policy: off, after_idle (the bank asks after `idle_seconds` without
    a person during a pause), or at_once. The bank's question is an intervention by `bank`."""
    steer.read(lambda db: check_writable(get_session(db, session_id)))  # an imported session is a record
    policy = AutoAskPolicy(data.mode, data.idle_seconds, data.max_in_a_row)
    steer.act(session_id, lambda u: set_auto_ask(u, session_id, policy))  # a paused runner looks again
    return AutoAskPublic.of(session_id, policy)

"""Lessons (lessons/) on the JSON API: /api/lessons (search, read, a person's status, promote to a
bank question, export and import) and per session /api/sessions/{id}/lessons (those that fit,
and one sent as a message). Routes only translate: validate, make one call into lessons/ or
app/domain/lesson_actions.py, answer."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Query, Request, status
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from sqlmodel import Session

from app.domain.lesson_actions import (
    import_file,
    lesson_or_404,
    promote_lesson,
    send_lesson,
    session_lessons,
    words_of,
)
from app.domain.schemas import InputModel, InterventionPublic
from app.domain.sessions import get_session
from app.engine.pipeline import session_scenarios
from app.faces.web.bank_api import embedder_for, invalid
from app.faces.web.bank_schemas import QuestionPublic, public
from app.faces.web.deps import Ctx, Db, Steer
from app.faces.web.identity import author_of
from app.faces.web.lessons_views import check_drawable
from app.services.context import ServerContext
from lessons.models import Lesson, LessonError, Status
from lessons.search import Filters, LessonHit, search_lessons
from lessons.store import FORMATS, ApplyResult, export_lessons, list_lessons, set_status
from question_bank import curation
from question_bank.evidence import question_evidence

router = APIRouter(prefix="/api", tags=["lessons"])

STATUSES = tuple(s.value for s in Status)
SHOWN = (Status.PROPOSED.value, Status.ACTIVE.value)  # what a search shows unless asked otherwise
MEDIA = {"jsonl": "application/x-ndjson", "yaml": "application/yaml"}


class LessonPublic(BaseModel):
    """A lesson (lessons/models.py) with its action in words; from a search, also its place."""

    id: int
    key: str
    arch: str
    problem: str
    action_words: str
    situation: dict[str, Any]
    action: dict[str, Any]
    effect: dict[str, Any]
    ratio: float
    count: int
    helped: int
    confidence: float
    scope: dict[str, Any]
    evidence: list[dict[str, Any]]
    tags: list[str]
    text: str
    status: str
    status_by: str
    author: str
    created_at: str | None
    updated_at: str | None
    score: float | None = None
    fit: float | None = None
    why: list[str] = []


class LessonStatusIn(InputModel):
    model_config = ConfigDict(extra="forbid")

    status: Literal["proposed", "active", "retired"] = Field(
        description="a person's status sticks: the distiller never changes it back")


class LessonPromotePublic(BaseModel):
    lesson_id: int
    question: QuestionPublic
    created: bool


class LessonImportPublic(BaseModel):
    created: int
    updated: int
    unchanged: int


class LessonSendIn(InputModel):
    """A lesson sent to a session as a steering message ("Lesson #N: " and its words)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["information", "question"] = "information"
    mode: Literal["steer", "queue"] = "steer"
    resume: bool = Field(default=False, description="resume the session if it is paused")
    author: str | None = Field(default=None, min_length=1, max_length=80)


def lesson_public(lesson: Lesson, hit: LessonHit | None = None) -> LessonPublic:
    d = lesson.to_dict()
    d["tags"] = [str(t) for t in d.get("tags") or []]
    extra: dict[str, Any] = {}
    if hit is not None:
        extra = {"score": round(hit.score, 4), "fit": round(hit.fit, 4), "why": list(hit.why)}
    return LessonPublic(**d, action_words=words_of(lesson), **extra)


def lesson_error(exc: LessonError) -> JSONResponse:
    message = str(exc)
    return JSONResponse({"detail": message, "message": message}, status_code=400)


def statuses_of(status_: str | None) -> tuple[str, ...]:
    if status_ == "all":
        return STATUSES
    return (status_,) if status_ else SHOWN


async def ranked(ctx: ServerContext, db: Session, q: str, filters: Filters, limit: int) -> list[LessonHit]:
    """Search (lessons/search.py): by words (and meaning, where the embedding model is installed)."""
    embedder = await asyncio.to_thread(embedder_for, ctx) if q.strip() else None
    return search_lessons(list_lessons(db, None), q, filters=filters, embedder=embedder, limit=limit)


def scenario_categories(db: Session, session_id: int) -> list[str]:
    """The categories of the session's scenarios (hidden ones too: this is a person's view)."""
    return sorted({s.category for s in session_scenarios(get_session(db, session_id))})


@router.get("/lessons", response_model=list[LessonPublic])
async def api_list(
    ctx: Ctx, db: Db,
    q: Annotated[str, Query(max_length=500, description="words (and meaning, where installed)")] = "",
    arch: Annotated[str, Query(max_length=32, description="an architecture prefix: sm_90")] = "",
    problem: Annotated[str, Query(max_length=64)] = "",
    category: Annotated[str, Query(max_length=64, description="measured on this scenario category")] = "",
    layer: Annotated[str, Query(max_length=64, description="the kernel family's layer its action changes")] = "",
    knob: Annotated[str, Query(max_length=64, description="a knob its action changes")] = "",
    status_: Annotated[Literal["proposed", "active", "retired", "all"] | None,
                       Query(alias="status", description="default: proposed and active")] = None,
    min_confidence: Annotated[float, Query(ge=0, le=1)] = 0.0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[LessonPublic]:
    """Lessons, filtered by tags and ranked: without `q` by evidence (confidence, times seen,
    size of the effect); with it by relevance to the words first."""
    filters = Filters(arch=arch, problem=problem, category=category, layer=layer, knob=knob,
                      statuses=statuses_of(status_), min_confidence=min_confidence)
    return [lesson_public(h.lesson, h) for h in await ranked(ctx, db, q, filters, limit)]


@router.get("/lessons/export", response_class=Response,
            responses={200: {"content": {"application/x-ndjson": {}, "application/yaml": {}},
                             "description": "the lessons as a file"}})
async def api_export(
    db: Db, format_: Annotated[Literal["jsonl", "yaml"], Query(alias="format")] = "jsonl",
    status_: Annotated[Literal["proposed", "active", "retired", "all"],
                       Query(alias="status", description="default: every lesson")] = "all",
) -> Response:
    """Every lesson as a file to carry to another server (no ids, no timestamps): JSON Lines or
    YAML (lessons/store.py). `socratic lessons import` and POST /api/lessons/import read it."""
    text = export_lessons(db, format_, None if status_ == "all" else (status_,))
    return Response(text, media_type=MEDIA[format_],
                    headers={"Content-Disposition": f'attachment; filename="lessons.{format_}"'})


@router.post("/lessons/import", response_model=LessonImportPublic,
             responses={400: {"description": "the file is not a lessons file; nothing was imported"}})
async def api_import(
    ctx: Ctx, text: Annotated[str, Body(media_type="text/plain", description="the file's text")],
    format_: Annotated[Literal["jsonl", "yaml"], Query(alias="format")] = "jsonl",
) -> Any:
    """Import a lessons file, all or nothing: a known key takes the file's evidence beside its
    own, a new key becomes a lesson; a person's status or words in the file are kept."""
    try:
        result = await asyncio.to_thread(import_text, ctx, text, format_)
    except LessonError as exc:
        return lesson_error(exc)
    return LessonImportPublic(**result.to_dict())


def import_text(ctx: ServerContext, text: str, fmt: str) -> ApplyResult:
    """In a thread (a large file must not hold up the event loop); committed only if every
    lesson it touched draws on the pages (app/faces/web/lessons_views.py)."""
    if fmt not in FORMATS:
        raise LessonError(f"format must be one of {', '.join(FORMATS)}")
    with ctx.database.session() as db:
        result = import_file(db, text, fmt, check_drawable)
        db.commit()
    return result


@router.get("/lessons/{lesson_id}", response_model=LessonPublic)
async def api_read(lesson_id: int, db: Db) -> LessonPublic:
    return lesson_public(lesson_or_404(db, lesson_id))


@router.post("/lessons/{lesson_id}/status", response_model=LessonPublic)
async def api_status(lesson_id: int, data: LessonStatusIn, db: Db) -> LessonPublic:
    """Retire a lesson (never shown to a model, never revived by the distiller), activate or
    propose it again; a person's status sticks."""
    lesson_or_404(db, lesson_id)
    row = set_status(db, lesson_id, data.status)
    db.commit()
    return lesson_public(row)


@router.post("/lessons/{lesson_id}/promote", response_model=LessonPromotePublic,
             status_code=status.HTTP_201_CREATED,
             responses={200: {"model": LessonPromotePublic, "description": "promoted before: the same question"},
                        422: {"description": "the bank refused the question; nothing was written"}})
async def api_promote(lesson_id: int, db: Db) -> Any:
    """A bank question from the lesson: would its action pay off on this leader as it did before?"""
    try:
        done = promote_lesson(db, lesson_id)
    except curation.BankValidationError as exc:
        return invalid(exc.errors)
    q = done.question
    body = LessonPromotePublic(lesson_id=lesson_id, question=public(q, question_evidence(db).get(q.id or 0)),
                               created=done.created)
    return JSONResponse(body.model_dump(mode="json"), status_code=201 if done.created else 200)


@router.get("/sessions/{session_id}/lessons", response_model=list[LessonPublic])
async def api_session_lessons(
    session_id: int, ctx: Ctx, db: Db,
    q: Annotated[str, Query(max_length=500)] = "",
    limit: Annotated[int, Query(ge=1, le=50)] = 5,
) -> list[LessonPublic]:
    """The lessons that fit the session: its architecture (once an evaluation named the GPU), its
    problem and the categories of its scenarios; each with its evidence (the pause panel's)."""
    categories = scenario_categories(db, session_id)
    embedder = await asyncio.to_thread(embedder_for, ctx) if q.strip() else None
    hits = session_lessons(db, session_id, categories, query=q, limit=limit, embedder=embedder)
    return [lesson_public(h.lesson, h) for h in hits]


@router.post("/sessions/{session_id}/lessons/{lesson_id}/send", response_model=InterventionPublic,
             status_code=status.HTTP_201_CREATED, tags=["steering"])
async def api_send(request: Request, session_id: int, lesson_id: int, steer: Steer,
                   data: LessonSendIn | None = None) -> dict[str, Any]:
    """Send the lesson to the session as a message ("Lesson #N: " and its words), through the same
    send as any message: recorded as an intervention, delivered at the next tool boundary (steer)
    or when the agent's turn ends (queue). It resumes a paused session only with `resume`."""
    data = data or LessonSendIn()
    author = author_of(request, data.author)
    item = steer.act(session_id, lambda u: send_lesson(u, session_id, lesson_id, kind=data.kind, mode=data.mode,
                                                       author=author, resume=data.resume))
    return item.model_dump()

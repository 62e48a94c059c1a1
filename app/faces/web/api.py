"""The JSON API: everything the pages do, described by the OpenAPI document at /openapi.json.
Routes only translate: validate (schemas), make one domain call through `Steer` (one unit of
work, then the runner is woken; app/faces/web/deps.py), and read the result back."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, status
from sqlmodel import Session

from app.domain import profiles
from app.domain.schemas import (
    ActionIn,
    AgentPublic,
    CandidateDetail,
    CandidatePublic,
    EventPublic,
    InterventionCreate,
    InterventionPublic,
    SessionCreate,
    SessionPublic,
    SessionUpdate,
    TriggerPublic,
)
from app.domain.sessions import (
    NotFound,
    candidate_by_number,
    candidates_of,
    evaluations_of,
    get_session,
    interventions_of,
    list_sessions,
    public_candidate,
    public_session,
    send_message,
    triggers_of,
    update_session,
)
from app.domain.sessions import (
    pause as pause_session,
)
from app.domain.sessions import (
    resume as resume_session,
)
from app.domain.sessions import (
    start as start_run,
)
from app.domain.sessions import (
    stop as stop_session,
)
from app.domain.steering.suggestions import suggest
from app.engine.agents.registry import available_agents
from app.engine.agents.scripts import BUILTIN_SCRIPTS
from app.engine.new_session import open_session, refuse_unavailable
from app.faces.web.deps import Ctx, Db, Steer
from app.faces.web.identity import author_of
from app.store.events import events_after
from app.store.input_limits import INT64_MAX

router = APIRouter(prefix="/api")


@router.get("/health", tags=["server"])
async def health(ctx: Ctx) -> dict[str, Any]:
    return {"ok": True, "gpu_holders": ctx.devices.holders, "gpu": ctx.devices.gpu_state}


@router.get("/agents", response_model=list[AgentPublic], tags=["agents"])
async def agents() -> list[AgentPublic]:
    scripts = [{"name": s.name, "candidate_kind": s.candidate_kind, "description": s.description}
               for s in BUILTIN_SCRIPTS.values()]
    return [AgentPublic(name=a.name, description=a.description, scripts=scripts if a.name == "scripted" else [])
            for a in available_agents()]


@router.get("/sessions", response_model=list[SessionPublic], tags=["sessions"])
async def sessions_index(db: Db) -> list[dict[str, Any]]:
    return [public_session(db, s) for s in list_sessions(db)]


@router.post("/sessions", response_model=SessionPublic, status_code=status.HTTP_201_CREATED, tags=["sessions"])
async def create(spec: SessionCreate, ctx: Ctx, steer: Steer) -> dict[str, Any]:
    refuse_unavailable(spec, ctx.settings)
    session = steer.act(None, lambda u: open_session(u, spec, ctx.settings))
    return steer.read(lambda db: _session(db, session.id or 0))


@router.get("/sessions/{session_id}", response_model=SessionPublic, tags=["sessions"])
async def read(session_id: int, db: Db) -> dict[str, Any]:
    return _session(db, session_id)


@router.patch("/sessions/{session_id}", response_model=SessionPublic, tags=["sessions"])
async def update(session_id: int, change: SessionUpdate, steer: Steer) -> dict[str, Any]:
    return steer.act_and_read(session_id, lambda u: update_session(u, session_id, change),
                              lambda db: _session(db, session_id))


@router.post("/sessions/{session_id}/start", response_model=SessionPublic, tags=["steering"])
async def start_session(session_id: int, steer: Steer) -> dict[str, Any]:
    return steer.act_and_read(session_id, lambda u: start_run(u, session_id), lambda db: _session(db, session_id))


@router.post("/sessions/{session_id}/pause", response_model=TriggerPublic, tags=["steering"])
async def pause(session_id: int, steer: Steer, action: ActionIn | None = None) -> dict[str, Any]:
    action = action or ActionIn()
    trigger = steer.act(session_id, lambda u: pause_session(u, session_id, action.author, action.reason))
    return steer.read(lambda db: _trigger(trigger, db))


@router.post("/sessions/{session_id}/resume", response_model=SessionPublic, tags=["steering"])
async def resume(session_id: int, steer: Steer, action: ActionIn | None = None) -> dict[str, Any]:
    author = (action or ActionIn()).author
    return steer.act_and_read(session_id, lambda u: resume_session(u, session_id, author),
                              lambda db: _session(db, session_id))


@router.post("/sessions/{session_id}/stop", response_model=SessionPublic, tags=["steering"])
async def stop(session_id: int, steer: Steer, action: ActionIn | None = None) -> dict[str, Any]:
    action = action or ActionIn()
    return steer.act_and_read(session_id, lambda u: stop_session(u, session_id, action.author, action.reason),
                              lambda db: _session(db, session_id))


@router.post("/sessions/{session_id}/interventions", response_model=InterventionPublic,
             status_code=status.HTTP_201_CREATED, tags=["steering"])
async def intervene(request: Request, session_id: int, msg: InterventionCreate, steer: Steer) -> dict[str, Any]:
    """Send a question or information: `steer` delivers it at the next tool boundary, `queue`
    when the agent's turn ends. With `resume` (default) a paused session resumes. `author`: who
    sends it (default: the name set with POST /name, else "person")."""
    msg = msg.model_copy(update={"author": author_of(request, msg.author)})
    return steer.act(session_id, lambda u: send_message(u, session_id, msg)).model_dump()


@router.get("/sessions/{session_id}/interventions", response_model=list[InterventionPublic], tags=["steering"])
async def interventions(session_id: int, db: Db) -> list[dict[str, Any]]:
    get_session(db, session_id)
    return [i.model_dump() for i in interventions_of(db, session_id)]


@router.get("/sessions/{session_id}/triggers", response_model=list[TriggerPublic], tags=["steering"])
async def triggers(session_id: int, db: Db) -> list[dict[str, Any]]:
    get_session(db, session_id)
    return [_trigger(t, db) for t in triggers_of(db, session_id)]


@router.get("/sessions/{session_id}/events", response_model=list[EventPublic], tags=["trace"])
async def events(session_id: int, db: Db, after: Annotated[int, Query(ge=0, le=INT64_MAX)] = 0,
                 limit: Annotated[int, Query(ge=1, le=5000)] = 1000) -> list[dict[str, Any]]:
    """The session's trace, oldest first, from the event after `after` (a sequence number)."""
    get_session(db, session_id)
    return [e.model_dump() for e in events_after(db, session_id, after, limit)]


@router.get("/sessions/{session_id}/candidates", response_model=list[CandidatePublic], tags=["candidates"])
async def candidates(session_id: int, db: Db) -> list[dict[str, Any]]:
    get_session(db, session_id)
    return [public_candidate(db, c) for c in candidates_of(db, session_id)]


@router.get("/sessions/{session_id}/candidates/{number}", response_model=CandidateDetail, tags=["candidates"])
async def candidate(session_id: int, number: int, db: Db) -> dict[str, Any]:
    c = candidate_by_number(db, session_id, number)
    return {**public_candidate(db, c), "source": c.source,
            "evaluations": [e.model_dump() for e in evaluations_of(db, c.id or 0)]}


@router.get("/sessions/{session_id}/candidates/{number}/profile", tags=["candidates"])
async def candidate_profile(session_id: int, number: int, ctx: Ctx) -> dict[str, Any]:
    """What bounds the candidate (harness/profile.py), from its suite evaluation: computed once per
    evaluation (one candidate, one GPU) and kept (app/domain/profiles.py); every scenario, hidden
    ones included, as a person's view. 404 while it has no evaluation, or one whose report the
    harness did not write (an imported trace's)."""
    with ctx.unit() as u:
        c = candidate_by_number(u.db, session_id, number)
        found = profiles.candidate_profile(u.db, c)
    if found is None:
        raise NotFound(f"candidate #{number} of session {session_id} has no suite evaluation the harness "
                       "can profile (not evaluated yet, or an imported report it cannot read)")
    return {"session_id": session_id, "number": number, **found.to_dict()}


def _session(db: Session, session_id: int) -> dict[str, Any]:
    return public_session(db, get_session(db, session_id))


def _trigger(t: Any, db: Session | None = None) -> dict[str, Any]:
    suggestions = suggest(t.kind, t.evidence, session_id=t.session_id, db=db)
    return {**t.model_dump(), "suggestions": [s.__dict__ for s in suggestions]}


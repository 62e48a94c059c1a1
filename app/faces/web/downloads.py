"""A candidate in one click: its source as a file, with its knob record (a family kernel) and
its suite report beside it. Candidate sources are untrusted text: served as attachments with a
plain-text type (never rendered), under a name the server makes up."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from app.domain.sessions import NotFound, candidate_by_number, latest_evaluation
from app.faces.web.deps import Db
from app.store.models import PYTHON_CPU

router = APIRouter(prefix="/api", tags=["candidates"])


def _attachment(body: str, name: str, media_type: str) -> Response:
    return Response(body, media_type=media_type, headers={"Content-Disposition": f'attachment; filename="{name}"'})


def file_stem(session_id: int, number: int) -> str:
    return f"session-{session_id}-candidate-{number}"


@router.get("/sessions/{session_id}/candidates/{number}/source", summary="Download a candidate's source")
def candidate_source(session_id: int, number: int, db: Db) -> Response:
    """The kernel as the agent submitted it: a `.cu` file (a python-cpu candidate's target as text)."""
    c = candidate_by_number(db, session_id, number)
    suffix = ".txt" if c.kind == PYTHON_CPU else ".cu"
    return _attachment(c.source, file_stem(session_id, number) + suffix, "text/plain; charset=utf-8")


@router.get("/sessions/{session_id}/candidates/{number}/knobs", summary="Download a family kernel's knob record")
def candidate_knobs(session_id: int, number: int, db: Db) -> Response:
    """The knob setting a kernel of the family records in its header (kernels/attention/family),
    as JSON; 404 for a kernel that is not one of the family's."""
    from kernels.attention.family.render import recorded_knobs

    c = candidate_by_number(db, session_id, number)
    knobs = recorded_knobs(c.source)
    if knobs is None:
        raise NotFound(f"candidate #{number} records no knob setting: it is not a kernel of the family")
    return _attachment(json.dumps(knobs, indent=1, sort_keys=True) + "\n",
                       file_stem(session_id, number) + ".knobs.json", "application/json")


@router.get("/sessions/{session_id}/candidates/{number}/report", summary="Download a candidate's suite report")
def candidate_report(session_id: int, number: int, db: Db) -> Response:
    """The harness's report of the candidate's suite evaluation (every scenario, hidden ones
    included: this is the person's view, never the agent's)."""
    c = candidate_by_number(db, session_id, number)
    suite = latest_evaluation(db, c.id or 0, "suite")
    if suite is None:
        raise NotFound(f"candidate #{number} has no suite evaluation yet")
    report: Any = suite.report
    return _attachment(json.dumps(report, indent=1, allow_nan=True) + "\n",
                       file_stem(session_id, number) + ".report.json", "application/json")

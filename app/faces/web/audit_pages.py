"""The audit pages of a session (overview, timeline, lineage, diff, candidate heatmap), the
trace download and upload, and the audit summary as JSON. Routes only translate: each loads
the session's record and hands it to the domain functions of this package. Sync handlers:
FastAPI runs them in its thread pool, so a long trace never blocks the event loop."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.domain.audit import trace_io
from app.domain.audit.compare import LeaderStats, leader_stats
from app.domain.audit.heatmap import candidate_heatmap
from app.domain.audit.lineage import build_lineage, kernel_diff, parse_ref
from app.domain.audit.ratios import retime_words
from app.domain.audit.record import AuditRecord, load_record
from app.domain.audit.summary import audit_summary
from app.domain.audit.timeline import FILTER_KINDS, counts_by_kind, filter_timeline, timeline
from app.domain.campaigns.trace import campaign_trace_limit, import_campaign, is_campaign_trace
from app.domain.sessions import Invalid, NotFound, stored_report
from app.faces.web import render
from app.faces.web.audit_charts import overview_context
from app.faces.web.deps import get_ctx
from app.faces.web.page_check import campaign_pages, session_pages

router = APIRouter(include_in_schema=False)
api_router = APIRouter(prefix="/api", tags=["audit"])
TIMELINE_PAGE = 500  # events per timeline page


def _record(request: Request, session_id: int, reports: bool = False) -> AuditRecord:
    """The session's record; with the harness reports only for views that draw scenarios."""
    with get_ctx(request).database.session() as db:
        return load_record(db, session_id, reports=reports)


def _page(request: Request, name: str, record: AuditRecord, tab: str, status_code: int = 200,
          **context: Any) -> HTMLResponse:
    return render.TEMPLATES.TemplateResponse(
        request, name, {"record": record, "s": record.session, "tab": tab, **context}, status_code=status_code)


def _leader_stats(request: Request, record: AuditRecord) -> LeaderStats | None:
    """The leader's report against the baseline and each peer (one report read, not all)."""
    leader = record.leader
    evaluation = record.suite_evaluation(leader) if leader is not None else None
    if evaluation is None:
        return None
    with get_ctx(request).database.session() as db:
        report = stored_report(db, evaluation.id or 0)
    return leader_stats(report) if report is not None else None


@router.get("/sessions/{session_id}/audit", response_class=HTMLResponse)
def audit_overview(request: Request, session_id: int) -> HTMLResponse:
    record = _record(request, session_id)
    return _page(request, "audit/overview.html", record, "overview",
                 **overview_context(record, _leader_stats(request, record)))


@router.get("/sessions/{session_id}/audit/timeline", response_class=HTMLResponse)
def audit_timeline(request: Request, session_id: int, kind: list[str] = Query(default=[]),  # noqa: B008
                   q: str = "", candidate: str = "", page: int = Query(1, ge=1)) -> HTMLResponse:
    record = _record(request, session_id)
    entries = timeline(record)
    number = int(candidate.lstrip("#")) if candidate.strip().lstrip("#").isdigit() else None
    shown = filter_timeline(entries, kind, q, number)
    pages = max(1, -(-len(shown) // TIMELINE_PAGE))
    page = min(page, pages)
    window = shown[(page - 1) * TIMELINE_PAGE: page * TIMELINE_PAGE]
    return _page(request, "audit/timeline.html", record, "timeline", entries=window, total=len(entries),
                 matched=len(shown), counts=counts_by_kind(entries), filter_kinds=FILTER_KINDS,
                 selected=set(kind), q=q, candidate=number, page=page, pages=pages,
                 query_base=_query(kind, q, number))


def _query(kinds: list[str], q: str, candidate: int | None) -> str:
    from urllib.parse import urlencode

    params: list[tuple[str, str]] = [("kind", k) for k in kinds]
    if q:
        params.append(("q", q))
    if candidate is not None:
        params.append(("candidate", str(candidate)))
    return urlencode(params)


@router.get("/sessions/{session_id}/audit/lineage", response_class=HTMLResponse)
def audit_lineage(request: Request, session_id: int) -> HTMLResponse:
    record = _record(request, session_id)
    return _page(request, "audit/lineage.html", record, "lineage", lineage=build_lineage(record))


@router.get("/sessions/{session_id}/audit/diff", response_class=HTMLResponse)
def audit_diff(request: Request, session_id: int, a: str = "baseline", b: str = "", view: str = "unified",
               full: bool = False) -> HTMLResponse:
    record = _record(request, session_id)
    if not b:
        b = str(record.leader.number) if record.leader else (str(record.candidates[-1].number)
                                                              if record.candidates else "baseline")
    try:
        ref_a, ref_b = parse_ref(a), parse_ref(b)
    except ValueError as exc:
        raise Invalid(f"compare 'baseline' or a candidate number, not {a!r} / {b!r}") from exc
    diff = kernel_diff(record, ref_a, ref_b, full=full)
    status = 404 if diff.missing.startswith("this session has no") else 200
    return _page(request, "audit/diff.html", record, "lineage", diff=diff, status_code=status,
                 split=diff.split if view == "split" else None, view=view, full=full)


@router.get("/sessions/{session_id}/audit/candidates/{number}", response_class=HTMLResponse)
def audit_candidate(request: Request, session_id: int, number: int) -> HTMLResponse:
    record = _record(request, session_id, reports=True)
    c = record.candidate(number)
    if c is None:
        raise NotFound(f"session {session_id} has no candidate #{number}")
    parent = record.parent_of(c)
    entries = filter_timeline(timeline(record), candidate=number)
    retimes = [e for e in record.evaluations if e.candidate_id == c.id and e.purpose == "retime"]
    return _page(request, "audit/candidate.html", record, "lineage", c=c, parent=parent,
                 heatmap=candidate_heatmap(record, c), entries=entries,
                 retime=retime_words(retimes[-1] if retimes else None))


@router.get("/sessions/{session_id}/audit/trace.jsonl")
def audit_download(request: Request, session_id: int) -> Response:
    record = _record(request, session_id, reports=True)
    body = "".join(trace_io.export_lines(record))
    name = f"socratic-session-{record.trace_id('session', session_id)}.jsonl"
    return Response(body, media_type="application/x-ndjson",
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})


@router.get("/traces/import", response_class=HTMLResponse)
def import_form(request: Request) -> HTMLResponse:
    return render.TEMPLATES.TemplateResponse(request, "audit/import.html", {"error": ""})


@router.post("/traces/import", response_class=HTMLResponse)
async def import_upload(request: Request) -> Response:
    """A session trace becomes a read-only session; a campaign trace (format "socratic-campaign",
    app/domain/campaigns/trace.py) a read-only campaign with its member sessions."""
    form = await request.form()
    upload = form.get("trace")
    if upload is None or isinstance(upload, str):
        return _import_error(request, "choose a trace file (.jsonl) to import")
    limit = get_ctx(request).settings.trace_max_bytes
    data = await upload.read(limit + 1)
    try:  # decompressing a large trace must not hold up the event loop either
        trace_io.check_size(len(data), limit)
        # a campaign's members may decompress to more (docs/campaigns.md); a session's is checked below
        text = await asyncio.to_thread(trace_io.trace_text, data, campaign_trace_limit(limit))
        campaign = is_campaign_trace(text)
        if not campaign:
            trace_io.check_size(len(text.encode("utf-8")), limit)
    except trace_io.TraceTooLarge as exc:
        return _import_error(request, str(exc), 413)
    except trace_io.TraceFormatError as exc:
        return _import_error(request, str(exc))
    database = get_ctx(request).database
    name = (upload.filename or "")[:200]

    def store() -> str:
        with database.session() as db:
            if campaign:
                imported = import_campaign(db, text, name, session_pages, campaign_pages)
                db.commit()
                return f"/campaigns/{imported.id or 0}"
            session = trace_io.import_trace_once(db, text, name, session_pages)
            db.commit()
            return f"/sessions/{session.id or 0}/audit"

    try:
        where = await asyncio.to_thread(store)  # a large trace must not hold up the event loop
    except trace_io.TraceAlreadyImported as exc:
        return _import_error(request, str(exc), 409)
    except trace_io.TraceFormatError as exc:
        return _import_error(request, str(exc))
    return RedirectResponse(where, status_code=303)


def _import_error(request: Request, message: str, status: int = 422) -> HTMLResponse:
    return render.TEMPLATES.TemplateResponse(request, "audit/import.html", {"error": message}, status_code=status)


@api_router.get("/sessions/{session_id}/audit", summary="Audit summary of a session")
def audit_api(request: Request, session_id: int) -> dict[str, Any]:
    """Churn, the gain credited to each intervention, cost, and the lineage as JSON."""
    return audit_summary(_record(request, session_id))

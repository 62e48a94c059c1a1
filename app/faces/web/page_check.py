"""What an import must show before it is kept: every page of an imported session (its panels
and chart, the audit's overview with its charts, timeline, lineage, each candidate) and of an
imported campaign (its page, live view and board), drawn in the import's own transaction and
within PAGE_CHECK_S. A file that breaks a page or takes too long to draw is refused whole."""

from __future__ import annotations

import time

from sqlmodel import Session

from app.domain.audit.heatmap import candidate_heatmap
from app.domain.audit.lineage import build_lineage
from app.domain.audit.record import load_record
from app.domain.audit.timeline import timeline
from app.domain.audit.trace_io import TraceFormatError
from app.domain.campaigns import board
from app.domain.campaigns.views import campaign_view
from app.domain.sessions import session_view
from app.faces.web import render
from app.faces.web.audit_charts import overview_context
from app.faces.web.campaign_tree import tree_layout
from app.store.campaign_models import Campaign
from app.store.models import SteeringSession

PAGE_CHECK_S = 10.0  # every page of one import together; a real trace of 2,000 events draws in well under 1 s


class _Clock:
    def __init__(self, what: str) -> None:
        self.what = what
        self.started = time.monotonic()

    def check(self) -> None:
        if time.monotonic() - self.started > PAGE_CHECK_S:
            raise TraceFormatError(f"{self.what}'s pages take more than {PAGE_CHECK_S:g} s to draw; "
                                   "nothing was imported")


def session_pages(db: Session, session: SteeringSession) -> None:
    """Draw every page of an imported session (raises TraceFormatError, or what a page raised)."""
    clock = _Clock(f"session {session.title!r}")
    sid = session.id or 0
    view = session_view(db, sid)
    render.render("fragments/panels.html", **render.panel_context(db, view), oob=True)
    clock.check()
    record = load_record(db, sid, reports=True)
    context = {"record": record, "s": record.session, "request": None}
    render.render("audit/overview.html", **context, tab="overview", **overview_context(record, None))
    clock.check()
    timeline(record)
    build_lineage(record)
    clock.check()
    for c in record.candidates:
        candidate_heatmap(record, c)
        clock.check()


def campaign_pages(db: Session, campaign: Campaign) -> None:
    """Draw an imported campaign's page, live view and board."""
    clock = _Clock(f"campaign {campaign.title!r}")
    view = campaign_view(db, campaign.id or 0)
    tree = tree_layout(view.tree)
    render.render("campaign.html", v=view, tree=tree, request=None)
    render.render("fragments/campaign_live.html", v=view, tree=tree, request=None)
    view.to_dict()
    [board.entry_dict(e) for e in board.read(db, campaign)]
    clock.check()

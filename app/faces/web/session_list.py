"""The dashboard's session list: a campaign's member sessions grouped under their campaign
(collapsible: open while a member runs, waits or a filter is set), filters by status, agent
and text, and two orders (newest first, fastest leader first). The page's form works without
script (GET /); htmx swaps only the list (GET /session-list) and keeps the URL the page's own."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sqlmodel import Session, col, select

from app.domain.sessions import LeaderBasis, count_rows, leader_basis, list_sessions
from app.domain.steering import goal as goals
from app.faces.web import render
from app.faces.web.deps import Db
from app.store.campaign_models import Campaign, CampaignMember
from app.store.models import Candidate, Intervention, SteeringSession

router = APIRouter(include_in_schema=False)

# Status filters: a session's status, and two that people look for that are not one.
STATUS_FILTERS: dict[str, str] = {
    "running": "running", "waiting": "waiting for a GPU", "paused": "paused (needs a question)",
    "created": "created", "interrupted": "interrupted", "done": "done", "stopped": "stopped", "failed": "failed",
    "imported": "imported (read-only)",
}
SORTS: dict[str, str] = {"newest": "newest first", "leader": "fastest leader first"}
LIVE = ("created", "running", "paused", "interrupted")  # a campaign with such a member opens by itself
MAX_QUERY = 200


@dataclass(frozen=True)
class ListFilters:
    status: str = ""
    agent: str = ""
    q: str = ""
    sort: str = "newest"

    @property
    def active(self) -> bool:
        return bool(self.status or self.agent or self.q)

    def query(self) -> str:
        """The filters as the dashboard's query string ("" for the defaults)."""
        pairs = [(k, v) for k, v in (("status", self.status), ("agent", self.agent), ("q", self.q)) if v]
        if self.sort != "newest":
            pairs.append(("sort", self.sort))
        return urlencode(pairs)


def filters_of(params: Mapping[str, str]) -> ListFilters:
    """The list's filters from a query string; anything unknown is no filter."""
    status = params.get("status", "")
    sort = params.get("sort", "newest")
    return ListFilters(status=status if status in STATUS_FILTERS else "", agent=params.get("agent", "")[:80].strip(),
                       q=params.get("q", "")[:MAX_QUERY].strip(), sort=sort if sort in SORTS else "newest")


@dataclass
class SessionRow:
    session: SteeringSession
    goal: str
    candidates: int
    interventions: int
    basis: LeaderBasis | None
    member: str = ""  # the member's name in its campaign ("agent 1 (tiling, seed 0)")


@dataclass
class CampaignGroup:
    campaign: Campaign
    members: list[SessionRow] = field(default_factory=list)
    total: int = 0      # members before filtering
    open: bool = False
    statuses: dict[str, int] = field(default_factory=dict)  # status filter -> members, before filtering
    imported: bool = False

    @property
    def best(self) -> float | None:
        speeds = [m.session.leader_speedup for m in self.members if m.session.leader_speedup is not None]
        return max(speeds) if speeds else None

    @property
    def newest(self) -> int:
        return max((m.session.id or 0) for m in self.members)


def status_key(s: SteeringSession) -> str:
    """The status filter a session falls under (the dashboard's badge says the same)."""
    if s.status == "running" and s.detail.startswith("waiting"):
        return "waiting"
    return s.status


def _matches(s: SteeringSession, f: ListFilters, words: str) -> bool:
    if f.status == "imported":
        if not s.read_only:
            return False
    elif f.status and status_key(s) != f.status:
        return False
    if f.agent and s.agent != f.agent:
        return False
    return not f.q or f.q.casefold() in words.casefold()


def _row(db: Session, s: SteeringSession, member: str = "") -> SessionRow:
    return SessionRow(s, goals.describe(s.goal_metric, s.goal_target), count_rows(db, Candidate, s.id or 0),
                      count_rows(db, Intervention, s.id or 0), leader_basis(db, s), member)


def _speed(s: SteeringSession) -> float:
    return s.leader_speedup if s.leader_speedup is not None else float("-inf")


def _newest(item: SessionRow | CampaignGroup) -> int:
    return -(item.newest if isinstance(item, CampaignGroup) else item.session.id or 0)


def _by_leader(item: SessionRow | CampaignGroup) -> tuple[float, int]:
    """Fastest leader first (a campaign by its best member); no leader last; then newest."""
    if isinstance(item, CampaignGroup):
        best = item.best
        return -(best if best is not None else float("-inf")), _newest(item)
    return -_speed(item.session), _newest(item)


def session_list(db: Session, f: ListFilters) -> dict[str, Any]:
    """The list as the template draws it: `items` (a SessionRow, or a CampaignGroup of them),
    `total` sessions in all, `shown` after the filters, the `agents` to filter by."""
    sessions = list(list_sessions(db))
    members = {m.session_id: m for m in db.exec(select(CampaignMember)).all()}
    campaigns = {c.id: c for c in db.exec(select(Campaign).order_by(col(Campaign.id))).all()}
    groups: dict[int, CampaignGroup] = {}
    items: list[SessionRow | CampaignGroup] = []
    shown = 0
    for s in sessions:
        m = members.get(s.id or 0)
        c = campaigns.get(m.campaign_id) if m is not None else None
        words = f"#{s.id} {s.title} {s.agent}" + (f" {c.title} {m.name}" if c is not None and m is not None else "")
        if c is not None:
            group = groups.get(c.id or 0)
            if group is None:
                group = groups[c.id or 0] = CampaignGroup(c)
            group.total += 1
            key = status_key(s)
            group.statuses[key] = group.statuses.get(key, 0) + 1
            group.imported = group.imported or s.read_only
        if not _matches(s, f, words):
            continue
        shown += 1
        if c is None or m is None:
            items.append(_row(db, s))
        else:
            groups[c.id or 0].members.append(_row(db, s, m.name))
    for group in groups.values():
        if group.members:
            group.open = f.active or any(r.session.status in LIVE and not r.session.read_only for r in group.members)
            items.append(group)
    if f.sort == "leader":
        for group in groups.values():
            group.members.sort(key=lambda r: (-_speed(r.session), -(r.session.id or 0)))
        items.sort(key=_by_leader)
    else:
        items.sort(key=_newest)
    return {"items": items, "total": len(sessions), "shown": shown, "filters": f,
            "list_agents": sorted({s.agent for s in sessions}), "status_filters": STATUS_FILTERS, "sorts": SORTS}


@router.get("/session-list", response_class=HTMLResponse)
async def session_list_fragment(request: Request, db: Db) -> HTMLResponse:
    """The list alone, swapped in by htmx as the person filters; the address bar shows the
    dashboard's own URL for the same list."""
    f = filters_of(request.query_params)
    response = render.TEMPLATES.TemplateResponse(request, "fragments/session_list.html", session_list(db, f))
    response.headers["HX-Push-Url"] = "/" + (f"?{f.query()}" if f.query() else "")
    return response

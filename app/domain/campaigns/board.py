"""The board: each judged candidate of a campaign member posts a conclusion (what changed, its
effect per scenario category, its verdicts); agents read it through the `read_board` tool
(app/engine/tools/board.py), filtered by layer, category and outcome, within the campaign's memory
bound (the last K entries, or all of them)."""

from __future__ import annotations

import difflib
import hashlib
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from typing import Any

from sqlmodel import Session, col, select

from app.domain.sessions import suite_report
from app.store.campaign_models import DISCARDED, LEADER, BoardEntry, Campaign, CampaignMember
from app.store.models import DONE, EVALUATED, EVALUATING, FAILED, QUEUED, STOPPED, Candidate, SteeringSession
from harness.report import EvaluationReport
from harness.stats import geomean

try:
    from kernels.attention.family import KNOB_LAYER
except ImportError:  # pragma: no cover - the family ships with the repository
    KNOB_LAYER = {}

OUTCOMES = ("leader", "backup", "discarded", "improved", "worse")
EFFECT_NOISE = 0.01  # an effect within 1% of no change is no effect


_SETTINGS: OrderedDict[str, dict[str, Any] | None] = OrderedDict()  # sha256 of a source -> its setting
_SETTINGS_LOCK = threading.Lock()
_SETTINGS_MAX = 4096


def _setting(text: str) -> dict[str, Any] | None:
    from kernels.attention.family import KnobError, knobs_from_mapping, render
    from kernels.attention.family.render import recorded_knobs

    knobs = recorded_knobs(text)
    if knobs is None:
        return None
    try:
        exact = render(knobs_from_mapping(knobs)) == text
    except (KnobError, TypeError, ValueError):
        return None
    return knobs if exact else None


def knobs_of_source(text: str) -> dict[str, Any] | None:
    """The knob setting of a family kernel: the one its header records, and only when the
    family renders exactly this file from it (a kernel edited by hand, or any other text, has
    none: its header is the author's claim, not what runs). Remembered per source hash: the
    board reads each kernel's setting on every read and every post."""
    key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    with _SETTINGS_LOCK:
        if key in _SETTINGS:
            _SETTINGS.move_to_end(key)
            found = _SETTINGS[key]
            return dict(found) if found is not None else None
    found = _setting(text)
    with _SETTINGS_LOCK:
        _SETTINGS[key] = found
        while len(_SETTINGS) > _SETTINGS_MAX:
            _SETTINGS.popitem(last=False)
    return dict(found) if found is not None else None


def describe_change(source: str, parent_source: str | None, title: str) -> tuple[str, dict[str, Any], str]:
    """(layer, changed knobs, one-line summary) of a candidate against its parent."""
    mine = knobs_of_source(source)
    theirs = knobs_of_source(parent_source) if parent_source is not None else None
    if mine is not None and theirs is not None:
        changed = {k: v for k, v in mine.items() if theirs.get(k) != v}
        layers = sorted({KNOB_LAYER.get(k, "") for k in changed} - {""})
        summary = ", ".join(f"{k}={v}" for k, v in changed.items()) or "no knob changed"
        return (layers[0] if len(layers) == 1 else ",".join(layers)), changed, summary
    if parent_source is None:
        return "", {}, title or "a first kernel"
    diff = [d for d in difflib.unified_diff(parent_source.splitlines(), source.splitlines(), lineterm="", n=0)
            if d[:1] in "+-" and not d.startswith(("+++", "---"))]
    added = sum(1 for d in diff if d.startswith("+"))
    return "", {}, f"{title or 'edit'}: +{added}/-{len(diff) - added} lines"


def category_speedups(report: EvaluationReport, visible_only: bool = False) -> dict[str, float]:
    """Geomean speedup over the baseline per scenario category (passed scenarios only). The
    board uses visible scenarios only: agents read it, and never learn about hidden ones."""
    speedups: dict[str, list[float]] = defaultdict(list)
    for r in report.scenarios:
        if visible_only and r.hidden:
            continue
        if r.speedup_vs_baseline is not None:  # a failed scenario has none
            speedups[r.category].append(r.speedup_vs_baseline)
    return {cat: round(geomean(v) or 0.0, 4) for cat, v in sorted(speedups.items())}


def post(db: Session, campaign: Campaign, member: CampaignMember, cand: Candidate,
         report: EvaluationReport | None, campaign_verdict: str, parent: Candidate | None = None,
         note: str = "") -> BoardEntry:
    """The candidate's conclusion on the board (the caller's transaction). The change is read
    against `parent` (evolution: the parent the judge chose), else the candidate's own parent;
    `note` follows the summary (what the page and the agents read)."""
    if parent is None and cand.parent_id:
        parent = db.get(Candidate, cand.parent_id)
    if parent is None and cand.number > 1:  # built on a kernel of another member (its setting)
        parent = nearest_measured(db, campaign, cand)
    layer, knobs, summary = describe_change(cand.source, parent.source if parent else None, cand.title)
    if note:
        summary = f"{summary[:300 - len(note) - 3]} ({note})"
    effects: dict[str, float] = {}
    if report is not None and campaign_verdict != DISCARDED:
        mine = category_speedups(report, visible_only=True)
        if parent is None:  # a first kernel: its own speedups over the baseline
            effects = {cat: round(v, 4) for cat, v in mine.items()}
        else:  # over its parent, in the categories both were measured in (none: no effect known)
            p = suite_report(db, parent.id)
            base = category_speedups(p, visible_only=True) if p is not None else {}
            effects = {cat: round(v / base[cat], 4) for cat, v in mine.items() if base.get(cat)}
    entry = BoardEntry(campaign_id=campaign.id or 0, session_id=cand.session_id, candidate_id=cand.id,
                       candidate_number=cand.number, author=member.name, layer=layer, knobs=knobs,
                       summary=summary[:300], effects=effects, verdict=cand.verdict or "",
                       campaign_verdict=campaign_verdict, speedup=cand.speedup)
    db.add(entry)
    db.flush()
    return entry


def nearest_measured(db: Session, campaign: Campaign, cand: Candidate, most: int = 3,
                     before_entry: int | None = None,
                     setting_of: Callable[[str], dict[str, Any] | None] | None = None) -> Candidate | None:
    """For a family kernel submitted without a parent in its own session (an agent that builds
    on another member's kernel): the campaign's earlier correct kernel (judged leader or
    backup) whose setting differs from it in the fewest knobs (1 to `most`; among equals the
    latest, which is what an agent following the board builds on), so that its board entry
    says what changed and its effects are read against that kernel. None for other kernels.
    `before_entry`: only entries posted before that board entry (the page reads back which
    kernel an entry's effects were measured against); `setting_of`: how a source's setting is
    read (default `knobs_of_source`; the page falls back to the header's record for a trace
    whose kernels today's family renders differently)."""
    setting_of = setting_of or knobs_of_source
    mine = setting_of(cand.source)
    if mine is None:
        return None
    query = (select(Candidate).join(BoardEntry, col(BoardEntry.candidate_id) == col(Candidate.id))
             .where(BoardEntry.campaign_id == campaign.id, BoardEntry.campaign_verdict != DISCARDED,
                    Candidate.id != cand.id))
    if before_entry is not None:
        query = query.where(col(BoardEntry.id) < before_entry)
    rows = db.exec(query).all()
    best: tuple[tuple[int, float, int], Candidate] | None = None
    for other in rows:
        theirs = setting_of(other.source)
        if theirs is None:
            continue
        distance = sum(1 for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        # the latest: by when it was submitted, then by id (an imported campaign's ids follow its members)
        key = (distance, -other.created_at.timestamp(), -(other.id or 0))
        if 1 <= distance <= most and (best is None or key < best[0]):
            best = (key, other)
    return best[1] if best else None


def visible_entries(db: Session, campaign: Campaign) -> list[BoardEntry]:
    """The board as agents see it: the newest `memory_k` entries (all when unbounded), oldest first."""
    stmt = select(BoardEntry).where(BoardEntry.campaign_id == campaign.id).order_by(col(BoardEntry.id).desc())
    if campaign.memory_k is not None:
        stmt = stmt.limit(campaign.memory_k)
    return list(reversed(db.exec(stmt).all()))


def matches(e: BoardEntry, layer: str | None, category: str | None, outcome: str | None) -> bool:
    if layer and layer not in e.layer.split(","):
        return False
    if category and category not in e.effects:
        return False
    if outcome in (LEADER, "backup", DISCARDED) and e.campaign_verdict != outcome:
        return False
    gains = [e.effects[category]] if category else list(e.effects.values())
    if outcome == "improved" and not any(g > 1 + EFFECT_NOISE for g in gains):
        return False
    return not (outcome == "worse" and not (gains and all(g < 1 - EFFECT_NOISE for g in gains)))


def read(db: Session, campaign: Campaign, *, layer: str | None = None, category: str | None = None,
         outcome: str | None = None) -> list[BoardEntry]:
    return [e for e in visible_entries(db, campaign) if matches(e, layer, category, outcome)]


def for_agents(db: Session, entries: list[BoardEntry]) -> list[dict[str, Any]]:
    """The entries as an agent reads them: `speedup` is the candidate's geomean over the visible
    scenarios only (agents never learn about hidden ones), and `setting` the whole knob setting
    it measured where it is a family kernel (None otherwise), so that no agent measures again
    what another one has measured."""
    ids = [e.candidate_id for e in entries if e.candidate_id is not None]
    cands = {c.id: c for c in db.exec(select(Candidate).where(col(Candidate.id).in_(ids)))} if ids else {}
    out = []
    for e in entries:
        cand = cands.get(e.candidate_id)
        out.append({**entry_dict(e), "speedup": cand.visible_speedup if cand is not None else None,
                    "setting": knobs_of_source(cand.source) if cand is not None else None})
    return out


def in_flight(db: Session, campaign: Campaign, exclude_session: int | None = None) -> list[dict[str, Any]]:
    """The members' kernels submitted and not yet on the board (queued, evaluating, or evaluated
    and still being judged), oldest first, of members whose session has not ended (a failed
    session's queued kernel never runs): who, which number, its title (the agent's own words),
    and the setting where it is a family kernel. Agents read it with the board so that two of
    them do not measure one kernel at the same time; it says nothing about how fast a kernel is."""
    live = select(SteeringSession.id).where(col(SteeringSession.status).not_in((DONE, STOPPED, FAILED)))
    members = {m.session_id: m.name for m in db.exec(select(CampaignMember).where(
        CampaignMember.campaign_id == campaign.id, col(CampaignMember.session_id).in_(live)))}
    members.pop(exclude_session or -1, None)
    if not members:
        return []
    judged = select(BoardEntry.candidate_id).where(BoardEntry.campaign_id == campaign.id,
                                                   col(BoardEntry.candidate_id).is_not(None))
    waiting = db.exec(select(Candidate).where(col(Candidate.session_id).in_(list(members)),
                                              col(Candidate.status).in_((QUEUED, EVALUATING, EVALUATED)),
                                              col(Candidate.id).not_in(judged))
                      .order_by(col(Candidate.id))).all()
    return [{"session_id": c.session_id, "candidate": c.number, "author": members[c.session_id],
             "title": c.title[:120], "setting": knobs_of_source(c.source)} for c in waiting]


def entry_dict(e: BoardEntry) -> dict[str, Any]:
    return {"id": e.id, "session_id": e.session_id, "candidate": e.candidate_number, "author": e.author,
            "layer": e.layer, "knobs": e.knobs, "summary": e.summary, "effects": e.effects,
            "verdict": e.verdict, "campaign_verdict": e.campaign_verdict, "speedup": e.speedup}


def entry_line(e: BoardEntry) -> str:
    effects = ", ".join(f"{cat} x{v:.2f}" for cat, v in e.effects.items()) or "no effect measured"
    where = f"[{e.layer}] " if e.layer else ""
    return f"{e.author} #{e.candidate_number}: {where}{e.summary} -> {e.campaign_verdict} ({effects})"


def member_of(db: Session, session_id: int) -> tuple[Campaign, CampaignMember] | None:
    member = db.exec(select(CampaignMember).where(CampaignMember.session_id == session_id)).first()
    if member is None:
        return None
    campaign = db.get(Campaign, member.campaign_id)
    return (campaign, member) if campaign is not None else None

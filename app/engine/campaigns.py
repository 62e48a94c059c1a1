"""Validate and create a campaign: every member's session is validated first (nothing is
written when one is invalid), then the campaign, its sessions and members are created together
and, unless told otherwise, started."""

from __future__ import annotations

from app.domain.campaigns.schemas import CampaignCreate, MemberIn
from app.domain.schemas import SessionCreate
from app.domain.sessions import start
from app.engine.new_session import create_session, default_agent, validate_new_session
from app.settings import Settings
from app.store.campaign_models import BOARD_MODE, EVOLUTION_MODE, Campaign, CampaignMember
from app.store.events import Unit

try:
    from kernels.attention.family import LAYERS
except ImportError:  # pragma: no cover - the family ships with the repository
    LAYERS = ("tiling", "memory", "math", "scheduling", "masking")


def generated_members(spec: CampaignCreate) -> list[MemberIn]:
    """`agents: N`: offline agents with different first layers (strategies) and seeds."""
    out = []
    for i in range(spec.agents or 0):
        layer = LAYERS[i % len(LAYERS)]
        config = {"seed": spec.seed + i, "focus": layer, "policy": spec.policy, "board": spec.mode == BOARD_MODE}
        out.append(MemberIn(agent="offline", agent_config=config, strategy=layer,
                            title=f"agent {i + 1} ({layer}, seed {spec.seed + i})"))
    return out


def member_specs(spec: CampaignCreate, settings: Settings) -> list[tuple[MemberIn, SessionCreate]]:
    members = spec.members if spec.members is not None else generated_members(spec)
    out = []
    for i, m in enumerate(members):
        agent = m.agent or default_agent(m.agent_config, settings)
        config = dict(m.agent_config)
        if agent == "offline" and spec.mode == BOARD_MODE:
            config.setdefault("board", True)  # a campaign's offline agents read the board
        if agent == "offline":
            # campaigns (their plateau switches, evolution's parents) were built and measured on the
            # greedy agent; a member takes the measured one when its config names it
            config.setdefault("strategy", "greedy")
        strategy = m.strategy or str(config.get("focus", ""))
        title = m.title or f"agent {i + 1} ({agent}{', ' + strategy if strategy else ''})"
        s = SessionCreate(title=f"{spec.title}: {title}"[:200], agent=agent, agent_config=config,
                          candidate_kind=spec.candidate_kind, baseline=spec.baseline, suite_filter=spec.suite_filter,
                          scenarios=spec.scenarios, goal_metric=spec.goal_metric, goal_target=spec.goal_target,
                          thresholds=spec.thresholds, start=spec.start)
        validate_new_session(s, settings)  # raises Invalid before anything is written
        out.append((m.model_copy(update={"title": title, "strategy": strategy}), s))
    return out


def create_campaign(unit: Unit, spec: CampaignCreate, settings: Settings) -> Campaign:
    members = member_specs(spec, settings)
    campaign = Campaign(title=spec.title, mode=spec.mode, budget_evaluations=spec.budget_evaluations,
                        goal_metric=spec.goal_metric, goal_target=spec.goal_target, memory_k=spec.memory_k,
                        plateau_window=spec.plateau_window, islands=spec.islands,
                        min_leader_gain=spec.thresholds.min_leader_gain)
    unit.db.add(campaign)
    unit.db.flush()
    for i, (m, s) in enumerate(members):
        session = create_session(unit, s, settings)
        island = m.island if m.island is not None else (i % spec.islands if spec.mode == EVOLUTION_MODE else 0)
        unit.db.add(CampaignMember(campaign_id=campaign.id or 0, session_id=session.id or 0, name=m.title or "",
                                   strategy=m.strategy, island=island, tried=[m.strategy] if m.strategy else []))
        unit.record(session, "campaign_member", {"campaign_id": campaign.id, "name": m.title,
                                                 "strategy": m.strategy, "island": island})
        if s.start:
            start(unit, session.id or 0)
    unit.db.flush()
    return campaign

"""A campaign and its members, read from the database (every campaign module finds them here)."""

from __future__ import annotations

from sqlmodel import Session, col, select

from app.domain.sessions import NotFound
from app.store.campaign_models import Campaign, CampaignMember


def get_campaign(db: Session, campaign_id: int) -> Campaign:
    c = db.get(Campaign, campaign_id)
    if c is None:
        raise NotFound(f"there is no campaign {campaign_id}")
    return c


def members_of(db: Session, campaign_id: int) -> list[CampaignMember]:
    return list(db.exec(select(CampaignMember).where(CampaignMember.campaign_id == campaign_id)
                        .order_by(col(CampaignMember.id))).all())


def member_session_ids(db: Session, campaign_id: int) -> list[int]:
    return [m.session_id for m in members_of(db, campaign_id)]

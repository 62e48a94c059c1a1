"""Profiles: evaluation_profile keeps the profile of a suite evaluation (harness/profile.py),
computed once from its report (app/domain/profiles.py).

Revision ID: 0005_profiles
Revises: 0004_campaigns
Create Date: 2026-12-06 02:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString, UTCDateTime

revision: str = '0005_profiles'
down_revision: str | Sequence[str] | None = '0004_campaigns'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('evaluation_profile',
    sa.Column('evaluation_id', sa.Integer(), nullable=False),
    sa.Column('schema_version', sa.Integer(), nullable=False),
    sa.Column('device', AutoString(), nullable=False),
    sa.Column('profile', sa.JSON(), nullable=False),
    sa.Column('created_at', UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['evaluation_id'], ['evaluation.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('evaluation_id')
    )


def downgrade() -> None:
    op.drop_table('evaluation_profile')

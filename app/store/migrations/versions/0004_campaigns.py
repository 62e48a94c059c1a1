"""Campaigns: campaign, campaign_member (one session each), board_entry (a judged candidate's
conclusion) and mutation (evolution mode's children and their questions).
Revision ID: 0004_campaigns
Revises: 0003_bank
Create Date: 2026-12-01 03:39:33.362492
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = '0004_campaigns'
down_revision: str | Sequence[str] | None = '0003_bank'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:

    op.create_table('campaign',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('title', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('mode', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('problem', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('budget_evaluations', sa.Integer(), nullable=True),
    sa.Column('goal_metric', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('goal_target', sa.Float(), nullable=True),
    sa.Column('memory_k', sa.Integer(), nullable=True),
    sa.Column('plateau_window', sa.Integer(), nullable=False),
    sa.Column('min_leader_gain', sa.Float(), nullable=False),
    sa.Column('islands', sa.Integer(), nullable=False),
    sa.Column('leader_session_id', sa.Integer(), nullable=True),
    sa.Column('leader_candidate_id', sa.Integer(), nullable=True),
    sa.Column('leader_speedup', sa.Float(), nullable=True),
    sa.Column('evaluations', sa.Integer(), nullable=False),
    sa.Column('last_leader_at', sa.Integer(), nullable=False),
    sa.Column('status', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('detail', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('read_only', sa.Boolean(), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('campaign_member',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('campaign_id', sa.Integer(), nullable=False),
    sa.Column('session_id', sa.Integer(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('strategy', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('island', sa.Integer(), nullable=False),
    sa.Column('tried', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['campaign_id'], ['campaign.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['session_id'], ['session.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('session_id')
    )
    with op.batch_alter_table('campaign_member', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_campaign_member_campaign_id'), ['campaign_id'], unique=False)

    op.create_table('board_entry',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('campaign_id', sa.Integer(), nullable=False),
    sa.Column('session_id', sa.Integer(), nullable=False),
    sa.Column('candidate_id', sa.Integer(), nullable=True),
    sa.Column('candidate_number', sa.Integer(), nullable=False),
    sa.Column('author', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('layer', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('knobs', sa.JSON(), nullable=False),
    sa.Column('summary', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('effects', sa.JSON(), nullable=False),
    sa.Column('verdict', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('campaign_verdict', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('speedup', sa.Float(), nullable=True),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['campaign_id'], ['campaign.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['candidate_id'], ['candidate.id'], ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['session_id'], ['session.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('board_entry', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_board_entry_campaign_id'), ['campaign_id'], unique=False)

    op.create_table('mutation',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('campaign_id', sa.Integer(), nullable=False),
    sa.Column('session_id', sa.Integer(), nullable=False),
    sa.Column('island', sa.Integer(), nullable=False),
    sa.Column('parent_candidate_id', sa.Integer(), nullable=True),
    sa.Column('parent_verdict', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('question_id', sa.Integer(), nullable=True),
    sa.Column('question', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('reasons', sa.JSON(), nullable=False),
    sa.Column('intervention_id', sa.Integer(), nullable=True),
    sa.Column('child_candidate_id', sa.Integer(), nullable=True),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['campaign_id'], ['campaign.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['child_candidate_id'], ['candidate.id'], ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['intervention_id'], ['intervention.id'], ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['parent_candidate_id'], ['candidate.id'], ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['session_id'], ['session.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('mutation', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_mutation_campaign_id'), ['campaign_id'], unique=False)




def downgrade() -> None:

    with op.batch_alter_table('mutation', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_mutation_campaign_id'))

    op.drop_table('mutation')
    with op.batch_alter_table('board_entry', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_board_entry_campaign_id'))

    op.drop_table('board_entry')
    with op.batch_alter_table('campaign_member', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_campaign_member_campaign_id'))

    op.drop_table('campaign_member')
    op.drop_table('campaign')


"""Initial schema of the server: sessions, events, candidates, evaluations, triggers, interventions.

Revision ID: 0001_app
Revises: (none)
Create Date: 2026-11-29 21:41:28.103429
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0001_app'
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('session',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('title', sa.String(), nullable=False),
    sa.Column('problem', sa.String(), nullable=False),
    sa.Column('agent', sa.String(), nullable=False),
    sa.Column('agent_config', sa.JSON(), nullable=False),
    sa.Column('candidate_kind', sa.String(), nullable=False),
    sa.Column('baseline', sa.String(), nullable=False),
    sa.Column('suite_filter', sa.String(), nullable=True),
    sa.Column('scenarios', sa.JSON(), nullable=True),
    sa.Column('goal_metric', sa.String(), nullable=False),
    sa.Column('goal_target', sa.Float(), nullable=True),
    sa.Column('thresholds', sa.JSON(), nullable=False),
    sa.Column('budget_steps', sa.Integer(), nullable=True),
    sa.Column('budget_tokens', sa.Integer(), nullable=True),
    sa.Column('budget_cost_usd', sa.Float(), nullable=True),
    sa.Column('budget_seconds', sa.Float(), nullable=True),
    sa.Column('used_steps', sa.Integer(), nullable=False),
    sa.Column('used_tokens', sa.Integer(), nullable=False),
    sa.Column('used_cost_usd', sa.Float(), nullable=False),
    sa.Column('used_seconds', sa.Float(), nullable=False),
    sa.Column('status', sa.String(), nullable=False),
    sa.Column('detail', sa.String(), nullable=False),
    sa.Column('leader_id', sa.Integer(), nullable=True),
    sa.Column('leader_speedup', sa.Float(), nullable=True),
    sa.Column('evaluations', sa.Integer(), nullable=False),
    sa.Column('window_start', sa.Integer(), nullable=False),
    sa.Column('open_trigger_id', sa.Integer(), nullable=True),
    sa.Column('last_seq', sa.Integer(), nullable=False),
    sa.Column('runner_state', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('candidate',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('session_id', sa.Integer(), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('author', sa.String(), nullable=False),
    sa.Column('kind', sa.String(), nullable=False),
    sa.Column('title', sa.String(), nullable=False),
    sa.Column('notes', sa.String(), nullable=False),
    sa.Column('source', sa.String(), nullable=False),
    sa.Column('parent_id', sa.Integer(), nullable=True),
    sa.Column('status', sa.String(), nullable=False),
    sa.Column('verdict', sa.String(), nullable=True),
    sa.Column('verdict_reason', sa.String(), nullable=False),
    sa.Column('speedup', sa.Float(), nullable=True),
    sa.Column('visible_speedup', sa.Float(), nullable=True),
    sa.Column('passed', sa.Integer(), nullable=False),
    sa.Column('scenario_count', sa.Integer(), nullable=False),
    sa.Column('flags', sa.JSON(), nullable=False),
    sa.Column('retime_speedup', sa.Float(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['parent_id'], ['candidate.id'], ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['session_id'], ['session.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('session_id', 'number', name='uq_candidate_session_number')
    )
    with op.batch_alter_table('candidate', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_candidate_session_id'), ['session_id'], unique=False)

    op.create_table('event',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('session_id', sa.Integer(), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(), nullable=False),
    sa.Column('payload', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['session_id'], ['session.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('session_id', 'seq', name='uq_event_session_seq')
    )
    with op.batch_alter_table('event', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_event_session_id'), ['session_id'], unique=False)

    op.create_table('trigger',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('session_id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(), nullable=False),
    sa.Column('summary', sa.String(), nullable=False),
    sa.Column('evidence', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('resolved_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('resolution', sa.String(), nullable=False),
    sa.ForeignKeyConstraint(['session_id'], ['session.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('trigger', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_trigger_session_id'), ['session_id'], unique=False)

    op.create_table('evaluation',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('candidate_id', sa.Integer(), nullable=False),
    sa.Column('purpose', sa.String(), nullable=False),
    sa.Column('against', sa.String(), nullable=False),
    sa.Column('report', sa.JSON(), nullable=False),
    sa.Column('device', sa.String(), nullable=False),
    sa.Column('seconds', sa.Float(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['candidate_id'], ['candidate.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('evaluation', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_evaluation_candidate_id'), ['candidate_id'], unique=False)

    op.create_table('intervention',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('session_id', sa.Integer(), nullable=False),
    sa.Column('author', sa.String(), nullable=False),
    sa.Column('kind', sa.String(), nullable=False),
    sa.Column('mode', sa.String(), nullable=False),
    sa.Column('text', sa.String(), nullable=False),
    sa.Column('trigger_id', sa.Integer(), nullable=True),
    sa.Column('status', sa.String(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('delivered_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('leader_at_delivery', sa.Float(), nullable=True),
    sa.Column('evaluations_after', sa.Integer(), nullable=False),
    sa.Column('credited_gain', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['session_id'], ['session.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['trigger_id'], ['trigger.id'], ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('intervention', schema=None) as batch_op:
        batch_op.create_index('ix_intervention_session_status', ['session_id', 'status'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('intervention', schema=None) as batch_op:
        batch_op.drop_index('ix_intervention_session_status')

    op.drop_table('intervention')
    with op.batch_alter_table('evaluation', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_evaluation_candidate_id'))

    op.drop_table('evaluation')
    with op.batch_alter_table('trigger', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_trigger_session_id'))

    op.drop_table('trigger')
    with op.batch_alter_table('event', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_event_session_id'))

    op.drop_table('event')
    with op.batch_alter_table('candidate', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_candidate_session_id'))

    op.drop_table('candidate')
    op.drop_table('session')

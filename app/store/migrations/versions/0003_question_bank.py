"""The question bank's tables (question_bank/models.py): questions, their uses in sessions with
the credited leader gain, per-session auto-ask policies, and the bank's own facts (whether the
starter bank was loaded).

Revision ID: 0003_bank
Revises: 0002_audit
Create Date: 2026-11-29 22:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0003_bank'
down_revision: str | Sequence[str] | None = '0002_audit'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('bank_auto_ask',
    sa.Column('session_ref', sa.String(length=64), nullable=False),
    sa.Column('mode', sa.String(length=16), nullable=False),
    sa.Column('idle_seconds', sa.Float(), nullable=False),
    sa.Column('max_in_a_row', sa.Integer(), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('session_ref')
    )
    op.create_table('bank_meta',
    sa.Column('key', sa.String(length=64), nullable=False),
    sa.Column('value', sa.String(), nullable=False),
    sa.PrimaryKeyConstraint('key')
    )
    op.create_table('bank_question',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('key', sa.String(length=64), nullable=False),
    sa.Column('text', sa.String(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('triggers', sa.JSON(), nullable=False),
    sa.Column('layers', sa.JSON(), nullable=False),
    sa.Column('problem', sa.String(length=64), nullable=True),
    sa.Column('archs', sa.JSON(), nullable=False),
    sa.Column('hypothesis', sa.String(), nullable=False),
    sa.Column('check', sa.String(), nullable=False),
    sa.Column('provenance', sa.String(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('merged_into_id', sa.Integer(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['merged_into_id'], ['bank_question.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('bank_question', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_bank_question_key'), ['key'], unique=True)
        batch_op.create_index(batch_op.f('ix_bank_question_status'), ['status'], unique=False)

    op.create_table('bank_use',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('question_id', sa.Integer(), nullable=True),
    sa.Column('session_ref', sa.String(length=64), nullable=False),
    sa.Column('intervention_ref', sa.String(length=64), nullable=True),
    sa.Column('text', sa.String(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('author', sa.String(length=16), nullable=False),
    sa.Column('trigger', sa.String(length=32), nullable=True),
    sa.Column('layers', sa.JSON(), nullable=False),
    sa.Column('used_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('eval_index', sa.Integer(), nullable=False),
    sa.Column('window', sa.Integer(), nullable=False),
    sa.Column('leader_before', sa.Float(), nullable=False),
    sa.Column('evaluations_seen', sa.Integer(), nullable=False),
    sa.Column('leader_after', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['question_id'], ['bank_question.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('bank_use', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_bank_use_intervention_ref'), ['intervention_ref'], unique=False)
        batch_op.create_index(batch_op.f('ix_bank_use_question_id'), ['question_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_bank_use_session_ref'), ['session_ref'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('bank_use', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_bank_use_session_ref'))
        batch_op.drop_index(batch_op.f('ix_bank_use_question_id'))
        batch_op.drop_index(batch_op.f('ix_bank_use_intervention_ref'))

    op.drop_table('bank_use')
    with op.batch_alter_table('bank_question', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_bank_question_status'))
        batch_op.drop_index(batch_op.f('ix_bank_question_key'))

    op.drop_table('bank_question')
    op.drop_table('bank_meta')
    op.drop_table('bank_auto_ask')

"""Lessons: the `lesson` table (lessons/models.py), one row per situation and action with its
effect, evidence, scope and status.

Revision ID: 0006_lessons
Revises: 0005_profiles
Create Date: 2026-12-06 05:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString, UTCDateTime

revision: str = '0006_lessons'
down_revision: str | Sequence[str] | None = '0005_profiles'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('lesson',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('key', AutoString(length=255), nullable=False),
    sa.Column('arch', AutoString(length=32), nullable=False),
    sa.Column('problem', AutoString(length=64), nullable=False),
    sa.Column('situation', sa.JSON(), nullable=False),
    sa.Column('action', sa.JSON(), nullable=False),
    sa.Column('effect', sa.JSON(), nullable=False),
    sa.Column('ratio', sa.Float(), nullable=False),
    sa.Column('count', sa.Integer(), nullable=False),
    sa.Column('helped', sa.Integer(), nullable=False),
    sa.Column('confidence', sa.Float(), nullable=False),
    sa.Column('scope', sa.JSON(), nullable=False),
    sa.Column('evidence', sa.JSON(), nullable=False),
    sa.Column('tags', sa.JSON(), nullable=False),
    sa.Column('text', AutoString(), nullable=False),
    sa.Column('status', AutoString(length=16), nullable=False),
    sa.Column('status_by', AutoString(length=16), nullable=False),
    sa.Column('author', AutoString(length=16), nullable=False),
    sa.Column('created_at', UTCDateTime(), nullable=False),
    sa.Column('updated_at', UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('lesson', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_lesson_arch'), ['arch'], unique=False)
        batch_op.create_index(batch_op.f('ix_lesson_key'), ['key'], unique=True)
        batch_op.create_index(batch_op.f('ix_lesson_problem'), ['problem'], unique=False)
        batch_op.create_index(batch_op.f('ix_lesson_status'), ['status'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('lesson', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_lesson_status'))
        batch_op.drop_index(batch_op.f('ix_lesson_problem'))
        batch_op.drop_index(batch_op.f('ix_lesson_key'))
        batch_op.drop_index(batch_op.f('ix_lesson_arch'))
    op.drop_table('lesson')

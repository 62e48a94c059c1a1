"""Trace audit: sessions can be read-only (imported from a trace file), and the trace_import
table records where each imported session came from and the ids of its trace.

Revision ID: 0002_audit
Revises: 0001_app
Create Date: 2026-11-29 22:05:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString, UTCDateTime

revision: str = '0002_audit'
down_revision: str | Sequence[str] | None = '0001_app'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN, not a batch copy of the table: the batch mode drops and re-creates
    # `session`, and with foreign keys on (app/store/database.py) dropping it cascades to every event and
    # candidate of every session.
    op.add_column('session', sa.Column('read_only', sa.Boolean(), nullable=False, server_default=sa.false()))

    op.create_table('trace_import',
    sa.Column('session_id', sa.Integer(), nullable=False),
    sa.Column('format_version', sa.Integer(), nullable=False),
    sa.Column('file_name', AutoString(), nullable=False),
    sa.Column('file_sha256', AutoString(), nullable=False),
    sa.Column('imported_at', UTCDateTime(), nullable=False),
    sa.Column('baseline_source', AutoString(), nullable=True),
    sa.Column('ids', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['session_id'], ['session.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('session_id')
    )


def downgrade() -> None:
    op.drop_table('trace_import')
    # SQLite >= 3.35 drops a column in place (no table copy, no cascade; see upgrade()).
    op.execute('ALTER TABLE session DROP COLUMN read_only')

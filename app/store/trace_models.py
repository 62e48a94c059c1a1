"""Where an imported session came from. An imported session keeps the ids of its trace in its
event payloads (they are stored verbatim); this row maps those ids to the rows the import
created, so that links resolve and a re-export writes the file it came from byte for byte."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, Column
from sqlmodel import Field, SQLModel

from app.store.models import utcnow

# The kinds of rows whose ids a trace carries (events are identified by their seq).
ID_KINDS = ("session", "candidate", "evaluation", "trigger", "intervention")


class TraceImport(SQLModel, table=True):
    """One imported trace: the read-only session it became and the id map of its rows."""

    __tablename__ = "trace_import"

    session_id: int = Field(primary_key=True, foreign_key="session.id", ondelete="CASCADE")
    format_version: int
    file_name: str = ""
    file_sha256: str = ""
    imported_at: dt.datetime = Field(default_factory=utcnow)
    # The baseline kernel as the trace carries it (the exporting machine's file), or None.
    baseline_source: str | None = None
    # {"candidate": {"<trace id>": <row id>, ...}, "evaluation": {...}, ..., "session": {...}}
    ids: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))

    def row_id(self, kind: str, trace_id: int) -> int | None:
        found = self.ids.get(kind, {}).get(str(trace_id))
        return int(found) if found is not None else None

    def trace_ids(self, kind: str) -> dict[int, int]:
        """row id -> trace id for one kind of row."""
        return {int(row): int(trace) for trace, row in self.ids.get(kind, {}).items()}

"""The server's documentation keeps up with the code: every setting is documented, and the
database schema matches the migrations."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from app.db import Database
from app.models import SQLModel
from app.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
APP_TABLES = {"session", "event", "candidate", "evaluation", "trigger", "intervention"}


def test_every_setting_is_documented_in_docs_server_md() -> None:
    text = (ROOT / "docs" / "server.md").read_text()
    missing = [name for name in Settings.model_fields if f"SOCRATIC_{name.upper()}" not in text]
    assert not missing, f"document these settings in docs/server.md: {missing}"


def test_migrations_build_the_tables_the_models_describe(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'm.db'}")
    db.upgrade()
    with db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)
    ours = [d for d in diff if _table_of(d) in APP_TABLES]
    assert ours == [], f"app/models.py and app/migrations disagree: {ours}"


def _table_of(change: object) -> str:
    item = change[0] if isinstance(change, list) else change
    for part in item[1:] if isinstance(item, tuple) else ():
        name = getattr(part, "name", None) if not isinstance(part, str) else None
        table = getattr(part, "table", None)
        if table is not None and getattr(table, "name", None):
            return str(table.name)
        if name and hasattr(part, "columns"):
            return str(name)
        if isinstance(part, str):
            return part
    return ""

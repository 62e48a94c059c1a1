"""The server's documentation keeps up with the code: every setting is documented, and the
database schema matches the migrations."""

from __future__ import annotations

import json
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from app.settings import PROJECT_ROOT, Settings
from app.store.database import Database
from app.store.models import SQLModel

ROOT = PROJECT_ROOT
APP_TABLES = {"session", "event", "candidate", "evaluation", "trigger", "intervention"}


def test_every_setting_is_documented_in_docs_server_md() -> None:
    text = (ROOT / "docs" / "server.md").read_text()
    missing = [name for name in Settings.model_fields if f"SOCRATIC_{name.upper()}" not in text]
    assert not missing, f"document these settings in docs/server.md: {missing}"


# Settings whose default in code is None but is documented as what None means.
DERIVED_DEFAULTS = {"db_url": "sqlite:///<data_dir>/socratic.db"}


def documented_defaults(text: str) -> dict[str, str]:
    """`SOCRATIC_X` -> its default cell, from docs/server.md's settings table (backticks dropped)."""
    found = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].startswith("`SOCRATIC_"):
            found[cells[0].strip("`")] = cells[2].strip("`")
    return found


def shown(value: object) -> str:
    """A default as the table writes it: JSON for lists, lower-case booleans, `none`, integral
    floats without the point."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple | list):
        return json.dumps(list(value), separators=(",", ":"))
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def test_every_documented_default_is_the_codes_default() -> None:
    documented = documented_defaults((ROOT / "docs" / "server.md").read_text())
    wrong = []
    for name, field in Settings.model_fields.items():
        key = f"SOCRATIC_{name.upper()}"
        if key not in documented:
            continue  # the test above names it
        expected = DERIVED_DEFAULTS.get(name) if field.default is None and name in DERIVED_DEFAULTS \
            else shown(field.default)
        if documented[key] != expected:
            wrong.append(f"{key}: docs say {documented[key]!r}, the code's default is {expected!r}")
    assert not wrong, "docs/server.md's settings table:\n" + "\n".join(wrong)


def test_the_default_check_reads_the_table_and_catches_a_wrong_cell() -> None:
    table = "| `SOCRATIC_PEERS` | | `[\"cudnn\",\"flash\"]` | peers |\n| `SOCRATIC_PORT` | `--port` | `8000` | port |"
    assert documented_defaults(table) == {"SOCRATIC_PEERS": '["cudnn","flash"]', "SOCRATIC_PORT": "8000"}
    assert shown(Settings.model_fields["peers"].default) != documented_defaults(table)["SOCRATIC_PEERS"]
    assert shown(30.0) == "30" and shown(None) == "none" and shown(False) == "false"


def test_migrations_build_the_tables_the_models_describe(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'm.db'}")
    db.upgrade()
    with db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)
    ours = [d for d in diff if _table_of(d) in APP_TABLES]
    assert ours == [], f"app/store/models.py and app/store/migrations disagree: {ours}"


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

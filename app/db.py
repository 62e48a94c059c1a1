"""The one place where the database is configured: engine, SQLite pragmas, the metadata that
alembic migrates, and the schema upgrade run at startup.

Other packages put their tables into the same database by defining SQLModel tables in a
module listed in MODEL_MODULES (today `app.models`, `app.audit.models` and, when it exists,
`question_bank.models`) and adding an alembic revision under app/migrations/versions/
(docs/server.md says how)."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url
from sqlmodel import Session, SQLModel, create_engine

from app.settings import Settings

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# Modules whose import registers tables in SQLModel.metadata; missing optional ones are skipped.
MODEL_MODULES = ("app.models", "question_bank.models", "app.audit.models", "app.campaigns.models")

# How long a writer waits for SQLite's lock before failing (milliseconds).
SQLITE_BUSY_TIMEOUT_MS = 5000


def load_models() -> Any:
    """Import every model module so that SQLModel.metadata holds all tables; returns it."""
    for name in MODEL_MODULES:
        if importlib.util.find_spec(name.rsplit(".", 1)[0]) is None:
            continue
        if name != "app.models" and importlib.util.find_spec(name) is None:
            continue
        importlib.import_module(name)
    return SQLModel.metadata


def _setup_sqlite(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL: readers (pages, websockets) never block the writer (the runner) and vice versa.
    cursor.execute("PRAGMA journal_mode=WAL")
    # SQLite ignores foreign keys unless asked, per connection; we rely on ON DELETE CASCADE.
    cursor.execute("PRAGMA foreign_keys=ON")
    # A writer that finds the database locked waits this long instead of failing at once.
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    # With WAL, NORMAL is durable across application crashes (only a power cut can lose
    # the last transactions) and much faster than FULL.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def make_engine(url: str) -> Engine:
    """An engine for `url`; SQLite files get their directory created and the pragmas above."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    database = parsed.database or ""
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    # The runner and request handlers share connections across threads (evaluation threads
    # never write, but the pool may hand a connection to another thread than its creator).
    engine = create_engine(url, connect_args={"check_same_thread": False})
    event.listen(engine, "connect", _setup_sqlite)
    return engine


def alembic_config(url: str) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest revision (run at every server start)."""
    from alembic import command

    load_models()
    cfg = alembic_config(str(engine.url.render_as_string(hide_password=False)))
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "head")


class Database:
    """The engine plus a way to open short sessions on it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)

    def upgrade(self) -> None:
        upgrade(self.engine)

    @contextmanager
    def session(self) -> Iterator[Session]:
        # expire_on_commit=False: objects stay readable after commit (pages render them).
        with Session(self.engine, expire_on_commit=False) as db:
            yield db

    def dispose(self) -> None:
        self.engine.dispose()


def open_database(settings: Settings) -> Database:
    """The database the settings name, migrated to the newest schema: what the server, `socratic
    db upgrade`, `socratic bank` and `socratic trace` all start from."""
    database = Database(settings.database_url)
    database.upgrade()
    return database

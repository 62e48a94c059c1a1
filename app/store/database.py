"""The one place where the database is configured: engine, SQLite pragmas, the metadata that
alembic migrates, and the schema upgrade run at startup.

Other packages put their tables into the same database by defining SQLModel tables in a
module listed in MODEL_MODULES (today `app.store.models`, `app.store.trace_models` and, when it exists,
`question_bank.models`) and adding an alembic revision under app/store/migrations/versions/
(docs/server.md says how)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import math
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session, SQLModel, create_engine

from app.settings import Settings
from app.store.input_limits import INT32_MAX, INT64_MAX

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# Modules whose import registers tables in SQLModel.metadata; missing optional ones are skipped.
MODEL_MODULES = ("app.store.models", "question_bank.models", "app.store.trace_models", "app.store.campaign_models",
                 "lessons.models")

# How long a writer waits for SQLite's lock before failing (milliseconds).
SQLITE_BUSY_TIMEOUT_MS = 5000


def load_models() -> Any:
    """Import every model module so that SQLModel.metadata holds all tables; returns it."""
    for name in MODEL_MODULES:
        if importlib.util.find_spec(name.rsplit(".", 1)[0]) is None:
            continue
        if name != "app.store.models" and importlib.util.find_spec(name) is None:
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


def private_dir(path: Path) -> None:
    """Create `path` (and missing parents) readable by this user only (0700). An existing
    directory is left as it is: it may be shared on purpose (the current directory)."""
    missing = []
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing.append(folder)
    path.mkdir(parents=True, exist_ok=True)
    for folder in missing:
        os.chmod(folder, 0o700)


def private_file(path: Path) -> None:
    """The database file: its directory made as private_dir does, the file created 0600 (SQLite
    gives its -wal and -shm files the same mode), an existing one narrowed to 0600."""
    private_dir(path.parent)
    if path.exists():
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o600)
        return
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))


def engine_url(url: str) -> URL:
    """`url` with its driver: a plain postgresql:// URL means psycopg 3 (the pinned driver;
    SQLAlchemy would otherwise look for psycopg2)."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def largest_integer(backend: str) -> int:
    """The largest value the integer columns (ids, sequence numbers, token counts) hold on
    `backend` ("sqlite", "postgresql"): a number beyond it matches no row."""
    return INT32_MAX if backend == "postgresql" else INT64_MAX


NONFINITE_KEY = "__float__"  # {"__float__": "inf"}: how PostgreSQL's JSON holds inf and NaN


def _tag_nonfinite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return {NONFINITE_KEY: repr(value)}  # "inf", "-inf", "nan"
    if isinstance(value, dict):
        return {k: _tag_nonfinite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_tag_nonfinite(v) for v in value]
    return value


def _untag_nonfinite(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and NONFINITE_KEY in obj:
        return float(obj[NONFINITE_KEY])
    return obj


def json_dumps(value: Any) -> str:
    """JSON for PostgreSQL, which refuses Infinity and NaN (reports hold them, e.g. the max error
    of a kernel that wrote NaN): they travel tagged and come back as the same floats."""
    return json.dumps(_tag_nonfinite(value), allow_nan=False)


def json_loads(text: str) -> Any:
    return json.loads(text, object_hook=_untag_nonfinite)


def make_engine(url: str) -> Engine:
    """An engine for `url`; SQLite files get their directory created and the pragmas above.
    PostgreSQL (the team database) needs nothing more: concurrent writers are safe by the
    row lock Unit.record takes (app/store/events.py)."""
    parsed = engine_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(parsed, pool_pre_ping=True, json_serializer=json_dumps,
                             json_deserializer=json_loads)
    database = parsed.database or ""
    if database and database != ":memory:" and not database.startswith("file:"):
        private_file(Path(database))
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


_REVISION_LINE = re.compile(r"^(revision|down_revision)\b[^=\n]*=\s*(.+)$", re.MULTILINE)


def head_revision() -> str | None:
    """The newest migration's id, read from the files under migrations/versions without
    importing alembic; None unless they form one line of revisions (then alembic decides)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (MIGRATIONS_DIR / "versions").glob("*.py"):
        found = {m.group(1): m.group(2) for m in _REVISION_LINE.finditer(path.read_text())}
        try:
            rev = ast.literal_eval(found.get("revision", "None"))
            down = ast.literal_eval(found.get("down_revision", "None"))
        except (ValueError, SyntaxError):
            return None
        if not isinstance(rev, str) or not (down is None or isinstance(down, str)):
            return None
        revisions.add(rev)
        if down is not None:
            parents.add(down)
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def current_revision(engine: Engine) -> str | None:
    """The revision the database records (alembic's table), or None: no such table, several
    rows, or not a database at all (alembic then reports what is wrong)."""
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT version_num FROM alembic_version")).fetchall()
    except SQLAlchemyError:
        return None
    return str(rows[0][0]) if len(rows) == 1 else None


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest revision (run at every server start and CLI command).
    A database already at the newest one is left alone without importing alembic and running
    its environment (~0.3 s of every `socratic bank`/`trace` command)."""
    load_models()
    head = head_revision()
    if head is not None and current_revision(engine) == head:
        return
    from alembic import command

    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
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

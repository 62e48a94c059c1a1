"""Options several command groups share."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.store.database import Database


def database_flags(p: argparse.ArgumentParser) -> None:
    """Which database a command opens: the server's own unless told otherwise."""
    p.add_argument("--db", help="SQLAlchemy URL or SQLite file path (default data/socratic.db)")
    p.add_argument("--data-dir", dest="data_dir", help="data directory (default ./data)")


def open_database_or_say_why(args: argparse.Namespace, command: str) -> tuple[Database, str] | None:
    """The database the flags or the environment name, migrated to the newest schema, and its
    URL; None after printing why the settings are refused (prefixed `socratic COMMAND:`)."""
    from pydantic import ValidationError

    from app.settings import Settings
    from app.store.database import open_database

    try:
        settings = Settings.from_args(args)
    except ValidationError as exc:
        for e in exc.errors():
            print(f"socratic {command}: {e['msg'].removeprefix('Value error, ')}", file=sys.stderr)
        return None
    return open_database(settings), settings.database_url

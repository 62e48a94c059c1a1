"""`socratic bank export|import`: the question bank as a YAML file, from the command line.
Both open the server's database (migrating it and loading the starter bank on first use, as
`socratic serve` would), then call question_bank/store.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from app.faces.commands.options import database_flags


def _database(args: argparse.Namespace) -> object:
    from app.settings import Settings
    from app.store.database import open_database
    from question_bank.store import ensure_starter_bank

    database = open_database(Settings.from_args(args))
    with database.session() as db:
        ensure_starter_bank(db)
    return database


def cmd_export(args: argparse.Namespace) -> int:
    from app.store.database import Database
    from question_bank.store import export_bank_text

    try:
        database = _database(args)
    except ValidationError as exc:
        print(f"socratic bank: {exc.errors()[0]['msg']}", file=sys.stderr)
        return 2
    assert isinstance(database, Database)
    with database.session() as db:
        text = export_bank_text(db, include_retired=not args.active_only)
    database.dispose()
    if args.out in (None, "-"):
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text, encoding="utf-8")
        count = text.count("\n- key: ")
        print(f"wrote {count} question{'s' if count != 1 else ''} to {args.out}", file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from app.store.database import Database
    from question_bank.bank_file import BankFileError, load_bank_file
    from question_bank.store import import_specs

    path = Path(args.file)
    try:
        specs = load_bank_file(path)  # validate before touching the database
    except BankFileError as exc:
        print(f"socratic bank import: {exc}", file=sys.stderr)
        return 1
    try:
        database = _database(args)
    except ValidationError as exc:
        print(f"socratic bank: {exc.errors()[0]['msg']}", file=sys.stderr)
        return 2
    assert isinstance(database, Database)
    try:
        with database.session() as db:
            result = import_specs(db, specs, source=str(path))
    except BankFileError as exc:
        print(f"socratic bank import: {exc}", file=sys.stderr)
        return 1
    finally:
        database.dispose()
    print(f"imported {path}: {result.summary()}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bank", help="the question bank: export or import YAML")
    bank = p.add_subparsers(dest="bank_command", required=True)

    q = bank.add_parser("export", help="write the bank as YAML (stdout by default)")
    q.add_argument("--out", "-o", help="file to write (default: stdout)")
    q.add_argument("--active-only", action="store_true", help="leave retired questions out")
    database_flags(q)
    q.set_defaults(func=cmd_export)

    q = bank.add_parser("import", help="create or update questions from a YAML file, all or nothing")
    q.add_argument("file", help="a bank file (the format of question_bank/starter_bank.yaml)")
    database_flags(q)
    q.set_defaults(func=cmd_import)

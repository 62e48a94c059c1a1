"""`socratic trace export SESSION > file.jsonl`, `socratic trace import file.jsonl` and
`socratic trace audit SESSION`: the trace format of docs/trace.md from the command line. They
need no GPU and no running server, only the database (SOCRATIC_DB_URL / --db)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from app.faces.commands.options import database_flags, open_database_or_say_why
from app.settings import Settings


def cmd_export(args: argparse.Namespace) -> int:
    from app.domain.audit.trace_io import export_session, trace_bytes
    from app.domain.sessions import NotFound

    opened = open_database_or_say_why(args, "trace")
    if opened is None:
        return 2
    database, url = opened
    try:
        with database.session() as db:
            text = export_session(db, args.session)
    except NotFound:
        print(f"socratic trace export: no session {args.session} in {url}", file=sys.stderr)
        return 1
    finally:
        database.dispose()
    if args.output and args.output != "-":
        data = trace_bytes(text, args.output)
        Path(args.output).write_bytes(data)
        print(f"wrote session {args.session} to {args.output} ({len(data)} bytes)", file=sys.stderr)
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(text.encode("ascii"))
        sys.stdout.buffer.flush()
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from app.domain.audit.trace_io import TraceFormatError, import_trace_once, trace_text
    from app.faces.web.page_check import session_pages

    try:
        limit = Settings.from_args(args).trace_max_bytes
    except ValidationError:
        open_database_or_say_why(args, "trace")  # says why the settings are refused
        return 2
    try:
        stream = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")  # noqa: SIM115
        with stream:
            raw = stream.read(limit + 1)
        text = trace_text(raw, limit)
    except OSError as exc:
        print(f"socratic trace import: {exc}", file=sys.stderr)
        return 1
    except TraceFormatError as exc:
        print(f"socratic trace import: {args.file}: {exc}", file=sys.stderr)
        return 1
    opened = open_database_or_say_why(args, "trace")
    if opened is None:
        return 2
    database, _url = opened
    name = "stdin" if args.file == "-" else Path(args.file).name
    try:
        with database.session() as db:
            session = import_trace_once(db, text, name, session_pages)
            db.commit()
    except TraceFormatError as exc:
        print(f"socratic trace import: {args.file}: {exc}", file=sys.stderr)
        return 1
    finally:
        database.dispose()
    print(f"imported {name} as session {session.id} (read-only): /sessions/{session.id}/audit")
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from app.domain.audit.record import load_record
    from app.domain.audit.summary import audit_text
    from app.domain.sessions import NotFound

    opened = open_database_or_say_why(args, "trace")
    if opened is None:
        return 2
    database, url = opened
    try:
        with database.session() as db:
            print(audit_text(load_record(db, args.session)), end="")
    except NotFound:
        print(f"socratic trace audit: no session {args.session} in {url}", file=sys.stderr)
        return 1
    finally:
        database.dispose()
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    trace = sub.add_parser("trace", help="export, import and audit session traces (docs/trace.md)")
    cmds = trace.add_subparsers(dest="trace_command", required=True)

    p = cmds.add_parser("export", help="write a session's whole trace as JSON Lines (stdout by default)")
    p.add_argument("session", type=int, help="session id")
    p.add_argument("-o", "--output", help="write to this file instead of stdout")
    database_flags(p)
    p.set_defaults(func=cmd_export)

    p = cmds.add_parser("import", help="import a trace file as a new read-only session")
    p.add_argument("file", help="a .jsonl trace, or - for stdin")
    database_flags(p)
    p.set_defaults(func=cmd_import)

    p = cmds.add_parser("audit", help="print a session's audit: interventions and their gains, churn, cost")
    p.add_argument("session", type=int, help="session id")
    database_flags(p)
    p.set_defaults(func=cmd_audit)

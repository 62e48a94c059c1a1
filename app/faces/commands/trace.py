"""`socratic trace export SESSION > file.jsonl`, `socratic trace import file.jsonl`,
`socratic trace audit SESSION` and `socratic trace kernel file.jsonl -o leader.cu`: the trace
format of docs/trace.md from the command line. They need no GPU and no running server; the
first three the database (SOCRATIC_DB_URL / --db), `kernel` only the file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from app.faces.commands.options import database_flags, open_database_or_say_why
from app.settings import Settings


def read_trace_or_say_why(path: str, limit: int, command: str) -> str | None:
    """A trace file's text (plain, xz or gzip; `-` for stdin; at most `limit` bytes), or None
    after saying on stderr why it cannot be read."""
    from app.domain.audit.trace_io import TraceFormatError, trace_text

    try:
        stream = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
        with stream:
            raw = stream.read(limit + 1)
        return trace_text(raw, limit)
    except OSError as exc:
        print(f"socratic trace {command}: {exc}", file=sys.stderr)
    except TraceFormatError as exc:
        print(f"socratic trace {command}: {path}: {exc}", file=sys.stderr)
    return None


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
    from app.domain.audit.trace_io import TraceFormatError, import_trace_once
    from app.faces.web.page_check import session_pages

    try:
        limit = Settings.from_args(args).trace_max_bytes
    except ValidationError:
        open_database_or_say_why(args, "trace")  # says why the settings are refused
        return 2
    text = read_trace_or_say_why(args.file, limit, "import")
    if text is None:
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


def cmd_kernel(args: argparse.Namespace) -> int:
    """One candidate's source out of a trace file (the session's leader by default), to evaluate
    it again (`socratic evaluate`, a proof's `--also`) without importing the trace anywhere."""
    from app.domain.audit.trace_io import TraceFormatError, candidate_source

    try:
        limit = Settings.from_args(args).trace_max_bytes
    except ValidationError as exc:
        print(f"socratic trace kernel: the settings are refused: {exc}", file=sys.stderr)
        return 2
    text = read_trace_or_say_why(args.file, limit, "kernel")
    if text is None:
        return 1
    try:
        number, label, source = candidate_source(text, args.candidate)
    except TraceFormatError as exc:
        print(f"socratic trace kernel: {args.file}: {exc}", file=sys.stderr)
        return 1
    if args.output and args.output != "-":
        try:
            Path(args.output).write_text(source)
        except OSError as exc:
            print(f"socratic trace kernel: {exc}", file=sys.stderr)
            return 1
        print(f"wrote candidate #{number} ({label}) to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(source)
        sys.stdout.flush()
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

    p = cmds.add_parser("kernel", help="write a candidate's source from a trace file (its leader by default)")
    p.add_argument("file", help="a .jsonl trace (.xz and .gz too), or - for stdin")
    p.add_argument("--candidate", type=int, help="the candidate's number in the session (default: the leader)")
    p.add_argument("-o", "--output", help="write to this file instead of stdout")
    p.set_defaults(func=cmd_kernel)

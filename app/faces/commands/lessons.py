"""`socratic lessons distill|list|show|status|words|export|import`: the lessons (lessons/) from the
command line. Each opens the server's database (migrating it, as `socratic serve` would).

`distill` with no file distils every session of the database (recorded here or imported); with
`--from TRACE...` it reads session or campaign trace files (plain, xz or gzip) without importing
them. Distilling is idempotent: the same evidence is merged once. A person's mistake (a missing
file, a bad lesson file, an unknown id) prints one line and exits 2."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from app.faces.commands.options import database_flags


class Refused(Exception):
    """A person's mistake: one line, exit code 2."""


@contextmanager
def database_session(args: argparse.Namespace) -> Iterator[Any]:
    """The server's database (migrated), one session; disposed afterwards."""
    from app.settings import Settings
    from app.store.database import open_database

    try:
        database = open_database(Settings.from_args(args))
    except ValidationError as exc:
        raise Refused(exc.errors()[0]["msg"]) from exc
    try:
        with database.session() as db:
            yield db
    finally:
        database.dispose()


def command(name: str) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    def wrap(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        @functools.wraps(fn)
        def run(args: argparse.Namespace) -> int:
            try:
                return fn(args)
            except Refused as exc:
                print(f"socratic lessons {name}: {exc}", file=sys.stderr)
                return 2
        return run
    return wrap


@command("distill")
def cmd_distill(args: argparse.Namespace) -> int:
    from sqlmodel import col, select

    from app.domain.audit.trace_io import TraceFormatError
    from app.domain.lessons import Distilled, distill_files, distill_session
    from app.store.models import SteeringSession

    paths = [Path(p) for p in args.sources]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise Refused(f"{missing[0]}: no such file")
    with database_session(args) as db:
        if paths:
            try:
                done = distill_files(db, paths)
            except TraceFormatError as exc:
                raise Refused(str(exc)) from exc
        else:
            done = Distilled()
            ids = list(db.exec(select(SteeringSession.id).order_by(col(SteeringSession.id))))
            for i, sid in enumerate(ids, 1):
                one = distill_session(db, int(sid or 0))
                done.sessions += one.sessions
                done.observations += one.observations
                done.result.add(one.result)
                print(f"  session {sid} ({i}/{len(ids)}): {one.observations} observation(s)", file=sys.stderr)
        db.commit()
    r = done.result
    print(f"distilled {done.sessions} session(s): {done.observations} observation(s); lessons: {r.created} new, "
          f"{r.updated} updated, {r.unchanged} unchanged")
    return 0


@command("list")
def cmd_list(args: argparse.Namespace) -> int:
    from lessons.search import Filters, search_lessons
    from lessons.store import list_lessons
    from question_bank.semantic import default_embedder

    statuses = (("proposed", "active", "retired") if args.status == "all" else (args.status,) if args.status
                else ("proposed", "active"))
    filters = Filters(arch=args.arch or "", category=args.category or "", layer=args.layer or "",
                      knob=args.knob or "", statuses=statuses)
    with database_session(args) as db:
        hits = search_lessons(list_lessons(db), args.query or "", filters=filters,
                              embedder=default_embedder(bool(args.query)), limit=args.limit)
        for h in hits:
            x = h.lesson
            print(f"#{x.id:<4} {x.status:<8} {x.ratio:6.3f}x  seen {x.count:<3} conf {x.confidence:.2f}  {x.text}")
    if not hits:
        print("no lesson matches", file=sys.stderr)
    return 0


@command("show")
def cmd_show(args: argparse.Namespace) -> int:
    import json

    from lessons.store import get_lesson

    with database_session(args) as db:
        try:
            print(json.dumps(get_lesson(db, args.id).to_dict(), indent=2, default=str))
        except LookupError as exc:
            raise Refused(str(exc)) from exc
    return 0


@command("status")
def cmd_status(args: argparse.Namespace) -> int:
    from lessons.models import LessonError
    from lessons.store import set_status

    with database_session(args) as db:
        try:
            x = set_status(db, args.id, args.status)
        except (LookupError, LessonError) as exc:
            raise Refused(str(exc)) from exc
        db.commit()
        print(f"lesson {x.id}: {x.status}")
    return 0


@command("export")
def cmd_export(args: argparse.Namespace) -> int:
    from lessons.store import export_lessons

    with database_session(args) as db:
        text = export_lessons(db, args.format)
    if args.out in (None, "-"):
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote the lessons to {args.out}", file=sys.stderr)
    return 0


@command("import")
def cmd_import(args: argparse.Namespace) -> int:
    from lessons.models import LessonError
    from lessons.store import import_lessons, parse_lessons

    path = Path(args.file)
    fmt = args.format or ("yaml" if path.suffix in (".yaml", ".yml") else "jsonl")
    try:
        text = path.read_text(encoding="utf-8")
        parse_lessons(text, fmt)  # checked before the database is touched
    except OSError as exc:
        raise Refused(f"{path}: {exc.strerror}") from exc
    except (LessonError, UnicodeDecodeError) as exc:
        raise Refused(f"{path}: {exc}") from exc
    with database_session(args) as db:
        result = import_lessons(db, text, fmt)
        db.commit()
    print(f"imported {path}: {result.created} new, {result.updated} updated, {result.unchanged} unchanged")
    return 0


@command("words")
def cmd_words(args: argparse.Namespace) -> int:
    """A model's paragraph for each active lesson still in the template's words (ANTHROPIC_API_KEY)."""
    import asyncio

    import anthropic

    from app.engine.agents.claude_config import DEFAULT_MODEL
    from app.settings import anthropic_api_key
    from lessons.store import list_lessons, set_text
    from lessons.words import model_paragraph

    key = anthropic_api_key()
    if key is None and args.client is None:
        raise Refused("ANTHROPIC_API_KEY is not set (the template's words stand without it)")
    async def write_all(db: Any) -> int:  # one event loop for the client's whole life
        client = args.client or anthropic.AsyncAnthropic(api_key=key)
        todo = [x for x in list_lessons(db, ("active",) if not args.all else ("proposed", "active"))
                if x.author == "distiller"][: args.limit]
        for x in todo:
            found = await model_paragraph(x.to_dict(), client, args.model or DEFAULT_MODEL)
            set_text(db, x.id or 0, found.text, author="model")
            db.commit()  # each paragraph kept as it comes: a later failure loses none of them
            print(f"lesson {x.id}: {found.input_tokens} + {found.output_tokens} tokens", file=sys.stderr)
        return len(todo)

    with database_session(args) as db:
        done = asyncio.run(write_all(db))
    print(f"wrote {done} lesson(s) in a model's words")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lessons", help="lessons distilled from finished work: distil, list, export, import")
    lessons = p.add_subparsers(dest="lessons_command", required=True)

    q = lessons.add_parser("distill", help="distil lessons from this database's sessions, or from trace files")
    q.add_argument("--from", dest="sources", nargs="+", default=[], metavar="TRACE",
                   help="session or campaign trace files (.jsonl, .xz, .gz); not imported")
    database_flags(q)
    q.set_defaults(func=cmd_distill)

    q = lessons.add_parser("list", help="search and list lessons, best fit and evidence first")
    q.add_argument("query", nargs="?", help="words to search for (by meaning too, where installed)")
    q.add_argument("--arch", help="e.g. sm_90")
    q.add_argument("--category", help="measured on this scenario category")
    q.add_argument("--layer", help="the family layer its action changes")
    q.add_argument("--knob", help="a knob its action changes")
    q.add_argument("--status", choices=("proposed", "active", "retired", "all"))
    q.add_argument("--limit", type=int, default=30)
    database_flags(q)
    q.set_defaults(func=cmd_list)

    q = lessons.add_parser("show", help="one lesson with its evidence, as JSON")
    q.add_argument("id", type=int)
    database_flags(q)
    q.set_defaults(func=cmd_show)

    q = lessons.add_parser("status", help="a person's status for a lesson (it sticks)")
    q.add_argument("id", type=int)
    q.add_argument("status", choices=("proposed", "active", "retired"))
    database_flags(q)
    q.set_defaults(func=cmd_status)

    q = lessons.add_parser("words", help="a model's paragraph for each active lesson (needs ANTHROPIC_API_KEY)")
    q.add_argument("--all", action="store_true", help="proposed lessons too")
    q.add_argument("--limit", type=int, default=20)
    q.add_argument("--model", help="default: the claude agent's default model")
    database_flags(q)
    q.set_defaults(func=cmd_words, client=None)

    q = lessons.add_parser("export", help="write every lesson as JSON Lines or YAML")
    q.add_argument("--format", choices=("jsonl", "yaml"), default="jsonl")
    q.add_argument("--out", "-o", help="file to write (default: stdout)")
    database_flags(q)
    q.set_defaults(func=cmd_export)

    q = lessons.add_parser("import", help="add lessons from a file, all or nothing (evidence merges by key)")
    q.add_argument("file")
    q.add_argument("--format", choices=("jsonl", "yaml"), help="default: by the file's suffix")
    database_flags(q)
    q.set_defaults(func=cmd_import)

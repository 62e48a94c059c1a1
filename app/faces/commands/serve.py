"""`socratic serve` (the server on uvicorn) and `socratic db` (schema migrations)."""

from __future__ import annotations

import argparse
import sys

from pydantic import ValidationError

from app.faces.commands.options import database_flags
from app.settings import Settings


def shown_url(url: str) -> str:
    """A database URL fit to print: the password masked."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def settings_error(exc: ValidationError) -> str:
    return "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())


def main_settings_error(argv: list[str]) -> str:
    """What `socratic <argv>` (serve or db) would refuse in its settings ("" when they are fine)."""
    parser = argparse.ArgumentParser(prog="socratic")
    add_commands(parser.add_subparsers(dest="command", required=True))
    try:
        Settings.from_args(parser.parse_args(argv))
    except ValidationError as exc:
        return settings_error(exc)
    return ""


def _address_list(text: str) -> tuple[str, ...]:
    return tuple(a.strip() for a in text.split(",") if a.strip())


def cmd_serve(args: argparse.Namespace) -> int:
    import os

    import uvicorn

    try:
        settings = Settings.from_args(args)
    except ValidationError as exc:
        print(f"socratic serve: {settings_error(exc)}", file=sys.stderr)
        return 2
    if settings.allow_python_candidates:
        # python-cpu candidates name module:function targets of the project (tests.cpu_kernels);
        # the harness's spawned workers inherit this path.
        from app.settings import PROJECT_ROOT

        if str(PROJECT_ROOT) not in sys.path:
            sys.path.insert(0, str(PROJECT_ROOT))
    if getattr(args, "token", None):
        print("socratic serve: a token on the command line is visible to every user of this machine (ps); "
              "use SOCRATIC_TOKEN or --token-file", file=sys.stderr)
    # Whatever the server writes (candidate sources, caches, the database) is the user's alone, and
    # a data folder made by an earlier version or by hand is tightened too.
    os.umask(0o077)
    if settings.data_dir.is_dir() and settings.data_dir.stat().st_uid == os.getuid():
        settings.data_dir.chmod(0o700)
    from app.faces.web.app import create_app

    app = create_app(settings)
    shown = f"[{settings.host}]" if ":" in settings.host else settings.host
    where = f"cluster {settings.cluster}" if settings.cluster else "this machine"
    print(f"Socratic on http://{shown}:{settings.port}  (database {shown_url(settings.database_url)}; evaluations on "
          f"{where})", file=sys.stderr)
    # X-Forwarded-For only from the proxies named (uvicorn would believe loopback by default: then
    # every guess at the token could claim another address).
    proxies = list(settings.forwarded_allow_ips)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=settings.log_level,
                            ws="auto", timeout_graceful_shutdown=10, proxy_headers=bool(proxies),
                            forwarded_allow_ips=proxies or "", server_header=False)
    from app.faces.web.security import install_log_redaction

    install_log_redaction(settings.token_value)  # after uvicorn configured its loggers: no token reaches a log
    uvicorn.Server(config).run()
    return 0


def cmd_db(args: argparse.Namespace) -> int:
    from alembic import command

    from app.store.database import alembic_config, open_database

    settings = Settings.from_args(args)
    if args.db_command == "upgrade":
        open_database(settings).dispose()
        print(f"database at the newest revision: {shown_url(settings.database_url)}")
    elif args.db_command == "current":
        command.current(alembic_config(settings.database_url), verbose=True)
    elif args.db_command == "revision":
        command.revision(alembic_config(settings.database_url), message=args.message,
                         autogenerate=args.autogenerate, rev_id=args.rev_id)
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the web server (sessions, steering, API)")
    p.add_argument("--host", help="address to bind (default 127.0.0.1; others need --token)")
    p.add_argument("--port", type=int, help="port (default 8000)")
    database_flags(p)
    p.add_argument("--token-file", dest="token_file",
                   help="require the token in this file (its first line) for pages, API and websockets")
    p.add_argument("--token", help="the token itself; visible to every user of the machine in `ps`: prefer "
                                   "SOCRATIC_TOKEN or --token-file")
    p.add_argument("--forwarded-allow-ips", dest="forwarded_allow_ips", type=_address_list,
                   help="comma-separated addresses of reverse proxies whose X-Forwarded-For is believed "
                        "(default: none; every client is its connection's address)")
    p.add_argument("--allow-python-candidates", action="store_true",
                   help="accept python-cpu candidates (CPU stand-in kernels for tests and demos)")
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="evaluate on the Dask cluster at ADDRESS (default: this machine's GPU)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("db", help="database schema: upgrade, current, revision")
    p.add_argument("db_command", choices=("upgrade", "current", "revision"))
    p.add_argument("--db", help="SQLAlchemy URL or SQLite file path")
    p.add_argument("--data-dir", dest="data_dir")
    p.add_argument("-m", "--message", default="schema change", help="revision message")
    p.add_argument("--autogenerate", action="store_true", help="diff the models against the database")
    p.add_argument("--rev-id", dest="rev_id", help="revision id (default: random)")
    p.set_defaults(func=cmd_db)

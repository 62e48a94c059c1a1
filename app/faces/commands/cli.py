"""The `socratic` command: the harness's commands, the kernel family's, and the server's
(serve, db, bank, trace, campaign). The harness registers only its own (harness/cli.py); the family's
CLI lives beside the family (kernels/attention/family/cli.py)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from harness.caches import keep_bytecode
from harness.cli import add_commands as add_harness_commands
from kernels.attention.family.cli import add_family_commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="socratic",
        description="Socratic: verify, time and steer agents writing CUDA attention kernels.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    add_harness_commands(sub)
    add_family_commands(sub)
    for register in app_command_registrars():
        register(sub)
    return parser


def app_command_registrars() -> list[Callable[[argparse._SubParsersAction], None]]:
    """Server-side command groups (serve, db, bank, trace, campaign, lessons), each in its own module."""
    from app.faces.commands.bank import add_commands as add_bank_commands
    from app.faces.commands.campaign import add_commands as add_campaign_commands
    from app.faces.commands.lessons import add_commands as add_lessons_commands
    from app.faces.commands.serve import add_commands as add_server_commands
    from app.faces.commands.trace import add_commands as add_trace_commands

    return [add_server_commands, add_bank_commands, add_trace_commands, add_campaign_commands, add_lessons_commands]


def main(argv: list[str] | None = None) -> int:
    """Run one command. Errors a person can act on print one line and exit non-zero: 1 for a
    database that cannot be used (its SQL is not shown), 2 for bad input, 130 on Ctrl-C."""
    keep_bytecode()  # before anything imports torch, here or in the workers started below
    args = build_parser().parse_args(argv)
    name = f"socratic {args.command}"
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        code = command_error(exc)
        if code is None:
            raise
        print(f"{name}: {code[1]}", file=sys.stderr)
        return code[0]


def command_error(exc: Exception) -> tuple[int, str] | None:
    """(exit code, one line) for an error a person can act on; None: a bug, let it show."""
    if "sqlalchemy" in sys.modules:
        from sqlalchemy.exc import SQLAlchemyError

        if isinstance(exc, SQLAlchemyError):
            cause = getattr(exc, "orig", None) or exc.__cause__
            reason = str(cause) if cause is not None else type(exc).__name__
            return 1, f"the database cannot be used: {reason.splitlines()[0] if reason else type(exc).__name__}"
    if isinstance(exc, LookupError | ValueError | OSError):
        return 2, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


if __name__ == "__main__":
    sys.exit(main())

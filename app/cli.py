"""The `socratic` command: the harness's commands, the kernel family's, and the server's
(serve, db, bank, trace, campaign). The harness registers only its own (harness/cli.py); the family's
CLI lives beside the family (kernels/attention/family/cli.py)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

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
    """Server-side command groups (serve, db, bank, trace, campaign), each in its own module."""
    from app.audit.cli import add_commands as add_trace_commands
    from app.bank_cli import add_commands as add_bank_commands
    from app.campaigns.cli import add_commands as add_campaign_commands
    from app.serve import add_commands as add_server_commands

    return [add_server_commands, add_bank_commands, add_trace_commands, add_campaign_commands]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())

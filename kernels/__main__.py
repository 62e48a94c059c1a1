"""`python -m kernels ...`: the harness's commands plus the kernel family's (`family render`,
`family space`, `family neighbours`), without the web app's dependencies."""

import argparse
import sys

from harness.cli import add_commands
from kernels.attention.family.cli import add_family_commands


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    add_commands(sub)
    add_family_commands(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


sys.exit(main())

"""`python -m app ...` is the `socratic` command (app/faces/commands/cli.py)."""

from app.faces.commands.cli import main

raise SystemExit(main())

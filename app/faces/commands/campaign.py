"""`socratic campaign create|list|show|export|import`: campaigns from the command line, on the
database alone (no server). `create` writes the campaign and its sessions in the `created`
state: a server starts them (the campaign page's Start, or POST /api/campaigns/ID/start)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError
from sqlmodel import Session

from app.faces.commands.options import database_flags, open_database_or_say_why
from app.store.database import Database


def _spec(args: argparse.Namespace) -> dict[str, object]:
    if args.spec:
        data = json.loads(Path(args.spec).read_text())
        if not isinstance(data, dict):
            raise ValueError("the spec file must hold a JSON object")
        return data
    spec: dict[str, object] = {"title": args.title or "campaign", "mode": args.mode, "agents": args.agents,
                               "policy": args.policy, "seed": args.seed, "plateau_window": args.plateau_window,
                               "islands": args.islands}
    for key in ("budget_evaluations", "memory_k", "suite_filter", "goal_target"):
        if getattr(args, key) is not None:
            spec[key] = getattr(args, key)
    return spec


def cmd_create(args: argparse.Namespace) -> int:
    from app.domain.campaigns.schemas import CampaignCreate
    from app.domain.sessions import Invalid
    from app.engine.campaigns import create_campaign
    from app.settings import Settings
    from app.store.events import EventHub, Unit

    try:
        spec = CampaignCreate.model_validate({**_spec(args), "start": False})
    except (ValidationError, ValueError, OSError) as exc:
        print(f"socratic campaign create: {exc}", file=sys.stderr)
        return 2
    def work(database: Database) -> int:
        with Unit(database, EventHub()) as u:
            cid = create_campaign(u, spec, Settings.from_args(args)).id
        print(f"created campaign {cid} ({spec.mode}); start it from /campaigns/{cid} or "
              f"POST /api/campaigns/{cid}/start")
        return 0

    return _on_db(args, "create", work, (Invalid,), 2)


def _on_db(args: argparse.Namespace, command: str, work: Callable[[Database], int],
           refused: tuple[type[Exception], ...] = (), status: int = 1) -> int:
    """Run `work` on the database the flags name. A missing campaign is exit status 1; the
    `refused` errors (a bad spec, a bad file) exit with `status`, their message on stderr."""
    from app.domain.sessions import NotFound

    opened = open_database_or_say_why(args, "campaign")
    if opened is None:
        return 2
    database, url = opened
    try:
        return work(database)
    except NotFound as exc:
        print(f"socratic campaign {command}: {exc} in {url}", file=sys.stderr)
        return 1
    except refused as exc:
        print(f"socratic campaign {command}: {exc}", file=sys.stderr)
        return status
    finally:
        database.dispose()


def _reading(work: Callable[[Session], int]) -> Callable[[Database], int]:
    def run(database: Database) -> int:
        with database.session() as db:
            return work(db)

    return run


def cmd_list(args: argparse.Namespace) -> int:
    from app.domain.campaigns.views import list_campaigns

    def work(db: Session) -> int:
        for c in list_campaigns(db):
            lead = f"{c.leader_speedup:.3f}x" if c.leader_speedup else "-"
            print(f"{c.id:>4}  {c.mode:<9} {c.status:<8} {c.evaluations:>4} evals  leader {lead:>8}  {c.title}")
        return 0

    return _on_db(args, "list", _reading(work))


def cmd_show(args: argparse.Namespace) -> int:
    from app.domain.audit.record import load_record
    from app.domain.audit.summary import audit_text
    from app.domain.campaigns.views import campaign_view

    def work(db: Session) -> int:
        view = campaign_view(db, args.campaign)
        if args.json:
            print(json.dumps(view.to_dict(), indent=1, default=str))
            return 0
        c = view.campaign
        print(f"campaign {c.id}: {c.title} ({c.mode}, {c.status}) - {c.evaluations}"
              f"/{c.budget_evaluations or '-'} evaluations; {c.detail}")
        for r in view.leaderboard:
            lead = f"{r['leader_speedup']:.3f}x" if r["leader_speedup"] else "-"
            print(f"  {lead:>8}  {r['name']:<40} {r['status']:<11} {r['evaluations']:>3} evals  "
                  f"gpu {r['gpu_s']:.0f}s  ${r['cost_usd']:.2f}"
                  + ("  <- campaign leader" if r["leads_campaign"] else ""))
        print("board (newest first):")
        for e in view.board[: args.board]:
            print(f"  {e['author']} #{e['candidate']}: [{e['layer']}] {e['summary']} -> {e['campaign_verdict']}")
        if args.audit:
            for r in view.leaderboard:
                print(f"\n== {r['name']} (session {r['session_id']})")
                print(audit_text(load_record(db, r["session_id"])), end="")
        return 0

    return _on_db(args, "show", _reading(work))


def cmd_export(args: argparse.Namespace) -> int:
    from app.domain.audit.trace_io import trace_bytes
    from app.domain.campaigns.trace import export_campaign

    def work(db: Session) -> int:
        text = export_campaign(db, args.campaign)
        if args.output and args.output != "-":
            Path(args.output).write_bytes(trace_bytes(text, args.output))
            print(f"wrote campaign {args.campaign} to {args.output}", file=sys.stderr)
        else:
            sys.stdout.write(text)
        return 0

    return _on_db(args, "export", _reading(work))


def cmd_import(args: argparse.Namespace) -> int:
    from app.domain.audit.trace_io import TraceFormatError, trace_text
    from app.domain.campaigns.trace import campaign_trace_limit, import_campaign
    from app.faces.web.page_check import campaign_pages, session_pages
    from app.settings import Settings

    limit = campaign_trace_limit(Settings.from_args(args).trace_max_bytes)
    try:
        with open(args.file, "rb") as f:
            raw = f.read(limit + 1)
        text = trace_text(raw, limit)
    except (OSError, TraceFormatError) as exc:
        print(f"socratic campaign import: {exc}", file=sys.stderr)
        return 1
    def work(db: Session) -> int:
        campaign = import_campaign(db, text, Path(args.file).name, session_pages, campaign_pages)
        db.commit()
        print(f"imported {Path(args.file).name} as campaign {campaign.id} (read-only): /campaigns/{campaign.id}")
        return 0

    return _on_db(args, "import", _reading(work), (TraceFormatError,), 1)


def add_commands(sub: argparse._SubParsersAction) -> None:
    campaign = sub.add_parser("campaign", help="campaigns: several agents, one board (docs/campaigns.md)")
    cmds = campaign.add_subparsers(dest="campaign_command", required=True)

    p = cmds.add_parser("create", help="create a campaign and its sessions (a server starts them)")
    p.add_argument("--spec", help="a JSON file with the API's campaign body (overrides the flags)")
    p.add_argument("--title")
    p.add_argument("--mode", choices=("board", "evolution"), default="board")
    p.add_argument("--agents", type=int, default=4, help="offline agents, each with another first layer")
    p.add_argument("--policy", choices=("questions", "autonomous"), default="autonomous")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget", dest="budget_evaluations", type=int, help="evaluations over all agents")
    p.add_argument("--memory-k", dest="memory_k", type=int, help="agents read the last K board entries")
    p.add_argument("--plateau-window", dest="plateau_window", type=int, default=6)
    p.add_argument("--islands", type=int, default=1)
    p.add_argument("--suite-filter", dest="suite_filter")
    p.add_argument("--goal", dest="goal_target", type=float, help="geomean vs baseline to reach")
    database_flags(p)
    p.set_defaults(func=cmd_create)

    p = cmds.add_parser("list", help="campaigns, newest first")
    database_flags(p)
    p.set_defaults(func=cmd_list)

    p = cmds.add_parser("show", help="a campaign's leaderboard and board")
    p.add_argument("campaign", type=int)
    p.add_argument("--json", action="store_true", help="the API's view as JSON")
    p.add_argument("--board", type=int, default=20, help="board entries to print")
    p.add_argument("--audit", action="store_true", help="each member session's audit too")
    database_flags(p)
    p.set_defaults(func=cmd_show)

    p = cmds.add_parser("export", help="write a whole campaign as JSON Lines")
    p.add_argument("campaign", type=int)
    p.add_argument("-o", "--output")
    database_flags(p)
    p.set_defaults(func=cmd_export)

    p = cmds.add_parser("import", help="import a campaign trace as a read-only campaign")
    p.add_argument("file")
    database_flags(p)
    p.set_defaults(func=cmd_import)

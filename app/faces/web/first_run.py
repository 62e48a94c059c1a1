"""The first run: a dashboard with no sessions offers what works on any machine. The shipped
example traces (real sessions recorded on an H200) import in one click as read-only sessions
whose every audit view works without a GPU; where python-cpu candidates are allowed, the CPU
demo runs the whole loop (agent, harness, judge, triggers, questions) on CPU stand-in kernels."""

from __future__ import annotations

import asyncio
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from app.domain.audit import trace_io
from app.faces.web.deps import Ctx
from app.faces.web.page_check import session_pages
from app.settings import PROJECT_ROOT

router = APIRouter(include_in_schema=False)
EXAMPLES = PROJECT_ROOT / "examples"


def example_traces() -> list[Path]:
    """The session traces the repository ships (examples/README.md says what each one is)."""
    return sorted(EXAMPLES.glob("*.jsonl"))


@router.post("/examples/import")
async def import_examples(ctx: Ctx) -> Response:
    """Import every shipped example session once (a second click imports nothing twice)."""
    database = ctx.database

    def store() -> int:
        imported = 0
        for path in example_traces():
            text = trace_io.trace_text(path.read_bytes(), ctx.settings.trace_max_bytes)
            with database.session() as db:
                try:
                    trace_io.import_trace_once(db, text, path.name, session_pages)
                except trace_io.TraceAlreadyImported:
                    continue
                db.commit()
                imported += 1
        return imported

    imported = await asyncio.to_thread(store)  # a megabyte of JSON each: off the event loop
    return RedirectResponse(f"/?examples={imported}", status_code=303)

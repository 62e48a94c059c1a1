"""Where evaluations run and what each GPU is doing: GET /api/devices (JSON) and the
dashboard's devices panel (/devices/panel, refreshed by htmx). On a cluster the rows come from
its workers (harness/cluster.py); on one machine from the device queue."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from app.faces.web import render
from app.faces.web.deps import Ctx
from app.services.context import ServerContext
from app.services.devices import GPU
from harness.cluster import ClusterExecutor

router = APIRouter()


async def devices_view(ctx: ServerContext) -> dict[str, Any]:
    """{"cluster": address or None, "workers": [{name, gpu, running, waiting, ...}], "error"}."""
    holders = dict(ctx.devices.holders)
    if not ctx.settings.cluster:
        gpu = await ctx.devices.gpu_available()
        rows = [{"name": "this machine", "address": "", "gpu": "0" if gpu else "", "pid": None,
                 "running": [h for d, h in holders.items() if d.startswith("cuda")],
                 "waiting": list(ctx.devices.waiting.get(GPU, [])), "gpu_slots": 1 if gpu else 0}]
        return {"cluster": None, "workers": rows, "sessions": holders, "error": ""}
    executor = ctx.evaluator.executor()
    assert isinstance(executor, ClusterExecutor)
    try:
        rows = await asyncio.wait_for(asyncio.to_thread(executor.status), timeout=15)
        error = ""
    except Exception as exc:  # an unreachable scheduler is shown, not raised
        rows, error = [], f"cannot reach the cluster at {ctx.settings.cluster}: {type(exc).__name__}: {exc}"
    return {"cluster": ctx.settings.cluster, "workers": rows, "sessions": holders, "error": error}


@router.get("/api/devices", tags=["server"])
async def devices(ctx: Ctx) -> dict[str, Any]:
    return await devices_view(ctx)


@router.get("/devices/panel", response_class=HTMLResponse, include_in_schema=False)
async def devices_panel(ctx: Ctx) -> HTMLResponse:
    view = await devices_view(ctx)
    return HTMLResponse(render.render("fragments/devices.html", **view))

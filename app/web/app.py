"""The FastAPI application: lifespan (migrate, recover, run), middleware, routers, errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from app.audit import routes as audit_routes
from app.context import ServerContext
from app.db import open_database, private_dir
from app.limits import LimitError
from app.runner.devices import DeviceQueue
from app.runner.evaluation import use_cluster
from app.runner.manager import RunnerManager
from app.runner.states import InvalidTransition
from app.sessions import Conflict, Invalid, NotFound
from app.settings import Settings
from app.steering import bank
from app.web import api, bank_api, bank_pages, campaigns, cluster_view, identity, pages, render, workbench, ws
from app.web import mcp as mcp_web
from app.web.hosts import HostOriginGuard
from app.web.limits import InputLimits
from app.web.security import make_middleware


def create_app(settings: Settings | None = None, *, devices: DeviceQueue | None = None) -> FastAPI:
    """The server. `devices` lets tests substitute the GPU probe; nothing else is faked."""
    settings = settings or Settings()
    mcp = mcp_web.McpEndpoint(settings)  # /mcp: outside agents (app/web/mcp.py)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        private_dir(settings.data_dir)  # 0700 when this creates it (candidate sources, secrets)
        database = await asyncio.to_thread(open_database, settings)  # alembic migrations, every start
        await asyncio.to_thread(bank.on_startup, database, semantic=settings.bank_semantic_search)
        ctx = ServerContext(settings, database,
                            devices=devices or DeviceQueue(settings.gpu_poll_s, cluster=settings.cluster))
        use_cluster(settings.cluster)  # where evaluations run: this machine, or a Dask cluster
        ctx.hub.bind_loop(asyncio.get_running_loop())
        runners = RunnerManager(ctx)
        runners.recover()  # running -> interrupted; paused stay paused
        app.state.ctx = ctx
        app.state.runners = runners
        try:
            async with mcp.running(ctx):
                yield
        finally:
            await runners.shutdown()
            database.dispose()

    app = FastAPI(
        title="Socratic",
        summary="Sessions where agents write CUDA kernels, a strict harness judges them, and people steer.",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,  # Swagger UI and ReDoc load from a CDN; pages load nothing from the internet
        redoc_url=None,
    )
    app.middleware("http")(make_middleware(settings))
    app.add_middleware(InputLimits, settings=settings)
    app.add_middleware(HostOriginGuard, settings=settings)  # outermost: a foreign Host gets nothing
    app.mount("/static", StaticFiles(directory=str(render.STATIC_DIR)), name="static")
    app.include_router(api.router)
    app.include_router(campaigns.api)
    app.include_router(campaigns.pages)
    app.include_router(ws.router)
    app.include_router(pages.router)
    app.include_router(cluster_view.router)
    app.include_router(audit_routes.router)
    app.include_router(audit_routes.api_router)
    app.include_router(bank_api.router)
    app.include_router(bank_pages.router)
    app.include_router(workbench.router)
    app.include_router(workbench.api_router)
    app.include_router(identity.router)
    app.state.mcp = mcp
    app.router.routes.append(mcp.route())
    app.include_router(mcp_web.router)
    _error_handlers(app)
    return app


def _wants_html(request: Request) -> bool:
    """Pages answer errors with a page (a bare `curl` of an audit URL included); the JSON API,
    /mcp and clients that ask for JSON get JSON."""
    if request.url.path.startswith(("/api", "/mcp")):
        return False
    accept = request.headers.get("accept", "")
    return "text/html" in accept or "application/json" not in accept


def _error(request: Request, status: int, message: str, detail: Any = None) -> Response:
    if _wants_html(request):
        return render.TEMPLATES.TemplateResponse(request, "error.html", {"status": status, "message": message},
                                                 status_code=status)
    return JSONResponse({"detail": detail if detail is not None else message, "message": message},
                        status_code=status)


def _error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def validation(request: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        parts = []
        for e in errors:
            loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body") or "body"
            parts.append(f"{loc}: {e.get('msg', 'invalid')}")
        detail = [{k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in errors]
        return _error(request, 422, "; ".join(parts), detail)

    @app.exception_handler(Invalid)
    async def invalid(request: Request, exc: Invalid) -> Response:
        loc = ["body", exc.field] if exc.field else ["body"]
        return _error(request, 422, str(exc), [{"loc": loc, "msg": str(exc), "type": "value_error"}])

    @app.exception_handler(NotFound)
    async def not_found(request: Request, exc: NotFound) -> Response:
        return _error(request, 404, str(exc))

    @app.exception_handler(Conflict)
    async def conflict(request: Request, exc: Conflict) -> Response:
        return _error(request, 409, str(exc))

    @app.exception_handler(InvalidTransition)
    async def transition(request: Request, exc: InvalidTransition) -> Response:
        return _error(request, 409, str(exc))

    @app.exception_handler(LimitError)
    async def beyond_limit(request: Request, exc: LimitError) -> Response:
        return _error(request, 422, str(exc))

    @app.exception_handler(OverflowError)
    async def overflow(request: Request, exc: OverflowError) -> Response:
        # A number no database column holds (e.g. ?after=2**64): nothing can match it.
        return _error(request, 422, "a number in the request is out of range (integers fit 64 bits)")

    @app.exception_handler(404)
    async def missing(request: Request, exc: Exception) -> Response:
        return _error(request, 404, "there is nothing at this address")


"""The FastAPI application: lifespan (migrate, recover, run), middleware, routers, errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from app.domain.lifecycle import InvalidTransition
from app.domain.sessions import Conflict, Invalid, NotFound
from app.engine.engine import Engine
from app.faces import mcp as mcp_web
from app.faces.web import (
    api,
    bank_api,
    bank_pages,
    campaigns,
    cluster_view,
    downloads,
    first_run,
    identity,
    lessons_api,
    lessons_pages,
    mcp_page,
    pages,
    render,
    session_list,
    workbench,
    ws,
)
from app.faces.web import audit_pages as audit_routes
from app.faces.web.hosts import HostOriginGuard
from app.faces.web.request_limits import InputLimits
from app.faces.web.security import Guesses, make_middleware
from app.services.devices import DeviceQueue
from app.services.evaluation import Evaluator
from app.settings import Settings
from app.store.input_limits import LimitError


def create_app(settings: Settings | None = None, *, devices: DeviceQueue | None = None,
               evaluator: Evaluator | None = None) -> FastAPI:
    """The server around one engine (app/engine/engine.py). `devices` and `evaluator` let tests
    substitute the GPU probe and the harness; nothing else is faked."""
    settings = settings or Settings()
    # One count of wrong credentials per client address for every door (app/faces/web/security.py).
    guesses = Guesses(settings.login_attempts_per_minute, settings.cookie_max_age_s)
    mcp = mcp_web.McpEndpoint(settings, guesses)  # /mcp: outside agents (app/faces/mcp.py)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with Engine(settings, devices=devices, evaluator=evaluator).running() as engine:
            app.state.engine = engine  # routes reach it through app/faces/web/deps.py
            async with mcp.running(engine):
                yield

    app = FastAPI(
        title="Socratic",
        summary="Sessions where agents write CUDA kernels, a strict harness judges them, and people steer.",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,  # Swagger UI and ReDoc load from a CDN; pages load nothing from the internet
        redoc_url=None,
    )
    app.state.guesses = guesses
    app.state.websockets = {}  # open session websockets per client address (app/faces/web/ws.py)
    app.middleware("http")(make_middleware(settings, guesses))
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
    app.include_router(lessons_api.router)
    app.include_router(lessons_pages.router)
    app.include_router(workbench.router)
    app.include_router(workbench.api_router)
    app.include_router(downloads.router)
    app.include_router(first_run.router)
    app.include_router(identity.router)
    app.include_router(session_list.router)
    app.include_router(mcp_page.router)
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


NUMBER_TYPES = ("int_parsing", "float_parsing", "int_type", "float_type")


def in_words(error: Any) -> str:
    """One validation error as a person reads it: a part of the address or query by its name
    (`/sessions/abc` is "the session number in the address must be a whole number, not 'abc'"),
    a body field by its path."""
    loc = [str(x) for x in error.get("loc", ())]
    msg = str(error.get("msg", "invalid"))
    kind = str(error.get("type", ""))
    given = error.get("input")
    if loc and loc[0] in ("path", "query") and len(loc) > 1:
        name = loc[1].removesuffix("_id").replace("_", " ")
        where = "in the address" if loc[0] == "path" else f"(?{loc[1]}=)"
        if kind in NUMBER_TYPES:
            what = "a whole number" if kind.startswith("int") else "a number"
            shown = f", not {str(given)[:40]!r}" if given is not None else ""
            return f"the {name} {where} must be {what}{shown}"
        return f"the {name} {where}: {msg[:1].lower() + msg[1:]}"
    return f"{'.'.join(x for x in loc if x != 'body') or 'body'}: {msg}"


def _error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def validation(request: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        parts = [in_words(e) for e in errors]
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


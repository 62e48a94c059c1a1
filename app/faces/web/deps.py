"""What routes receive through FastAPI's dependency injection: the server context, the runner
manager, a read-only database session, and `Steering`, the one helper for a steering action
(act in one unit of work, wake the session's runner, read the result back). Pages, the JSON
API, the websocket and the bank's routes all act through it, so none of them reaches the
runner manager itself."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Annotated, Any, TypeVar

from fastapi import Depends
from sqlmodel import Session
from starlette.requests import HTTPConnection

from app.engine.engine import Engine
from app.engine.runner.manager import RunnerManager
from app.services.context import ServerContext
from app.store.events import Unit

T = TypeVar("T")
R = TypeVar("R")


def get_engine(conn: HTTPConnection) -> Engine:
    """The engine the app's lifespan started (app/faces/web/app.py)."""
    engine: Engine = conn.app.state.engine
    return engine


def get_ctx(conn: HTTPConnection) -> ServerContext:
    return get_engine(conn).ctx


def get_runners(conn: HTTPConnection) -> RunnerManager:
    return get_engine(conn).runners


Ctx = Annotated[ServerContext, Depends(get_ctx)]
Runners = Annotated[RunnerManager, Depends(get_runners)]


def read_db(ctx: Ctx) -> Iterator[Session]:
    with ctx.database.session() as db:
        yield db


Db = Annotated[Session, Depends(read_db)]


class Steering:
    """Act, wake, read back. `act` runs one domain call in a unit of work (its events are
    published when it commits), then lets the session's runner look again: it starts a runner
    for a running session, wakes a paused one, and stops one whose session ended."""

    def __init__(self, ctx: ServerContext, runners: RunnerManager, loop: asyncio.AbstractEventLoop | None = None
                 ) -> None:
        self.ctx = ctx
        self.runners = runners
        self.loop = loop  # the server's event loop, where runners live

    def _changed(self, session_id: int) -> None:
        """Tell the runners, on the event loop whatever thread acts (a sync route runs in the
        thread pool, where starting a runner task would fail after the commit)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            if self.loop is None:
                raise
            self.loop.call_soon_threadsafe(self.runners.changed, session_id)
            return
        self.runners.changed(session_id)

    def act(self, session_id: int | None, action: Callable[[Unit], T]) -> T:
        """`session_id` None: the action creates the session and returns it (its id is woken)."""
        with self.ctx.unit() as u:
            result = action(u)
        woken = session_id if session_id is not None else getattr(result, "id", None)
        if woken is not None:
            self._changed(int(woken))
        return result

    def read(self, reader: Callable[[Session], R]) -> R:
        with self.ctx.database.session() as db:
            return reader(db)

    def act_and_read(self, session_id: int, action: Callable[[Unit], Any], reader: Callable[[Session], R]) -> R:
        self.act(session_id, action)
        return self.read(reader)

    def wake(self, session_id: int) -> None:
        """For changes written outside a unit (the bank's auto-ask policy): let the runner look again."""
        self._changed(session_id)


async def get_steering(ctx: Ctx, runners: Runners) -> Steering:
    # async: FastAPI runs it on the event loop, whose handle the Steering keeps for sync routes.
    return Steering(ctx, runners, asyncio.get_running_loop())


Steer = Annotated[Steering, Depends(get_steering)]

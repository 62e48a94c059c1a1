"""What routes receive through FastAPI's dependency injection: the server context, the runner
manager, a read-only database session, and `Steering`, the one helper for a steering action
(act in one unit of work, wake the session's runner, read the result back). Pages, the JSON
API, the websocket and the bank's routes all act through it, so none of them reaches the
runner manager itself."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated, Any, TypeVar

from fastapi import Depends
from sqlmodel import Session
from starlette.requests import HTTPConnection

from app.context import ServerContext
from app.events import Unit
from app.runner.manager import RunnerManager

T = TypeVar("T")
R = TypeVar("R")


def get_ctx(conn: HTTPConnection) -> ServerContext:
    ctx: ServerContext = conn.app.state.ctx
    return ctx


def get_runners(conn: HTTPConnection) -> RunnerManager:
    runners: RunnerManager = conn.app.state.runners
    return runners


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

    def __init__(self, ctx: ServerContext, runners: RunnerManager) -> None:
        self.ctx = ctx
        self.runners = runners

    def act(self, session_id: int | None, action: Callable[[Unit], T]) -> T:
        """`session_id` None: the action creates the session and returns it (its id is woken)."""
        with self.ctx.unit() as u:
            result = action(u)
        woken = session_id if session_id is not None else getattr(result, "id", None)
        if woken is not None:
            self.runners.changed(int(woken))
        return result

    def read(self, reader: Callable[[Session], R]) -> R:
        with self.ctx.database.session() as db:
            return reader(db)

    def act_and_read(self, session_id: int, action: Callable[[Unit], Any], reader: Callable[[Session], R]) -> R:
        self.act(session_id, action)
        return self.read(reader)

    def wake(self, session_id: int) -> None:
        """For changes written outside a unit (the bank's auto-ask policy): let the runner look again."""
        self.runners.changed(session_id)


def get_steering(ctx: Ctx, runners: Runners) -> Steering:
    return Steering(ctx, runners)


Steer = Annotated[Steering, Depends(get_steering)]

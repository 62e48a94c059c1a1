"""The append-only event log of a session and its live fan-out.

Events are written inside the caller's transaction (the sequence number comes from the
session row, so it is gapless and unique per session) and published to subscribers only
after the commit: a websocket never shows an event that a restart could lose."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm.attributes import set_committed_value
from sqlmodel import Session, col, select

from app.store.database import Database, largest_integer
from app.store.models import Event, SteeringSession, utcnow


@dataclass(frozen=True)
class LiveNote:
    """A transient update (evaluation progress) that is pushed but not stored."""

    session_id: int
    kind: str
    payload: dict[str, Any] = field(default_factory=dict)


Published = Event | LiveNote


class EventHub:
    """Fan-out of committed events and live notes to the websockets watching a session.
    Lives on the event loop; threads use publish_threadsafe."""

    def __init__(self) -> None:
        self._subscribers: dict[int, set[asyncio.Queue[Published]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def subscribe(self, session_id: int) -> asyncio.Queue[Published]:
        queue: asyncio.Queue[Published] = asyncio.Queue()
        self._subscribers.setdefault(session_id, set()).add(queue)
        return queue

    def unsubscribe(self, session_id: int, queue: asyncio.Queue[Published]) -> None:
        subs = self._subscribers.get(session_id)
        if subs is not None:
            subs.discard(queue)
            if not subs:
                del self._subscribers[session_id]

    def subscriber_count(self, session_id: int) -> int:
        return len(self._subscribers.get(session_id, ()))

    def publish(self, item: Published) -> None:
        for queue in list(self._subscribers.get(item.session_id, ())):
            queue.put_nowait(item)

    def publish_threadsafe(self, item: Published) -> None:
        if self._loop is None or self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self.publish, item)


class Unit:
    """One transaction: database work plus the events it records, published on commit."""

    def __init__(self, database: Database, hub: EventHub) -> None:
        self._database = database
        self._hub = hub
        self._events: list[Event] = []
        self._db: Session | None = None

    @property
    def db(self) -> Session:
        assert self._db is not None, "use the unit inside a with block"
        return self._db

    def __enter__(self) -> Unit:
        self._db = Session(self._database.engine, expire_on_commit=False)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        db = self.db
        try:
            if exc_type is None:
                db.commit()
                for ev in self._events:
                    self._hub.publish(ev)
            else:
                db.rollback()
        finally:
            db.close()
            self._db = None

    def record(self, session: SteeringSession, kind: str, payload: dict[str, Any] | None = None) -> Event:
        """Append an event to `session`'s trace in this transaction.

        The sequence number is taken by one UPDATE ... RETURNING on the session row, never from
        the (possibly stale) object in memory: on PostgreSQL the update holds the row's lock until
        this transaction ends, so concurrent writers to one session take numbers one after the
        other, gapless and unique; on SQLite the update takes the database's write lock."""
        assert session.id is not None
        now = utcnow()
        seq = self.db.execute(
            update(SteeringSession).where(col(SteeringSession.id) == session.id)
            .values(last_seq=col(SteeringSession.last_seq) + 1, updated_at=now)
            .returning(col(SteeringSession.last_seq))
            .execution_options(synchronize_session=False)
        ).scalar_one()
        set_committed_value(session, "last_seq", seq)
        set_committed_value(session, "updated_at", now)
        ev = Event(session_id=session.id, seq=seq, kind=kind, payload=payload or {})
        self.db.add(session)
        self.db.add(ev)
        self._events.append(ev)
        return ev


def events_after(db: Session, session_id: int, after: int, limit: int | None = None) -> Sequence[Event]:
    """Events of a session with seq > after, oldest first (none past the largest number the
    database's integer column holds: PostgreSQL would refuse to compare with it)."""
    if after >= largest_integer(db.get_bind().dialect.name):
        return []
    query = (
        select(Event).where(Event.session_id == session_id, col(Event.seq) > after)
        .order_by(col(Event.seq))
    )
    if limit is not None:
        query = query.limit(limit)
    return db.exec(query).all()

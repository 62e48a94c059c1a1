"""Distilling lessons in the background (app/domain/lessons.py, lessons/): the pipeline asks for
a judged candidate (that candidate against its parent: one candidate's reading, however long
the session) and the runner for the whole session at its end; one worker thread distils them one
at a time, in its own transactions, so the runner never waits for it.

Requests for the same session coalesce: candidates asked for while one distillation runs are
distilled together next, and a request for the whole session covers them. A failure is logged
and counted; it never reaches the session. `drain` waits until nothing is pending (tests,
shutdown)."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from app.domain.lessons import distill_candidates, distill_session
from app.store.database import Database

log = logging.getLogger("socratic.lessons")


@dataclass
class DistillerStats:
    runs: int = 0
    failures: int = 0
    seconds: float = 0.0  # spent distilling, in all
    last: dict[str, Any] = field(default_factory=dict)  # the last run: session, seconds, counts or error

    def to_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "failures": self.failures, "seconds": round(self.seconds, 3), "last": self.last}


class LessonDistiller:
    def __init__(self, database: Database | None = None, *, enabled: bool = True) -> None:
        self.database = database
        self.enabled = enabled
        self.stats = DistillerStats()
        # session id -> the candidate numbers asked for, or None for the whole session (in order)
        self._pending: dict[int, set[int] | None] = {}
        self._busy = False
        self._closed = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def schedule(self, session_id: int, candidate: int | None = None) -> None:
        """Ask for a judged candidate's distillation, or (candidate None) the whole session's;
        returns at once."""
        if not self.enabled or self.database is None or self._closed:
            return
        with self._cond:
            if session_id in self._pending:
                asked = self._pending[session_id]
                if asked is not None and candidate is not None:
                    asked.add(candidate)
                else:
                    self._pending[session_id] = None
            else:
                self._pending[session_id] = {candidate} if candidate is not None else None
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="lesson-distiller", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until nothing is pending or running; False when `timeout` passed first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout: float = 10.0) -> None:
        """Finish what is pending (up to `timeout`), then stop the worker."""
        self.drain(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if self._closed and not self._pending:
                    return
                session_id = next(iter(self._pending))
                numbers = self._pending.pop(session_id)
                self._busy = True
            started = time.monotonic()
            try:
                assert self.database is not None
                with self.database.session() as db:
                    done = (distill_session(db, session_id) if numbers is None
                            else distill_candidates(db, session_id, numbers))
                    db.commit()
                self.stats.last = {"session": session_id, **({"candidates": sorted(numbers)} if numbers else {}),
                                   **done.to_dict()}
            except Exception as exc:  # a broken trace row or a database hiccup: logged, the session never sees it
                self.stats.failures += 1
                self.stats.last = {"session": session_id, "error": f"{type(exc).__name__}: {exc}"}
                log.exception("distilling lessons from session %s", session_id)
            finally:
                seconds = time.monotonic() - started
                self.stats.runs += 1
                self.stats.seconds += seconds
                self.stats.last["seconds"] = round(seconds, 3)
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

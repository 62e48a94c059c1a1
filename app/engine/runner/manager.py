"""Starts, wakes and stops session runners, and recovers sessions at startup: running ones
become interrupted (one click resumes them), paused ones stay paused."""

from __future__ import annotations

import asyncio
import logging

from app.domain.sessions import get_session, interrupt_running
from app.engine.runner.session_runner import SessionRunner
from app.services.context import ServerContext
from app.store.models import PAUSED, RUNNING

log = logging.getLogger("socratic.runner")


class RunnerManager:
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.runners: dict[int, SessionRunner] = {}

    def recover(self) -> list[int]:
        with self.ctx.unit() as u:
            return interrupt_running(u)

    def is_running(self, session_id: int) -> bool:
        runner = self.runners.get(session_id)
        return runner is not None and runner.alive

    def ensure_running(self, session_id: int) -> None:
        """A running session has a live runner task; start one if it has none."""
        if self.is_running(session_id):
            self.runners[session_id].wake.set()
            return
        runner = SessionRunner(self.ctx, session_id)
        self.runners[session_id] = runner
        runner.start()

    def changed(self, session_id: int) -> None:
        """The session's state or its pending messages changed: let its runner look again."""
        with self.ctx.unit() as u:
            status = get_session(u.db, session_id).status
        if status == RUNNING:
            self.ensure_running(session_id)
        elif status == PAUSED:
            runner = self.runners.get(session_id)
            if runner is not None:
                runner.wake.set()
        else:
            self.stop(session_id)

    def stop(self, session_id: int) -> None:
        runner = self.runners.get(session_id)
        if runner is None or not runner.alive:
            return
        runner.request_stop()

    async def wait_idle(self, session_id: int, timeout: float = 30.0) -> None:
        runner = self.runners.get(session_id)
        if runner is not None and runner.task is not None:
            await asyncio.wait_for(asyncio.shield(runner.task), timeout)

    async def shutdown(self) -> None:
        """Server stop: cancel evaluations and tasks. Sessions keep their status in the
        database; running ones are marked interrupted at the next start (the engine closes the
        evaluator afterwards)."""
        tasks = []
        for runner in self.runners.values():
            if runner.alive and runner.task is not None:
                runner.cancel.set()
                runner.task.cancel()
                tasks.append(runner.task)
        if tasks:
            await asyncio.wait(tasks, timeout=30)
        self.runners.clear()

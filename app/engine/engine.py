"""The engine: everything a running Socratic needs, built once and started in one place. The web
app (app/faces/web/app.py), MCP, the commands and the experiment scripts all start an `Engine`
rather than assembling the services themselves (KernelBot's backend object is the model).

Start: the data folder (0700), the database (migrated), the question bank's starter questions,
the services (`ServerContext`: event hub, device queue, evaluator on this machine or a cluster),
the runners, and recovery (sessions that were running become interrupted; paused stay paused).
Stop: the runners (evaluations in flight cancelled), the evaluator's worker processes, the
database."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from app.domain.steering import bank
from app.engine.runner.manager import RunnerManager
from app.services.context import ServerContext
from app.services.devices import DeviceQueue
from app.services.evaluation import Evaluator
from app.settings import Settings
from app.store.database import open_database, private_dir


class Engine:
    """One server's engine. `devices` and `evaluator` let tests and the scripts' CPU stand-in
    substitute the GPU probe and the harness; nothing else is replaceable."""

    def __init__(self, settings: Settings, *, devices: DeviceQueue | None = None,
                 evaluator: Evaluator | None = None, gpu_probe: Callable[[], bool] | None = None) -> None:
        self.settings = settings
        self._devices = devices
        self._evaluator = evaluator
        self._gpu_probe = gpu_probe
        self._ctx: ServerContext | None = None
        self._runners: RunnerManager | None = None
        self.recovered: list[int] = []

    @property
    def ctx(self) -> ServerContext:
        if self._ctx is None:
            raise RuntimeError("the engine is not started")
        return self._ctx

    @property
    def runners(self) -> RunnerManager:
        if self._runners is None:
            raise RuntimeError("the engine is not started")
        return self._runners

    async def start(self) -> None:
        s = self.settings
        private_dir(s.data_dir)  # 0700 when this creates it (candidate sources, secrets)
        database = await asyncio.to_thread(open_database, s)  # alembic migrations, every start
        await asyncio.to_thread(bank.on_startup, database, semantic=s.bank_semantic_search)
        devices = self._devices
        if devices is None:
            probe = {"gpu_probe": self._gpu_probe} if self._gpu_probe is not None else {}
            devices = DeviceQueue(s.gpu_poll_s, cluster=s.cluster, **probe)
        evaluator = self._evaluator or Evaluator(s.cluster)  # this machine, or a Dask cluster
        self._ctx = ServerContext(s, database, devices=devices, evaluator=evaluator)
        self._ctx.hub.bind_loop(asyncio.get_running_loop())
        self._runners = RunnerManager(self._ctx)
        self.recovered = self._runners.recover()

    async def stop(self) -> None:
        if self._ctx is None or self._runners is None:
            return
        await self._runners.shutdown()
        await asyncio.to_thread(self._ctx.lessons.close)
        await asyncio.to_thread(self._ctx.evaluator.close)
        self._ctx.database.dispose()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Engine]:
        await self.start()
        try:
            yield self
        finally:
            await self.stop()

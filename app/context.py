"""What the server holds while it runs: settings, the database, the event hub, the device
queue and the runners. Built once by app/web/app.py and reached from routes as app.state.ctx."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.db import Database
from app.events import EventHub, Unit
from app.runner.devices import DeviceQueue
from app.settings import Settings

if TYPE_CHECKING:
    from app.runner.manager import RunnerManager


@dataclass
class ServerContext:
    settings: Settings
    database: Database
    hub: EventHub = field(default_factory=EventHub)
    devices: DeviceQueue = field(default_factory=DeviceQueue)
    runners: RunnerManager | None = None

    def unit(self) -> Unit:
        """A transaction whose recorded events are published when it commits."""
        return Unit(self.database, self.hub)

    @property
    def manager(self) -> RunnerManager:
        assert self.runners is not None, "the runner manager starts with the app"
        return self.runners

"""What the server holds while it runs: settings, the database, the event hub and the device
queue; the services every domain call and tool handler may use. Built once by app/web/app.py,
reached from routes through app/web/deps.py. The runner manager is not here: it sits above
the domain, and routes get it by dependency injection (app.state.runners)."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.db import Database
from app.events import EventHub, Unit
from app.runner.devices import DeviceQueue
from app.settings import Settings


@dataclass
class ServerContext:
    settings: Settings
    database: Database
    hub: EventHub = field(default_factory=EventHub)
    devices: DeviceQueue = field(default_factory=DeviceQueue)

    def unit(self) -> Unit:
        """A transaction whose recorded events are published when it commits."""
        return Unit(self.database, self.hub)

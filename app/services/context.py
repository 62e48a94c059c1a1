"""What the server holds while it runs: settings, the database, the event hub, the device
queue, the evaluator and the lessons' background distiller; the services every domain call,
tool handler and face may use. Built once by the engine (app/engine/engine.py). The runners
are not here: they sit above the services, in the engine."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.services.devices import DeviceQueue
from app.services.distiller import LessonDistiller
from app.services.evaluation import Evaluator
from app.settings import Settings
from app.store.database import Database
from app.store.events import EventHub, Unit


@dataclass
class ServerContext:
    settings: Settings
    database: Database
    hub: EventHub = field(default_factory=EventHub)
    devices: DeviceQueue = field(default_factory=DeviceQueue)
    evaluator: Evaluator = field(default_factory=Evaluator)  # this machine, or settings.cluster
    lessons: LessonDistiller = field(default_factory=LessonDistiller)  # distils in the background

    def __post_init__(self) -> None:
        if self.lessons.database is None:
            self.lessons.database = self.database
            self.lessons.enabled = self.settings.lessons_distill

    def unit(self) -> Unit:
        """A transaction whose recorded events are published when it commits."""
        return Unit(self.database, self.hub)

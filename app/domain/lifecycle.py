"""The session state machine: created -> running <-> paused -> done | stopped | failed, plus
interrupted (the server stopped while it ran; resuming continues where it was)."""

from __future__ import annotations

from app.store.models import CREATED, DONE, FAILED, INTERRUPTED, PAUSED, RUNNING, STOPPED

TRANSITIONS: dict[str, frozenset[str]] = {
    CREATED: frozenset({RUNNING, STOPPED}),
    RUNNING: frozenset({PAUSED, DONE, STOPPED, FAILED, INTERRUPTED}),
    PAUSED: frozenset({RUNNING, STOPPED, FAILED}),
    INTERRUPTED: frozenset({RUNNING, STOPPED}),
    DONE: frozenset(),
    STOPPED: frozenset(),
    FAILED: frozenset(),
}
FINAL_STATES = frozenset(s for s, targets in TRANSITIONS.items() if not targets)
ACTIVE_STATES = frozenset({RUNNING, PAUSED})  # a runner task may exist for these


class InvalidTransition(ValueError):
    """A steering action that does not apply to the session's current state."""

    def __init__(self, current: str, target: str) -> None:
        allowed = ", ".join(sorted(TRANSITIONS.get(current, ()))) or "nothing (it is final)"
        super().__init__(f"a {current} session cannot become {target}; from {current} it can become {allowed}")
        self.current = current
        self.target = target


def can_transition(current: str, target: str) -> bool:
    return target in TRANSITIONS.get(current, frozenset())


def check_transition(current: str, target: str) -> None:
    if not can_transition(current, target):
        raise InvalidTransition(current, target)

"""The runner's persisted progress, `SteeringSession.runner_state`: the one module that reads
and writes it. Everything a restarted server needs to continue a session's step is a key:

  agent            the agent's snapshot (Agent.snapshot)
  step             the step in flight (AgentStep.to_dict), None between steps
  results          the tool results of that step so far
  feedback         what the agent gets before its next step
  call_candidates  tool call id -> candidate id, so a resumed call finds its candidate
  step_checked     the end-of-step checks ran (not twice after a restart)
  workspace        the agent's working copy of the kernel (app/engine/tools/workspace.py)

Writers change keys through `save`, inside the caller's unit of work, so the state commits
with the events that go with it."""

from __future__ import annotations

import copy
from typing import Any

from app.store.events import Unit
from app.store.models import SteeringSession

KEYS = ("agent", "step", "results", "feedback", "call_candidates", "step_checked", "workspace")


class RunnerState:
    def __init__(self, data: dict[str, Any] | None = None) -> None:
        self._data: dict[str, Any] = dict(data or {})

    @classmethod
    def load(cls, session: SteeringSession) -> RunnerState:
        """The state as the session last saved it."""
        return cls(copy.deepcopy(session.runner_state or {}))

    def get(self, key: str, default: Any = None) -> Any:
        if key not in KEYS:
            raise KeyError(key)
        return self._data.get(key, default)

    def save(self, unit: Unit, session: SteeringSession, **changes: Any) -> None:
        """Change `changes` and write the whole state onto `session` in `unit`'s transaction."""
        unknown = set(changes) - set(KEYS)
        if unknown:
            raise KeyError(f"unknown runner_state keys: {sorted(unknown)}")
        self._data.update(changes)
        session.runner_state = dict(self._data)
        unit.db.add(session)

    # -- the keys other modules share --------------------------------------------------------

    def candidate_of_call(self, call_id: str) -> int | None:
        """The candidate a tool call already created (before a restart), if any."""
        found = self.get("call_candidates", {}).get(call_id)
        return int(found) if found is not None else None

    def remember_candidate(self, unit: Unit, session: SteeringSession, call_id: str, candidate_id: int) -> None:
        self.save(unit, session, call_candidates={**self.get("call_candidates", {}), call_id: candidate_id})

    def add_result(self, unit: Unit, session: SteeringSession, result: dict[str, Any]) -> None:
        self.save(unit, session, results=[*self.get("results", []), result])

"""The audit timeline: every event of a session, sorted into the kinds a reviewer filters by,
searchable, and linked to the candidates it concerns."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from app.domain.audit.record import AuditRecord
from app.store.models import Event

# Filter kinds, in the order the page shows them.
MESSAGE = "message"
TOOL = "tool"
EVALUATION = "evaluation"
TRIGGER = "trigger"
INTERVENTION = "intervention"
SESSION = "session"
FILTER_KINDS: dict[str, str] = {
    MESSAGE: "agent messages",
    TOOL: "tool calls",
    EVALUATION: "evaluations",
    TRIGGER: "triggers",
    INTERVENTION: "interventions",
    SESSION: "session state",
}
_BY_EVENT_KIND: dict[str, tuple[str, ...]] = {
    "tool_result": (TOOL,),
    "candidate": (TOOL,),
    "evaluation_started": (EVALUATION,),
    "evaluation": (EVALUATION,),
    "verdict": (EVALUATION,),
    "leader": (EVALUATION,),
    "goal_met": (EVALUATION,),
    "trigger": (TRIGGER,),
    "intervention": (INTERVENTION,),
    "delivered": (INTERVENTION,),
}


@dataclass
class TimelineEntry:
    event: Event
    kinds: tuple[str, ...]
    candidates: list[int] = field(default_factory=list)  # numbers of the candidates it concerns

    @property
    def seq(self) -> int:
        return self.event.seq


def kinds_of(event: Event) -> tuple[str, ...]:
    if event.kind == "agent_step":
        kinds: list[str] = []
        if str(event.payload.get("text", "")).strip():
            kinds.append(MESSAGE)
        if event.payload.get("tool_calls"):
            kinds.append(TOOL)
        return tuple(kinds) or (MESSAGE,)
    return _BY_EVENT_KIND.get(event.kind, (SESSION,))


def _numbers(values: Iterable[Any]) -> list[int]:
    out: list[int] = []
    for v in values:
        if isinstance(v, int) and not isinstance(v, bool) and v > 0 and v not in out:
            out.append(v)
        elif isinstance(v, str) and v.isdigit() and int(v) > 0 and int(v) not in out:
            out.append(int(v))
    return out


def _concerned(event: Event, submitted: list[int]) -> list[int]:
    p = event.payload
    if event.kind in ("candidate", "evaluation_started", "evaluation", "verdict", "leader", "goal_met"):
        return _numbers([p.get("number")])
    if event.kind == "agent_step":
        refs: list[Any] = []
        for call in p.get("tool_calls") or []:
            args = call.get("args", {}) if isinstance(call, dict) else {}
            refs.extend([args.get("parent"), args.get("number")])
        return _numbers(refs)
    if event.kind == "tool_result" and p.get("name") == "submit_candidate":
        return list(submitted[-1:])
    if event.kind == "tool_result" and p.get("name") == "read_candidate":
        return []
    if event.kind == "trigger":
        evidence: dict[str, Any] = p["evidence"] if isinstance(p.get("evidence"), dict) else {}
        window: list[Any] = evidence["window"] if isinstance(evidence.get("window"), list) else []
        return _numbers([evidence.get("candidate"), evidence.get("number"),
                         *[w.get("number") for w in window if isinstance(w, dict)]])
    return []


def timeline(record: AuditRecord) -> list[TimelineEntry]:
    """Every event with its filter kinds and the candidates it concerns."""
    entries: list[TimelineEntry] = []
    submitted: list[int] = []  # candidates created since the agent's last step
    known = {c.number for c in record.candidates}
    for e in record.events:
        if e.kind == "agent_step":
            submitted = []
        elif e.kind == "candidate":
            submitted.extend(_numbers([e.payload.get("number")]))
        numbers = [n for n in _concerned(e, submitted) if n in known]
        entries.append(TimelineEntry(e, kinds_of(e), numbers))
    return entries


def matches(entry: TimelineEntry, kinds: set[str], query: str, candidate: int | None) -> bool:
    if kinds and not kinds.intersection(entry.kinds):
        return False
    if candidate is not None and candidate not in entry.candidates:
        return False
    if query:
        haystack = entry.event.kind + " " + json.dumps(entry.event.payload, ensure_ascii=False, default=str)
        if query.casefold() not in haystack.casefold():
            return False
    return True


def filter_timeline(entries: list[TimelineEntry], kinds: Iterable[str] = (), query: str = "",
                    candidate: int | None = None) -> list[TimelineEntry]:
    wanted = {k for k in kinds if k in FILTER_KINDS}
    q = query.strip()
    return [e for e in entries if matches(e, wanted, q, candidate)]


def counts_by_kind(entries: list[TimelineEntry]) -> dict[str, int]:
    counts = dict.fromkeys(FILTER_KINDS, 0)
    for e in entries:
        for k in e.kinds:
            counts[k] += 1
    return counts


# -- events in words ----------------------------------------------------------------------------

FIELD_TEXT_MAX = 2000  # characters of one field shown; the trace download has the rest


def rounded(v: Any) -> str:
    """A number as people read it: 4 significant digits (10.934, 0.6234, 1.2e+04), whole
    numbers whole; anything else as text. A trace's floats carry 16 digits nobody needs."""
    if isinstance(v, bool) or v is None:
        return "yes" if v is True else "no" if v is False else "none"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if v.is_integer() and abs(v) < 1e15:
            return str(int(v))
        return f"{v:.4g}" if abs(v) >= 1e-3 else f"{v:.3g}"
    return str(v)


def value_words(v: Any, depth: int = 0) -> str:
    """A payload value in words: numbers rounded, lists joined by "; ", mappings as "key: value"."""
    if isinstance(v, dict):
        if depth >= 3:
            return f"({len(v)} fields)"
        return ", ".join(f"{str(k).replace('_', ' ')}: {value_words(x, depth + 1)}" for k, x in v.items())
    if isinstance(v, list | tuple):
        if depth >= 3:
            return f"({len(v)} items)"
        return "; ".join(value_words(x, depth + 1) for x in v)
    text = rounded(v)
    return text if len(text) <= FIELD_TEXT_MAX else text[:FIELD_TEXT_MAX] + "…"


def payload_items(payload: Any) -> list[tuple[str, str]]:
    """An event's fields as (label, words) pairs, for kinds with no sentence of their own."""
    if not isinstance(payload, dict):
        return [("value", value_words(payload))]
    return [(str(k).replace("_", " "), value_words(v)) for k, v in payload.items()]


FORK_FIELDS = ("from_session", "from_title", "from_candidate", "number", "speedup", "author")


def fork_extra(payload: Any) -> list[tuple[str, str]]:
    """The fields of a `forked` event beyond the sentence the page writes from FORK_FIELDS."""
    if not isinstance(payload, dict):
        return []
    return payload_items({k: v for k, v in payload.items() if k not in FORK_FIELDS})

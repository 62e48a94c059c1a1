"""What a session cost: tokens by kind and money by agent step, where the prompt tokens went
(context, tool results) against generation, the device time its evaluations took, and the
knowledge layer's share (lessons chosen for the prompt, `read_lessons` calls: `knowledge` events).

Read from the `usage` of each `agent_step` event. docs/trace.md defines the contract; every
field but input_tokens, output_tokens and cost_usd is optional, and a missing one is counted
as missing, never guessed: prompt tokens a step does not split are shown as "not split"."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.domain.audit.record import AuditRecord

TOKEN_KINDS = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")
TOKEN_LABELS = {
    "input_tokens": "input (uncached prompt)",
    "cache_read_tokens": "cache read (prompt)",
    "cache_write_tokens": "cache write (prompt)",
    "output_tokens": "output (generation)",
}
# Parts a step may split its prompt into (usage.prompt_parts); other keys are shown as given.
PROMPT_PARTS = {"context": "prompt context", "tool_results": "tool results", "steering": "steering messages"}
GENERATION = "generation"
NOT_SPLIT = "prompt, not split by the agent"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _float(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


@dataclass
class StepCost:
    index: int  # 1-based agent step
    seq: int
    agent: str
    model: str
    tokens: dict[str, int]  # present token kinds only
    cost_usd: float | None
    cumulative_usd: float
    prompt_parts: dict[str, int]  # as the agent reported them
    tool_calls: int
    tool_result_chars: int  # text of this step's tool results, as the trace holds it

    @property
    def prompt_tokens(self) -> int:
        return sum(self.tokens.get(k, 0) for k in TOKEN_KINDS if k != "output_tokens")

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens.values())


@dataclass
class DeviceTime:
    device: str
    purpose: str  # suite | retime
    evaluations: int
    seconds: float


@dataclass
class KnowledgeCost:
    """What lessons (lessons/) cost the session, from its `knowledge` events: the prompt's section
    chosen at each runner start (`what: prompt`) and each `read_lessons` call (`what: read_lessons`),
    with the seconds spent choosing them and the tokens of what the agent was given."""

    events: int = 0  # knowledge events of any kind
    prompts: int = 0  # prompt sections chosen (one per runner start)
    readings: int = 0  # read_lessons calls
    seconds: float = 0.0
    tokens: int = 0
    lessons: list[int] = field(default_factory=list)  # distinct lesson ids given, in first-seen order
    token_share: float | None = None  # of all the session's tokens (None without any)
    second_share: float | None = None  # of the session's running seconds (None without any)


@dataclass
class CostReport:
    steps: list[StepCost]
    tokens: dict[str, int]  # by kind, summed over steps
    cost_usd: float
    where: dict[str, int]  # where the tokens went: prompt parts, not split, generation
    missing: dict[str, int]  # usage field -> steps that lack it
    device_time: list[DeviceTime]
    tool_result_chars: int
    session_used: dict[str, float] = field(default_factory=dict)  # the session row's counters
    knowledge: KnowledgeCost = field(default_factory=KnowledgeCost)

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens.values())

    @property
    def has_tokens(self) -> bool:
        return self.total_tokens > 0 or self.cost_usd > 0


def session_cost(record: AuditRecord) -> CostReport:
    steps: list[StepCost] = []
    totals = dict.fromkeys(TOKEN_KINDS, 0)
    where: dict[str, int] = {}
    missing: dict[str, int] = {}
    cumulative = 0.0
    result_chars = 0
    devices: dict[tuple[str, str], DeviceTime] = {}
    knowledge = KnowledgeCost()
    for e in record.events:
        p = e.payload
        if e.kind == "agent_step":
            usage: dict[str, Any] = p["usage"] if isinstance(p.get("usage"), dict) else {}
            tokens = {k: v for k in TOKEN_KINDS if (v := _int(usage.get(k))) is not None}
            for k in (*TOKEN_KINDS, "cost_usd", "prompt_parts"):
                if k not in usage:
                    missing[k] = missing.get(k, 0) + 1
            for k, v in tokens.items():
                totals[k] += v
            cost = _float(usage.get("cost_usd"))
            cumulative += cost or 0.0
            parts_raw = usage.get("prompt_parts")
            parts = {str(k): v for k, v0 in parts_raw.items() if (v := _int(v0)) is not None} \
                if isinstance(parts_raw, dict) else {}
            step = StepCost(len(steps) + 1, e.seq, str(p.get("agent", "")), str(usage.get("model", "")), tokens,
                            cost, cumulative, parts, len(p.get("tool_calls") or []), 0)
            steps.append(step)
            for k, v in parts.items():
                label = PROMPT_PARTS.get(k, k)
                where[label] = where.get(label, 0) + v
            unsplit = step.prompt_tokens - sum(parts.values())
            if unsplit > 0:
                where[NOT_SPLIT] = where.get(NOT_SPLIT, 0) + unsplit
            if tokens.get("output_tokens"):
                where[GENERATION] = where.get(GENERATION, 0) + tokens["output_tokens"]
        elif e.kind == "tool_result":
            chars = len(str(p.get("text", "")))
            result_chars += chars
            if steps:
                steps[-1].tool_result_chars += chars
        elif e.kind == "evaluation":
            key = (str(p.get("device") or "unknown"), str(p.get("purpose", "suite")))
            slot = devices.setdefault(key, DeviceTime(key[0], key[1], 0, 0.0))
            slot.evaluations += 1
            slot.seconds += _float(p.get("seconds")) or 0.0
        elif e.kind == "knowledge":
            _add_knowledge(knowledge, p)
    s = record.session
    used = {"steps": float(s.used_steps), "tokens": float(s.used_tokens), "cost_usd": s.used_cost_usd,
            "seconds": s.used_seconds}
    total = sum(totals.values())
    knowledge.token_share = knowledge.tokens / total if total else None
    knowledge.second_share = knowledge.seconds / s.used_seconds if s.used_seconds else None
    return CostReport(steps, totals, cumulative, where, missing, sorted(devices.values(), key=lambda d: d.device),
                      result_chars, used, knowledge)


def _add_knowledge(knowledge: KnowledgeCost, p: dict[str, Any]) -> None:
    """One `knowledge` event; a field that is missing or not a count is not counted."""
    knowledge.events += 1
    if p.get("what") == "prompt":
        knowledge.prompts += 1
    elif p.get("what") == "read_lessons":
        knowledge.readings += 1
    knowledge.seconds += _float(p.get("seconds")) or 0.0
    knowledge.tokens += _int(p.get("tokens")) or 0
    ids = p.get("lessons")
    for lesson_id in ids if isinstance(ids, list) else []:
        if _int(lesson_id) is not None and lesson_id not in knowledge.lessons:
            knowledge.lessons.append(lesson_id)

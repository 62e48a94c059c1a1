"""What each question changed: the leader's speedup after every evaluation, where triggers
fired and messages reached the agent, and the gain credited to each message.

The credit rule is the question bank's (question_bank/evidence.py): a message delivered when
the session had finished n evaluations is credited with leader-after / leader-at-delivery
over evaluations n+1 .. n+K. To use that one rule rather than a second copy, the trace is
replayed through evidence.record_use / record_evaluation into a scratch in-memory database;
K is the session's credit window. Everything is read from the trace's events, so imported
sessions are attributed exactly like live ones."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.pool import StaticPool
from sqlmodel import Session, SQLModel, create_engine

from app.domain.audit.evidence import pause_log
from app.domain.audit.record import AuditRecord
from app.domain.steering.triggers import Thresholds
from app.store.models import INFORMATION, LEADER, QUESTION
from question_bank import evidence
from question_bank.models import Author, BankQuestion, BankUse

SCRATCH_REF = "audit"


@dataclass(frozen=True)
class EvaluationStep:
    """One judged candidate, in the order the judge decided."""

    index: int  # 1-based: the session's n-th evaluation
    number: int  # the candidate
    verdict: str
    speedup: float | None  # geomean vs baseline, all scenarios (None: it failed)
    leader_after: float  # the leader's speedup once this verdict was in (1.0: the baseline)
    seq: int


@dataclass(frozen=True)
class TriggerMark:
    seq: int
    kind: str
    summary: str
    after_evaluations: int  # evaluations finished when it fired


@dataclass
class InterventionCredit:
    """One message to the agent and the gain that followed it."""

    label: str  # Q1, Q2 ... for questions, I1 ... for information
    intervention_id: int | None  # the row (None if the trace's row is missing)
    kind: str
    author: str
    mode: str
    text: str
    trigger_kind: str | None  # the pause it answered
    sent_seq: int
    delivered_seq: int | None  # None: never reached the agent
    after_evaluations: int | None  # evaluations finished at delivery
    leader_before: float | None
    leader_after: float | None
    evaluations_seen: int
    window: int
    gain: float | None  # leader after / leader before over the window seen (None: nothing yet)
    candidates: list[int] = field(default_factory=list)  # evaluated in its window
    new_leaders: list[int] = field(default_factory=list)
    reply: str = ""  # what the agent said in its first step after the delivery

    @property
    def gain_percent(self) -> float | None:
        return None if self.gain is None else (self.gain - 1.0) * 100.0

    @property
    def complete(self) -> bool:
        return self.evaluations_seen >= self.window


@dataclass
class Attribution:
    steps: list[EvaluationStep]
    triggers: list[TriggerMark]
    interventions: list[InterventionCredit]
    by_kind: dict[str, evidence.EvidenceStats]  # question / information
    window: int
    silent: evidence.EvidenceStats = evidence.NO_EVIDENCE  # pauses resumed without a message: the control

    @property
    def final_leader(self) -> float:
        return self.steps[-1].leader_after if self.steps else 1.0

    def credited(self, kind: str) -> list[InterventionCredit]:
        return [i for i in self.interventions if i.kind == kind and i.gain is not None]


def evaluation_steps(record: AuditRecord) -> list[EvaluationStep]:
    steps: list[EvaluationStep] = []
    leader = 1.0
    for e in record.events:
        if e.kind != "verdict":
            continue
        p = e.payload
        speedup = _number(p.get("speedup"))
        if p.get("verdict") == LEADER and speedup is not None:
            leader = speedup
        steps.append(EvaluationStep(len(steps) + 1, int(p.get("number", 0)), str(p.get("verdict", "")),
                                    speedup, leader, e.seq))
    return steps


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _scratch() -> Session:
    # One connection for the life of the session: an in-memory SQLite database lives in it.
    engine = create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})
    tables = [BankQuestion.__table__, BankUse.__table__]  # type: ignore[attr-defined]
    SQLModel.metadata.create_all(engine, tables=tables)
    return Session(engine, expire_on_commit=False)


def attribute(record: AuditRecord) -> Attribution:
    window = Thresholds.from_dict(record.session.thresholds).credit_window or evidence.DEFAULT_WINDOW
    steps = evaluation_steps(record)
    triggers: list[TriggerMark] = []
    trigger_kinds: dict[int, str] = {}  # trace trigger id -> kind
    sent: dict[int, InterventionCredit] = {}  # trace intervention id -> credit
    order: list[InterventionCredit] = []
    uses: dict[int, int] = {}  # scratch use id -> trace intervention id
    counters = {QUESTION: 0, INFORMATION: 0}
    finished = 0
    leader = 1.0
    awaiting_reply: list[InterventionCredit] = []
    with _scratch() as scratch:
        for e in record.events:
            p = e.payload
            if e.kind == "agent_step" and awaiting_reply:
                for credit in awaiting_reply:
                    credit.reply = str(p.get("text", ""))
                awaiting_reply = []
            elif e.kind == "verdict":
                step = steps[finished]
                finished += 1
                leader = step.leader_after
                evidence.record_evaluation(scratch, session_ref=SCRATCH_REF, eval_index=finished, leader=leader)
            elif e.kind == "trigger":
                kind = str(p.get("kind", ""))
                if isinstance(p.get("trigger_id"), int):
                    trigger_kinds[p["trigger_id"]] = kind
                triggers.append(TriggerMark(e.seq, kind, str(p.get("summary", "")), finished))
            elif e.kind == "intervention":
                kind = QUESTION if p.get("kind") != INFORMATION else INFORMATION
                counters[kind] += 1
                trace_id = p.get("intervention_id")
                credit = InterventionCredit(
                    label=f"{'Q' if kind == QUESTION else 'I'}{counters[kind]}",
                    intervention_id=record.row_id("intervention", trace_id) if isinstance(trace_id, int) else None,
                    kind=kind, author=str(p.get("author", "")), mode=str(p.get("mode", "")),
                    text=str(p.get("text", "")), trigger_kind=trigger_kinds.get(p.get("trigger_id") or -1),
                    sent_seq=e.seq, delivered_seq=None, after_evaluations=None, leader_before=None,
                    leader_after=None, evaluations_seen=0, window=window, gain=None)
                order.append(credit)
                if isinstance(trace_id, int):
                    sent[trace_id] = credit
            elif e.kind == "delivered":
                for trace_id in p.get("intervention_ids", []):
                    credit_or_none = sent.get(trace_id)
                    if credit_or_none is None or credit_or_none.delivered_seq is not None:
                        continue
                    credit = credit_or_none
                    credit.delivered_seq = e.seq
                    credit.after_evaluations = finished
                    credit.leader_before = leader
                    use = evidence.record_use(
                        scratch, session_ref=SCRATCH_REF, text=credit.text, kind=credit.kind,
                        author=credit.author if credit.author in {a.value for a in Author} else Author.PERSON.value,
                        eval_index=finished, leader=leader, intervention_ref=trace_id,
                        trigger=credit.trigger_kind, window=window)
                    uses[use.id or 0] = trace_id
                    awaiting_reply.append(credit)
        for use in evidence.uses_of_session(scratch, SCRATCH_REF):
            credit = sent[uses[use.id or 0]]
            credit.evaluations_seen = use.evaluations_seen
            credit.leader_after = use.leader_after
            credit.gain = use.gain
        by_kind = evidence.evidence_table(scratch).overall
    for credit in order:
        if credit.after_evaluations is None:
            continue
        seen = steps[credit.after_evaluations:credit.after_evaluations + credit.evaluations_seen]
        credit.candidates = [s.number for s in seen]
        credit.new_leaders = [s.number for s in seen if s.verdict == LEADER]
    silent = evidence.stats_of(pause_log(record.events).silent_gains(window))
    return Attribution(steps, triggers, order, by_kind, window, silent)

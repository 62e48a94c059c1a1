"""Evidence of which messages work: each message sent to an agent (bank question, typed question,
information) is credited with the leader gain over the next K evaluations of its session.

Gain is a ratio of leader speedups (leader after / leader at the time of the message), so 1.0
means no new leader and 1.12 a 1.12x better leader. No new leader is credited twice: an
evaluation counts for the messages of the latest boundary before it only, so a message's window
ends where the next message reaches the agent. Messages delivered at the same boundary share
that boundary's credit (each shows the group's gain; `credit_groups` counts a group once)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlmodel import Session, col, select

from harness.stats import geomean, geomean_interval
from question_bank.models import Author, BankQuestion, BankUse, Kind, Status, as_utc, normalize_text

DEFAULT_WINDOW = 5      # K: evaluations credited to a message
HIT_EPSILON = 1e-9      # a gain above 1 + this counts as "a new leader followed"
PRIOR_USES = 2.0        # pseudo-uses of "no gain" that shrink the evidence of rarely used questions


@dataclass(frozen=True)
class EvidenceStats:
    """Evidence for a group of uses. Only uses with at least one evaluation after them count."""

    uses: int               # times sent
    credited: int           # of those, with at least one evaluation after them
    geomean_gain: float     # exp(mean log gain) over credited uses; 1.0 when none
    hit_rate: float         # fraction of credited uses followed by a new leader
    best_gain: float        # largest single gain; 1.0 when none
    log_gain_sum: float     # sum of log gains, for shrinkage
    interval: tuple[float, float] | None = None  # 95% interval of geomean_gain; None below 2 credited

    @property
    def shrunk_log_gain(self) -> float:
        """Mean log gain pulled toward zero for small samples: one lucky use is not evidence."""
        return self.log_gain_sum / (self.credited + PRIOR_USES)

    @property
    def gain_percent(self) -> float:
        return (self.geomean_gain - 1.0) * 100.0

    def to_dict(self) -> dict[str, float | int | list[float] | None]:
        return {"uses": self.uses, "credited": self.credited, "geomean_gain": self.geomean_gain,
                "interval": list(self.interval) if self.interval is not None else None,
                "hit_rate": self.hit_rate, "best_gain": self.best_gain}


NO_EVIDENCE = EvidenceStats(uses=0, credited=0, geomean_gain=1.0, hit_rate=0.0, best_gain=1.0, log_gain_sum=0.0)


def stats_of(gains: Iterable[float | None]) -> EvidenceStats:
    """Evidence over a list of gains (None: a use that no evaluation has followed yet)."""
    every = list(gains)
    # A gain is a ratio of two positive leader speedups (BankUse.gain, record_evaluation): only a
    # use that no evaluation has followed yet has none.
    credited = [g for g in every if g is not None]
    mean = geomean(credited)
    if mean is None:
        return EvidenceStats(len(every), 0, 1.0, 0.0, 1.0, 0.0)
    return EvidenceStats(
        uses=len(every),
        credited=len(credited),
        geomean_gain=mean,
        hit_rate=sum(g > 1.0 + HIT_EPSILON for g in credited) / len(credited),
        best_gain=max(credited),
        log_gain_sum=sum(math.log(g) for g in credited),
        interval=geomean_interval(credited),
    )


# A campaign's instruction to a member (app/domain/campaigns/evolution.py `instruction`): the bank
# question, then the parent to start from and, for a kernel of the family, the parent's knobs.
PARENT_MARK = "\n\nParent: session "
_PARENT_TAIL = re.compile(r"Parent: session (\d{1,18}) candidate #(\d{1,18})(?:; knobs (\{.*\}))?\s*", re.S)
MAX_KNOBS = 200  # a knob record read from a message holds at most this many knobs


@dataclass(frozen=True)
class MessageParts:
    """A message as sent, taken apart: the question, and the parent a campaign's instruction
    names with its knob setting (None: the message names none)."""

    question: str
    parent_session: int | None = None
    parent_number: int | None = None
    knobs: dict[str, Any] | None = None

    @property
    def parent(self) -> str:
        return (f"session {self.parent_session} candidate #{self.parent_number}"
                if self.parent_session is not None else "")


def _knob_record(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or len(value) > MAX_KNOBS:
        return None
    plain = (str, int, float, bool, type(None))
    return {str(k): v for k, v in value.items() if isinstance(v, plain)}


def message_parts(text: str) -> MessageParts:
    """The question of a message and, for a campaign's instruction, the parent it names and the
    parent's knobs (read from the text, never trusted beyond a flat mapping of plain values)."""
    at = text.rfind(PARENT_MARK)
    m = _PARENT_TAIL.fullmatch(text, at + 2) if at >= 0 else None
    if m is None:
        return MessageParts(text)
    return MessageParts(text[:at].rstrip(), int(m.group(1)), int(m.group(2)), _knob_record(m.group(3)))


def knob_value(v: Any) -> str:
    """A knob's value as the family's records write it: false/true, null, numbers, bare strings."""
    if isinstance(v, str):
        return v
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return json.dumps(v)


def knob_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """The knobs `after` sets differently from `before`, one "knob: a -> b" line each (a knob
    only one side names reads "(unset)" on the other)."""
    lines = []
    for k, v in after.items():
        if k not in before:
            lines.append(f"{k}: (unset) -> {knob_value(v)}")
        elif before[k] != v or type(before[k]) is not type(v):
            lines.append(f"{k}: {knob_value(before[k])} -> {knob_value(v)}")
    lines.extend(f"{k}: {knob_value(v)} -> (unset)" for k, v in before.items() if k not in after)
    return lines


def find_question_by_text(session: Session, text: str) -> BankQuestion | None:
    """The active bank question with this text (case and spacing ignored), if any: a person who
    sends a suggested question verbatim, or retypes one, is using the bank; a campaign's
    instruction is its question followed by the parent to start from."""
    wanted = normalize_text(message_parts(text).question)
    for q in session.exec(select(BankQuestion).where(BankQuestion.status == Status.ACTIVE.value)):
        if normalize_text(q.text) == wanted:
            return q
    return None


def record_use(
    session: Session,
    *,
    session_ref: str | int,
    text: str,
    kind: str = Kind.QUESTION.value,
    author: str = Author.PERSON.value,
    eval_index: int,
    leader: float | None,
    question_id: int | None = None,
    intervention_ref: str | int | None = None,
    trigger: str | None = None,
    layers: Sequence[str] | None = None,
    window: int = DEFAULT_WINDOW,
    used_at: datetime | None = None,
    commit: bool = True,
) -> BankUse:
    """Record that a message was sent to the agent of a session.

    eval_index: evaluations the session had finished when the message was sent.
    leader: the leader's speedup at that moment (None before any leader: the baseline, 1.0).
    commit=False leaves the commit to the caller's transaction (the server's, which records the
    delivery in the same one)."""
    if kind not in (Kind.QUESTION.value, Kind.INFORMATION.value):
        raise ValueError(f"kind must be question or information, got {kind!r}")
    if author not in tuple(a.value for a in Author):
        raise ValueError(f"author must be person, bank or agent, got {author!r}")
    if window < 1:
        raise ValueError("the evidence window must be at least one evaluation")
    question = session.get(BankQuestion, question_id) if question_id is not None else None
    if question_id is not None and question is None:
        raise ValueError(f"no bank question with id {question_id}")
    if question is None:
        question = find_question_by_text(session, text)
    use = BankUse(
        question_id=question.id if question is not None else None,
        session_ref=str(session_ref),
        intervention_ref=str(intervention_ref) if intervention_ref is not None else None,
        text=text,
        kind=kind,
        author=author,
        trigger=trigger,
        layers=list(layers) if layers is not None else (list(question.layers) if question else []),
        eval_index=eval_index,
        window=window,
        leader_before=leader if leader is not None and leader > 0 else 1.0,
    )
    if used_at is not None:
        use.used_at = as_utc(used_at)
    session.add(use)
    if commit:
        session.commit()
        session.refresh(use)
    else:
        session.flush()
    return use


def record_evaluation(
    session: Session, *, session_ref: str | int, eval_index: int, leader: float | None, commit: bool = True
) -> int:
    """Credit the session's open uses with evaluation number `eval_index` (1-based) and the leader
    speedup after it was judged. Idempotent: replaying an evaluation changes nothing. Returns the
    number of uses credited."""
    if leader is None or leader <= 0:
        leader = 1.0
    ref = str(session_ref)
    stmt = select(BankUse).where(
        BankUse.session_ref == ref,
        col(BankUse.eval_index) < eval_index,
    )
    before = list(session.exec(stmt))
    if not before:
        return 0
    latest = max(use.eval_index for use in before)  # the boundary whose messages own this evaluation
    credited = 0
    for use in before:
        if use.eval_index != latest:
            # Superseded: a later message reached the agent before this evaluation. Its window
            # ends at that boundary (what it saw is all it is credited with; `complete` holds).
            ended = min(use.window, latest - use.eval_index)
            if use.window != ended:
                use.window = ended
                session.add(use)
            continue
        offset = eval_index - use.eval_index
        if offset > use.window or offset < use.evaluations_seen:
            continue
        # The latest evaluation inside the window decides: a leader that a re-timing demoted
        # lowers the gain again.
        use.evaluations_seen = offset
        use.leader_after = leader
        session.add(use)
        credited += 1
    if credited and commit:
        session.commit()
    return credited


def silent_gains(leaders: Sequence[float], messages: Iterable[int], silent: Iterable[int],
                 window: int = DEFAULT_WINDOW) -> list[float | None]:
    """The silent control's measure, by the rule messages are credited with: for each pause
    resumed without a message after j evaluations, the leader after the latest evaluation of
    j+1 .. j+K over the leader at j (None: no evaluation followed yet). The window ends where
    the next message or the next silent resume reaches the agent, so no leader counts twice.

    leaders[n]: the leader's speedup once n evaluations were judged (leaders[0] = 1.0, the
    baseline); messages, silent: the evaluation counts at each delivery and each silent resume.
    A silent resume at or inside a message's window (the latest message at i <= j < i + K) is
    no control, the agent is still following that message, and is left out."""
    if window < 1:
        raise ValueError("the evidence window must be at least one evaluation")
    delivered = sorted(set(messages))
    quiet = sorted(set(silent))
    boundaries = sorted(set(delivered) | set(quiet))
    finished = len(leaders) - 1
    gains: list[float | None] = []
    for j in quiet:
        latest = max((i for i in delivered if i <= j), default=None)
        if latest is not None and j < latest + window:
            continue
        end = min([j + window, finished, *(b for b in boundaries if b > j)])
        if end <= j or not 0 <= j < len(leaders):
            gains.append(None)
            continue
        gains.append(leaders[end] / leaders[j])
    return gains


def credit_groups(uses: Iterable[BankUse]) -> list[list[BankUse]]:
    """The uses of one session grouped by the boundary that delivered them (same evaluation
    index): the unit of credit, so that totals count each group's gain once."""
    groups: dict[tuple[str, int], list[BankUse]] = {}
    for use in uses:
        groups.setdefault((use.session_ref, use.eval_index), []).append(use)
    return [groups[k] for k in sorted(groups)]


def uses_of_session(session: Session, session_ref: str | int) -> list[BankUse]:
    stmt = select(BankUse).where(BankUse.session_ref == str(session_ref)).order_by(col(BankUse.id))
    return list(session.exec(stmt))



def uses_of_question(session: Session, question_id: int, limit: int = 200) -> Sequence[BankUse]:
    """A question's uses, newest first (its page lists the latest `limit`)."""
    return session.exec(select(BankUse).where(BankUse.question_id == question_id)
                        .order_by(col(BankUse.id).desc()).limit(limit)).all()

def question_evidence(session: Session) -> dict[int, EvidenceStats]:
    """Evidence per bank question."""
    gains: dict[int, list[float | None]] = {}
    for use in session.exec(select(BankUse).where(col(BankUse.question_id).is_not(None))):
        assert use.question_id is not None
        gains.setdefault(use.question_id, []).append(use.gain)
    return {qid: stats_of(g) for qid, g in gains.items()}


@dataclass(frozen=True)
class EvidenceRow:
    """One line of the evidence table: a bank question, or a message typed in sessions that is
    not in the bank (grouped by its text)."""

    question_id: int | None
    key: str | None
    text: str
    kind: str
    status: str | None
    stats: EvidenceStats
    sessions: int
    last_use_id: int | None  # for promoting an unbanked message
    uses: tuple[BankUse, ...] = field(default=(), compare=False)  # newest first, at most USES_SHOWN


USES_SHOWN = 50  # the uses an evidence row carries for the page to list


@dataclass(frozen=True)
class EvidenceTable:
    overall: dict[str, EvidenceStats]           # kind -> stats: questions against information
    by_author: dict[tuple[str, str], EvidenceStats]   # (kind, author) -> stats
    rows: list[EvidenceRow]                      # bank questions, most evidence first
    unbanked: list[EvidenceRow]                  # typed messages not (yet) in the bank


def _newest(group: list[BankUse]) -> tuple[BankUse, ...]:
    return tuple(reversed(group[-USES_SHOWN:]))


def evidence_table(session: Session) -> EvidenceTable:
    uses = list(session.exec(select(BankUse).order_by(col(BankUse.id))))
    questions = {q.id: q for q in session.exec(select(BankQuestion))}

    by_kind: dict[str, list[float | None]] = {Kind.QUESTION.value: [], Kind.INFORMATION.value: []}
    by_author: dict[tuple[str, str], list[float | None]] = {}
    by_question: dict[int, list[BankUse]] = {}
    by_text: dict[str, list[BankUse]] = {}
    for use in uses:
        by_kind.setdefault(use.kind, []).append(use.gain)
        by_author.setdefault((use.kind, use.author), []).append(use.gain)
        if use.question_id is not None:
            by_question.setdefault(use.question_id, []).append(use)
        else:  # a campaign's instructions to several parents are one message
            by_text.setdefault(normalize_text(message_parts(use.text).question), []).append(use)

    rows = []
    for qid, group in by_question.items():
        q = questions.get(qid)
        if q is None:
            continue
        rows.append(EvidenceRow(qid, q.key, q.text, q.kind, q.status, stats_of(u.gain for u in group),
                                len({u.session_ref for u in group}), group[-1].id, _newest(group)))
    unbanked = [
        EvidenceRow(None, None, message_parts(group[-1].text).question, group[-1].kind, None,
                    stats_of(u.gain for u in group), len({u.session_ref for u in group}), group[-1].id,
                    _newest(group))
        for group in by_text.values()
    ]

    def order(row: EvidenceRow) -> tuple[float, int]:
        return (-row.stats.shrunk_log_gain, -row.stats.uses)

    return EvidenceTable(
        overall={kind: stats_of(g) for kind, g in by_kind.items()},
        by_author={key: stats_of(g) for key, g in sorted(by_author.items())},
        rows=sorted(rows, key=order),
        unbanked=sorted(unbanked, key=lambda r: (-r.stats.uses, -r.sessions, r.text)),
    )

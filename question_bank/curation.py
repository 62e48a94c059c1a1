"""Curating the bank: add, edit, retire, merge duplicates, and promote a message that was sent in
a session into the bank. Every operation validates first and writes in one commit."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from sqlmodel import Session, col, select

from question_bank.bank_file import ARCH_RE, KEY_RE, LAYERS, MAX_TEXT, TRIGGERS
from question_bank.models import (
    BankQuestion,
    BankUse,
    Kind,
    Status,
    normalize_text,
    slugify,
    utcnow,
)
from question_bank.store import get_by_key


class BankValidationError(ValueError):
    """Field -> message for every problem with a requested change; nothing was written."""

    def __init__(self, errors: dict[str, str]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))


class NotFound(LookupError):
    pass


@dataclass
class QuestionDraft:
    """A question as a person writes it in the curation form or the API."""

    text: str
    kind: str = Kind.QUESTION.value
    triggers: Sequence[str] = ()
    layers: Sequence[str] = ()
    problem: str | None = None
    archs: Sequence[str] = ()
    hypothesis: str = ""
    check: str = ""
    provenance: str = ""
    key: str | None = None

    def cleaned(self) -> QuestionDraft:
        return QuestionDraft(
            text=" ".join(self.text.split()),
            kind=self.kind.strip(),
            triggers=list(dict.fromkeys(t.strip() for t in self.triggers if t.strip())),
            layers=list(dict.fromkeys(x.strip() for x in self.layers if x.strip())),
            problem=(self.problem or "").strip() or None,
            archs=list(dict.fromkeys(a.strip() for a in self.archs if a.strip())),
            hypothesis=" ".join(self.hypothesis.split()),
            check=" ".join(self.check.split()),
            provenance=" ".join(self.provenance.split()),
            key=(self.key or "").strip() or None,
        )

    def errors(self) -> dict[str, str]:
        errors: dict[str, str] = {}
        if not self.text:
            errors["text"] = "must not be empty"
        elif len(self.text) > MAX_TEXT:
            errors["text"] = f"is {len(self.text)} characters long; the limit is {MAX_TEXT}"
        elif self.kind == Kind.QUESTION.value and "?" not in self.text:
            errors["text"] = "a question must ask something (no '?'); use kind information for a statement"
        if self.kind not in (Kind.QUESTION.value, Kind.INFORMATION.value):
            errors["kind"] = "must be question or information"
        bad = [t for t in self.triggers if t not in TRIGGERS]
        if bad or not self.triggers:
            errors["triggers"] = (f"{', '.join(bad)} not among " if bad else "name at least one of ") + \
                ", ".join(TRIGGERS)
        bad = [x for x in self.layers if x not in LAYERS]
        if bad or not self.layers:
            errors["layers"] = (f"{', '.join(bad)} not among " if bad else "name at least one of ") + \
                ", ".join(LAYERS)
        bad = [a for a in self.archs if not ARCH_RE.match(a)]
        if bad:
            errors["archs"] = f"{', '.join(bad)}: expected GPU archs such as sm_90"
        if self.problem is not None and len(self.problem) > 64:
            errors["problem"] = "is longer than 64 characters"
        if self.key is not None and not KEY_RE.match(self.key):
            errors["key"] = "must be lowercase letters, digits and dashes (at most 64)"
        for name in ("hypothesis", "check", "provenance"):
            if len(getattr(self, name)) > MAX_TEXT:
                errors[name] = f"is longer than {MAX_TEXT} characters"
        for name in ("text", "hypothesis", "check", "provenance", "problem", "key"):
            if "\x00" in (getattr(self, name) or ""):
                errors[name] = "contains a NUL character"
        return errors


def _same_text(session: Session, text: str, except_id: int | None = None) -> BankQuestion | None:
    wanted = normalize_text(text)
    for q in session.exec(select(BankQuestion)):
        if q.id != except_id and normalize_text(q.text) == wanted:
            return q
    return None


def _free_key(session: Session, base: str) -> str:
    key, n = base, 2
    while get_by_key(session, key) is not None:
        suffix = f"-{n}"
        key = base[: 64 - len(suffix)] + suffix
        n += 1
    return key


def _validated(session: Session, draft: QuestionDraft, except_id: int | None = None) -> QuestionDraft:
    draft = draft.cleaned()
    errors = draft.errors()
    if "text" not in errors:
        twin = _same_text(session, draft.text, except_id)
        if twin is not None:
            errors["text"] = f"the bank already holds this text as '{twin.key}'"
    if draft.key is not None and "key" not in errors:
        holder = get_by_key(session, draft.key)
        if holder is not None and holder.id != except_id:
            errors["key"] = f"'{draft.key}' is taken"
    if errors:
        raise BankValidationError(errors)
    return draft


def _fill(q: BankQuestion, draft: QuestionDraft) -> None:
    q.text = draft.text
    q.kind = draft.kind
    q.triggers = list(draft.triggers)
    q.layers = list(draft.layers)
    q.problem = draft.problem
    q.archs = list(draft.archs)
    q.hypothesis = draft.hypothesis
    q.check = draft.check
    q.provenance = draft.provenance


def add_question(session: Session, draft: QuestionDraft) -> BankQuestion:
    draft = _validated(session, draft)
    q = BankQuestion(key=draft.key or _free_key(session, slugify(draft.text)), text=draft.text)
    _fill(q, draft)
    session.add(q)
    session.commit()
    session.refresh(q)
    return q


def _get(session: Session, question_id: int) -> BankQuestion:
    q = session.get(BankQuestion, question_id)
    if q is None:
        raise NotFound(f"no bank question with id {question_id}")
    return q


def edit_question(session: Session, question_id: int, draft: QuestionDraft) -> BankQuestion:
    q = _get(session, question_id)
    draft = _validated(session, draft, except_id=question_id)
    if draft.key is not None:
        q.key = draft.key
    _fill(q, draft)
    q.updated_at = utcnow()
    session.add(q)
    session.commit()
    session.refresh(q)
    return q


def set_status(session: Session, question_id: int, status: str) -> BankQuestion:
    """Retire (keeps the question and its evidence, stops suggesting it) or reactivate."""
    if status not in (Status.ACTIVE.value, Status.RETIRED.value):
        raise BankValidationError({"status": "must be active or retired"})
    q = _get(session, question_id)
    if status == Status.ACTIVE.value and q.merged_into_id is not None:
        raise BankValidationError({"status": "this question was merged into another; edit that one instead"})
    q.status = status
    q.updated_at = utcnow()
    session.add(q)
    session.commit()
    session.refresh(q)
    return q


def retire_question(session: Session, question_id: int) -> BankQuestion:
    return set_status(session, question_id, Status.RETIRED.value)


def merge_questions(session: Session, keep_id: int, duplicate_ids: Sequence[int]) -> BankQuestion:
    """Fold duplicates into one question: it gains their triggers and layers and all their uses
    (so its evidence is the sum); the duplicates are retired and point at it."""
    dupes = [d for d in dict.fromkeys(duplicate_ids) if d != keep_id]
    if not dupes:
        raise BankValidationError({"duplicates": "choose at least one other question to merge"})
    keep = _get(session, keep_id)
    if keep.merged_into_id is not None:
        raise BankValidationError({"keep": f"'{keep.key}' was itself merged into another question"})
    others = [_get(session, d) for d in dupes]
    triggers = list(keep.triggers)
    layers = list(keep.layers)
    for other in others:
        triggers += [t for t in other.triggers if t not in triggers]
        layers += [x for x in other.layers if x not in layers]
        for use in session.exec(select(BankUse).where(BankUse.question_id == other.id)):
            use.question_id = keep.id
            session.add(use)
        # Questions merged earlier into a duplicate now point at the survivor.
        for child in session.exec(select(BankQuestion).where(BankQuestion.merged_into_id == other.id)):
            child.merged_into_id = keep.id
            session.add(child)
        other.status = Status.RETIRED.value
        other.merged_into_id = keep.id
        other.updated_at = utcnow()
        session.add(other)
    keep.triggers = triggers
    keep.layers = layers
    note = f"merged {', '.join(o.key for o in others)}"
    keep.provenance = f"{keep.provenance}; {note}" if keep.provenance else note
    keep.updated_at = utcnow()
    session.add(keep)
    session.commit()
    session.refresh(keep)
    return keep


@dataclass
class Promotion:
    question: BankQuestion
    created: bool                    # False: the bank already held this text
    uses_linked: list[int] = field(default_factory=list)


def promote_message(
    session: Session,
    draft: QuestionDraft,
    *,
    session_ref: str | int,
    message_ref: str | int | None = None,
    promoted_by: str = "a person",
) -> Promotion:
    """Put a message sent in a session into the bank. Its earlier uses (that message, and the same
    text sent anywhere before) become uses of the new question, so its evidence comes along."""
    cleaned = draft.cleaned()
    twin = _same_text(session, cleaned.text)
    if twin is not None:
        question, created = twin, False
    else:
        origin = f"promoted by {promoted_by} from session {session_ref}"
        if message_ref is not None:
            origin += f", message {message_ref}"
        cleaned.provenance = f"{origin}; {cleaned.provenance}" if cleaned.provenance else origin
        question, created = add_question(session, cleaned), True
    wanted = normalize_text(cleaned.text)
    linked: list[int] = []
    for use in session.exec(select(BankUse).where(col(BankUse.question_id).is_(None))):
        same_message = message_ref is not None and use.session_ref == str(session_ref) \
            and use.intervention_ref == str(message_ref)
        if same_message or normalize_text(use.text) == wanted:
            use.question_id = question.id
            if not use.layers:
                use.layers = list(question.layers)
            session.add(use)
            if use.id is not None:
                linked.append(use.id)
    session.commit()
    session.refresh(question)
    return Promotion(question, created, linked)


def answered_trigger_first(triggers: Sequence[str], answered: str | None) -> list[str]:
    """A promoted message's triggers with the pause it was sent at first (when it is one of them):
    ranking prefers a question's first trigger."""
    out = list(triggers)
    if answered is not None and answered in out:
        out.remove(answered)
        out.insert(0, answered)
    return out


class Message(Protocol):
    """A message sent in a session, as the bank sees it (the server's interventions fit)."""

    id: int | None
    text: str
    author: str


M = TypeVar("M", bound=Message)


@dataclass
class Promotable(Generic[M]):
    item: M
    gain: float | None  # the leader gain credited to it, when its window closed


def promotable_messages(session: Session, newest_first: Iterable[M], limit: int) -> list[Promotable[M]]:
    """Messages people sent whose text is not in the bank yet (the ones worth promoting), each
    text once, the newest `limit`, with the gain the bank credited to each."""
    banked = {normalize_text(q.text) for q in session.exec(select(BankQuestion))}
    seen: set[str] = set()
    chosen: list[M] = []
    for item in newest_first:
        text = normalize_text(item.text)
        if item.author == "bank" or text in banked or text in seen:
            continue
        seen.add(text)
        chosen.append(item)
        if len(chosen) >= limit:
            break
    gains = {u.intervention_ref: u.gain for u in session.exec(select(BankUse).where(
        col(BankUse.intervention_ref).in_([str(i.id) for i in chosen])))}
    return [Promotable(i, gains.get(str(i.id))) for i in chosen]

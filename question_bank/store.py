"""Reading the bank from the database, importing a bank file into it (all or nothing), exporting
it back to a file, and loading the starter bank on first start."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlmodel import Session, col, select

from question_bank.bank_file import (
    BankFileError,
    BankFileIssue,
    QuestionSpec,
    dump_bank_text,
    load_bank_file,
    parse_bank_text,
)
from question_bank.models import BankMeta, BankQuestion, Status, normalize_text, utcnow

STARTER_BANK = Path(__file__).with_name("starter_bank.yaml")
STARTER_LOADED = "starter_bank_loaded"


@dataclass
class ImportResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.created) + len(self.updated) + len(self.unchanged)

    def summary(self) -> str:
        return (f"{len(self.created)} created, {len(self.updated)} updated, "
                f"{len(self.unchanged)} unchanged")


def list_questions(
    session: Session,
    *,
    status: str | None = None,
    kind: str | None = None,
    trigger: str | None = None,
    layer: str | None = None,
) -> list[BankQuestion]:
    """Questions in creation order; list-valued filters are applied in Python (the bank is small)."""
    stmt = select(BankQuestion).order_by(col(BankQuestion.id))
    if status:
        stmt = stmt.where(BankQuestion.status == status)
    if kind:
        stmt = stmt.where(BankQuestion.kind == kind)
    out = list(session.exec(stmt))
    if trigger:
        out = [q for q in out if trigger in q.triggers]
    if layer:
        out = [q for q in out if layer in q.layers]
    return out


def get_question(session: Session, question_id: int) -> BankQuestion | None:
    return session.get(BankQuestion, question_id)


def merged_into(session: Session, question_id: int) -> Sequence[BankQuestion]:
    """The questions merged into this one (curation's merge keeps them, retired, for the record)."""
    return session.exec(select(BankQuestion).where(BankQuestion.merged_into_id == question_id)
                        .order_by(col(BankQuestion.id))).all()


def get_by_key(session: Session, key: str) -> BankQuestion | None:
    return session.exec(select(BankQuestion).where(BankQuestion.key == key)).first()


def question_to_spec(q: BankQuestion, keys_by_id: dict[int, str]) -> QuestionSpec:
    return QuestionSpec(
        key=q.key, text=q.text, kind=q.kind, triggers=tuple(q.triggers), layers=tuple(q.layers),
        problem=q.problem, archs=tuple(q.archs), hypothesis=q.hypothesis, check=q.check,
        provenance=q.provenance, status=q.status,
        merged_into=keys_by_id.get(q.merged_into_id) if q.merged_into_id is not None else None,
    )


def _apply(q: BankQuestion, spec: QuestionSpec) -> bool:
    """Copy a spec's fields onto a question; True if anything changed (merged_into aside)."""
    changed = False
    for name, value in (
        ("text", spec.text), ("kind", spec.kind), ("triggers", list(spec.triggers)),
        ("layers", list(spec.layers)), ("problem", spec.problem), ("archs", list(spec.archs)),
        ("hypothesis", spec.hypothesis), ("check", spec.check), ("provenance", spec.provenance),
        ("status", spec.status),
    ):
        if getattr(q, name) != value:
            setattr(q, name, value)
            changed = True
    return changed


def import_specs(session: Session, specs: Sequence[QuestionSpec], *, source: str = "<bank>") -> ImportResult:
    """Create or update questions by key, in one transaction: either every question of the file is
    in the bank afterwards, or (on any error) none of the file's changes are."""
    existing = {q.key: q for q in session.exec(select(BankQuestion))}
    file_keys = {s.key for s in specs}
    issues = [
        BankFileIssue(s.line, f"question '{s.key}': merged_into '{s.merged_into}' is neither in this "
                              "file nor in the bank")
        for s in specs
        if s.merged_into and s.merged_into not in file_keys and s.merged_into not in existing
    ]
    by_text = {normalize_text(q.text): q.key for q in existing.values()}
    for s in specs:
        other = by_text.get(normalize_text(s.text))
        if other is not None and other != s.key and other not in file_keys:
            issues.append(BankFileIssue(s.line, f"question '{s.key}': the bank already holds this text "
                                                f"as '{other}'"))
    if issues:
        raise BankFileError(source, issues)

    result = ImportResult()
    try:
        touched: dict[str, BankQuestion] = {}
        for spec in specs:
            q = existing.get(spec.key)
            if q is None:
                q = BankQuestion(key=spec.key, text=spec.text)
                _apply(q, spec)
                session.add(q)
                result.created.append(spec.key)
            elif _apply(q, spec):
                q.updated_at = utcnow()
                result.updated.append(spec.key)
            else:
                result.unchanged.append(spec.key)
            touched[spec.key] = q
        session.flush()
        ids = {key: q.id for key, q in {**existing, **touched}.items()}
        for spec in specs:
            q = touched[spec.key]
            target = ids.get(spec.merged_into) if spec.merged_into else None
            if q.merged_into_id != target:
                q.merged_into_id = target
                if spec.key in result.unchanged:
                    result.unchanged.remove(spec.key)
                    result.updated.append(spec.key)
        session.commit()
    except Exception:
        session.rollback()
        raise
    return result


def import_bank_text(session: Session, text: str, *, source: str = "<bank>") -> ImportResult:
    return import_specs(session, parse_bank_text(text, source), source=source)


def import_bank_file(session: Session, path: Path) -> ImportResult:
    return import_specs(session, load_bank_file(path), source=str(path))


def export_specs(session: Session, *, include_retired: bool = True) -> list[QuestionSpec]:
    questions = list_questions(session)
    keys_by_id = {q.id: q.key for q in questions if q.id is not None}
    return [question_to_spec(q, keys_by_id) for q in questions
            if include_retired or q.status == Status.ACTIVE.value]


EXPORT_HEADER = """Socratic question bank, exported {when} UTC.
Import with `socratic bank import FILE` or on the bank page; questions are matched by key."""


def export_bank_text(session: Session, *, include_retired: bool = True) -> str:
    header = EXPORT_HEADER.format(when=utcnow().strftime("%Y-%m-%d %H:%M"))
    return dump_bank_text(export_specs(session, include_retired=include_retired), header)


def ensure_starter_bank(session: Session, path: Path = STARTER_BANK) -> ImportResult | None:
    """Load the starter bank the first time the database is used; never again afterwards (a
    curator who retires or rewrites starter questions keeps the bank as they left it)."""
    if session.get(BankMeta, STARTER_LOADED) is not None:
        return None
    specs = load_bank_file(path)
    held = list(session.exec(select(BankQuestion)))
    keys = {q.key for q in held}
    texts = {normalize_text(q.text) for q in held}
    fresh = [s for s in specs if s.key not in keys and normalize_text(s.text) not in texts]
    result = import_specs(session, fresh, source=str(path))
    session.add(BankMeta(key=STARTER_LOADED, value=f"{utcnow().isoformat()} {result.total} questions"))
    session.commit()
    return result

"""Lessons in the database: applying observations (the merge), listing, a person's status and
words, and the portable file formats (YAML and JSON Lines) for export and import.

Functions take a sqlmodel Session and flush; the caller commits (one transaction per call site).
An import is all or nothing: every record is checked before the first is written."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from sqlmodel import Session, col, select

from lessons.distill import Observation, merge, settle, summarize
from lessons.models import Author, Lesson, LessonError, Status, check_lesson, utcnow

FORMATS = ("jsonl", "yaml")
# The fields a file carries (no database id, no timestamps: a file moves between servers).
PORTABLE = ("key", "arch", "problem", "situation", "action", "evidence", "tags", "text", "status", "status_by",
            "author")
MAX_IMPORT_LESSONS = 5000


@dataclass
class ApplyResult:
    created: int = 0
    updated: int = 0
    unchanged: int = 0

    def add(self, other: ApplyResult) -> None:
        self.created += other.created
        self.updated += other.updated
        self.unchanged += other.unchanged

    def to_dict(self) -> dict[str, int]:
        return {"created": self.created, "updated": self.updated, "unchanged": self.unchanged}


def _as_dict(row: Lesson) -> dict[str, Any]:
    return {name: getattr(row, name) for name in (*PORTABLE, "effect", "ratio", "count", "helped", "confidence",
                                                  "scope")}


def _write(row: Lesson, fields: dict[str, Any]) -> None:
    for name, value in fields.items():
        if name in ("id", "created_at", "updated_at"):
            continue
        setattr(row, name, value)
    row.updated_at = utcnow()


def by_key(db: Session, key: str) -> Lesson | None:
    return db.exec(select(Lesson).where(Lesson.key == key)).first()


def apply(db: Session, observations: Iterable[Observation]) -> ApplyResult:
    """Merge each observation into its lesson (a new one for a new key)."""
    result = ApplyResult()
    for obs in observations:
        row = by_key(db, obs.key)
        before = _as_dict(row) if row is not None else None
        after = merge(before, obs)
        if row is None:
            row = Lesson(key=obs.key)
            _write(row, after)
            db.add(row)
            result.created += 1
        elif after != before:
            _write(row, after)
            db.add(row)
            result.updated += 1
        else:
            result.unchanged += 1
        db.flush()
    return result


def list_lessons(db: Session, statuses: Sequence[str] | None = None) -> list[Lesson]:
    query = select(Lesson).order_by(col(Lesson.id))
    if statuses:
        query = query.where(col(Lesson.status).in_(list(statuses)))
    return list(db.exec(query))


def get_lesson(db: Session, lesson_id: int) -> Lesson:
    row = db.get(Lesson, lesson_id)
    if row is None:
        raise LookupError(f"no lesson {lesson_id}")
    return row


def set_status(db: Session, lesson_id: int, status: str) -> Lesson:
    """A person's status: it sticks (the distiller never changes it back)."""
    if status not in {s.value for s in Status}:
        raise LessonError(f"status must be one of {', '.join(s.value for s in Status)}, not {status!r}")
    row = get_lesson(db, lesson_id)
    row.status, row.status_by, row.updated_at = status, Author.PERSON.value, utcnow()
    db.add(row)
    db.flush()
    return row


def set_text(db: Session, lesson_id: int, text: str, author: str = Author.PERSON.value) -> Lesson:
    """A lesson's words by a person or a model; the distiller keeps them from then on."""
    if not text.strip():
        raise LessonError("a lesson's text cannot be empty")
    if author not in {a.value for a in Author}:
        raise LessonError(f"author must be one of {', '.join(a.value for a in Author)}")
    row = get_lesson(db, lesson_id)
    row.text, row.author, row.updated_at = text.strip()[:4000], author, utcnow()
    db.add(row)
    db.flush()
    return row


# -- files -----------------------------------------------------------------------------------------


def portable(row: Lesson) -> dict[str, Any]:
    return {name: getattr(row, name) for name in PORTABLE}


def export_lessons(db: Session, fmt: str = "jsonl", statuses: Sequence[str] | None = None) -> str:
    rows = [portable(r) for r in list_lessons(db, statuses)]
    if fmt == "jsonl":
        return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
    if fmt == "yaml":
        return yaml.safe_dump({"lessons": rows}, sort_keys=False, allow_unicode=True)
    raise LessonError(f"format must be one of {', '.join(FORMATS)}")


def parse_lessons(text: str, fmt: str) -> list[dict[str, Any]]:
    """The records of a file, each checked; the first bad one raises with its place."""
    records: list[tuple[str, Any]] = []
    if fmt == "jsonl":
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append((f"line {n}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise LessonError(f"line {n}: not JSON ({exc.msg})") from exc
    elif fmt == "yaml":
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise LessonError(f"not YAML: {exc}") from exc
        if not isinstance(doc, dict) or not isinstance(doc.get("lessons"), list):
            raise LessonError("a lessons YAML file is a mapping with a list under `lessons`")
        records = [(f"lesson {i + 1}", r) for i, r in enumerate(doc["lessons"])]
    else:
        raise LessonError(f"format must be one of {', '.join(FORMATS)}")
    if len(records) > MAX_IMPORT_LESSONS:
        raise LessonError(f"at most {MAX_IMPORT_LESSONS} lessons per file, this one holds {len(records)}")
    out = []
    for where, r in records:
        if not isinstance(r, dict):
            raise LessonError(f"{where}: a lesson is a mapping")
        missing = [k for k in ("key", "situation", "action", "evidence") if k not in r]
        if missing:
            raise LessonError(f"{where}: missing {', '.join(missing)}")
        unknown = sorted(set(r) - set(PORTABLE))
        if unknown:
            raise LessonError(f"{where}: unknown field(s) {', '.join(unknown)}")
        if not isinstance(r.get("tags", []), list) or not all(isinstance(t, str) for t in r.get("tags", [])):
            raise LessonError(f"{where}: tags are a list of texts")
        if not isinstance(r.get("text", ""), str):
            raise LessonError(f"{where}: text is a text")
        try:
            check_lesson(r["situation"], r["action"])
        except LessonError as exc:
            raise LessonError(f"{where}: {exc}") from exc
        if not isinstance(r["key"], str) or not r["key"] or len(r["key"]) > 255:
            raise LessonError(f"{where}: key must be a text of 1 to 255 characters")
        if not isinstance(r["evidence"], list) or not all(isinstance(e, dict) and isinstance(e.get("key"), str)
                                                          for e in r["evidence"]):
            raise LessonError(f"{where}: evidence is a list of entries, each with a key")
        for i, e in enumerate(r["evidence"], 1):
            problem = _evidence_problem(e)
            if problem:
                raise LessonError(f"{where}: evidence {i}: {problem}")
        if r.get("status", Status.PROPOSED.value) not in {s.value for s in Status}:
            raise LessonError(f"{where}: status must be one of {', '.join(s.value for s in Status)}")
        if r.get("author", Author.DISTILLER.value) not in {a.value for a in Author}:
            raise LessonError(f"{where}: author must be one of {', '.join(a.value for a in Author)}")
        out.append(r)
    return out


def _ratio_ok(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and value > 0)


def _evidence_problem(e: dict[str, Any]) -> str:
    """What is wrong with an evidence entry from a file ("" when nothing): the numbers the effect is
    recomputed from must be positive and finite, the counts whole."""
    if e.get("ratio") is not None and not _ratio_ok(e["ratio"]):
        return "ratio must be a positive finite number or null"
    for table in ("categories", "head_dims"):
        values = e.get(table, {})
        if not isinstance(values, dict) or not all(isinstance(k, str) and _ratio_ok(v) for k, v in values.items()):
            return f"{table} must map names to positive finite ratios"
    broke = e.get("broke", 0)
    if isinstance(broke, bool) or not isinstance(broke, int) or broke < 0:
        return "broke must be a count"
    if not isinstance(e.get("parent_setting", ""), str):
        return "parent_setting must be a text"
    return ""


def import_lessons(db: Session, text: str, fmt: str) -> ApplyResult:
    """Add a file's lessons: a known key takes the file's evidence beside its own (the same entry
    once), a new key becomes a lesson; a person's status or words in the file are kept."""
    result = ApplyResult()
    for r in parse_lessons(text, fmt):
        row = by_key(db, r["key"])
        if row is None:
            base = {k: r.get(k) for k in PORTABLE}
            base.setdefault("tags", [])
            base["tags"] = base["tags"] or []
            base["status"] = base.get("status") or Status.PROPOSED.value
            base["status_by"] = base.get("status_by") or Author.DISTILLER.value
            base["author"] = base.get("author") or Author.DISTILLER.value
            base["arch"] = base.get("arch") or r["situation"]["arch"]
            base["problem"] = base.get("problem") or r["situation"]["problem"]
            evidence = list(r["evidence"])
            row = Lesson(key=r["key"])
            result.created += 1
        else:
            base = _as_dict(row)
            mine = {e["key"] for e in row.evidence}
            evidence = [*row.evidence, *(e for e in r["evidence"] if e["key"] not in mine)]
            if r.get("status_by") == Author.PERSON.value and row.status_by != Author.PERSON.value:
                base["status"], base["status_by"] = r["status"], Author.PERSON.value
            if r.get("author") in (Author.PERSON.value, Author.MODEL.value) and row.author == Author.DISTILLER.value:
                base["text"], base["author"] = r.get("text") or row.text, r["author"]
            if len(evidence) == len(row.evidence) and base == _as_dict(row):
                result.unchanged += 1
                continue
            result.updated += 1
        _write(row, settle({**base, "evidence": evidence, **summarize(evidence)}))
        db.add(row)
        db.flush()
    return result

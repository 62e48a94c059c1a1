"""People's lesson actions (lessons/) about sessions and the bank: the lessons that fit a
session's situation, one sent to a session as a steering message, one promoted to a bank
question, and the import that keeps nothing a page could not draw. The web's routes
(app/faces/web/lessons_api.py, lessons_pages.py) each make one call here."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session, col, select

from app.domain.lessons import session_situation
from app.domain.schemas import InterventionCreate
from app.domain.sessions import NotFound, send_message
from app.store.events import Unit
from app.store.input_limits import MAX_DEPTH, LimitError, check_json_value, json_depth_ok
from app.store.models import Intervention
from lessons.distill import NOISE, action_words
from lessons.models import Lesson, LessonError
from lessons.search import Filters, LessonHit, search_lessons
from lessons.store import ApplyResult, get_lesson, import_lessons, list_lessons, parse_lessons
from question_bank import curation
from question_bank.bank_file import ARCH_RE
from question_bank.models import BankQuestion, Layer, Trigger
from question_bank.semantic import Embedder
from question_bank.store import get_by_key

MESSAGE_PREFIX = "Lesson #{id}: "  # a lesson sent to a session is recorded as a message that starts so
# The kernel family's layers (kernels/attention/family: KNOB_SPACE) as the bank's (question_bank/models.py).
FAMILY_TO_BANK = {"tiling": Layer.SCHEDULING.value, "memory": Layer.MEMORY.value,
                  "math": Layer.TENSOR_CORES.value, "scheduling": Layer.SCHEDULING.value,
                  "masking": Layer.MASKING.value}
# An edit's features (lessons/distill.py: FEATURES) as the bank's layers.
FEATURE_TO_BANK = {
    "wgmma": Layer.TENSOR_CORES.value, "mma.sync": Layer.TENSOR_CORES.value, "ldmatrix": Layer.TENSOR_CORES.value,
    "tma": Layer.MEMORY.value, "bulk-copy": Layer.MEMORY.value, "cp.async": Layer.PIPELINE.value,
    "mbarrier": Layer.PIPELINE.value, "setmaxnreg": Layer.PIPELINE.value, "swizzle": Layer.MEMORY.value,
    "vectorized-io": Layer.MEMORY.value, "exp2": Layer.PRECISION.value, "warp-shuffle": Layer.ALGORITHM.value,
    "split-kv": Layer.SCHEDULING.value, "persistent": Layer.SCHEDULING.value, "causal-skip": Layer.MASKING.value,
}
ACTION_WORDS_MAX = 300  # characters of a lesson's action in a bank question's text


def lesson_or_404(db: Session, lesson_id: int) -> Lesson:
    try:
        return get_lesson(db, lesson_id)
    except LookupError as exc:
        raise NotFound(f"no lesson {lesson_id}") from exc


def words_of(lesson: Lesson) -> str:
    """The lesson's action in words; an imported record that is odd still reads as something."""
    try:
        return action_words(lesson.action or {})
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return str((lesson.action or {}).get("summary") or lesson.key)


def number(value: object) -> float | None:
    """A finite number from a stored JSON value, else None (an imported file holds anything)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


# -- a session's lessons ---------------------------------------------------------------------------


def session_lessons(db: Session, session_id: int, categories: Iterable[str], *, query: str = "",
                    limit: int = 5, embedder: Embedder | None = None) -> list[LessonHit]:
    """The lessons that fit where the session stands (its GPU's architecture once an evaluation
    named it, its problem, `categories`: those of its scenarios), proposed and active ones, best
    first: the pause panel's "Lessons that fit"."""
    situation = session_situation(db, session_id, categories)
    return search_lessons(list_lessons(db, None), query, filters=Filters(), situation=situation,
                          embedder=embedder, limit=limit)


def lesson_message(lesson: Lesson) -> str:
    return (MESSAGE_PREFIX.format(id=lesson.id) + (lesson.text.strip() or words_of(lesson)))[:10_000]


def send_lesson(unit: Unit, session_id: int, lesson_id: int, *,
                kind: Literal["question", "information"] = "information", mode: Literal["steer", "queue"] = "steer",
                author: str = "person", resume: bool = False) -> Intervention:
    """The lesson's words sent to the session as a steering message through the one send
    (app/domain/sessions.py: send_message): recorded as an intervention whose text starts with
    "Lesson #N: ", delivered like any message."""
    lesson = lesson_or_404(unit.db, lesson_id)
    msg = InterventionCreate(text=lesson_message(lesson), kind=kind, mode=mode, author=author, resume=resume)
    return send_message(unit, session_id, msg)


# -- a lesson as a bank question ---------------------------------------------------------------


def bank_layers(lesson: Lesson) -> list[str]:
    action = lesson.action if isinstance(lesson.action, dict) else {}
    found: list[str] = []
    for layer in action.get("layers") or []:
        if isinstance(layer, str) and layer in FAMILY_TO_BANK:
            found.append(FAMILY_TO_BANK[layer])
    for feature in [*(action.get("added") or []), *(action.get("removed") or [])]:
        if isinstance(feature, str) and feature in FEATURE_TO_BANK:
            found.append(FEATURE_TO_BANK[feature])
    return list(dict.fromkeys(found)) or [Layer.ALGORITHM.value]


def question_key(lesson: Lesson) -> str:
    return f"lesson-{lesson.id}"


def lesson_ratio(lesson: Lesson) -> float | None:
    """The overall effect, None where no time measured one (a ratio of 0 says so)."""
    ratio = number(lesson.ratio)
    return ratio if ratio is not None and ratio > 0 else None


def lesson_question(lesson: Lesson, *, named: bool = False) -> curation.QuestionDraft:
    """A short question pointing at the lesson's hypothesis: would the action pay off on this
    leader as it did before (or is it still a dead end)? Its layers are the bank's names for the
    family's layers the action changes; its provenance names the lesson. `named`: the text names
    the lesson too (two lessons can share an action and its numbers; the bank's texts cannot)."""
    action = " ".join(words_of(lesson).split())
    if len(action) > ACTION_WORDS_MAX:
        action = action[:ACTION_WORDS_MAX - 1].rstrip() + "…"
    ratio = lesson_ratio(lesson)
    times = f"{lesson.count} time{'s' if lesson.count != 1 else ''}"
    measured = f"{ratio:.3f}x over its parent, seen {times}" if ratio is not None else f"seen {times}"
    if named:
        measured = f"lesson #{lesson.id}: {measured}"
    if ratio is not None and ratio > 1 + NOISE:
        text = f"On this leader, would {action} pay off here as it did before ({measured})?"
    else:
        text = f"On this leader, would {action} still not pay off here, as before ({measured})?"
    cats = (lesson.scope or {}).get("holds", {}).get("category", []) if isinstance(lesson.scope, dict) else []
    held = ", ".join(str(c) for c in cats[:6]) if isinstance(cats, list) else ""
    check = ("Apply the change to the leader alone and compare per category against the leader"
             + (f"; before, it helped on {held}" if held else "") + ".")
    arch = lesson.arch if ARCH_RE.match(lesson.arch or "") else ""
    return curation.QuestionDraft(
        text=text, kind="question", triggers=[Trigger.PLATEAU.value, Trigger.DECLARED_LIMIT.value],
        layers=bank_layers(lesson), problem=(lesson.problem or None) and lesson.problem[:64],
        archs=[arch] if arch else [], hypothesis=(lesson.text or "")[:1000], check=check,
        provenance=provenance_of(lesson), key=question_key(lesson),
    )


@dataclass
class Promoted:
    question: BankQuestion
    created: bool


def promote_lesson(db: Session, lesson_id: int) -> Promoted:
    """Add the lesson's question to the bank (committed); promoted twice, the same question."""
    lesson = lesson_or_404(db, lesson_id)
    existing = promoted_question(db, lesson)
    if existing is not None:
        return Promoted(existing, False)
    taken = get_by_key(db, question_key(lesson)) is not None  # by a question from elsewhere (another server)
    draft = lesson_question(lesson)
    draft.key = None if taken else draft.key  # None: the bank derives a free key from the text
    try:
        return Promoted(curation.add_question(db, draft), True)
    except curation.BankValidationError as exc:
        if set(exc.errors) != {"text"}:  # not a twin's text: the bank's reason stands
            raise
    named = lesson_question(lesson, named=True)
    named.key = draft.key
    return Promoted(curation.add_question(db, named), True)


def provenance_of(lesson: Lesson) -> str:
    return f"lesson #{lesson.id} ({lesson.key})"[:1000]


def promoted_question(db: Session, lesson: Lesson) -> BankQuestion | None:
    """The bank question promoted from this lesson, if it was: the one whose provenance names it
    (by id and key: a bank file from another server may hold the key `lesson-N` for another)."""
    wanted = " ".join(provenance_of(lesson).split())  # as the bank stores it (question_bank/curation.py)
    return db.exec(select(BankQuestion).where(BankQuestion.provenance == wanted).order_by(col(BankQuestion.id))
                   ).first()


# -- import ------------------------------------------------------------------------------------------


MAX_NESTING = MAX_DEPTH


def _shape_ok(text: str, fmt: str) -> None:
    """Refuse, before any parser recurses, a file nested deeper than MAX_NESTING or a YAML file
    with aliases (a small file that stands for a huge one)."""
    if fmt == "yaml":
        import yaml

        depth = 0
        try:
            for event in yaml.parse(text, Loader=yaml.SafeLoader):
                if isinstance(event, yaml.AliasEvent):
                    raise LessonError("aliases (*name) are not accepted in a lessons file")
                if isinstance(event, yaml.CollectionStartEvent):
                    depth += 1
                    if depth > MAX_NESTING:
                        raise LessonError(f"nested more than {MAX_NESTING} levels deep")
                elif isinstance(event, yaml.CollectionEndEvent):
                    depth -= 1
        except yaml.YAMLError as exc:
            raise LessonError(f"not YAML: {exc}") from exc
        return
    if not json_depth_ok(text.encode(), MAX_NESTING):
        raise LessonError(f"nested more than {MAX_NESTING} levels deep")


def import_file(db: Session, text: str, fmt: str,
                check: Callable[[list[Lesson]], None] | None = None) -> ApplyResult:
    """Import a lessons file all or nothing (the caller commits only on success): every record
    checked (lessons/store.py), within the input limits (app/store/input_limits.py), and every
    lesson it touched read back through what the pages draw (`check`, called with them). Any
    problem is a LessonError with its message; the caller then writes nothing."""
    if "\x00" in text:
        raise LessonError("the file contains a NUL character")
    _shape_ok(text, fmt)
    records = parse_lessons(text, fmt)
    try:
        check_json_value(records, "the file")
    except LimitError as exc:
        raise LessonError(str(exc)) from exc
    try:
        result = import_lessons(db, text, fmt)
        keys = {r["key"] for r in records}
        touched = [row for row in list_lessons(db, None) if row.key in keys]
        for row in touched:
            check_lesson_draws(row)
        if check is not None:
            check(touched)
    except LessonError:
        raise
    except (ArithmeticError, AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
        raise LessonError(f"a lesson in the file has fields of the wrong shape ({type(exc).__name__}: {exc})") from exc
    except SQLAlchemyError as exc:  # a field the table's column refuses (a list for a text, too long a text)
        raise LessonError(f"the database refused a lesson of the file: {str(exc).splitlines()[0][:300]}") from exc
    return result


def check_lesson_draws(lesson: Lesson) -> None:
    """What every reader does with a lesson, done once: its words, its search document, its
    question; an exception means a reader would fail on it."""
    action_words(lesson.action or {})
    search_lessons([lesson], "check", filters=Filters(statuses=(lesson.status,)))
    lesson_question(lesson)

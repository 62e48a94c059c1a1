"""Lessons in the database, on SQLite and on PostgreSQL (tests/conftest.py runs this module on
both): the migration's table, distilling the shipped traces, a person's status that the
distiller keeps, and the round trip of every lesson through export and import, in both formats,
into a fresh database. A malformed file writes nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func
from sqlmodel import select

from app.domain.lessons import distill_files
from app.settings import PROJECT_ROOT, Settings
from app.store.database import Database, open_database
from lessons.models import Lesson, LessonError
from lessons.store import export_lessons, import_lessons, list_lessons, portable, set_status

EXAMPLES = PROJECT_ROOT / "examples"
SOME = [EXAMPLES / "h200-offline-bank-questions.jsonl", EXAMPLES / "h200-offline-silent.jsonl",
        *sorted((EXAMPLES / "campaigns" / "h200-2026-12-01-judge-fixed").glob("h200-autonomous-*.xz"))]


def database(tmp_path: Path, backend: str, name: str = "a") -> Database:
    url = os.environ["SOCRATIC_DB_URL"] if backend == "postgresql" else f"sqlite:///{tmp_path / name}.db"
    return open_database(Settings(data_dir=tmp_path, db_url=url))


def test_distil_keep_a_persons_status_and_round_trip_through_both_formats(tmp_path: Path,
                                                                           database_backend: str) -> None:
    db1 = database(tmp_path, database_backend)
    with db1.session() as db:
        done = distill_files(db, SOME)
        db.commit()
        assert done.result.created >= 10 and done.observations > done.result.created
        first = list_lessons(db)
        retired = first[0].id or 0
        set_status(db, retired, "retired")
        db.commit()
        again = distill_files(db, SOME)  # idempotent, and the person's status stays
        db.commit()
        assert again.result.created == 0 and again.result.updated == 0
        assert db.get(Lesson, retired).status == "retired"  # type: ignore[union-attr]
        texts = {fmt: export_lessons(db, fmt) for fmt in ("jsonl", "yaml")}
        before = sorted((portable(x) for x in list_lessons(db)), key=lambda r: r["key"])
    db1.dispose()
    if database_backend == "postgresql":
        return  # (one fresh PostgreSQL database per test: the round trip runs on SQLite below)
    for fmt, text in texts.items():
        fresh = database(tmp_path, database_backend, f"fresh-{fmt}")
        with fresh.session() as db:
            result = import_lessons(db, text, fmt)
            db.commit()
            assert result.created == len(before)
            after = sorted((portable(x) for x in list_lessons(db)), key=lambda r: r["key"])
            assert after == before, fmt
            assert import_lessons(db, text, fmt).unchanged == len(before)  # the same file twice: nothing new
        fresh.dispose()


def test_a_malformed_file_writes_nothing(tmp_path: Path, database_backend: str) -> None:
    db1 = database(tmp_path, database_backend)
    with db1.session() as db:
        distill_files(db, SOME[:1])
        db.commit()
        good = export_lessons(db, "jsonl").splitlines()
    db1.dispose()
    fresh = database(tmp_path, "sqlite", "fresh")
    second = json.loads(good[1])
    second["situation"]["arch"] = ""
    broken = "\n".join([good[0], json.dumps(second), good[2]])
    with fresh.session() as db:
        with pytest.raises(LessonError, match="line 2: a lesson needs a situation"):
            import_lessons(db, broken, "jsonl")
        db.rollback()
        with pytest.raises(LessonError, match="line 1: not JSON"):
            import_lessons(db, "{nope\n", "jsonl")
        with pytest.raises(LessonError, match="list under `lessons`"):
            import_lessons(db, "- a\n- b\n", "yaml")
        with pytest.raises(LessonError, match="unknown field"):
            import_lessons(db, good[0][:-1] + ', "id": 3}', "jsonl")
        db.rollback()
        assert db.exec(select(func.count()).select_from(Lesson)).one() == 0
    fresh.dispose()


def exported_record(tmp_path: Path) -> dict[str, Any]:
    """The first lesson distilled from one shipped trace, as its JSON Lines export writes it."""
    source = database(tmp_path, "sqlite")
    with source.session() as db:
        distill_files(db, SOME[:1])
        db.commit()
        record: dict[str, Any] = json.loads(export_lessons(db, "jsonl").splitlines()[0])
    source.dispose()
    return record


def assert_refused(tmp_path: Path, record: dict[str, Any], message: str) -> None:
    """Importing `record` into a fresh database fails with `message` and writes no lesson."""
    fresh = database(tmp_path, "sqlite", "fresh")
    with fresh.session() as db:
        with pytest.raises(LessonError, match=message):
            import_lessons(db, json.dumps(record), "jsonl")
        assert db.exec(select(func.count()).select_from(Lesson)).one() == 0
    fresh.dispose()


@pytest.mark.parametrize("bad, message", [
    ({"ratio": "fast"}, "ratio must be a positive finite number"),
    ({"ratio": -1.0}, "ratio must be a positive finite number"),
    ({"categories": {"prefill": "x"}}, "categories must map names"),
    ({"head_dims": [1, 2]}, "head_dims must map names"),
    ({"broke": -2}, "broke must be a count"),
    ({"parent_setting": 7}, "parent_setting must be a text"),
])
def test_evidence_numbers_from_a_file_are_checked_before_anything_is_written(
        tmp_path: Path, bad: dict[str, object], message: str, database_backend: str) -> None:
    if database_backend == "postgresql":
        pytest.skip("the file is refused before a database is touched: once is enough")
    record = exported_record(tmp_path)
    record["evidence"][0].update(bad)
    assert_refused(tmp_path, record, f"line 1: evidence 1: {message}")


@pytest.mark.parametrize("change, message", [
    ({"action": {"kind": "knobs", "changes": {"stages": 3}}}, "map each knob's name to \\[before, after\\]"),
    ({"action": {"kind": "knobs", "changes": {"stages": [1, 2]}, "layers": "memory"}}, "layers are a list"),
    ({"action": {"kind": "edit", "summary": 5}}, "needs a summary"),
    ({"tags": "fast"}, "tags are a list of texts"),
    ({"text": ["words"]}, "text is a text"),
])
def test_a_record_of_the_wrong_shape_is_refused_by_name(
        tmp_path: Path, change: dict[str, object], message: str, database_backend: str) -> None:
    if database_backend == "postgresql":
        pytest.skip("the file is refused before a database is touched: once is enough")
    assert_refused(tmp_path, {**exported_record(tmp_path), **change}, f"line 1: .*{message}")

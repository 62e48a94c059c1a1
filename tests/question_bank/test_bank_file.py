"""The bank's YAML format: the starter bank, validation errors that name their line, and imports
that are all or nothing."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from question_bank.bank_file import BankFileError, dump_bank_text, parse_bank_text
from question_bank.models import BankQuestion, Kind, Layer, Trigger
from question_bank.store import (
    STARTER_BANK,
    ensure_starter_bank,
    export_bank_text,
    import_bank_file,
    import_bank_text,
    list_questions,
)

GOOD = textwrap.dedent("""\
    version: 1
    questions:
      - key: what-bounds-it
        text: What bounds this kernel now?
        triggers: [plateau]
        layers: [measurement]
      - key: cold-l2
        text: Does the gain survive a cold L2?
        triggers: [suspicious_win]
        layers: [measurement, memory]
    """)


def errors_of(text: str) -> BankFileError:
    with pytest.raises(BankFileError) as info:
        parse_bank_text(text, "bank.yaml")
    return info.value


def test_starter_bank_has_at_least_30_questions_covering_every_trigger_and_layer() -> None:
    specs = parse_bank_text(STARTER_BANK.read_text(), str(STARTER_BANK))
    questions = [s for s in specs if s.kind == Kind.QUESTION.value]
    assert len(questions) >= 30
    assert {t for s in questions for t in s.triggers} == {t.value for t in Trigger}
    assert {layer for s in questions for layer in s.layers} == {layer.value for layer in Layer}
    for s in questions:
        assert s.text.endswith("?") and s.hypothesis and s.check, s.key
    # Scoped to attention forward on Hopper, except questions about measurement in general.
    assert all(s.problem in ("attention-forward", None) for s in specs)
    assert all(s.archs in (("sm_90",), ()) for s in specs)


def test_a_valid_file_parses_with_defaults() -> None:
    specs = parse_bank_text(GOOD)
    assert [s.key for s in specs] == ["what-bounds-it", "cold-l2"]
    assert specs[1].layers == ("measurement", "memory")
    assert specs[0].kind == "question" and specs[0].status == "active"
    assert specs[0].line == 3 and specs[1].line == 7


def test_unknown_trigger_is_reported_on_its_own_line() -> None:
    bad = GOOD.replace("triggers: [suspicious_win]", "triggers: [suspicous_win]")
    err = errors_of(bad)
    assert [i.line for i in err.issues] == [9]
    assert "'suspicous_win' is not one of plateau" in str(err)
    assert "bank.yaml:line 9:" in str(err)
    assert "nothing was imported" in str(err)


def test_every_problem_of_a_file_is_listed_with_its_line() -> None:
    bad = textwrap.dedent("""\
        questions:
          - key: Not A Key
            text: Is this fine?
            triggers: [plateau]
            layers: [memry]
          - text: This states a fact without asking anything.
            triggers: [plateau]
            layers: [memory]
            colour: blue
          - key: no-layers
            text: Where are the layers?
            triggers: [budget]
        """)
    err = errors_of(bad)
    lines = sorted(i.line for i in err.issues)
    assert lines == [2, 5, 6, 9, 10], str(err)
    assert any("lowercase letters" in i.message for i in err.issues if i.line == 2)
    assert any("'memry' is not one of" in i.message for i in err.issues if i.line == 5)
    assert any("a question must ask something" in i.message for i in err.issues if i.line == 6)
    assert any("unknown field 'colour'" in i.message for i in err.issues if i.line == 9)
    assert any("has no 'layers'" in i.message for i in err.issues if i.line == 10)


def test_yaml_syntax_error_names_the_line() -> None:
    bad = GOOD.replace("layers: [measurement, memory]", "layers: [measurement, memory")
    err = errors_of(bad)
    assert len(err.issues) == 1
    assert "not valid YAML" in err.issues[0].message
    assert err.issues[0].line >= 10


def test_duplicate_keys_and_duplicate_fields_are_errors() -> None:
    twice = GOOD + (
        "  - key: cold-l2\n"
        "    text: Is the L2 cold when you time it?\n"
        "    triggers: [suspicious_win]\n"
        "    layers: [measurement]\n"
        "    layers: [memory]\n"
        "  - key: cold-l2\n"
        "    text: Is the L2 cold when you time it, really?\n"
        "    triggers: [suspicious_win]\n"
        "    layers: [measurement]\n"
    )
    err = errors_of(twice)
    messages = {i.line: i.message for i in err.issues}
    assert "field 'layers' appears twice (first on line 14)" in messages[15]
    assert "key 'cold-l2' is already used by the question on line 7" in messages[16]


def test_wrong_version_and_missing_questions_are_errors() -> None:
    assert "version 2 is not supported" in str(errors_of("version: 2\nquestions: []\n"))
    assert "no 'questions:' list" in str(errors_of("version: 1\n"))
    assert "the file is empty" in str(errors_of(""))
    assert "must be a list" in str(errors_of("questions: {a: 1}\n"))


def _five_new_and_one_changed() -> str:
    good_ones = "".join(
        f"  - key: fresh-{i}\n    text: Fresh question number {i}?\n    triggers: [plateau]\n"
        f"    layers: [memory]\n" for i in range(5)
    )
    changed = "  - key: cold-l2\n    text: Does the gain survive a cold L2 and hidden shapes?\n" \
              "    triggers: [suspicious_win]\n    layers: [measurement]\n"
    return "questions:\n" + good_ones + changed


def test_a_file_with_one_bad_question_imports_nothing(db: Session, tmp_path: Path) -> None:
    import_bank_text(db, GOOD)
    before = export_bank_text(db)
    broken = "  - key: broken\n    text: Broken?\n    triggers: [plateau]\n    layers: [nowhere]\n"
    path = tmp_path / "mixed.yaml"
    path.write_text(_five_new_and_one_changed() + broken)
    with pytest.raises(BankFileError) as info:
        import_bank_file(db, path)
    assert f"{path}:line 29: question 7: layers: 'nowhere' is not one of memory" in str(info.value)
    assert len(list_questions(db)) == 2
    assert export_bank_text(db).split("\n", 1)[1] == before.split("\n", 1)[1]


def test_a_database_failure_halfway_through_an_import_rolls_everything_back(db: Session) -> None:
    import_bank_text(db, GOOD)
    before = export_bank_text(db)
    # A real SQLite trigger refuses the last question of the file, after the first five were
    # inserted and one was updated in the same transaction.
    db.connection().exec_driver_sql(
        "CREATE TRIGGER refuse_poison BEFORE INSERT ON bank_question WHEN NEW.key = 'poison' "
        "BEGIN SELECT RAISE(ABORT, 'poison refused'); END"
    )
    db.commit()
    poison = "  - key: poison\n    text: Poison?\n    triggers: [plateau]\n    layers: [memory]\n"
    with pytest.raises(IntegrityError, match="poison refused"):
        import_bank_text(db, _five_new_and_one_changed() + poison)
    assert [q.key for q in list_questions(db)] == ["what-bounds-it", "cold-l2"]
    assert export_bank_text(db).split("\n", 1)[1] == before.split("\n", 1)[1]


def test_a_merge_target_that_exists_nowhere_imports_nothing(db: Session) -> None:
    text = GOOD + "  - key: dup\n    text: What bounds it now?\n    triggers: [plateau]\n" \
                  "    layers: [memory]\n    status: retired\n    merged_into: nowhere\n"
    with pytest.raises(BankFileError) as info:
        import_bank_text(db, text, source="merge.yaml")
    assert "merge.yaml:line 11: question 'dup': merged_into 'nowhere'" in str(info.value)
    assert list_questions(db) == []


def test_import_updates_by_key_and_reports_what_changed(db: Session) -> None:
    first = import_bank_text(db, GOOD)
    assert first.created == ["what-bounds-it", "cold-l2"]
    again = import_bank_text(db, GOOD)
    assert again.unchanged == ["what-bounds-it", "cold-l2"] and not again.created
    edited = import_bank_text(db, GOOD.replace("triggers: [plateau]", "triggers: [plateau, declared_limit]"))
    assert edited.updated == ["what-bounds-it"]
    q = db.exec(select(BankQuestion).where(BankQuestion.key == "what-bounds-it")).one()
    assert q.triggers == ["plateau", "declared_limit"]


def test_exported_file_reads_back_to_the_same_questions(db: Session) -> None:
    ensure_starter_bank(db)
    # Curate a little so that retired, merged and information entries are all exported.
    questions = list_questions(db)
    questions[0].status = "retired"
    questions[1].status = "retired"
    questions[1].merged_into_id = questions[2].id
    db.commit()
    exported = export_bank_text(db)
    specs = parse_bank_text(exported)
    assert len(specs) == len(questions)
    assert dump_bank_text(specs) == dump_bank_text(parse_bank_text(dump_bank_text(specs)))


def test_round_trip_through_a_second_database(db: Session, tmp_path: Path) -> None:
    from tests.question_bank.conftest import bank_engine

    ensure_starter_bank(db)
    questions = list_questions(db)
    questions[3].status = "retired"
    questions[3].merged_into_id = questions[4].id
    questions[5].archs = ["sm_90", "sm_100"]
    questions[5].problem = None
    db.commit()
    exported = export_bank_text(db)
    path = tmp_path / "exported.yaml"
    path.write_text(exported)

    other = bank_engine(tmp_path / "other.db")
    with Session(other, expire_on_commit=False) as db2:
        result = import_bank_file(db2, path)
        assert len(result.created) == len(questions)
        again = export_bank_text(db2)
        copied = {q.key: q.to_dict() for q in list_questions(db2)}
    other.dispose()
    original = {q.key: q.to_dict() for q in questions}
    keys_by_id = {q.id: q.key for q in questions}
    copied_keys_by_id = {d["id"]: k for k, d in copied.items()}
    for key, d in original.items():
        c = copied[key]
        assert {k: v for k, v in c.items() if k not in ("id", "merged_into_id")} == \
               {k: v for k, v in d.items() if k not in ("id", "merged_into_id")}
        assert copied_keys_by_id.get(c["merged_into_id"]) == keys_by_id.get(d["merged_into_id"])
    # The files differ only in the export time on their first line.
    assert again.split("\n", 1)[1] == exported.split("\n", 1)[1]


def test_starter_bank_loads_once_and_a_curated_bank_is_not_reloaded(db: Session) -> None:
    result = ensure_starter_bank(db)
    assert result is not None and len(result.created) >= 30
    first = list_questions(db)[0]
    db.delete(first)
    db.commit()
    assert ensure_starter_bank(db) is None
    assert len(list_questions(db)) == len(result.created) - 1

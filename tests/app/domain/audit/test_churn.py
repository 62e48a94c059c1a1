"""Churn: the share of the lines an agent adds that are byte-identical to lines it removed
earlier in the session, on edit sequences whose answer is known."""

from __future__ import annotations

import pytest

from app.domain.audit.churn import Edit, churn, line_changes, session_churn, session_edits
from app.domain.audit.record import load_record
from app.store.database import Database
from app.store.models import Candidate, SteeringSession

V1 = "int tile = 64;\nint stages = 2;\nfor (;;) {\n  step();\n}\n"
V2 = "int tile = 128;\nint stages = 2;\nfor (;;) {\n  step();\n}\n"  # tile 64 -> 128
V3 = "int tile = 64;\nint stages = 3;\nfor (;;) {\n  step();\n}\n"  # back to 64 (re-added), stages 3


def test_a_line_put_back_after_an_earlier_edit_removed_it_counts_as_churn() -> None:
    report = churn([Edit(1, "a", V1, V2), Edit(2, "a", V2, V3)])
    first, second = report.edits
    assert (first.added, first.removed, first.readded) == (1, 1, 0)
    assert (second.added, second.removed, second.readded) == (2, 2, 1)  # "int tile = 64;" came back
    assert second.share == pytest.approx(0.5)
    assert report.share == pytest.approx(1 / 3)
    assert [e.cumulative_share for e in report.edits] == [pytest.approx(0.0), pytest.approx(1 / 3)]
    assert report.top_lines == [("int tile = 64;", 1)]


def test_a_line_removed_and_added_in_the_same_edit_is_not_churn() -> None:
    moved = "int stages = 2;\nint tile = 64;\nfor (;;) {\n  step();\n}\n"  # two lines swapped
    report = churn([Edit(1, "a", V1, moved)])
    assert report.edits[0].added >= 1 and report.readded == 0


def test_churn_is_counted_per_agent() -> None:
    report = churn([Edit(1, "a", V1, V2), Edit(2, "b", V2, V3), Edit(3, "a", V3, V1)])
    # b re-adds a line only a removed: not b's churn. a then re-adds "int stages = 2;" that it
    # never removed (b did) and nothing else it removed itself.
    assert [e.readded for e in report.edits] == [0, 0, 0]
    report = churn([Edit(1, "a", V1, V2), Edit(2, "a", V2, V1)])
    assert report.edits[1].readded == 1 and report.share == pytest.approx(0.5)


def test_indentation_matters_and_blank_or_brace_lines_are_not_counted() -> None:
    indented = V1.replace("int tile = 64;", "  int tile = 64;")
    report = churn([Edit(1, "a", V1, V2), Edit(2, "a", V2, indented)])
    assert report.edits[1].readded == 0  # "  int tile = 64;" is not byte-identical to "int tile = 64;"
    added, removed = line_changes("a();\n}\n\n", "b();\n};\n\n\n{\n")
    assert added == ["b();"] and removed == ["a();"]


def test_circling_between_two_variants_approaches_full_churn() -> None:
    variants = [V1, V2] * 6
    edits = [Edit(i + 1, "a", variants[i - 1] if i else None, variants[i]) for i in range(len(variants))]
    report = churn(edits)
    # The first edit writes 4 meaningful lines from nothing and the second swaps one; from then
    # on every added line is the one removed two edits before: 10 of 4 + 11 added lines.
    assert [e.readded for e in report.edits] == [0, 0] + [1] * 10
    assert report.edits[-1].cumulative_share == pytest.approx(10 / 15)


def test_session_edits_follow_parents_then_the_authors_previous_candidate_then_the_baseline(
        database: Database) -> None:
    with database.session() as db:
        s = SteeringSession(title="churn", agent="scripted", candidate_kind="python-cpu", baseline="m:base")
        db.add(s)
        db.flush()
        sid = s.id or 0
        db.add(Candidate(session_id=sid, number=1, author="a", source=V1))  # from the baseline
        db.add(two := Candidate(session_id=sid, number=2, author="a", source=V2))  # no parent: after #1
        db.flush()
        db.add(Candidate(session_id=sid, number=3, author="a", source=V1, parent_id=two.id))
        db.add(Candidate(session_id=sid, number=4, author="a", source=V3, parent_id=two.id))
        db.commit()
        record = load_record(db, sid)
    edits = session_edits(record)
    assert [(e.number, e.before) for e in edits] == [(1, "m:base"), (2, V1), (3, V2), (4, V2)]
    report = session_churn(record)
    # #2 removed "int tile = 64;"; #3 and #4 each put it back.
    assert [e.readded for e in report.edits] == [0, 0, 1, 1]
    assert report.top_lines == [("int tile = 64;", 2)]

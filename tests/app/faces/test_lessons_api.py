"""Lessons on the JSON API and the pages, against a real server (app and lifespan, a real SQLite
file): the example trace recorded on the H200 is imported (session 1, read-only) and distilled,
so every lesson's evidence names that session. Search and filters, 404s, a person's status that
sticks, promotion to a bank question, export and import between two servers (all or nothing,
400 with the reason), the lessons that fit a session, one sent to a paused session as a
message, and untrusted lesson text escaped on the pages."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from app.domain.audit.trace_io import import_trace
from app.domain.lessons import distill_session
from app.settings import PROJECT_ROOT
from tests.server_support import cpu_session, running_app, wait_status

TRACE = PROJECT_ROOT / "examples" / "h200-offline-bank-questions.jsonl"
pytestmark = pytest.mark.skipif(not TRACE.exists(), reason="examples/ lacks the example trace")


def database_of(client: TestClient) -> Any:
    return client.app.state.engine.ctx.database  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with running_app(tmp_path_factory.mktemp("lessons"), bank_semantic_search=False) as c:
        with database_of(c).session() as db:
            session = import_trace(db, TRACE.read_text(encoding="utf-8"), TRACE.name)
            db.commit()
            assert session.id == 1
            distill_session(db, 1)
            db.commit()
        yield c


def lessons(client: TestClient, **params: Any) -> list[dict[str, Any]]:
    r = client.get("/api/lessons", params=params)
    assert r.status_code == 200, r.text
    return list(r.json())


def by_knob(client: TestClient, knob: str) -> dict[str, Any]:
    found = lessons(client, knob=knob, status="all")
    assert found, f"no lesson changes {knob}"
    return found[0]


def test_lessons_are_listed_searched_and_filtered(client: TestClient) -> None:
    every = lessons(client, status="all")
    assert len(every) >= 10
    assert {x["status"] for x in lessons(client)} <= {"proposed", "active"}
    first = every[0]
    assert first["action_words"] and first["text"] and first["evidence"]
    # The trace was imported here: evidence links its session.
    assert all(e.get("session_id") == 1 and e.get("trace") == TRACE.name for x in every for e in x["evidence"])

    hits = lessons(client, q="exp2_folded")
    assert hits and all("softmax_exp" in h["action"]["changes"] for h in hits)
    assert len(hits) < len(every)
    assert hits[0]["score"] is not None

    memory = lessons(client, layer="memory")
    assert memory and all("memory" in x["action"]["layers"] for x in memory)
    stages = lessons(client, knob="stages")
    assert stages and all("stages" in x["action"]["changes"] for x in stages)
    decode = lessons(client, category="decode")
    assert decode and all("decode" in x["effect"]["category"] for x in decode)
    assert lessons(client, arch="sm_90") and not lessons(client, arch="sm_80")
    assert len(lessons(client, limit=2)) == 2
    assert not lessons(client, q="no-such-words-anywhere-zzqx")
    assert client.get("/api/lessons", params={"status": "gone"}).status_code == 422


def test_a_missing_lesson_is_a_404_with_its_number(client: TestClient) -> None:
    for r in (client.get("/api/lessons/99999"), client.post("/api/lessons/99999/status", json={"status": "active"}),
              client.post("/api/lessons/99999/promote"), client.get("/lessons/99999", headers={"accept": "text/html"})):
        assert r.status_code == 404, r.text
        assert "no lesson 99999" in r.text
    r = client.get("/api/lessons/abc")
    assert r.status_code == 422 and "whole number" in r.json()["message"]


def test_a_persons_status_sticks_through_distillation(client: TestClient) -> None:
    lesson = by_knob(client, "smem_layout")
    lid = lesson["id"]
    r = client.post(f"/api/lessons/{lid}/status", json={"status": "retired"})
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "retired" and r.json()["status_by"] == "person"
    assert lid not in [x["id"] for x in lessons(client)]
    assert lid in [x["id"] for x in lessons(client, status="retired")]
    with database_of(client).session() as db:  # the distiller sees the session again: nothing changes back
        distill_session(db, 1)
        db.commit()
    assert client.get(f"/api/lessons/{lid}").json()["status"] == "retired"
    assert client.post(f"/api/lessons/{lid}/status", json={"status": "bogus"}).status_code == 422
    assert client.post(f"/api/lessons/{lid}/status", json={"status": "active"}).json()["status"] == "active"


def test_promote_makes_a_bank_question_that_points_at_the_lesson(client: TestClient) -> None:
    lesson = by_knob(client, "softmax_exp")
    r = client.post(f"/api/lessons/{lesson['id']}/promote")
    assert r.status_code == 201, r.text
    body = r.json()
    q = body["question"]
    assert body["created"] and body["lesson_id"] == lesson["id"]
    assert q["text"].startswith("On this leader, would softmax_exp") and q["text"].endswith("?")
    assert f"{lesson['ratio']:.3f}x" in q["text"]
    assert q["kind"] == "question" and q["layers"] == ["tensor_cores"]  # the family's math layer
    assert f"lesson #{lesson['id']}" in q["provenance"] and q["key"] == f"lesson-{lesson['id']}"
    assert q["archs"] == ["sm_90"] and q["problem"] == "attention-forward"
    assert client.get(f"/api/bank/questions/{q['id']}").json()["text"] == q["text"]
    again = client.post(f"/api/lessons/{lesson['id']}/promote")  # twice: the same question
    assert again.status_code == 200 and again.json()["question"]["id"] == q["id"] and not again.json()["created"]
    tiling = client.post(f"/api/lessons/{by_knob(client, 'tile_d64')['id']}/promote").json()["question"]
    assert tiling["layers"] == ["scheduling"]
    # From the pause panel (htmx): a line naming the question; from the lesson's page: to the question.
    line = client.post(f"/lessons/{lesson['id']}/promote", headers={"hx-request": "true"})
    assert "already holds it as" in line.text and f'href="/bank/questions/{q["id"]}"' in line.text
    page = client.post(f"/lessons/{lesson['id']}/promote", follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"].startswith(f"/bank/questions/{q['id']}?")
    assert f'href="/bank/questions/{q["id"]}"' in client.get(f"/lessons/{lesson['id']}").text


def test_two_lessons_with_the_same_words_promote_to_two_questions(tmp_path: Path) -> None:
    one = {"key": "sm_90|p|a", "situation": {"arch": "sm_90", "problem": "attention-forward"},
           "action": {"kind": "knobs", "changes": {"stages": [1, 2]}, "layers": ["memory"]},
           "evidence": [{"key": "trace:x:2", "trace": "x.jsonl", "candidate": 2, "parent": 1, "ratio": 1.2}]}
    two = {**one, "key": "sm_90|p|b"}  # another engine, say: the same words, the same numbers
    with running_app(tmp_path, bank_semantic_search=False) as fresh:
        text = "".join(json.dumps(r) + "\n" for r in (one, two))
        assert fresh.post("/api/lessons/import", content=text, headers={"content-type": "text/plain"}).json()[
            "created"] == 2
        first, second = (fresh.post(f"/api/lessons/{x['id']}/promote").json()["question"]
                         for x in sorted(lessons(fresh), key=lambda x: x["id"]))
        assert first["text"] != second["text"] and first["layers"] == ["memory"]
        assert f"(lesson #{second['key'].split('-')[1]}: 1.200x" in second["text"]


def test_export_then_import_into_a_fresh_server_gives_the_same_lessons(client: TestClient, tmp_path: Path) -> None:
    jsonl = client.get("/api/lessons/export", params={"format": "jsonl"})
    assert jsonl.status_code == 200
    assert jsonl.headers["content-disposition"] == 'attachment; filename="lessons.jsonl"'
    yml = client.get("/api/lessons/export", params={"format": "yaml"})
    assert yml.status_code == 200 and "lessons.yaml" in yml.headers["content-disposition"]
    records = [json.loads(line) for line in jsonl.text.splitlines()]
    assert len(records) == len(lessons(client, status="all"))
    assert yaml.safe_load(yml.text)["lessons"] == records
    assert client.get("/lessons/export.yaml").text == yml.text  # the page's download is the same file

    with running_app(tmp_path / "fresh", bank_semantic_search=False) as fresh:
        r = fresh.post("/api/lessons/import", params={"format": "jsonl"}, content=jsonl.text,
                       headers={"content-type": "text/plain"})
        assert r.status_code == 200, r.text
        assert r.json() == {"created": len(records), "updated": 0, "unchanged": 0}
        again = fresh.post("/api/lessons/import", params={"format": "yaml"}, content=yml.text,
                           headers={"content-type": "application/yaml"})
        assert again.json() == {"created": 0, "updated": 0, "unchanged": len(records)}
        back = fresh.get("/api/lessons/export", params={"format": "jsonl"}).text
        assert sorted(back.splitlines()) == sorted(jsonl.text.splitlines())
        upload = fresh.post("/lessons/import", files={"file": ("lessons.yaml", yml.text, "application/yaml")},
                            follow_redirects=False)  # the page's form: the format from the file's name
        assert upload.status_code == 303 and "unchanged" in upload.headers["location"]
        # The evidence still names the session of the first server (and the trace file).
        assert all(e["trace"] == TRACE.name for x in lessons(fresh, status="all") for e in x["evidence"])


def test_a_malformed_import_is_a_400_with_the_reason_and_writes_nothing(client: TestClient, tmp_path: Path) -> None:
    good = client.get("/api/lessons/export", params={"format": "jsonl"}).text.splitlines()[0]
    record = json.loads(good)
    wrong_shape = json.dumps({**record, "key": "another-key", "evidence": [{"key": "x", "categories": ["a"]}]})
    cases = [
        ("jsonl", good + "\n{not json\n", "line 2: not JSON"),
        ("jsonl", good + "\n" + json.dumps({**record, "key": "k2", "action": {"kind": "knobs"}}) + "\n", "line 2"),
        ("jsonl", json.dumps({**record, "status": "forgotten"}) + "\n", "status must be one of"),
        ("jsonl", wrong_shape + "\n", "evidence 1: categories must map names"),
        ("jsonl", "[" * 100 + "]" * 100 + "\n", "nested more than"),
        ("yaml", "lessons: 3\n", "a list under `lessons`"),
        ("yaml", "a: &x [1]\nb: *x\n", "aliases"),
    ]
    with running_app(tmp_path / "fresh", bank_semantic_search=False) as fresh:
        for fmt, text, reason in cases:
            r = fresh.post("/api/lessons/import", params={"format": fmt}, content=text,
                           headers={"content-type": "text/plain"})
            assert r.status_code == 400, (fmt, text[:80], r.text)
            assert reason in r.json()["message"], r.json()
            assert lessons(fresh, status="all") == []  # nothing written, not even the good first line
        assert fresh.post("/api/lessons/import", params={"format": "csv"}, content=good).status_code == 422
        page = fresh.post("/lessons/import", data={"text": good + "\n{not json\n", "format": "jsonl"})
        assert page.status_code == 400 and "Nothing was imported" in page.text and "line 2" in page.text
        assert lessons(fresh, status="all") == []


def test_the_lessons_that_fit_a_session_and_one_sent_to_it_as_a_message(client: TestClient) -> None:
    fit = client.get("/api/sessions/1/lessons")
    assert fit.status_code == 200, fit.text
    hits = fit.json()
    assert 1 <= len(hits) <= 5 and all(h["evidence"] and h["fit"] is not None for h in hits)
    assert all(h["arch"] == "sm_90" for h in hits)  # the session's GPU was an H200
    assert len(client.get("/api/sessions/1/lessons", params={"limit": 2}).json()) <= 2
    assert client.get("/api/sessions/99999/lessons").status_code == 404
    lid = hits[0]["id"]
    # An imported session is a record: it takes no message.
    assert client.post(f"/api/sessions/1/lessons/{lid}/send", json={}).status_code == 409

    sid = cpu_session(client, [{"say": "done", "declare_done": "nothing left"}])["id"]
    wait_status(client, sid, "paused", timeout=60)
    r = client.post(f"/api/sessions/{sid}/lessons/{lid}/send", json={"author": "ada"})
    assert r.status_code == 201, r.text
    sent = r.json()
    assert sent["text"].startswith(f"Lesson #{lid}: ") and sent["kind"] == "information"
    assert sent["author"] == "ada" and sent["status"] == "pending"
    assert client.get(f"/api/sessions/{sid}").json()["status"] == "paused"  # resume only when asked
    texts = [i["text"] for i in client.get(f"/api/sessions/{sid}/interventions").json()]
    assert texts == [sent["text"]]
    assert client.post(f"/api/sessions/{sid}/lessons/99999/send").status_code == 404
    # The pause panel's fragment: the lessons that fit, each with a Send button.
    panel = client.get(f"/sessions/{sid}/lessons/fit")
    assert panel.status_code == 200 and "Lessons that fit" in panel.text
    assert f'hx-post="/sessions/{sid}/lessons/' in panel.text and "Send as message" in panel.text
    assert "lessons-fit-slot" in client.get(f"/sessions/{sid}").text
    # The runner recorded what choosing the prompt's lessons cost: the audit's cost section shows it.
    audit = client.get(f"/sessions/{sid}/audit")
    assert audit.status_code == 200 and 'id="cost-knowledge"' in audit.text


def test_pages_list_a_lesson_link_its_evidence_and_escape_what_traces_wrote(client: TestClient) -> None:
    page = client.get("/lessons")
    assert page.status_code == 200 and 'href="/lessons"' in page.text and "lesson-row" in page.text
    lesson = by_knob(client, "causal_skip")
    detail = client.get(f"/lessons/{lesson['id']}")
    assert detail.status_code == 200
    assert 'href="/sessions/1/audit"' in detail.text and "Promote to bank question" in detail.text
    assert 'hx-get="/lessons/results"' in page.text
    results = client.get("/lessons/results", params={"q": "causal_skip"})
    assert "causal_skip" in results.text and results.text.count("lesson-row") < page.text.count("lesson-row")

    hostile = json.loads(client.get("/api/lessons/export").text.splitlines()[0])
    hostile.update(key="hostile<script>", text="<script>alert(1)</script> words", author="person",
                   action={"kind": "edit", "summary": "<img src=x onerror=alert(2)>"},
                   evidence=[{"key": "<b>k</b>", "trace": "<script>alert(3)</script>.jsonl", "candidate": 2,
                              "session_id": "../../logout", "ratio": 1.5, "categories": {"<i>c</i>": 1.5}}])
    r = client.post("/api/lessons/import", content=json.dumps(hostile) + "\n", headers={"content-type": "text/plain"})
    assert r.status_code == 200, r.text
    hid = next(x["id"] for x in lessons(client, status="all") if x["key"] == "hostile<script>")
    for html in (client.get(f"/lessons/{hid}").text, client.get("/lessons", params={"status": "all"}).text):
        assert "<script>alert" not in html and "<img src=x" not in html and "<i>c</i>" not in html
        assert "&lt;script&gt;alert(" in html or "&lt;img src=x" in html
    assert "../../logout" not in client.get(f"/lessons/{hid}").text  # a session id that is no number links nowhere
    client.post(f"/api/lessons/{hid}/status", json={"status": "retired"})

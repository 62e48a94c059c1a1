"""The bank inside the server: its JSON API and pages on a real app and SQLite file, the pause
banner's ranked suggestions, evidence credited from a real session, auto-ask in a real runner,
and `socratic bank export|import`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from app.faces.commands.cli import main as socratic
from app.store.models import PAUSED
from question_bank.store import STARTER_BANK
from tests.server_support import cpu_session, events, running_app, submit, wait_for, wait_status

LIMIT = "I think this is the limit."
WHAT_BOUNDS = ("What bounds this kernel now - memory bandwidth, tensor-core throughput, or issue slots - "
               "and which measured number tells you so?")


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    with running_app(tmp_path, bank_semantic_search=False) as c:
        yield c  # type: ignore[misc]


def test_the_starter_bank_is_there_on_first_start_and_searchable(client: TestClient) -> None:
    everything = client.get("/api/bank/questions", params={"limit": 500}).json()
    assert len(everything) == len(yaml.safe_load(STARTER_BANK.read_text())["questions"])
    hits = client.get("/api/bank/questions", params={"q": "bank confl"}).json()
    assert hits[0]["key"] == "v-tile-bank-conflicts" and hits[0]["score"] > 0
    budget = client.get("/api/bank/questions", params={"trigger": "budget", "kind": "question"}).json()
    assert budget and all("budget" in q["triggers"] for q in budget)


def test_adding_an_invalid_question_is_a_422_naming_each_field_and_writes_nothing(client: TestClient) -> None:
    before = len(client.get("/api/bank/questions", params={"limit": 500}).json())
    r = client.post("/api/bank/questions", json={"text": "No question mark", "triggers": ["soon"], "layers": []})
    assert r.status_code == 422
    fields = {d["loc"][-1] for d in r.json()["detail"]}
    assert fields == {"text", "triggers", "layers"}
    assert "a question must ask something" in r.json()["message"]
    assert len(client.get("/api/bank/questions", params={"limit": 500}).json()) == before


def test_add_edit_retire_merge_through_the_api(client: TestClient) -> None:
    a = client.post("/api/bank/questions", json={"text": "Is the grid order friendly to L2?", "triggers": ["plateau"],
                                                 "layers": ["scheduling"]})
    assert a.status_code == 201, a.text
    a_id = a.json()["id"]
    b = client.post("/api/bank/questions", json={"text": "Does the launch order reuse K/V in L2?",
                                                 "triggers": ["declared_limit"], "layers": ["memory"]}).json()
    edited = client.patch(f"/api/bank/questions/{a_id}", json={"layers": ["scheduling", "memory"]}).json()
    assert edited["layers"] == ["scheduling", "memory"] and edited["text"] == "Is the grid order friendly to L2?"
    merged = client.post("/api/bank/merge", json={"keep_id": a_id, "duplicate_ids": [b["id"]]}).json()
    assert merged["triggers"] == ["plateau", "declared_limit"]
    gone = client.get(f"/api/bank/questions/{b['id']}").json()
    assert gone["status"] == "retired" and gone["merged_into_id"] == a_id
    assert client.post(f"/api/bank/questions/{b['id']}/activate").status_code == 422
    retired = client.post(f"/api/bank/questions/{a_id}/retire").json()
    assert retired["status"] == "retired"
    assert client.get("/api/bank/questions/99999").status_code == 404


def test_export_and_import_through_the_api_round_trip(client: TestClient, tmp_path: Path) -> None:
    exported = client.get("/api/bank/export").text
    assert exported.startswith("# Socratic question bank, exported")
    edited = exported.replace("What bounds this kernel now", "What bounds this kernel today", 1)
    r = client.post("/api/bank/import", content=edited, headers={"content-type": "application/yaml"})
    assert r.status_code == 200, r.text
    assert r.json()["updated"] == ["what-bounds-the-kernel-now"]
    bad = edited.replace("layers: [measurement, memory, tensor_cores]", "layers: [measurement, memroy]", 1)
    r = client.post("/api/bank/import", content=bad, headers={"content-type": "application/yaml"})
    assert r.status_code == 422
    assert "'memroy' is not one of" in r.json()["message"] and r.json()["detail"][0]["loc"][:2] == ["body", "line"]
    # The rejected file changed nothing.
    assert yaml.safe_load(client.get("/api/bank/export").text) == yaml.safe_load(edited)


def test_a_paused_session_gets_the_bank_s_ranking_in_its_banner(client: TestClient) -> None:
    s = cpu_session(client, [{"say": LIMIT, "list": True}, {"say": "more", "list": True}])
    wait_status(client, s["id"], PAUSED)
    trigger = client.get(f"/api/sessions/{s['id']}/triggers").json()[-1]
    assert trigger["kind"] == "declared_limit"
    sources = [x["source"] for x in trigger["suggestions"]]
    assert sources and all(src.startswith("bank:") for src in sources)
    ranked = client.get(f"/api/sessions/{s['id']}/bank/suggestions").json()
    assert [f"bank:{q['key']}" for q in ranked[:len(sources)]] == sources
    assert any("written for a declared limit" in r for r in ranked[0]["reasons"])
    page = client.get(f"/sessions/{s['id']}").text
    assert ranked[0]["text"].replace("'", "&#39;")[:40] in page


def test_a_delivered_question_is_credited_with_the_leader_gain_that_followed(client: TestClient) -> None:
    steps = [submit("correct_5ms"), {"say": LIMIT, "list": True}, submit("correct_2ms"), {"say": "again", "list": True}]
    s = cpu_session(client, steps, thresholds={"credit_window": 2})
    sid = s["id"]
    wait_status(client, sid, PAUSED)
    r = client.post(f"/api/sessions/{sid}/interventions", json={"text": WHAT_BOUNDS, "author": "ana"})
    assert r.status_code == 201
    wait_for(client, sid, lambda st: st["evaluations"] >= 2 and st["status"] == PAUSED, what="the second evaluation")
    ev = client.get("/api/bank/evidence").json()
    [row] = [r for r in ev["questions"] if r["key"] == "what-bounds-the-kernel-now"]
    assert row["evidence"]["uses"] == 1 and row["evidence"]["credited"] == 1
    leader = client.get(f"/api/sessions/{sid}").json()["leader_speedup"]
    assert row["evidence"]["geomean_gain"] > 1.5 and row["evidence"]["hit_rate"] == 1.0
    assert ev["overall"]["question"]["uses"] == 1
    # The server's own per-intervention credit agrees with the bank's.
    [item] = client.get(f"/api/sessions/{sid}/interventions").json()
    assert item["credited_gain"] == pytest.approx(row["evidence"]["geomean_gain"])
    assert leader == pytest.approx(item["leader_at_delivery"] * item["credited_gain"])


def test_auto_ask_at_once_answers_a_pause_as_the_bank_and_resumes(client: TestClient) -> None:
    steps = [submit("correct_5ms"), {"say": LIMIT, "list": True}, {"say": "looking again", "list": True}]
    s = cpu_session(client, steps, start=False)
    sid = s["id"]
    r = client.put(f"/api/sessions/{sid}/auto-ask", json={"mode": "at_once", "max_in_a_row": 2})
    assert r.status_code == 200 and r.json()["mode"] == "at_once"
    client.post(f"/api/sessions/{sid}/start")
    # Two pauses answered by the bank (the declared limit, then the end of the script), then it
    # waits for a person.
    wait_for(client, sid, lambda st: st["status"] == PAUSED and len(
        [i for i in client.get(f"/api/sessions/{sid}/interventions").json() if i["author"] == "bank"]) == 2,
        what="two questions from the bank")
    items = client.get(f"/api/sessions/{sid}/interventions").json()
    assert [i["author"] for i in items] == ["bank", "bank"]
    assert items[0]["text"] != items[1]["text"]
    assert items[0]["status"] == "delivered" and items[0]["kind"] == "question"
    evs = events(client, sid)
    asked = [e for e in evs if e["kind"] == "bank_asked"]
    assert len(asked) == 2 and "auto-ask" in asked[0]["payload"]["reason"]
    resolutions = [t["resolution"] for t in client.get(f"/api/sessions/{sid}/triggers").json()]
    assert resolutions[:2] == ["resumed by bank", "resumed by bank"]
    ev = client.get("/api/bank/evidence").json()
    assert any(r["author"] == "bank" and r["uses"] == 2 for r in ev["by_author"])
    # Still paused: the bank asked twice in a row and leaves the third pause to a person.
    assert client.get(f"/api/sessions/{sid}").json()["status"] == PAUSED


def test_auto_ask_policy_is_validated(client: TestClient) -> None:
    s = cpu_session(client, [{"say": "hello", "list": True}], start=False)
    r = client.put(f"/api/sessions/{s['id']}/auto-ask", json={"mode": "sometimes"})
    assert r.status_code == 422
    assert client.put("/api/sessions/999/auto-ask", json={"mode": "off"}).status_code == 404
    assert client.get(f"/api/sessions/{s['id']}/auto-ask").json()["mode"] == "off"


def test_the_agent_tool_over_http(client: TestClient) -> None:
    r = client.post("/api/bank/consult", json={"situation": "causal is as slow as non-causal", "trigger": "plateau"})
    assert r.status_code == 200 and len(r.json()["questions"]) == 3
    assert client.post("/api/bank/consult", json={"situation": ""}).status_code == 422


def test_the_bank_page_renders_and_searches_as_you_type(client: TestClient) -> None:
    page = client.get("/bank")
    assert page.status_code == 200 and "Question bank" in page.text and 'id="bank-q"' in page.text
    fragment = client.get("/bank/results", params={"q": "cold l2"}).text
    assert "survives-hidden-and-cold-l2" in fragment and "<html" not in fragment
    hostile = client.get("/bank/results", params={"q": "<script>alert(1)</script>"}).text
    assert "<script>alert(1)" not in hostile


def test_bank_export_and_import_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db_a, db_b, out = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "bank.yaml"
    assert socratic(["bank", "export", "--db", str(db_a), "--out", str(out)]) == 0
    assert "questions to" in capsys.readouterr().err
    out.write_text(out.read_text() + "- key: what-bounds-it-now\n  text: Which unit is busiest now?\n"
                                      "  triggers: [plateau]\n  layers: [measurement]\n")
    assert socratic(["bank", "import", str(out), "--db", str(db_b)]) == 0
    starter = len(yaml.safe_load(STARTER_BANK.read_text())["questions"])
    assert f"1 created, 0 updated, {starter} unchanged" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("questions:\n  - text: Broken?\n    triggers: [plateau]\n    layers: [nowhere]\n")
    assert socratic(["bank", "import", str(bad), "--db", str(db_b)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:line 4:" in err and "nothing was imported" in err
    assert socratic(["bank", "export", "--db", str(db_b)]) == 0
    assert "key: what-bounds-it-now" in capsys.readouterr().out


def test_the_bank_page_forms_add_merge_retire_and_import(client: TestClient) -> None:
    bad = client.post("/bank/questions", data={"text": "no question mark", "kind": "question",
                                              "triggers": ["plateau"]})
    assert bad.status_code == 422
    assert 'data-field="text"' in bad.text and 'data-field="layers"' in bad.text
    assert "no question mark" in bad.text  # the person's input is kept in the form
    ok = client.post("/bank/questions", data={"text": "Which barrier guards nothing?", "kind": "question",
                                             "triggers": ["plateau"], "layers": ["pipeline"]},
                     follow_redirects=False)
    assert ok.status_code == 303 and "which-barrier-guards-nothing" in ok.headers["location"]
    dup = client.post("/bank/questions", data={"text": "Which barrier guards no data?", "kind": "question",
                                              "triggers": ["budget"], "layers": ["memory"]})
    assert dup.status_code in (200, 303)
    ids = {q["key"]: q["id"] for q in client.get("/api/bank/questions", params={"q": "barrier guards"}).json()}
    keep, other = ids["which-barrier-guards-nothing"], ids["which-barrier-guards-no-data"]
    merged = client.post("/bank/merge", data={"keep_id": str(keep), "duplicate_ids": [str(other)]})
    assert merged.status_code == 200 and "Merged 1 question(s) into" in merged.text
    assert client.get(f"/api/bank/questions/{other}").json()["merged_into_id"] == keep
    retired = client.post(f"/bank/questions/{keep}/status", data={"status": "retired"})
    assert "Retired" in retired.text
    page = client.get(f"/bank/questions/{keep}").text
    assert "merged from" in page and "which-barrier-guards-no-data" in page

    broken = client.post("/bank/import", files={"file": ("mine.yaml", b"questions:\n  - text: Why?\n")})
    assert broken.status_code == 422 and "Nothing was imported." in broken.text
    assert "mine.yaml:line 2: question 1 has no" in broken.text
    good = client.post("/bank/import", data={"text": "questions:\n  - text: Why now?\n    triggers: [any]\n"
                                                     "    layers: [algorithm]\n"})
    assert good.status_code == 200 and "Imported the pasted text: 1 created" in good.text
    exported = client.get("/bank/export.yaml")
    assert exported.headers["content-disposition"].startswith("attachment") and "key: why-now" in exported.text


def test_promoting_through_the_api_links_the_message_s_evidence(client: TestClient) -> None:
    s = cpu_session(client, [{"say": LIMIT, "list": True}, {"say": "more", "list": True}])
    sid = s["id"]
    wait_status(client, sid, PAUSED)
    sent = client.post(f"/api/sessions/{sid}/interventions", json={"text": "Is the wait on the GPU or the host?"})
    mid = sent.json()["id"]
    wait_status(client, sid, PAUSED)
    missing_layers = client.post("/api/bank/promote", json={"session_id": sid, "intervention_id": mid,
                                                            "triggers": ["declared_limit"], "layers": []})
    assert missing_layers.status_code == 422 and missing_layers.json()["detail"][0]["loc"] == ["body", "layers"]
    r = client.post("/api/bank/promote", json={"session_id": sid, "intervention_id": mid,
                                               "triggers": ["plateau", "declared_limit"], "layers": ["measurement"]})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["created"] and body["uses_linked"] == 1
    # The pause it answered comes first: it was written for a declared limit.
    assert body["question"]["triggers"] == ["declared_limit", "plateau"]
    assert body["question"]["provenance"] == f"promoted by person from session {sid}, message {mid}"
    assert client.post("/api/bank/promote", json={"session_id": sid, "intervention_id": 999, "triggers": ["any"],
                                                  "layers": ["memory"]}).status_code == 404


def test_a_pause_resumed_without_a_word_is_the_silent_control(client: TestClient) -> None:
    steps = [submit("correct_5ms"), {"say": LIMIT, "list": True}, submit("correct_2ms"), {"say": "again", "list": True}]
    s = cpu_session(client, steps, thresholds={"credit_window": 2})
    sid = s["id"]
    wait_status(client, sid, PAUSED)
    before = client.get(f"/api/sessions/{sid}").json()["leader_speedup"]
    assert client.get("/api/bank/evidence").json()["control"]["evidence"]["uses"] == 0
    assert client.post(f"/api/sessions/{sid}/resume").status_code == 200  # no message
    wait_for(client, sid, lambda st: st["evaluations"] >= 2 and st["status"] == PAUSED, what="the second evaluation")
    after = client.get(f"/api/sessions/{sid}").json()["leader_speedup"]
    ev = client.get("/api/bank/evidence").json()
    control = ev["control"]
    assert control["sessions"] == 1
    assert control["evidence"]["uses"] == 1 and control["evidence"]["credited"] == 1
    assert control["evidence"]["geomean_gain"] == pytest.approx(after / before) and after / before > 1.5
    assert control["evidence"]["interval"] is None  # one pause: no interval
    assert ev["overall"]["question"]["uses"] == 0  # a silent resume is no message
    page = client.get("/bank").text
    assert 'id="silent-control"' in page and "1 pause in 1 session" in page
    assert f"{after / before:.3f}x" in page


def test_the_bank_reads_each_shipped_question_against_the_shipped_silent_session(client: TestClient) -> None:
    assert client.post("/examples/import", follow_redirects=False).status_code == 303
    ev = client.get("/api/bank/evidence").json()
    # examples/h200-offline-silent.jsonl: seven pauses resumed without a word, no new leader after any
    control = ev["control"]
    assert control["sessions"] == 1 and control["evidence"]["credited"] == 7
    assert control["evidence"]["geomean_gain"] == pytest.approx(1.0) and control["evidence"]["hit_rate"] == 0.0
    # the bank session's seven questions: a 1.037x geomean whose interval still holds the control's 1.000x
    questions = ev["overall"]["question"]
    assert questions["credited"] == 7 and questions["geomean_gain"] == pytest.approx(1.037, abs=5e-4)
    low, high = questions["interval"]
    assert low < 1.0 < high
    page = client.get("/bank").text
    assert "7 pauses in 1 session" in page and "vs silent" in page
    assert 'class="evidence-row control-row"' in page
    assert "1.114x" in page  # the best question's gain, and its ratio to a control of 1.000x
    first = next(r for r in ev["questions"] if r["evidence"]["geomean_gain"] > 1.1)
    question_page = client.get(f"/bank/questions/{first['question_id']}").text
    assert "against the silent control" in question_page and "7 pauses resumed without a message" in question_page

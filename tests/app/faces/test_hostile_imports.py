"""Hostile imports (issue 48, breaks 1 and 2; docs/security.md): a trace or a campaign trace
whose numbers would stretch a chart forever, whose records are malformed, or whose pages
cannot be drawn is refused whole with a 4xx naming the problem; nothing is stored, every page
keeps answering, and a large import never holds up the event loop."""

from __future__ import annotations

import json
import lzma
import math
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.domain.audit.trace_io import TraceFormatError
from app.domain.progress import ChartPoint
from app.faces.web import campaigns as campaign_routes
from app.faces.web import page_check
from app.faces.web.render import MAX_TICKS, chart_svg
from app.settings import PROJECT_ROOT
from tests.server_support import running_app

SESSION_TRACE = PROJECT_ROOT / "examples" / "h200-offline-silent.jsonl"
CAMPAIGNS = PROJECT_ROOT / "examples" / "campaigns"
CAMPAIGN_TRACE = CAMPAIGNS / "h200-2026-12-01-judge-fixed" / "h200-autonomous-seed0.jsonl.xz"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with running_app(tmp_path / "data", bank_semantic_search=False) as c:
        yield c


def upload(client: TestClient, text: str) -> Any:
    return client.post("/traces/import", files={"trace": ("t.jsonl", text.encode(), "application/x-ndjson")},
                       headers={"accept": "text/html"}, follow_redirects=False)


def with_first_verdict(change: Callable[[dict[str, Any]], None]) -> str:
    """The example session trace with its first verdict event's payload changed."""
    lines = SESSION_TRACE.read_text().splitlines()
    for i, line in enumerate(lines):
        record = json.loads(line)
        if record["type"] == "event" and record["kind"] == "verdict":
            change(record["payload"])
            lines[i] = json.dumps(record)
            break
    return "\n".join(lines) + "\n"


def answering(client: TestClient, sessions: int = 0, campaigns: int = 0) -> None:
    assert client.get("/api/health").status_code == 200
    assert len(client.get("/api/sessions").json()) == sessions
    assert len(client.get("/api/campaigns").json()) == campaigns
    assert client.get("/", headers={"accept": "text/html"}).status_code == 200
    assert client.get("/campaigns", headers={"accept": "text/html"}).status_code == 200


# -- break 1: a number that froze the server ------------------------------------------------------


@pytest.mark.parametrize("speedup", [math.inf, 1.7e308, 1.64e308, 1e300, -1.0])
def test_a_verdict_speedup_beyond_any_kernel_is_refused_at_the_import(client: TestClient, speedup: float) -> None:
    def huge(payload: dict[str, Any]) -> None:
        payload["speedup"] = speedup

    r = upload(client, with_first_verdict(huge))
    assert r.status_code == 422, r.status_code
    assert "event.payload.speedup" in r.text, r.text[-600:]
    assert "a speedup is from 0 to" in r.text or "only finite numbers" in r.text, r.text[-600:]
    answering(client)


def test_the_chart_draws_any_values_with_a_bounded_number_of_ticks() -> None:
    values: list[Any] = [math.inf, -math.inf, math.nan, 1.7e308, 1e300, "12", True, -5.0, 3.0]
    points = [ChartPoint(i + 1, i + 1, "leader", v) for i, v in enumerate(values)]
    started = time.monotonic()
    for goal in (None, math.inf, 1e308, 2.0):
        chart = chart_svg(points, [], goal)
        assert 2 <= len(chart["ticks"]) <= MAX_TICKS + 1
        assert all(math.isfinite(d["y"]) for d in chart["dots"])
        assert all(math.isfinite(t["y"]) for t in chart["ticks"])
    assert time.monotonic() - started < 1.0
    dots = chart_svg(points, [], None)["dots"]
    assert [d["failed"] for d in dots] == [True, True, True, False, False, True, True, False, False]


def test_an_import_is_refused_when_one_of_its_pages_cannot_be_drawn(client: TestClient) -> None:
    """The import's check draws the session page's chart: a verdict whose number is text once
    imported, then broke /sessions/ID for good."""

    def wordy(payload: dict[str, Any]) -> None:
        payload["number"] = "one"

    r = upload(client, with_first_verdict(wordy))
    assert r.status_code == 422 and "cannot be shown" in r.text, r.text[-600:]
    answering(client)
    assert upload(client, SESSION_TRACE.read_text()).status_code == 303  # the real trace still imports
    for page in ("/sessions/1", "/sessions/1/audit", "/sessions/1/audit/timeline", "/sessions/1/audit/candidates/1"):
        assert client.get(page, headers={"accept": "text/html"}).status_code == 200, page


def test_an_import_whose_pages_take_too_long_to_draw_is_refused(client: TestClient,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(page_check, "PAGE_CHECK_S", -1.0)  # every page is "too slow"
    r = upload(client, SESSION_TRACE.read_text())
    assert r.status_code == 422 and "to draw; nothing was imported" in r.text, r.text[-600:]
    answering(client)


# -- break 2: campaign traces checked like session traces -------------------------------------------


def campaign_records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in lzma.decompress(CAMPAIGN_TRACE.read_bytes()).decode().splitlines()]


def campaign_text(records: list[dict[str, Any]]) -> bytes:
    return ("\n".join(json.dumps(r) for r in records) + "\n").encode()


def first(records: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(r for r in records if r["type"] == kind)


def _drop(record: dict[str, Any], key: str) -> None:
    record.pop(key)


def _no_members(records: list[dict[str, Any]]) -> None:
    records[:] = [r for r in records if r["type"] not in ("member", "session_line")]
    first(records, "header")["members"] = 0


MALFORMED: dict[str, tuple[Callable[[list[dict[str, Any]]], None], str]] = {
    "a member without index": (lambda rs: _drop(first(rs, "member"), "index"), "member.index"),
    "a member with a text index": (lambda rs: first(rs, "member").update(index="0"), "member.index"),
    "a title that is an object": (lambda rs: first(rs, "campaign").update(title={"a": 1}), "campaign.title"),
    "a text leader_speedup": (lambda rs: first(rs, "campaign").update(leader_speedup="fast"),
                              "campaign.leader_speedup"),
    "an infinite leader_speedup": (lambda rs: first(rs, "campaign").update(leader_speedup=1.7e308), "a speedup"),
    "a created_at that is no time": (lambda rs: first(rs, "campaign").update(created_at="yesterday"),
                                     "campaign.created_at"),
    "a created_at without its offset": (lambda rs: first(rs, "board").update(created_at="2026-12-01T10:00:00"),
                                        "UTC offset"),
    "a board entry's member out of range": (lambda rs: first(rs, "board").update(member=7), "member must be"),
    "a board entry's member as text": (lambda rs: first(rs, "board").update(member="0"), "member must be"),
    "a board entry with a text speedup": (lambda rs: first(rs, "board").update(speedup="2x"), "board.speedup"),
    "a board entry whose effects are text": (lambda rs: first(rs, "board").update(effects="none"), "board.effects"),
    "a board entry whose effects hold text": (lambda rs: first(rs, "board").update(effects={"decode": "big"}),
                                              "board.effects"),
    "a board entry naming no candidate": (lambda rs: first(rs, "board").update(candidate_number=999),
                                          "has no candidate #999"),
    "evaluations as text": (lambda rs: first(rs, "campaign").update(evaluations="lots"), "campaign.evaluations"),
    "negative evaluations": (lambda rs: first(rs, "campaign").update(evaluations=-1), "campaign.evaluations"),
    "an unknown mode": (lambda rs: first(rs, "campaign").update(mode="chaos"), "campaign.mode"),
    "an unknown field": (lambda rs: first(rs, "campaign").update(owner="me"), "unknown campaign field"),
    "a leader that is no pair": (lambda rs: first(rs, "campaign").update(leader="best"), "campaign.leader"),
    "a leader naming no candidate": (lambda rs: first(rs, "campaign").update(leader=[0, 999]), "no candidate #999"),
    "a header without counts": (lambda rs: first(rs, "header").update(board="many"), "header's board"),
    "no members at all": (lambda rs: _no_members(rs), "at least one member"),
    "a board count that disagrees": (lambda rs: rs.remove(first(rs, "board")), "truncated or was edited"),
    "a session line that is no text": (lambda rs: first(rs, "session_line").update(line=5), "session_line"),
    "a record of no known type": (lambda rs: rs.append({"type": "gossip"}), "unknown record type"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_campaign_trace_is_a_422_naming_the_problem(client: TestClient, name: str) -> None:
    records = campaign_records()
    change, message = MALFORMED[name]
    change(records)
    r = client.post("/api/campaigns/import", files={"file": ("c.jsonl", campaign_text(records))})
    assert r.status_code == 422, (name, r.status_code, r.text[:400])
    assert message in r.json()["message"], (name, r.json()["message"])
    answering(client)


def test_a_real_campaign_trace_imports_and_every_page_of_it_answers(client: TestClient) -> None:
    r = client.post("/api/campaigns/import", files={"file": ("c.jsonl.xz", CAMPAIGN_TRACE.read_bytes())})
    assert r.status_code == 201, r.text
    cid = r.json()["id"]
    for page in (f"/campaigns/{cid}", f"/campaigns/{cid}/live", f"/api/campaigns/{cid}/board", f"/api/campaigns/{cid}"):
        assert client.get(page).status_code == 200, page
    assert client.get(f"/api/campaigns/{cid}/export").content == lzma.decompress(CAMPAIGN_TRACE.read_bytes())


# -- weak spot: imports ran on the event loop ------------------------------------------------------------


@pytest.mark.parametrize("route", ["campaign", "bank"])
def test_an_import_runs_off_the_event_loop(client: TestClient, monkeypatch: pytest.MonkeyPatch, route: str) -> None:
    """While an import works (here: waits), the server still answers."""
    entered, release = threading.Event(), threading.Event()

    def slow(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(20)
        raise TraceFormatError("stopped by the test")

    if route == "campaign":
        monkeypatch.setattr(campaign_routes, "import_campaign", slow)

        def request() -> Any:
            return client.post("/api/campaigns/import", files={"file": ("c.jsonl", b'{"type": "header"}\n')})
    else:
        from app.faces.web import bank_api
        from question_bank.bank_file import BankFileError

        def slow_bank(*args: Any, **kwargs: Any) -> Any:
            entered.set()
            release.wait(20)
            raise BankFileError("upload", [])

        monkeypatch.setattr(bank_api, "import_bank_text", slow_bank)

        def request() -> Any:
            return client.post("/api/bank/import", content=b"questions: []\n",
                               headers={"content-type": "application/yaml"})
    replies: list[Any] = []
    worker = threading.Thread(target=lambda: replies.append(request()))
    worker.start()
    try:
        assert entered.wait(20), "the import never started"
        started = time.monotonic()
        assert client.get("/api/health").status_code == 200
        assert time.monotonic() - started < 5, "the health check waited for the import"
    finally:
        release.set()
        worker.join(30)
    assert replies and replies[0].status_code == 422

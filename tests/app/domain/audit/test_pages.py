"""The audit pages of an imported session, through the real app: the trace is uploaded, and
every view (overview, timeline filters, lineage, diffs, heatmap, download, JSON) reads it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.app.domain.audit.conftest import INFORMATION, QUESTION, RecordedSession
from tests.server_support import running_app

HTML = {"accept": "text/html"}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with running_app(tmp_path, bank_semantic_search=False) as c:
        yield c


@pytest.fixture
def imported(client: TestClient, recorded: RecordedSession) -> int:
    r = client.post("/traces/import", files={"trace": ("demo.jsonl", recorded.trace.encode(), "application/x-ndjson")},
                    follow_redirects=False)
    assert r.status_code == 303, r.text
    match = re.fullmatch(r"/sessions/(\d+)/audit", r.headers["location"])
    assert match
    return int(match.group(1))


def test_the_overview_shows_attribution_churn_and_cost_of_an_imported_session(
        client: TestClient, imported: int) -> None:
    page = client.get(f"/sessions/{imported}/audit", headers=HTML).text
    assert 'id="imported-badge"' in page and "from demo.jsonl" in page
    assert "audit &lt;demo&gt;" in page and "<demo>" not in page
    rows = re.findall(r'<tr class="credit credit-(\w+)" data-label="(\w+)">', page)
    assert rows == [("information", "I1"), ("question", "Q1")]
    assert QUESTION in page and INFORMATION in page
    assert page.count('class="mark mark-question"') == 1 and page.count('class="mark mark-trigger"') == 2
    assert 'id="churn-share"' in page and 'id="tokens-by-kind"' in page and "suite on cpu" in page


def test_the_timeline_filters_by_kind_text_and_candidate(client: TestClient, imported: int) -> None:
    base = f"/sessions/{imported}/audit/timeline"
    everything = client.get(base, headers=HTML).text
    total = len(re.findall(r'class="audit-event', everything))
    assert total > 30
    only = client.get(base, params={"kind": ["intervention"]}, headers=HTML).text
    kinds = re.findall(r'data-kinds="([^"]*)"', only)
    assert kinds == ["intervention"] * 3  # two messages sent, one delivery
    found = client.get(base, params={"q": "chunked prefill"}, headers=HTML).text
    assert 0 < len(re.findall(r'class="audit-event', found)) < total
    about = client.get(base, params={"candidate": "4", "kind": ["evaluation"]}, headers=HTML).text
    assert "new leader" in about and f'href="/sessions/{imported}/audit/candidates/4"' in about
    assert set(re.findall(r'data-kinds="([^"]*)"', about)) == {"evaluation"}
    assert set(re.findall(r'class="candidate-link"[^>]*>#(\d+)<', about)) == {"4"}


def test_lineage_diffs_and_heatmap(client: TestClient, imported: int, recorded: RecordedSession) -> None:
    lineage = client.get(f"/sessions/{imported}/audit/lineage", headers=HTML).text
    assert re.findall(r'data-node="(\w+)"', lineage) == ["baseline", "1", "2", "3", "4"]
    assert 'class="node node-leader on-leader-path is-leader" data-node="4"' in lineage
    assert 'class="node node-rejected" data-node="2"' in lineage
    assert lineage.count("edge edge-leader") == 2  # baseline -> #1 -> #4

    diff = client.get(f"/sessions/{imported}/audit/diff", params={"a": "2", "b": "3"}, headers=HTML).text
    assert '<span class="del">-tests.app.domain.audit.slow_kernels:skips_tail_5ms</span>' in diff
    assert '<span class="add">+tests.cpu_kernels:correct_5ms_retiled</span>' in diff
    base = client.get(f"/sessions/{imported}/audit/diff", params={"a": "baseline", "b": "4"}, headers=HTML).text
    assert "+tests.cpu_kernels:correct_2ms" in base
    missing = client.get(f"/sessions/{imported}/audit/diff", params={"a": "9", "b": "1"}, headers=HTML)
    assert missing.status_code == 404 and "no candidate #9" in missing.text

    heat = client.get(f"/sessions/{imported}/audit/candidates/4", headers=HTML).text
    cells = re.findall(r'<g class="heat-cell([^"]*)" data-scenario="([^"]+)"', heat)
    assert len(cells) == 4 and sum("heat-hidden" in c for c, _ in cells) == 1
    rejected = client.get(f"/sessions/{imported}/audit/candidates/2", headers=HTML).text
    assert rejected.count("heat-failed") == 2

    download = client.get(f"/sessions/{imported}/audit/trace.jsonl")
    assert download.content == recorded.trace.encode()


def test_the_json_audit_and_the_session_page_of_an_imported_session(client: TestClient, imported: int) -> None:
    data = client.get(f"/api/sessions/{imported}/audit").json()
    assert data["session"]["imported"] and data["lineage"]["leader_path"] == ["baseline", "1", "4"]
    assert [i["label"] for i in data["interventions"]] == ["I1", "Q1"]
    assert data["interventions"][1]["new_leaders"] == [4]
    session_page = client.get(f"/sessions/{imported}", headers=HTML).text
    assert 'id="imported-badge"' in session_page and 'id="composer-form"' not in session_page
    assert 'id="resume-button"' not in session_page
    assert client.post(f"/api/sessions/{imported}/resume", json={}).status_code == 409


def test_an_upload_that_is_not_a_trace_is_refused_with_the_reason(client: TestClient) -> None:
    r = client.post("/traces/import", files={"trace": ("x.jsonl", b'{"type": "header"}\n', "text/plain")},
                    headers=HTML)
    assert r.status_code == 422 and "not a Socratic trace" in r.text
    r = client.post("/traces/import", files={"trace": ("x.bin", b"\xff\xfe", "application/octet-stream")},
                    headers=HTML)
    assert r.status_code == 422 and "UTF-8" in r.text


def test_a_trace_with_odd_payloads_still_renders(client: TestClient, recorded: RecordedSession) -> None:
    """Payloads and reports are stored as the file holds them; the pages must not trust them."""
    import json

    lines = []
    for line in recorded.trace.split("\n")[:-1]:
        record = json.loads(line)
        if record["type"] == "event" and record["kind"] in ("evaluation", "verdict", "leader"):
            record["payload"] = {**record["payload"], "speedup": "fast", "passed": None}
        if record["type"] == "evaluation":
            for row in record["report"].get("scenarios", []):
                row["time_ms"], row["speedup_vs_baseline"] = "slow", "2x"
        lines.append(json.dumps(record))
    r = client.post("/traces/import", files={"trace": ("odd.jsonl", ("\n".join(lines) + "\n").encode(), "text/plain")},
                    follow_redirects=False)
    assert r.status_code == 303, r.text
    base = r.headers["location"]
    for path in ("", "/timeline", "/lineage", "/candidates/4", "/diff?a=1&b=4"):
        assert client.get(base + path, headers=HTML).status_code == 200, path

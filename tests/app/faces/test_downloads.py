"""A candidate in one click: its source as an attachment under a name the server makes up,
its knob record and its suite report beside it, linked from the audit and compare pages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.settings import PROJECT_ROOT
from tests.server_support import running_app

TRACE = PROJECT_ROOT / "examples" / "h200-offline-bank-questions.jsonl"
CONTROL = PROJECT_ROOT / "examples" / "h200-offline-silent.jsonl"


def test_a_candidates_source_knobs_and_report_download_as_files(tmp_path: Path) -> None:
    if not (TRACE.is_file() and CONTROL.is_file()):
        pytest.skip("examples/ lacks the bank example trace")
    with running_app(tmp_path, bank_semantic_search=False) as client:
        r = client.post("/traces/import", files={"trace": ("t.jsonl", TRACE.read_bytes(), "application/x-ndjson")},
                        follow_redirects=False)
        sid = int(r.headers["location"].split("/")[2])
        r = client.post("/traces/import", files={"trace": ("c.jsonl", CONTROL.read_bytes(), "application/x-ndjson")},
                        follow_redirects=False)
        other = int(r.headers["location"].split("/")[2])
        leader = client.get(f"/api/sessions/{sid}").json()["leader_number"]
        source = client.get(f"/api/sessions/{sid}/candidates/{leader}/source")
        knobs = client.get(f"/api/sessions/{sid}/candidates/{leader}/knobs")
        report = client.get(f"/api/sessions/{sid}/candidates/{leader}/report")
        missing = client.get(f"/api/sessions/{sid}/candidates/999/source")
        audit = client.get(f"/sessions/{sid}/audit/candidates/{leader}").text
        compare = client.get(f"/compare?s={sid}&s={other}").text
        listed = client.get(f"/api/sessions/{sid}/candidates").json()
    kept = next(c for c in listed if c["number"] == leader)
    assert source.status_code == 200 and source.headers["content-type"].startswith("text/plain")
    assert source.headers["content-disposition"] == f'attachment; filename="session-{sid}-candidate-{leader}.cu"'
    assert "socratic_attention_forward" in source.text and "Knob setting:" in source.text
    assert knobs.status_code == 200 and json.loads(knobs.text)["mma"]  # the family's record, parsed
    body = json.loads(report.text)
    assert len(body["scenarios"]) == kept["scenario_count"] == 10
    assert report.headers["content-disposition"].endswith(f'candidate-{leader}.report.json"')
    assert missing.status_code == 404
    link = f'href="/api/sessions/{sid}/candidates/{leader}/source"'
    assert link in audit and link in compare

"""A campaign through the real server and runners (the offline agents' kernels are rendered
for real; their evaluations come from the synthetic speed table of tests/family_model.py, the
stand-in the offline agent's own tests use): created through the API and the CLI, judged on
one board within one budget, exported and imported back as the same bytes, audited."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.domain.audit.trace_io import trace_bytes
from app.domain.campaigns.trace import CAMPAIGN_TRACE_FACTOR
from app.faces.commands.cli import main as socratic
from tests.app.domain.campaigns.support import SCENARIO_SPECS
from tests.family_model import SyntheticEvaluator
from tests.server_support import running_app


def run_campaign(client: TestClient, body: dict[str, Any], timeout: float = 150.0) -> dict[str, Any]:
    r = client.post("/api/campaigns", json={"scenarios": SCENARIO_SPECS, **body})
    assert r.status_code == 201, r.text
    cid = r.json()["id"]
    deadline = time.monotonic() + timeout
    while True:
        view = client.get(f"/api/campaigns/{cid}").json()
        if view["status"] == "finished" and all(row["status"] in ("stopped", "done") for row in view["leaderboard"]):
            return dict(view)
        for row in view["leaderboard"]:  # pauses are resumed without a message
            if row["status"] == "paused":
                client.post(f"/api/sessions/{row['session_id']}/resume", json={"author": "test"})
        assert time.monotonic() < deadline, f"the campaign did not finish: {view['detail']}"
        time.sleep(0.3)


def test_a_board_campaign_runs_judges_within_one_budget_and_round_trips_as_a_trace(
        tmp_path: Path) -> None:
    with running_app(tmp_path, gpu=True, evaluator=SyntheticEvaluator(), trace_max_bytes=2**20) as client:
        bad = client.post("/api/campaigns", json={"title": "x", "scenarios": SCENARIO_SPECS})
        assert bad.status_code == 422  # neither agents nor members
        view = run_campaign(client, {"title": "board", "agents": 3, "budget_evaluations": 12, "memory_k": 5,
                                     "plateau_window": 4,
                                     "thresholds": {"plateau_window": 3, "suspicious_jump": 50}})
        cid = view["id"]
        assert view["evaluations"] == 12 and "budget of 12 evaluations" in view["detail"]
        assert [r["strategy"] for r in sorted(view["leaderboard"], key=lambda r: r["session_id"])] == \
            ["tiling", "memory", "math"]
        board = view["board"]
        # (a kernel already on the device when the budget ran out is posted too, but not counted)
        assert len(board) >= 12 and {e["campaign_verdict"] for e in board} <= {"leader", "backup", "discarded"}
        # Each campaign leader was faster than the one before; the last one leads.
        leads = [e for e in board if e["campaign_verdict"] == "leader"]
        assert view["leader"]["speedup"] == max(e["speedup"] for e in leads)
        assert [e["speedup"] for e in reversed(leads)] == sorted(e["speedup"] for e in leads)
        # Each agent read the board after each submission, within the memory bound.
        sid = view["leaderboard"][0]["session_id"]
        evs = client.get(f"/api/sessions/{sid}/events?limit=1000").json()
        reads = [e for e in evs if e["kind"] == "tool_result" and e["payload"]["name"] == "read_board"]
        assert reads and all("The board (the last 5 entries" in e["payload"]["text"] for e in reads)
        assert client.get(f"/api/campaigns/{cid}/board?outcome=leader").json() == \
            [e for e in client.get(f"/api/campaigns/{cid}/board").json() if e["campaign_verdict"] == "leader"]
        page = client.get(f"/campaigns/{cid}")
        assert page.status_code == 200 and 'id="leaderboard"' in page.text and 'id="campaign-tree"' in page.text

        # Export, import as a read-only campaign, export again: the same bytes; the audit reads it.
        text = client.get(f"/api/campaigns/{cid}/export").text
        r = client.post("/api/campaigns/import", files={"file": ("c.jsonl", text.encode())})
        assert r.status_code == 201, r.text
        copy = r.json()["id"]
        assert client.get(f"/api/campaigns/{copy}/export").text == text
        imported = client.get(f"/api/campaigns/{copy}").json()
        assert imported["read_only"] and imported["leader"]["speedup"] == view["leader"]["speedup"]
        assert len(imported["board"]) == len(board) and len(imported["tree"]["nodes"]) == len(view["tree"]["nodes"])
        member = imported["leaderboard"][0]["session_id"]
        assert client.get(f"/sessions/{member}/audit").status_code == 200
        assert client.post(f"/api/campaigns/{copy}/start").status_code == 409
        # The same file again is said, not stored twice; a file over the limit is refused whole.
        campaigns = len(client.get("/api/campaigns").json())
        again = client.post("/api/campaigns/import", files={"file": ("c.jsonl", text.encode())})
        assert again.status_code == 409 and "imported before" in again.text
        assert len(client.get("/api/campaigns").json()) == campaigns
        huge = b" " * (CAMPAIGN_TRACE_FACTOR * 2**20 + 1)  # twice SOCRATIC_TRACE_MAX_BYTES (1 MiB here)
        assert client.post("/api/campaigns/import", files={"file": ("big.jsonl", huge)}).status_code == 413
        # Compressed, it is the same trace: read, recognised, not stored twice.
        packed = trace_bytes(text, "c.jsonl.gz")
        again = client.post("/api/campaigns/import", files={"file": ("c.jsonl.gz", packed)})
        assert again.status_code == 409 and "imported before" in again.text
        deep = (text.splitlines()[0] + "\n" + '{"type":"campaign","x":' + "[" * 200 + "]" * 200 + "}\n").encode()
        assert client.post("/api/campaigns/import", files={"file": ("deep.jsonl", deep)}).status_code == 422
    (tmp_path / "c.jsonl").write_text(text)
    other = tmp_path / "other.db"
    assert socratic(["campaign", "import", str(tmp_path / "c.jsonl"), "--db", str(other)]) == 0
    assert socratic(["campaign", "export", "1", "--db", str(other), "-o", str(tmp_path / "again.jsonl")]) == 0
    assert (tmp_path / "again.jsonl").read_text() == text
    assert socratic(["campaign", "import", str(tmp_path / "c.jsonl"), "--db", str(other)]) == 1  # already there
    # Compressed by the name it is written to, read back by its magic bytes (examples/ keeps xz).
    packed = tmp_path / "c.jsonl.xz"
    assert socratic(["campaign", "export", "1", "--db", str(other), "-o", str(packed)]) == 0
    assert packed.read_bytes()[:6] == b"\xfd7zXZ\x00" and packed.stat().st_size < len(text) // 3
    third = tmp_path / "third.db"
    assert socratic(["campaign", "import", str(packed), "--db", str(third)]) == 0
    assert socratic(["campaign", "export", "1", "--db", str(third), "-o", str(tmp_path / "3.jsonl")]) == 0
    assert (tmp_path / "3.jsonl").read_text() == text


def test_an_evolution_campaign_orders_each_child_with_a_bank_question(
        tmp_path: Path) -> None:
    with running_app(tmp_path, gpu=True, evaluator=SyntheticEvaluator()) as client:
        view = run_campaign(client, {"title": "evolution", "mode": "evolution", "agents": 2, "islands": 2,
                                     "policy": "questions", "budget_evaluations": 10,
                                     "thresholds": {"plateau_window": 1000, "suspicious_jump": 50}})
        muts = view["mutations"]
        assert len(muts) >= 6 and all(m["question"].endswith("?") for m in muts)
        assert {m["parent_verdict"] for m in muts} <= {"leader", "backup"}
        cross = [e for e in view["tree"]["edges"] if e["kind"] == "mutation"]
        assert cross and all(e["question"] for e in cross)
        # The bank credits the questions that ordered children (as for any question).
        questions = client.get("/api/bank/questions").json()
        used = {m["question_id"] for m in muts}
        assert any(q["id"] in used and q["evidence"]["credited"] > 0 for q in questions)


def test_the_cli_creates_lists_and_shows_a_campaign(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "cli.db"
    assert socratic(["campaign", "create", "--db", str(db), "--title", "from the cli", "--agents", "2",
                     "--budget", "8", "--memory-k", "4", "--suite-filter", "category=decode"]) == 0
    assert "created campaign 1" in capsys.readouterr().out
    assert socratic(["campaign", "list", "--db", str(db)]) == 0
    assert "from the cli" in capsys.readouterr().out
    assert socratic(["campaign", "show", "1", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "agent 1 (tiling, seed 0)" in out and "agent 2 (memory, seed 1)" in out and "created" in out
    assert socratic(["campaign", "create", "--db", str(db), "--agents", "0"]) == 2


@pytest.mark.parametrize("change", [
    {"goal_target": float("nan")}, {"goal_target": 1e400}, {"title": "a\u0000b"}, {"seed": -1},
    {"budget_evaluations": 10**12}, {"baseline": "/etc/passwd"}, {"members": [{"agent": "offline", "island": 99}]},
])
def test_a_campaign_is_checked_like_every_other_input(tmp_path: Path, change: dict[str, Any]) -> None:
    body: dict[str, Any] = {"title": "limits", "agents": 2, "start": False, **change}
    if "members" in change:
        body.pop("agents")
    with running_app(tmp_path) as client:
        r = client.post("/api/campaigns", content=json.dumps(body), headers={"content-type": "application/json"})
        assert r.status_code == 422, r.text
        assert client.get("/api/campaigns").json() == [] and client.get("/api/sessions").json() == []


"""A candidate's profile on the server: `GET /api/sessions/{id}/candidates/{n}/profile` (every
scenario, for a person), computed once per evaluation and kept; the `profile` tool an agent calls
(hidden scenarios counted, never named); the candidate page and the pause banner show the
diagnosis. Driven by the synthetic H100 (tests/family_model.py) through the real runner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlmodel import Session, create_engine, select

from app.engine.agents.base import PROFILE
from app.store.models import PAUSED, EvaluationProfile
from harness.profile import PROFILE_SCHEMA
from harness.scenario import Scenario
from tests.family_model import SyntheticEvaluator
from tests.server_support import events, running_app
from tests.waiting import wait_until

SCENARIOS = [
    Scenario("prefill-d128-s4096-full", "prefill", 4, 4096, 4096, 16, 16, 128, causal=False),
    Scenario("prefill-d64-s2048-causal", "prefill", 8, 2048, 2048, 32, 32, 64, causal=True),
    Scenario("decode-d128-b16-k8192", "decode", 16, 1, 8192, 32, 8, 128, causal=True),
    Scenario("prefill-secret-d256-s1024", "prefill", 16, 1024, 1024, 8, 8, 256, causal=False, hidden=True),
]


def specs() -> list[dict[str, Any]]:
    return [{k: v for k, v in s.to_dict().items() if k not in ("model", "tags")} for s in SCENARIOS]


def test_profile_route_tool_page_and_pause_banner_show_what_bounds_the_candidate(tmp_path: Path) -> None:
    with running_app(tmp_path, gpu=True, evaluator=SyntheticEvaluator(hopper=True)) as client:
        r = client.post("/api/sessions", json={
            "title": "profiled", "agent": "offline", "agent_config": {"seed": 0, "patience": 2},
            "scenarios": specs(), "thresholds": {"plateau_window": 2, "suspicious_jump": 50}, "start": False})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        assert client.get(f"/api/sessions/{sid}/candidates/1/profile").status_code == 404  # nothing evaluated yet
        assert client.post(f"/api/sessions/{sid}/start").status_code == 200
        state = wait_until(lambda: (lambda s: s if s["status"] == PAUSED and s["evaluations"] >= 3 else None)(
            client.get(f"/api/sessions/{sid}").json()), 120, "a pause after three evaluations")
        first = client.get(f"/api/sessions/{sid}/candidates/1/profile")
        assert first.status_code == 200, first.text
        body = first.json()
        assert body["findings"][0]["code"] == "no_wgmma_on_hopper"
        assert body["findings"][0]["layer"] == "math" and body["findings"][0]["knob"] == "mma"
        assert "no HGMMA on sm_90a" in body["diagnosis"]
        assert "prefill-secret-d256-s1024" in [s["scenario"] for s in body["scenarios"]]  # a person sees all
        assert client.get(f"/api/sessions/{sid}/candidates/1/profile").json() == body
        page = client.get(f"/sessions/{sid}/candidates/1").text
        assert 'id="diagnosis"' in page and "no HGMMA on sm_90a" in page and 'data-finding="no_wgmma_on_hopper"' in page
        leader = client.get(f"/api/sessions/{sid}/candidates/{state['leader_number']}/profile").json()
        # the Hopper kernel's profile: findings read from its shapes, each with the moves after its own setting
        hopper = client.get(f"/api/sessions/{sid}/candidates/2/profile").json()
        loop = next(f for f in hopper["findings"] if f["code"] == "loop_below_roofline")
        assert loop["moves"][0] == ["math", "rescale", "lazy"]
        page2 = client.get(f"/sessions/{sid}/candidates/2").text
        assert 'data-finding="loop_below_roofline"' in page2 and '<code class="move">rescale=lazy</code>' in page2
        session_page = client.get(f"/sessions/{sid}").text
        assert 'id="pause-diagnosis"' in session_page and leader["diagnosis"].split(";")[0] in session_page
        client.post(f"/api/sessions/{sid}/stop", json={"author": "test"})
        evs = events(client, sid)
    # computed once, kept per evaluation
    engine = create_engine(f"sqlite:///{tmp_path / 'socratic.db'}")
    with Session(engine) as db:
        rows = list(db.exec(select(EvaluationProfile)))
    engine.dispose()
    assert rows and all(row.profile["schema"] == PROFILE_SCHEMA for row in rows)
    # the agent's tool: the visible profile, the hidden scenario counted, never named
    tool = [e["payload"] for e in evs if e["kind"] == "tool_result" and e["payload"]["name"] == PROFILE]
    assert tool and all("prefill-secret" not in t["text"] for t in tool)
    assert "1 hidden scenario(s) are counted" in tool[0]["text"]

"""Choosing the agent, its model or search options, and its budgets per session, from the API
and from the new-session form; the default agent follows whether an API key is configured."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.faces.web.pages import session_spec_from_form
from tests.server_support import running_app


def test_a_session_that_names_no_agent_gets_the_offline_agent_without_an_api_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with running_app(tmp_path) as client:
        r = client.post("/api/sessions", json={"title": "default agent", "start": False})
        assert r.status_code == 201, r.text
        assert r.json()["agent"] == "offline" and r.json()["candidate_kind"] == "cuda"
        page = client.get("/").text
        assert '<option value="offline" selected>' in page


def test_with_an_api_key_the_default_agent_is_claude(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    with running_app(tmp_path) as client:
        r = client.post("/api/sessions", json={"title": "default agent", "start": False})
        assert r.status_code == 201, r.text
        assert r.json()["agent"] == "claude"


def test_the_api_sets_model_and_budgets_and_refuses_options_an_agent_does_not_take(tmp_path: Path) -> None:
    with running_app(tmp_path) as client:
        r = client.post("/api/sessions", json={
            "title": "claude", "agent": "claude", "agent_config": {"model": "claude-opus-5", "max_tokens": 8000},
            "budget": {"tokens": 2_000_000, "cost_usd": 12.5, "steps": 300}, "start": False})
        assert r.status_code == 201, r.text
        s = r.json()
        assert s["agent_config"] == {"model": "claude-opus-5", "max_tokens": 8000}
        assert s["budget"]["tokens"] == 2_000_000 and s["budget"]["cost_usd"] == 12.5 and s["budget"]["steps"] == 300
        for body, message in (
            ({"agent": "claude", "agent_config": {"temperature": 1}}, "unknown claude option"),
            ({"agent": "offline", "agent_config": {"focus": "everything"}}, "focus must be one of"),
            ({"agent": "offline", "candidate_kind": "python-cpu", "baseline": "tests.cpu_kernels:correct_10ms"},
             "writes cuda candidates"),
            ({"agent": "mcp", "agent_config": {"model": "x"}}, "takes no options"),
        ):
            r = client.post("/api/sessions", json={"title": "bad", "start": False, **body})
            assert r.status_code == 422 and message in r.json()["message"], r.text
        names = {a["name"] for a in client.get("/api/agents").json()}
        assert {"scripted", "claude", "offline", "mcp"} <= names


def test_the_form_passes_the_model_and_the_token_and_money_budgets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    claude = {"title": "claude from the form", "agent": "claude", "model": "claude-haiku-4-5",
              "budget_tokens": "500000", "budget_cost_usd": "3.5", "seed": "9"}
    with running_app(tmp_path) as client:
        # Without a key the form refuses Claude with the reason, and stores nothing (issue 17).
        refused = client.post("/sessions", data=claude, follow_redirects=False)
        assert refused.status_code == 422 and "ANTHROPIC_API_KEY" in refused.text
        assert client.get("/api/sessions").json() == []
    # What the form would create for Claude (with a key it starts): its fields arrive.
    spec = session_spec_from_form(claude, "offline")
    assert spec.agent == "claude" and spec.agent_config == {"model": "claude-haiku-4-5"}  # no offline seed
    assert spec.budget.tokens == 500_000 and spec.budget.cost_usd == 3.5
    with running_app(tmp_path) as client:
        ok = client.post("/sessions", data={"title": "offline from the form", "agent": "offline", "seed": "4",
                                            "focus": "masking"}, follow_redirects=False)
        assert ok.status_code == 303, ok.text
        sid = int(ok.headers["location"].rsplit("/", 1)[1])
        s = client.get(f"/api/sessions/{sid}").json()
        assert s["agent_config"] == {"seed": 4, "focus": "masking"} and s["candidate_kind"] == "cuda"
        client.post(f"/api/sessions/{sid}/stop")

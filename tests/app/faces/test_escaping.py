"""Every agent- or kernel-provided text is escaped: the agent's words, candidate titles,
notes and sources, messages, and session titles, on pages and in websocket fragments."""

from __future__ import annotations

from pathlib import Path

from app.store.models import PAUSED
from tests.server_support import running_app, wait_for, wait_status

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>"><svg onload=alert(2)>'
RAW_MARKERS = ("<script>alert", "<img src=x", "<svg onload")


def assert_escaped(html: str) -> None:
    for marker in RAW_MARKERS:
        assert marker not in html, f"unescaped {marker!r} in the page"
    assert "&lt;script&gt;alert(" in html


def test_hostile_agent_words_titles_and_messages_are_escaped_everywhere(tmp_path: Path) -> None:
    steps = [{"say": f"{HOSTILE} this is the limit", "list": True}]
    with running_app(tmp_path) as client:
        r = client.post("/api/sessions", json={"title": HOSTILE, "agent_config": {"steps": steps},
                                               "candidate_kind": "python-cpu",
                                               "baseline": "tests.cpu_kernels:correct_10ms"})
        sid = r.json()["id"]
        wait_status(client, sid, PAUSED)
        client.post(f"/api/sessions/{sid}/interventions", json={"text": HOSTILE, "resume": False})
        page = client.get(f"/sessions/{sid}").text
        assert_escaped(page)
        assert 'data-trigger="declared_limit"' in page  # the banner quotes the agent's words, escaped
        assert_escaped(client.get("/").text)
        with client.websocket_connect(f"/ws/sessions/{sid}?after=0") as ws:
            assert_escaped(ws.receive_text())
        # The JSON API returns the text as data, unchanged.
        assert client.get(f"/api/sessions/{sid}").json()["title"] == HOSTILE


def test_hostile_kernel_source_title_and_notes_are_escaped_on_the_candidate_page(tmp_path: Path) -> None:
    source = f"// {HOSTILE}\n__global__ void k() {{}}\n"
    steps = [{"say": "here", "submit": {"source": source, "title": HOSTILE, "notes": HOSTILE}}]
    with running_app(tmp_path, gpu=False) as client:  # a CUDA candidate waits for a GPU: never run here
        r = client.post("/api/sessions", json={"title": "t", "agent_config": {"steps": steps}})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        wait_for(client, sid, lambda s: s["candidates"] == 1, what="the candidate")
        page = client.get(f"/sessions/{sid}/candidates/1").text
        assert_escaped(page)
        assert "__global__ void k()" in page
        client.post(f"/api/sessions/{sid}/stop")

"""The session websocket: htmx fragments for new events and panels, replay after a
reconnect (every missed event, in order, none twice), and steering messages from the page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from starlette.websockets import WebSocketDisconnect

from tests.server_support import cpu_session, events, running_app, seqs_in


def read_until(ws: Any, last: int, seen: list[int]) -> list[str]:
    """Messages until the event with seq `last` has arrived; appends every event seq seen."""
    messages = []
    while not seen or seen[-1] < last:
        text = ws.receive_text()
        messages.append(text)
        seen.extend(seqs_in(text))
    return messages


def send(client: Any, sid: int, text: str) -> None:
    r = client.post(f"/api/sessions/{sid}/interventions", json={"text": text})
    assert r.status_code == 201


def test_reconnecting_client_gets_every_missed_event_in_order_and_none_twice(tmp_path: Path) -> None:
    with running_app(tmp_path) as client:
        sid = cpu_session(client, [{"say": "x", "list": True}], start=False)["id"]
        for i in range(3):
            send(client, sid, f"before {i}")
        seen: list[int] = []
        with client.websocket_connect(f"/ws/sessions/{sid}?after=0") as ws:
            first = read_until(ws, 4, seen)
            assert 'id="last-seq" data-seq="4"' in first[0]
            assert 'hx-swap-oob="beforeend"' in first[0]  # events are appended to the trace
            send(client, sid, "live")  # pushed while connected
            read_until(ws, 5, seen)
        for i in range(2):
            send(client, sid, f"while away {i}")  # seq 6, 7: missed
        with client.websocket_connect(f"/ws/sessions/{sid}?after={seen[-1]}") as ws:
            read_until(ws, 7, seen)
            send(client, sid, "after reconnect")
            read_until(ws, 8, seen)
        assert seen == list(range(1, 9))
        assert [e["seq"] for e in events(client, sid)] == seen


def test_every_message_carries_the_panels_and_the_last_seq_marker(tmp_path: Path) -> None:
    with running_app(tmp_path) as client:
        sid = cpu_session(client, [{"say": "x", "list": True}], start=False)["id"]
        with client.websocket_connect(f"/ws/sessions/{sid}?after=1") as ws:
            panels = ws.receive_text()  # nothing to replay: the panels alone
            assert seqs_in(panels) == []
            for part in ('id="session-header" class="card header" hx-swap-oob="true"', 'id="pause-banner"',
                         'id="chart"', 'id="candidates"', 'id="interventions"'):
                assert part in panels
            send(client, sid, "hello")
            text = ws.receive_text()
            assert seqs_in(text) == [2] and 'id="last-seq" data-seq="2"' in text


def test_steering_over_the_websocket_records_the_message_and_acknowledges_it(tmp_path: Path) -> None:
    with running_app(tmp_path) as client:
        sid = cpu_session(client, [{"say": "x", "list": True}], start=False)["id"]
        with client.websocket_connect(f"/ws/sessions/{sid}?after=1") as ws:
            ws.receive_text()
            ws.send_text(json.dumps({"action": "send", "text": "Which layer?", "kind": "question", "mode": "queue",
                                     "HEADERS": {"HX-Request": "true"}}))
            texts = [ws.receive_text(), ws.receive_text()]
            assert any("Question sent (queue)." in t for t in texts)
            assert any("Which layer?" in t and seqs_in(t) == [2] for t in texts)
            ws.send_text(json.dumps({"action": "send", "text": "   "}))
            assert "must not be blank" in ws.receive_text()
            ws.send_text(json.dumps({"action": "pause"}))
            assert "only a running session can be paused" in ws.receive_text()
        items = client.get(f"/api/sessions/{sid}/interventions").json()
        assert [(i["text"], i["mode"]) for i in items] == [("Which layer?", "queue")]


def test_unknown_session_is_refused(tmp_path: Path) -> None:
    with running_app(tmp_path) as client, pytest.raises(WebSocketDisconnect), \
            client.websocket_connect("/ws/sessions/999") as ws:
        ws.receive_text()

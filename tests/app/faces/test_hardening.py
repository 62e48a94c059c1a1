"""Hardening (docs/security.md): one regression test per attack that once worked against
`socratic serve` on its defaults. Each is refused with a clear 4xx, nothing is stored
half-way, and the server keeps answering afterwards."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from app.domain.audit.trace_io import FORMAT, VERSION
from app.domain.kernel_names import kernel_names
from app.faces.commands.cli import main as socratic
from app.faces.web.security import RedactTokens
from app.settings import PROJECT_ROOT
from app.store.events import EventHub, Unit
from app.store.models import SteeringSession
from tests.server_support import CPU, cpu_session, free_port, running_app

ROOT = PROJECT_ROOT
BIG = 2**63  # one past the largest id SQLite holds


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with running_app(tmp_path / "data", bank_semantic_search=False) as c:
        yield c


def still_fine(client: TestClient, sessions: int = 0) -> None:
    """The server answers and lists what it held before the attack, nothing more."""
    r = client.get("/api/sessions")
    assert r.status_code == 200 and len(r.json()) == sessions, r.text
    assert client.get("/", headers={"accept": "text/html"}).status_code == 200


def cuda_body(**fields: Any) -> dict[str, Any]:
    return {"title": "t", "agent": "offline", "candidate_kind": "cuda", "start": False, **fields}


# -- paths: a request names kernels from the server's list, never a file --------------------


def test_a_baseline_is_a_name_from_the_servers_list_never_a_path(client: TestClient, tmp_path: Path) -> None:
    link = tmp_path / "innocent.cu"
    link.symlink_to("/etc/passwd")
    inside = tmp_path / "baseline-link.cu"
    inside.symlink_to(ROOT / "kernels" / "attention" / "baseline.cu")
    for bad in ("/etc/passwd", "../../../../etc/passwd", "kernels/attention/../../../../etc/passwd",
                str(ROOT / "kernels" / "attention" / "baseline.cu"), str(link), str(inside),
                "kernels/attention/contract.h", "kernels/attention/baseline.cu/", "gallery/../baseline"):
        r = client.post("/api/sessions", json=cuda_body(baseline=bad))
        assert r.status_code == 422, (bad, r.text)
        assert "not a kernel this server offers" in r.json()["message"] and "gallery/" in r.json()["message"]
    still_fine(client)
    for good in ("baseline", "kernels/attention/baseline.cu", next(n for n in kernel_names() if "gallery/" in n)):
        r = client.post("/api/sessions", json=cuda_body(baseline=good))
        assert r.status_code == 201, (good, r.text)
    assert len(client.get("/api/sessions").json()) == 3


def test_the_scripted_agent_submits_listed_kernels_or_text_never_a_file(client: TestClient) -> None:
    for bad in ("/etc/passwd", "../../etc/passwd", "kernels/../../../etc/passwd", "tests/cpu_kernels.py"):
        steps = [{"submit": {"path": bad, "title": "x"}}]
        r = client.post("/api/sessions", json=cuda_body(agent="scripted", agent_config={"steps": steps}))
        assert r.status_code == 422, (bad, r.text)
        assert "not a kernel this server offers" in r.text
    bad_replace = [{"submit": {"path": "baseline", "replace": "oops"}}]
    r = client.post("/api/sessions", json=cuda_body(agent="scripted", agent_config={"steps": bad_replace}))
    assert r.status_code == 422 and "replace" in r.text
    still_fine(client)
    ok = [{"submit": {"path": "kernels/attention/baseline.cu", "title": "the baseline"}}]
    assert client.post("/api/sessions", json=cuda_body(agent="scripted", agent_config={"steps": ok})).status_code == 201


def test_a_stored_path_from_before_names_never_opens_a_file(tmp_path: Path) -> None:
    """A row written before baselines were names (or by hand) must not leak the file it names
    through the audit pages or the trace download."""
    with running_app(tmp_path) as client:
        ctx = client.app.state.engine.ctx  # type: ignore[attr-defined]
        with Unit(ctx.database, EventHub()) as u:
            u.db.add(SteeringSession(title="old row", agent="offline", baseline="/etc/passwd", status="stopped"))
        trace = client.get("/sessions/1/audit/trace.jsonl")
        assert trace.status_code == 200
        assert "root:" not in trace.text
        assert '{"type":"baseline","source":null}' in trace.text
        page = client.get("/sessions/1/audit/diff", params={"a": "baseline", "b": "baseline"})
        assert "root:" not in page.text


# -- sizes, depth, numbers, NUL -------------------------------------------------------------


def test_oversized_bodies_and_fields_are_refused(client: TestClient) -> None:
    r = client.post("/api/sessions", content=b'{"title": "' + b"x" * (3 * 1024 * 1024) + b'"}',
                    headers={"content-type": "application/json"})
    assert r.status_code == 413 and "larger than 2 MiB" in r.json()["detail"]
    r = client.post("/api/sessions", json=cuda_body(title="x" * 201))
    assert r.status_code == 422 and "title" in r.json()["message"]
    sid = cpu_session(client, [{"say": "hello"}], start=False)["id"]
    r = client.post(f"/api/sessions/{sid}/interventions", json={"text": "y" * 10_001})
    assert r.status_code == 422
    r = client.post("/api/bank/import", content=b"questions:\n" + b"#" * (3 * 1024 * 1024),
                    headers={"content-type": "application/yaml"})
    assert r.status_code == 413
    still_fine(client, sessions=1)


def test_deep_nesting_is_refused_without_a_recursion_error(client: TestClient) -> None:
    deep = b'{"title": "t", "agent_config": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
    r = client.post("/api/sessions", content=deep, headers={"content-type": "application/json"})
    assert r.status_code == 422 and "nested more than" in r.json()["detail"]
    nested: Any = "leaf"
    for _ in range(40):
        nested = {"k": nested}
    r = client.post("/api/sessions", json=cuda_body(agent="scripted", agent_config={"steps": [], "x": nested}))
    assert r.status_code == 422 and "nested more than" in r.text
    yaml_bomb = "questions: " + "[" * 50_000 + "]" * 50_000
    r = client.post("/api/bank/import", content=yaml_bomb, headers={"content-type": "application/yaml"})
    assert r.status_code == 422 and "nested more than" in r.text
    aliases = "a: &a [x, x, x]\nb: &b [*a, *a, *a]\nquestions: [*b, *b]\n"
    r = client.post("/api/bank/import", content=aliases, headers={"content-type": "application/yaml"})
    assert r.status_code == 422 and "aliases" in r.text
    still_fine(client)


@pytest.mark.parametrize("path", [
    "/api/sessions/{id}", "/api/sessions/{id}/events", "/api/sessions/1/candidates/{id}",
    "/sessions/{id}", "/sessions/{id}/audit", "/sessions/{id}/audit/trace.jsonl", "/api/sessions/{id}/audit",
    "/api/bank/questions/{id}", "/api/sessions/{id}/auto-ask", "/api/sessions/{id}/mcp",
])
def test_ids_beyond_64_bits_are_not_found(client: TestClient, path: str) -> None:
    for big in (BIG, 2**64, 10**40):
        r = client.get(path.format(id=big))
        assert r.status_code == 404, (path, big, r.text)
    r = client.post(f"/api/sessions/{BIG}/pause", json={})
    assert r.status_code == 404
    with pytest.raises(WebSocketDisconnect), client.websocket_connect(f"/ws/sessions/{BIG}") as ws:
        ws.receive_text()
    still_fine(client)


def test_numbers_past_32_bits_match_nothing_on_either_database(client: TestClient) -> None:
    """PostgreSQL's INTEGER columns hold 32 bits: a larger id or sequence number is no row
    there (404, or no events), never a database error; token budgets stay within 32 bits."""
    sid = cpu_session(client, [{"say": "hi"}], start=False)["id"]
    for path in ("/api/sessions/{id}", "/api/sessions/1/candidates/{id}", "/api/bank/questions/{id}"):
        assert client.get(path.format(id=2**31)).status_code == 404, path
    assert client.get(f"/api/sessions/{sid}/events", params={"after": 2**31}).json() == []
    with client.websocket_connect(f"/ws/sessions/{sid}?after={2**40}") as ws:
        assert "session-header" in ws.receive_text()
    assert client.patch(f"/api/sessions/{sid}", json={"budget": {"tokens": 2**31}}).status_code == 422
    r = client.patch(f"/api/sessions/{sid}", json={"budget": {"tokens": 2**31 - 1}})
    assert r.status_code == 200, r.text
    still_fine(client, sessions=1)


def test_numbers_outside_what_the_database_holds_are_refused(client: TestClient) -> None:
    sid = cpu_session(client, [{"say": "hi"}], start=False)["id"]
    assert client.get(f"/api/sessions/{sid}/events", params={"after": 2**64}).status_code == 422
    assert client.get(f"/api/sessions/{sid}/events", params={"after": BIG - 1}).json() == []
    with client.websocket_connect(f"/ws/sessions/{sid}?after={2**70}") as ws:  # clamped, not a crash
        assert "session-header" in ws.receive_text()
    for budget in ({"steps": 10**23}, {"steps": 1e23}, {"tokens": 2**64}, {"seconds": 1e300}, {"steps": 0},
                   {"cost_usd": 0}):
        r = client.patch(f"/api/sessions/{sid}", json={"budget": budget})
        assert r.status_code == 422, (budget, r.text)
    for raw in ('{"goal_target": Infinity}', '{"goal_target": NaN}', '{"goal_target": 1e400}',
                '{"goal_target": 0}', '{"goal_target": -Infinity}', '{"budget": {"cost_usd": NaN}}',
                '{"thresholds": {"suspicious_jump": Infinity}}'):
        r = client.patch(f"/api/sessions/{sid}", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 422, (raw, r.text)
    assert client.get(f"/api/sessions/{sid}").json()["goal_target"] is None
    # The form too: infinite, zero and absurd budgets are refused, not dropped.
    for field, value in (("goal_target", "inf"), ("goal_target", "1e400"), ("budget_minutes", "0"),
                         ("budget_minutes", "nan"), ("budget_steps", "100000000000000000000000"),
                         ("goal_target", "0")):
        form = {"title": "form", "agent": "scripted", "script": "cpu-demo", field: value}
        r = client.post("/sessions", data=form, headers={"accept": "text/html"})
        assert r.status_code == 422, (field, value)
    still_fine(client, sessions=1)


def test_nul_characters_are_refused_everywhere(client: TestClient) -> None:
    r = client.post("/api/sessions", json=cuda_body(title="a\x00b"))
    assert r.status_code == 422 and "NUL" in r.json()["message"]
    r = client.post("/api/sessions", json=cuda_body(agent="scripted", agent_config={"steps": [{"say": "\x00"}]}))
    assert r.status_code == 422 and "NUL" in r.json()["message"]
    sid = cpu_session(client, [{"say": "hi"}], start=False)["id"]
    r = client.post(f"/api/sessions/{sid}/interventions", json={"text": "why\x00?", "resume": False})
    assert r.status_code == 422
    with client.websocket_connect(f"/ws/sessions/{sid}") as ws:
        ws.send_text(json.dumps({"action": "send", "text": "hi\x00there"}))
        assert "contains a NUL character" in reply(ws)
        ws.send_text("[" * 30_000)
        assert "nested too deeply" in reply(ws)
        ws.send_text('{"action": "send", "text": "hi", "kind": NaN}')
        assert "only finite numbers" in reply(ws)
    assert client.get(f"/api/sessions/{sid}/interventions").json() == []
    question = {"text": "Is it\x00 fast?", "triggers": ["plateau"], "layers": ["memory"]}
    assert client.post("/api/bank/questions", json=question).status_code == 422
    r = client.post("/bank/questions", data={**question, "triggers": "plateau", "layers": "memory"},
                    headers={"accept": "text/html"})
    assert r.status_code == 422
    still_fine(client, sessions=1)


def reply(ws: Any) -> str:
    """The composer's answer to a steering message (state panels may come first)."""
    for _ in range(10):
        text = str(ws.receive_text())
        if "composer-status" in text:
            return text
    raise AssertionError("no answer to the steering message")


# -- traces ---------------------------------------------------------------------------------


def tiny_trace(**session: Any) -> str:
    row = {"type": "session", "id": 7, "title": "tiny", "problem": "attention-forward", "agent": "offline",
           "agent_config": {}, "candidate_kind": "cuda", "baseline": "kernels/attention/baseline.cu",
           "suite_filter": None, "scenarios": None, "goal_metric": "vs_baseline", "goal_target": None,
           "thresholds": {"plateau_window": 3}, "budget_steps": None, "budget_tokens": None,
           "budget_cost_usd": None, "budget_seconds": None, "used_steps": 0, "used_tokens": 0,
           "used_cost_usd": 0.0, "used_seconds": 0.0, "status": "stopped", "detail": "", "leader_id": None,
           "leader_speedup": None, "evaluations": 0, "window_start": 0, "open_trigger_id": None, "last_seq": 0,
           "runner_state": {}, "created_at": "2026-11-29T23:19:14+00:00",
           "updated_at": "2026-11-29T23:19:14+00:00", "finished_at": None, **session}
    counts = dict.fromkeys(("candidate", "evaluation", "trigger", "intervention", "event"), 0)
    header = {"type": "header", "format": FORMAT, "version": VERSION, "session": row["id"], "counts": counts}
    lines = [json.dumps(header), json.dumps(row), json.dumps({"type": "baseline", "source": "// base"})]
    return "\n".join(lines) + "\n"


def deep_object(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"x": value}
    return value


def upload(client: TestClient, text: str | bytes, name: str = "t.jsonl") -> Any:
    data = text.encode() if isinstance(text, str) else text
    return client.post("/traces/import", files={"trace": (name, data, "application/x-ndjson")},
                       headers={"accept": "text/html"}, follow_redirects=False)


def test_a_trace_is_checked_against_the_apis_own_rules(client: TestClient) -> None:
    assert upload(client, tiny_trace()).status_code == 303  # the well-formed one imports
    bad = {
        "thresholds": ([1, 2], "session.thresholds must be an object"),
        "agent_config": ("text", "session.agent_config must be an object"),
        "scenarios": ({"a": 1}, "session.scenarios must be"),
        "title": ("a\x00b", "NUL"),
        "goal_target": (0, "goal_target"),
        "budget_steps": (10**23, "fit a 64-bit integer"),
        "used_seconds": (float("inf"), "only finite numbers"),
        "goal_metric": ("vs_everything", "session.goal_metric must be"),
        "status": ("exploded", "session.status must be"),
        "id": (2**70, "fit a 64-bit integer"),
        "runner_state": (deep_object(40), "nested"),
    }
    for field, (value, message) in bad.items():
        fields = {"title": f"bad {field}", field: value}
        r = upload(client, tiny_trace(**fields))
        assert r.status_code == 422, (field, r.status_code)
        assert message in r.text.replace("&#39;", "'"), (field, r.text[-800:])
    deep = tiny_trace().replace('"runner_state": {}', '"runner_state": ' + "[" * 50_000 + "]" * 50_000)
    r = upload(client, deep)
    assert r.status_code == 422 and "nested" in r.text
    nan = tiny_trace().replace('"used_cost_usd": 0.0', '"used_cost_usd": NaN')
    assert upload(client, nan).status_code == 422
    still_fine(client, sessions=1)
    for page in ("/", "/sessions/1", "/sessions/1/audit", "/sessions/1/audit/timeline", "/api/sessions/1/audit"):
        assert client.get(page).status_code == 200, page


def test_the_same_trace_twice_is_said_not_stored_twice(client: TestClient) -> None:
    first = upload(client, tiny_trace(), "a.jsonl")
    assert first.status_code == 303
    again = upload(client, tiny_trace(), "b.jsonl")
    assert again.status_code == 409
    assert "imported before (from a.jsonl), as session 1" in again.text and "/sessions/1/audit" in again.text
    still_fine(client, sessions=1)


def test_a_trace_over_the_size_limit_is_refused_whole(tmp_path: Path) -> None:
    with running_app(tmp_path, trace_max_bytes=64 * 1024) as client:
        padded = tiny_trace(detail="x" * 100_000)
        r = upload(client, padded)
        assert r.status_code == 413 and "imports traces up to 64 KiB" in r.text
        still_fine(client)
    with running_app(tmp_path / "default") as client:
        big = b"x" * (50 * 1024 * 1024)
        r = upload(client, big)
        assert r.status_code == 413
        still_fine(client)


def test_the_cli_refuses_the_same_trace_twice_and_an_oversized_one(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(tiny_trace())
    db = ["--db", str(tmp_path / "cli.db")]
    assert socratic(["trace", "import", str(trace), *db]) == 0
    assert socratic(["trace", "import", str(trace), *db]) == 1
    assert "imported before (from t.jsonl), as session 1" in capsys.readouterr().err
    os.environ["SOCRATIC_TRACE_MAX_BYTES"] = "1024"
    try:
        big = tmp_path / "big.jsonl"
        big.write_text(tiny_trace(detail="y" * 5000))
        assert socratic(["trace", "import", str(big), *db]) == 1
        assert "imports traces up to" in capsys.readouterr().err
    finally:
        del os.environ["SOCRATIC_TRACE_MAX_BYTES"]


def test_the_bank_cli_refuses_oversized_deep_and_aliased_files(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    db = ["--db", str(tmp_path / "bank.db")]
    cases = {"big.yaml": ("questions: []\n" + "#" * (3 * 1024 * 1024), "larger than"),
             "deep.yaml": ("questions: " + "[" * 50_000 + "]" * 50_000, "nested more than"),
             "alias.yaml": ("questions: &q [*q]\n", "aliases")}
    for name, (text, message) in cases.items():
        (tmp_path / name).write_text(text)
        assert socratic(["bank", "import", str(tmp_path / name), *db]) == 1
        assert message in capsys.readouterr().err, name


# -- the token, the cookie, the files -------------------------------------------------------


def test_the_token_travels_only_in_a_header_or_a_derived_cookie(tmp_path: Path) -> None:
    with running_app(tmp_path, token="s3cret") as client:
        assert client.get("/api/sessions", params={"token": "s3cret"}).status_code == 401
        assert client.get("/", params={"token": "s3cret"}, follow_redirects=False).status_code == 303
        assert client.get("/api/sessions", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        client.cookies.set("socratic_token", "s3cret")  # the raw token as a cookie opens nothing
        assert client.get("/api/sessions").status_code == 401
        client.cookies.clear()
        r = client.post("/login", data={"token": "s3cret", "next": "/"}, follow_redirects=False)
        cookie = r.headers["set-cookie"]
        assert "s3cret" not in cookie and "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
        assert client.get("/api/sessions").status_code == 200  # the derived value opens the API
        sid = cpu_session(client, [{"say": "hi"}], start=False)["id"]
        client.cookies.clear()
        with client.websocket_connect(f"/ws/sessions/{sid}?token=s3cret") as ws:  # the handshake may use it
            assert "session-header" in ws.receive_text()


def test_wrong_tokens_are_rate_limited_per_address(tmp_path: Path) -> None:
    with running_app(tmp_path, token="s3cret", login_attempts_per_minute=3) as client:
        for _ in range(3):
            assert client.post("/login", data={"token": "guess", "next": "/"}).status_code == 401
        r = client.post("/login", data={"token": "s3cret", "next": "/"}, follow_redirects=False)
        assert r.status_code == 429 and r.headers["retry-after"] == "60"
        # One count for every door (tests/app/faces/test_guesses.py): the header is refused too.
        assert client.get("/api/sessions", headers={"Authorization": "Bearer s3cret"}).status_code == 429


def test_the_token_is_redacted_from_logged_urls() -> None:
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5000", "GET", "/ws/sessions/1?after=3&token=s3cret", "1.1", 101), None)
    RedactTokens().filter(record)
    assert "s3cret" not in record.getMessage() and "token=[redacted]" in record.getMessage()
    assert "after=3" in record.getMessage()


def test_the_database_and_data_directory_are_private(tmp_path: Path, database_backend: str) -> None:
    data = tmp_path / "fresh" / "data"
    with running_app(data) as client:
        assert client.get("/api/sessions").status_code == 200
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    if database_backend == "postgresql":  # the database is the server's; no file is made here
        assert not (data / "socratic.db").exists()
        return
    assert stat.S_IMODE((data / "socratic.db").stat().st_mode) == 0o600
    for side in data.glob("socratic.db-*"):
        assert stat.S_IMODE(side.stat().st_mode) & 0o077 == 0, side


# -- Host and Origin ------------------------------------------------------------------------


def test_a_foreign_host_gets_421_and_a_foreign_origin_403(client: TestClient) -> None:
    for host in ("evil.example", "evil.example:8000", "127.0.0.1.evil.example", "localhost.evil.example"):
        r = client.get("/api/bank/export", headers={"host": host})
        assert r.status_code == 421, host
        assert "SOCRATIC_ALLOWED_HOSTS" in r.json()["detail"]
    for host in ("127.0.0.1:8000", "localhost", "[::1]:8000", "127.0.0.2"):
        assert client.get("/api/health", headers={"host": host}).status_code == 200, host
    with pytest.raises(WebSocketDisconnect), client.websocket_connect(
            "/ws/sessions/1", headers={"host": "evil.example"}) as ws:
        ws.receive_text()
    sid = cpu_session(client, [{"say": "hi"}], start=False)["id"]
    for headers in ({"origin": "http://evil.example"}, {"origin": "null"}, {"origin": "http://127.0.0.1:1"},
                    {"sec-fetch-site": "cross-site"}):
        assert client.post(f"/api/sessions/{sid}/start", headers=headers).status_code == 403, headers
    assert client.get(f"/api/sessions/{sid}").json()["status"] == "created"
    same = client.post(f"/api/sessions/{sid}/stop", json={}, headers={"origin": "http://testserver"})
    assert same.status_code == 200


def test_allowed_hosts_adds_names(tmp_path: Path) -> None:
    with running_app(tmp_path, allowed_hosts=("testserver", "gpu1.example.org")) as client:
        assert client.get("/api/health", headers={"host": "gpu1.example.org:8000"}).status_code == 200
        assert client.get("/api/health", headers={"host": "gpu2.example.org"}).status_code == 421


def test_python_targets_stay_module_function_names(client: TestClient) -> None:
    r = client.post("/api/sessions", json={"title": "t", "agent": "scripted", "agent_config": {"steps": []},
                                           "candidate_kind": "python-cpu", "baseline": "/etc/passwd"})
    assert r.status_code == 422
    assert cpu_session(client, [{"say": "hi"}], start=False, baseline=f"{CPU}:correct_10ms")["id"] == 1


def test_a_real_server_never_logs_the_token(tmp_path: Path) -> None:
    """uvicorn's access and websocket logs, from `socratic serve` itself."""
    from websockets.sync.client import connect

    port = free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--port", str(port), "--token",
                                 "s3cret-token", "--data-dir", str(tmp_path / "data")],
                                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
        try:
            base = f"http://127.0.0.1:{port}"
            auth = {"Authorization": "Bearer s3cret-token"}
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"{base}/api/health?token=s3cret-token", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
            r = httpx.post(f"{base}/api/sessions", headers=auth,
                           json={"title": "t", "agent": "offline", "candidate_kind": "cuda", "start": False})
            assert r.status_code == 201, r.text
            assert httpx.get(f"{base}/api/sessions?token=s3cret-token").status_code == 401
            with connect(f"ws://127.0.0.1:{port}/ws/sessions/1?after=0&token=s3cret-token") as ws:
                assert "session-header" in str(ws.recv(timeout=30))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    text = log_path.read_text()
    assert "/ws/sessions/1?after=0&token=[redacted]" in text and "/api/health?token=[redacted]" in text, text
    assert "s3cret-token" not in text

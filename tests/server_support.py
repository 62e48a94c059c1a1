"""Helpers for the server's tests: a real app on a real SQLite file (in a temporary folder),
driven through its HTTP API; candidates are CPU stand-in kernels (tests/cpu_kernels.py)
evaluated by the harness's real worker processes."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from app.faces.web.app import create_app
from app.services.devices import DeviceQueue
from app.services.evaluation import Evaluator
from app.settings import Settings

CPU = "tests.cpu_kernels"
SEQ = re.compile(r'class="event[^"]*" data-seq="(\d+)"')


def settings_for(data_dir: Path, **overrides: Any) -> Settings:
    # "testserver": the Host that Starlette's TestClient sends (app/faces/web/hosts.py answers only known names).
    return Settings(**{"data_dir": data_dir, "allow_python_candidates": True, "allowed_hosts": ("testserver",),
                       **overrides})


@contextmanager
def running_app(data_dir: Path, gpu: bool = False, evaluator: Evaluator | None = None,
                **overrides: Any) -> Iterator[TestClient]:
    """The server with its lifespan (migrations, recovery, runners). `gpu` fixes what the
    device queue believes about the machine, so tests behave the same on a GPU host; `evaluator`
    replaces the harness (tests/family_model.py's speed table)."""
    devices = DeviceQueue(poll_s=0.2, gpu_probe=lambda: gpu)
    app = create_app(settings_for(data_dir, **overrides), devices=devices, evaluator=evaluator)
    with TestClient(app) as client:
        yield client


def cpu_session(client: TestClient, steps: list[dict[str, Any]] | None = None, *, script: str | None = None,
                **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "title": fields.pop("title", "test session"),
        "agent": "scripted",
        "agent_config": {"steps": steps} if steps is not None else {"script": script or "cpu-demo"},
        "candidate_kind": "python-cpu",
        "baseline": f"{CPU}:correct_10ms",
    }
    body.update(fields)
    r = client.post("/api/sessions", json=body)
    assert r.status_code == 201, r.text
    return dict(r.json())


def submit(target: str, title: str = "", **extra: Any) -> dict[str, Any]:
    return {"say": f"trying {target}", "submit": {"target": f"{CPU}:{target}", "title": title or target, **extra}}


def wait_for(client: TestClient, session_id: int, predicate: Callable[[dict[str, Any]], bool],
             timeout: float = 90.0, what: str = "condition") -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    state: dict[str, Any] = {}
    while time.monotonic() < deadline:
        state = client.get(f"/api/sessions/{session_id}").json()
        if predicate(state):
            return state
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; session is {state.get('status')}: {state.get('detail')}")


def wait_status(client: TestClient, session_id: int, *statuses: str, timeout: float = 90.0) -> dict[str, Any]:
    return wait_for(client, session_id, lambda s: s["status"] in statuses, timeout, f"status {statuses}")


def events(client: TestClient, session_id: int, after: int = 0) -> list[dict[str, Any]]:
    r = client.get(f"/api/sessions/{session_id}/events", params={"after": after})
    assert r.status_code == 200, r.text
    return list(r.json())


def kinds(evs: list[dict[str, Any]]) -> list[str]:
    return [e["kind"] for e in evs]


def seqs_in(html: str) -> list[int]:
    return [int(m) for m in SEQ.findall(html)]


# -- a real `socratic serve` and the system Chromium, for browser and MCP tests -------------

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
BROWSER_MARKS = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="the system Chromium is not installed"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def live_server(data_dir: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """`socratic serve` in its own process on a free loopback port; yields the base URL once
    /api/health answers, and stops the server afterwards."""
    port = free_port()
    # The log goes to a file, not a pipe: nobody reads a pipe while the server runs, and a full
    # one (a few hundred access-log lines) would block the server.
    log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed in the finally below)
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port), "--data-dir", str(data_dir), *args],
        cwd=ROOT, env={**os.environ, **(env or {})}, stdout=log, stderr=subprocess.STDOUT, text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/api/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                out = log.read()
                raise RuntimeError(f"the server did not start:\n{out}")
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()

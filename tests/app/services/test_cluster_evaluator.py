"""The server on a real Dask cluster (a scheduler and two worker processes on loopback):
sessions evaluate on it, each evaluation sharded over the workers (a re-time, when the judge
asks for one, on one worker), and the devices panel and /api/devices show the workers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("distributed")
from fastapi.testclient import TestClient

from app.faces.web.app import create_app
from app.services.devices import DeviceQueue
from tests.harness.support import start_cluster
from tests.server_support import cpu_session, settings_for, submit, wait_for


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    c = start_cluster(2)
    yield c
    c.close()


def test_sessions_evaluate_on_the_cluster_sharded_over_its_workers(
        tmp_path: Path, cluster: Any) -> None:
    address = cluster.scheduler_address
    settings = settings_for(tmp_path, cluster=address)
    app = create_app(settings, devices=DeviceQueue(poll_s=0.2, gpu_probe=lambda: False, cluster=address))
    steps = [submit("correct_10ms"), submit("correct_5ms", parent=1), {"declare_done": "enough"}]
    with TestClient(app) as client:
        view = client.get("/api/devices").json()
        assert view["cluster"] == address and view["error"] == ""
        assert len(view["workers"]) == 2 and all(w["gpu_slots"] == 1 for w in view["workers"])
        panel = client.get("/devices/panel").text
        assert "GPUs of the cluster" in panel and panel.count('class="device-row"') == 2
        sessions = [cpu_session(client, steps, title=f"team {i}") for i in range(2)]
        for s in sessions:
            client.post(f"/api/sessions/{s['id']}/start")
        for s in sessions:
            wait_for(client, s["id"], lambda st: st["status"] not in ("running", "created"), 240, "the end")
            evals = [e for c in client.get(f"/api/sessions/{s['id']}/candidates").json()
                     for e in client.get(f"/api/sessions/{s['id']}/candidates/{c['number']}").json()["evaluations"]]
            by_purpose: dict[str, list[dict[str, Any]]] = {}
            for e in evals:
                by_purpose.setdefault(e["purpose"], []).append(e)
            assert len(by_purpose["suite"]) == 2
            for e in evals:
                shards = e["report"]["settings"]["device_info"]["cluster"]["shards"]
                assert sum(sh["scenarios"] for sh in shards) == len(e["report"]["scenarios"])
                assert len(shards) == (1 if e["purpose"] == "retime" else 2)


def test_the_judges_retime_keeps_both_kernels_on_one_worker(cluster: Any) -> None:
    import threading

    from app.services import evaluation as ev

    evaluator = ev.Evaluator(cluster.scheduler_address)
    try:
        settings = ev.eval_settings("python-cpu", trials=2, timing_budget_ms=5, scenario_timeout_s=60, peers=())
        contender = ev.Implementation("python-cpu", "tests.cpu_kernels:correct_5ms", "candidate-2")
        leader = ev.Implementation("python-cpu", "tests.cpu_kernels:correct_10ms", "candidate-1")
        reports = {one: evaluator.evaluate(contender, leader, ev.CPU_SCENARIOS, settings, None, threading.Event(),
                                           one_device=one) for one in (True, False)}
    finally:
        evaluator.close()
    for one, report in reports.items():
        shards = report.settings["device_info"]["cluster"]["shards"]
        assert len(shards) == (1 if one else 2)
        assert [r.status for r in report.scenarios] == ["pass"] * len(ev.CPU_SCENARIOS)


def test_serve_takes_the_cluster_from_its_flag_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.faces.commands.cli import build_parser
    from app.settings import Settings

    assert Settings.from_args(build_parser().parse_args(["serve"])).cluster is None
    monkeypatch.setenv("SOCRATIC_CLUSTER", "tcp://10.0.0.2:8786")
    assert Settings.from_args(build_parser().parse_args(["serve"])).cluster == "tcp://10.0.0.2:8786"
    args = build_parser().parse_args(["serve", "--cluster", "tcp://127.0.0.1:9999"])
    assert Settings.from_args(args).cluster == "tcp://127.0.0.1:9999"
    assert build_parser().parse_args(["eval", "k.cu", "--cluster", "tcp://h:1"]).cluster == "tcp://h:1"

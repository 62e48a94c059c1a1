"""Without a GPU the server still runs: a session with CUDA candidates waits with a clear
"no GPU available" status instead of failing, and can be stopped while it waits."""

from __future__ import annotations

from pathlib import Path

from app.settings import PROJECT_ROOT
from app.store.models import RUNNING, STOPPED
from tests.server_support import events, running_app, wait_for


def test_cuda_candidates_wait_for_a_gpu_with_a_clear_status(tmp_path: Path) -> None:
    steps = [{"say": "the baseline", "submit": {"path": "kernels/attention/baseline.cu", "title": "baseline"}}]
    with running_app(tmp_path, gpu=False) as client:
        r = client.post("/api/sessions", json={"title": "gpu work", "agent_config": {"steps": steps},
                                               "suite_filter": "category=decode,head_dim=128"})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        state = wait_for(client, sid, lambda s: "no GPU available" in s["detail"], what="the waiting status")
        assert state["status"] == RUNNING
        waiting = [e for e in events(client, sid) if e["kind"] == "waiting"]
        assert len(waiting) == 1 and "no GPU available" in waiting[0]["payload"]["reason"]
        assert "no GPU available" in client.get("/").text
        cands = client.get(f"/api/sessions/{sid}/candidates").json()
        assert [(c["number"], c["status"]) for c in cands] == [(1, "queued")]
        assert client.post(f"/api/sessions/{sid}/stop").json()["status"] == STOPPED
        final = wait_for(client, sid, lambda s: s["status"] == STOPPED, what="stop")
        assert final["status"] == STOPPED
        cand = wait_for(client, sid, lambda s: client.get(f"/api/sessions/{sid}/candidates").json()[0]["status"]
                        == "cancelled", what="the candidate cancelled")
        assert cand["status"] == STOPPED


def test_a_cuda_candidate_is_compiled_before_it_waits_for_the_gpu(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """nvcc never holds the GPU queue: the candidate and the baseline it is timed against are in
    the compile cache while the session still waits; a kernel the static checks refuse is not."""
    from harness.compile import cache_dir

    monkeypatch.setenv("SOCRATIC_CACHE_DIR", str(tmp_path / "cache"))
    source = (PROJECT_ROOT / "kernels" / "attention" / "baseline.cu").read_text()
    variant = source + "\n// a variant: same code, another file hash\n"
    steps = [{"say": "a variant", "submit": {"source": variant, "title": "variant"}}]
    with running_app(tmp_path, gpu=False) as client:
        r = client.post("/api/sessions", json={"title": "gpu work", "agent_config": {"steps": steps},
                                               "suite_filter": "category=decode,head_dim=128"})
        sid = r.json()["id"]
        wait_for(client, sid, lambda s: "no GPU available" in s["detail"], what="the waiting status")
        libraries = sorted(cache_dir().glob("*/kernel.so"))
        assert len(libraries) == 2  # the candidate and the baseline
        client.post(f"/api/sessions/{sid}/stop")
        wait_for(client, sid, lambda s: s["status"] == STOPPED, what="stop")

    refused = [{"say": "a cheat", "submit": {"source": "#include <cublas_v2.h>\n" + source, "title": "cheat"}}]
    monkeypatch.setenv("SOCRATIC_CACHE_DIR", str(tmp_path / "cache2"))
    with running_app(tmp_path / "second", gpu=False) as client:
        sid = client.post("/api/sessions", json={"title": "gpu work", "agent_config": {"steps": refused},
                                                 "suite_filter": "category=decode,head_dim=128"}).json()["id"]
        wait_for(client, sid, lambda s: "no GPU available" in s["detail"], what="the waiting status")
        assert len(sorted(cache_dir().glob("*/kernel.so"))) == 1  # only the baseline
        client.post(f"/api/sessions/{sid}/stop")
        wait_for(client, sid, lambda s: s["status"] == STOPPED, what="stop")


def test_waiting_sessions_are_shown_waiting_and_a_stop_marks_their_messages_undelivered(tmp_path: Path) -> None:
    steps = [{"say": "the baseline", "submit": {"path": "kernels/attention/baseline.cu", "title": "baseline"}}]
    with running_app(tmp_path, gpu=False) as client:
        ids = []
        for title in ("first", "second"):
            r = client.post("/api/sessions", json={"title": title, "agent_config": {"steps": steps},
                                                   "suite_filter": "category=decode,head_dim=128"})
            ids.append(r.json()["id"])
        for sid in ids:
            wait_for(client, sid, lambda s: "no GPU available" in s["detail"], what="the waiting status")
        # Both are in the queue, in the order they reached it (nvcc first), each with its place in line.
        devices = wait_for(client, ids[0], lambda s: len(client.get("/api/devices").json()["workers"][0]["waiting"])
                           == 2, what="both sessions in the queue")
        assert devices["status"] == RUNNING
        waiting = client.get("/api/devices").json()["workers"][0]["waiting"]
        order = [int(w.split(":")[0].removeprefix("session ")) for w in waiting]
        assert sorted(order) == ids
        for place, sid in enumerate(order, 1):
            wait_for(client, sid, lambda s, place=place: f"({place} of 2 waiting)" in s["detail"],
                     what=f"session {sid} told it is {place} of 2")
        page = client.get(f"/sessions/{ids[0]}").text
        assert 'data-status="running"' in page and "waiting for a GPU</span>" in page
        assert "device-waiting" in client.get("/devices/panel").text
        # A question sent while it waits can never reach the agent once the session stops.
        r = client.post(f"/api/sessions/{ids[0]}/interventions", json={"text": "why this tile?", "author": "ana"})
        assert r.status_code == 201, r.text
        client.post(f"/api/sessions/{ids[0]}/stop")
        wait_for(client, ids[0], lambda s: s["status"] == STOPPED, what="stop")
        items = client.get(f"/api/sessions/{ids[0]}/interventions").json()
        assert [i["status"] for i in items] == ["undelivered"]
        kinds = [e["kind"] for e in events(client, ids[0])]
        assert kinds.index("undelivered") > kinds.index("status")
        client.post(f"/api/sessions/{ids[1]}/stop")
        wait_for(client, ids[1], lambda s: s["status"] == STOPPED, what="stop")

"""Without a GPU the server still runs: a session with CUDA candidates waits with a clear
"no GPU available" status instead of failing, and can be stopped while it waits."""

from __future__ import annotations

from pathlib import Path

from app.models import RUNNING, STOPPED
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
    source = (Path(__file__).resolve().parents[1] / "kernels" / "attention" / "baseline.cu").read_text()
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

"""Nothing the candidate's process writes is trusted later (harness/trusted_cache.py, issue 47):
the executor's process signs every cache entry, decides what a worker's measurements may become,
and puts its own copy of every cached number into the results. Recorded worker results stand in
for a GPU."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness import signed_entries, trusted_cache
from harness.job import KernelSpec, WorkerJob
from harness.peer_cache import DEVICE_KEYS, PeerCache
from harness.report import PASS, PeerResult, ScenarioResult
from harness.scenario import Scenario
from harness.settings import EvalSettings

S = Scenario("s", "prefill", 1, 64, 64, 4, 2, 64, causal=True)
DEVICE = {"name": "H100", "capability": "9.0", "sm_count": 132, "torch": "2.11", "cuda": "13.0",
          "cudnn": 91900, "driver": "580.1"}


@pytest.fixture(autouse=True)
def own_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOCRATIC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(signed_entries, "_KEY", None)


def job(tmp_path: Path, **opts: object) -> WorkerJob:
    st = EvalSettings(device="cuda", peers=("cudnn",), peer_cache_dir=str(tmp_path / "peers"),
                      baseline_cache=False, **opts)  # type: ignore[arg-type]
    return WorkerJob("attention-forward", KernelSpec("k", "library", "/x.so"), None, [S], st)


def peer_proposal(ms: float) -> dict[str, object]:
    return {"kind": "peer", "peer": "cudnn", "scenario": "s",
            "entry": {"peer": "cudnn", "scenario": "s", "device": {k: DEVICE[k] for k in DEVICE_KEYS},
                      "status": "ok", "time_ms": ms, "tflops": 1.0, "reason": "", "measured_at": 1e12}}


def test_rates_measured_by_a_worker_are_kept_signed_and_passed_to_the_next_job(tmp_path: Path) -> None:
    first = job(tmp_path)
    trusted_cache.prepare(first)
    assert first.rates == {}
    trusted_cache.keep(first, [], {"measured_rates": {"gpu": "H100", "matrix_tflops": 700.0, "copy_gbps": 3000.0}}, [])
    second = job(tmp_path)
    trusted_cache.prepare(second)
    assert second.rates == {"H100": {"matrix_tflops": 700.0, "copy_gbps": 3000.0}}


def test_a_tampered_rates_file_is_ignored_and_counted(tmp_path: Path) -> None:
    trusted_cache.keep_rates("H100", 700.0, 3000.0)
    path = trusted_cache.rates_file()
    d = json.loads(path.read_text())
    d["entry"]["H100"]["matrix_tflops"] = 7000.0  # a roofline ten times laxer
    path.write_text(json.dumps(d))
    j = job(tmp_path)
    assert trusted_cache.prepare(j) == {"cache_rejected": 1}
    assert j.rates == {}


def test_peer_times_are_kept_only_from_a_clean_passing_scenario(tmp_path: Path) -> None:
    j = job(tmp_path)
    trusted_cache.prepare(j)
    flagged = ScenarioResult("s", "prefill", False, PASS, flags=["wall-clock 1 ms per call vs ..."])
    trusted_cache.keep(j, [flagged], dict(DEVICE), [(0, peer_proposal(0.5))])
    assert not list((tmp_path / "peers").glob("*.json"))
    clean = ScenarioResult("s", "prefill", False, PASS)
    trusted_cache.keep(j, [clean], dict(DEVICE), [(0, peer_proposal(0.5))])
    assert len(list((tmp_path / "peers").glob("*.json"))) == 1
    off = job(tmp_path, hardening=False)  # the device-idle checks did not run: nothing kept
    trusted_cache.keep(off, [clean], dict(DEVICE), [(0, peer_proposal(0.25))])
    hit = PeerCache(tmp_path / "peers", 1e18, DEVICE, j.settings).get("cudnn", S)
    assert hit is not None and hit.time_ms == 0.5


def test_a_cached_peer_time_the_worker_reports_is_replaced_by_the_executors_copy(tmp_path: Path) -> None:
    j = job(tmp_path)
    trusted_cache.keep(j, [ScenarioResult("s", "prefill", False, PASS)], dict(DEVICE), [(0, peer_proposal(0.5))])
    again = job(tmp_path)
    trusted_cache.prepare(again)
    assert len(again.peer_entries) == 1
    lied = ScenarioResult("s", "prefill", False, PASS, time_ms=0.25)
    lied.peers["cudnn"] = PeerResult(status="ok", time_ms=5.0, cached_at=1e12)  # 20x instead of 2x
    lied.speedup_vs_peers["cudnn"] = 20.0
    trusted_cache.keep(again, [lied], dict(DEVICE), [])
    assert lied.peers["cudnn"].time_ms == 0.5 and lied.speedup_vs_peers["cudnn"] == 2.0


def test_a_process_whose_cache_folder_changes_signs_with_the_new_folders_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A long-lived process (a test worker, a server whose SOCRATIC_CACHE_DIR is set anew) must not
    # keep signing with the key of the folder it first read: entries there would never verify.
    monkeypatch.setenv("SOCRATIC_CACHE_DIR", str(tmp_path / "a"))
    first = signed_entries.signing_key()
    monkeypatch.setenv("SOCRATIC_CACHE_DIR", str(tmp_path / "b"))
    second = signed_entries.signing_key()
    assert second != first
    assert signed_entries.key_path().read_text().strip() == second.hex()
    monkeypatch.setenv("SOCRATIC_CACHE_DIR", str(tmp_path / "a"))
    assert signed_entries.signing_key() == first


def test_processes_making_the_key_at_once_all_read_one_whole_key(tmp_path: Path) -> None:
    """Two workers of the test suite, or an executor and a script, may make the key at once: each
    must read the one key that won, never a file caught half-written (an empty file read as an
    empty key would sign with b"")."""
    import subprocess
    import sys

    code = ("import sys; from harness import signed_entries as s; sys.stdout.write(s.signing_key().hex())")
    env = {**os.environ, "SOCRATIC_CACHE_DIR": str(tmp_path / "cache")}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(8)]
    keys = {p.communicate(timeout=120)[0] for p in procs}
    assert len(keys) == 1 and len(bytes.fromhex(keys.pop())) == signed_entries.KEY_BYTES
    assert [f.name for f in (tmp_path / "cache" / "keys").iterdir()] == ["cache.key"]  # no draft left


def test_a_key_file_that_holds_no_key_is_reported_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOCRATIC_CACHE_DIR", str(tmp_path))
    signed_entries.key_path().parent.mkdir(parents=True)
    signed_entries.key_path().write_text("")
    with pytest.raises(ValueError, match="does not hold a 32-byte key: delete it"):
        signed_entries.signing_key()

"""The peer cache (harness/peer_cache.py): what makes two evaluations share a peer time, when an
entry is too old or not the same, what is never kept, and how reports say a ratio is cached."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from harness.peer_cache import PeerCache
from harness.report import CompileInfo, EvaluationReport, PeerResult, ScenarioResult, render_geomeans
from harness.scenario import Scenario
from harness.settings import EvalSettings
from harness.timing import TimingSettings

H200 = {"name": "NVIDIA H200", "capability": "9.0", "sm_count": 132, "torch": "2.11.0+cu130",
        "cuda": "13.0", "cudnn": 91900, "matrix_tflops": 760.0, "pid": 123}
SHAPE = Scenario("prefill-a", "prefill", 2, 1024, 1024, 16, 16, 128, causal=True)
DAY = 86400.0


def cache(folder: Path, device: dict[str, object] = H200, settings: EvalSettings | None = None,
          max_age_s: float = DAY) -> PeerCache:
    return PeerCache(folder, max_age_s, dict(device), settings or EvalSettings())


def test_a_timed_peer_is_found_by_a_later_evaluation_with_when_it_was_measured(tmp_path: Path) -> None:
    before = time.time()
    cache(tmp_path).put("cudnn", SHAPE, PeerResult("ok", time_ms=0.25, tflops=550.0))
    hit = cache(tmp_path).get("cudnn", SHAPE)
    assert hit is not None
    assert (hit.status, hit.time_ms, hit.tflops) == ("ok", 0.25, 550.0)
    assert hit.cached_at is not None and before <= hit.cached_at <= time.time()
    assert cache(tmp_path).get("flash", SHAPE) is None  # another peer is another entry


def test_the_same_shape_under_another_name_or_visibility_shares_the_entry(tmp_path: Path) -> None:
    cache(tmp_path).put("cudnn", SHAPE, PeerResult("ok", time_ms=0.25))
    twin = dataclasses.replace(SHAPE, name="renamed", hidden=True, category="other")
    assert cache(tmp_path).get("cudnn", twin) is not None


def test_anything_that_changes_the_peer_or_its_timing_misses(tmp_path: Path) -> None:
    cache(tmp_path).put("cudnn", SHAPE, PeerResult("ok", time_ms=0.25))
    misses = [
        cache(tmp_path, device={**H200, "cudnn": 92000}),
        cache(tmp_path, device={**H200, "torch": "2.12.0"}),
        cache(tmp_path, device={**H200, "name": "NVIDIA H100 80GB HBM3"}),
        cache(tmp_path, settings=EvalSettings(timing=TimingSettings(budget_ms=20.0))),
        cache(tmp_path, settings=EvalSettings(trials=3)),
        cache(tmp_path, settings=EvalSettings(seed=7)),
    ]
    assert [c.get("cudnn", SHAPE) for c in misses] == [None] * len(misses)
    for other in (dataclasses.replace(SHAPE, causal=False), dataclasses.replace(SHAPE, seqlen_k=2048),
                  dataclasses.replace(SHAPE, heads_kv=4)):
        assert cache(tmp_path).get("cudnn", other) is None
    # Facts that do not change the peer (measured rates, the worker's pid) do not matter.
    assert cache(tmp_path, device={**H200, "pid": 999, "matrix_tflops": 1.0}).get("cudnn", SHAPE) is not None


def test_an_entry_older_than_the_limit_misses(tmp_path: Path) -> None:
    cache(tmp_path).put("cudnn", SHAPE, PeerResult("ok", time_ms=0.25))
    assert cache(tmp_path).get("cudnn", SHAPE, now=time.time() + DAY - 60) is not None
    assert cache(tmp_path).get("cudnn", SHAPE, now=time.time() + DAY + 60) is None
    assert cache(tmp_path, max_age_s=0).get("cudnn", SHAPE, now=time.time() + 1) is None


def test_definite_answers_are_kept_but_errors_untimed_and_cached_results_are_not(tmp_path: Path) -> None:
    c = cache(tmp_path)
    c.put("flash", SHAPE, PeerResult("unsupported", reason="head_dim 256 is not supported"))
    hit = c.get("flash", SHAPE)
    assert hit is not None and hit.status == "unsupported" and "head_dim 256" in hit.reason
    c.put("cudnn", SHAPE, PeerResult("error", reason="out of memory"))
    c.put("cudnn", SHAPE, PeerResult("ok"))  # checked, not timed: a correctness-only run
    assert c.get("cudnn", SHAPE) is None
    c.put("cudnn", SHAPE, PeerResult("ok", time_ms=0.3, cached_at=1.0))  # never re-stamped
    assert c.get("cudnn", SHAPE) is None
    assert list(tmp_path.glob("*.tmp")) == []


def test_a_broken_or_foreign_entry_is_a_miss_not_an_error(tmp_path: Path) -> None:
    c = cache(tmp_path)
    c.put("cudnn", SHAPE, PeerResult("ok", time_ms=0.25))
    (entry,) = tmp_path.glob("*.json")
    entry.write_text("{not json")
    assert c.get("cudnn", SHAPE) is None
    entry.write_text(json.dumps({"peer": "flash", "status": "ok", "time_ms": 1.0, "measured_at": time.time()}))
    assert c.get("cudnn", SHAPE) is None
    entry.write_text(json.dumps({"peer": "cudnn", "status": "ok", "time_ms": None, "measured_at": time.time()}))
    assert c.get("cudnn", SHAPE) is None


def _report(peers: dict[str, PeerResult]) -> EvaluationReport:
    r = ScenarioResult("prefill-a", "prefill", False, "pass", time_ms=0.2, speedup_vs_baseline=10.0,
                       speedup_vs_peers={"cudnn": 1.25}, peers=peers)
    return EvaluationReport("k.cu", "baseline.cu", "NVIDIA H200", "all", [r], CompileInfo(ok=True))


def test_a_report_says_which_peer_ratios_rest_on_cached_times_and_how_old() -> None:
    now = time.time()
    fresh = _report({"cudnn": PeerResult("ok", time_ms=0.25), "flash": PeerResult("ok", time_ms=0.3)})
    assert fresh.cached_peer_note() is None
    assert not any(line.startswith("note:") for line in render_geomeans(fresh))
    mixed = _report({"cudnn": PeerResult("ok", time_ms=0.25, cached_at=now - 2 * 3600),
                     "flash": PeerResult("ok", time_ms=0.3)})
    note = mixed.cached_peer_note(now=now)
    assert note is not None and note.startswith("1 of 2 peer results came from the peer cache")
    assert "2.0 h earlier" in note and "not side by side" in note
    assert any(line.startswith("note: 1 of 2") for line in render_geomeans(mixed))
    again = EvaluationReport.from_dict(json.loads(mixed.to_json()))
    assert again.scenarios[0].peers["cudnn"].cached_at == now - 2 * 3600


def test_a_cache_that_cannot_be_written_is_skipped_without_an_error(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    c = cache(blocked / "peers")  # its parent is a file: mkdir fails
    c.put("cudnn", SHAPE, PeerResult("ok", time_ms=0.25))
    assert c.get("cudnn", SHAPE) is None
    assert blocked.read_text() == "not a folder"


def test_a_pinned_softmax_scale_is_part_of_the_key_and_fa3_is_its_own_peer(tmp_path: Path) -> None:
    cache(tmp_path).put("fa3", SHAPE, PeerResult("ok", time_ms=0.2))
    assert cache(tmp_path).get("fa3", SHAPE) is not None
    assert cache(tmp_path).get("cudnn", SHAPE) is None
    assert cache(tmp_path).get("fa3", dataclasses.replace(SHAPE, softmax_scale=1 / 12)) is None


def test_a_peer_that_cannot_load_is_named_with_its_reason_under_the_table() -> None:
    r = ScenarioResult("prefill-a", "prefill", False, "pass", time_ms=0.2, speedup_vs_baseline=10.0,
                       speedup_vs_peers={"cudnn": 1.25, "fa3": 0.5})
    why = "fa3-fwd could not be loaded (ModuleNotFoundError: x); install the optional extra"
    rep = EvaluationReport("k.cu", "baseline.cu", "NVIDIA H200", "all", [r], CompileInfo(ok=True),
                           settings={"device_info": {"peers_unavailable": {"fa3": why}}})
    lines = render_geomeans(rep)
    assert f"note: peer fa3 not timed: {why}" in lines
    assert "vs FA3 0.500x" in lines[0]
    again = EvaluationReport.from_dict(json.loads(rep.to_json()))
    assert again.unavailable_peers() == {"fa3": why}
    assert again.to_dict()["geomean"]["all"]["vs_peers"]["fa3"] == 0.5

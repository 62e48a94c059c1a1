"""Caches that change numbers (baseline and peer times, roofline rates) are trusted only as the
executor's process wrote them (issue 47): that process never loads a candidate. Each entry is
signed with an HMAC key kept under the cache folder (`keys/cache.key`, mode 0600) that only such
processes read; a worker never receives it, reads no cache file and writes none. The executor
reads and verifies the entries a job can use and passes them in the job (WorkerJob.baseline_entries,
peer_entries, rates); the worker sends what it measured back as proposals, and the executor
decides what to keep: baseline times only from a process that evaluated the baseline alone, peer
times only from a scenario that passed with no flag (its device-idle checks passed), rates only as
measured before the candidate was loaded. An entry whose signature does not match (rewritten by
anyone without the key) is ignored and counted (`cache_rejected` in the device info)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from harness.caches import cache_root
from harness.signed_entries import Rejected, entries_in, read_signed, write_signed


def rates_file() -> Path:
    return cache_root() / "roofline-signed.json"


def known_rates() -> tuple[dict[str, dict[str, float]], int]:
    """Roofline rates by GPU name, verified; with 1 where the file was rejected."""
    try:
        entry = read_signed(rates_file())
    except Rejected:
        return {}, 1
    return ({k: v for k, v in (entry or {}).items() if isinstance(v, dict)}, 0)


def keep_rates(gpu: str, matrix_tflops: Any, copy_gbps: Any) -> None:
    """Rates a worker measured before it loaded its candidate, added to the signed file."""
    if not (isinstance(gpu, str) and all(isinstance(x, float | int) and math.isfinite(x) and x > 0
                                          for x in (matrix_tflops, copy_gbps))):
        return
    rates, _ = known_rates()
    rates[gpu] = {"matrix_tflops": float(matrix_tflops), "copy_gbps": float(copy_gbps)}
    write_signed(rates_file(), rates)


# -- the executor's side ---------------------------------------------------------------------------


def baseline_folder(settings: Any) -> Path | None:
    if settings.baseline_cache_dir:
        return Path(settings.baseline_cache_dir)
    return cache_root() / "baseline-times" if settings.device == "cuda" else None


def prepare(job: Any) -> dict[str, Any]:
    """Fill the job with the verified entries it can use (in place); returns the facts for the
    device info (how many files were rejected)."""
    from harness.peer_cache import kernel_digest

    st = job.settings
    rejected = 0
    names = {s.name for s in job.scenarios}
    if job.baseline is not None and st.baseline_cache and st.measure:
        folder = baseline_folder(st)
        digest = job.baseline.sha256
        if folder is not None and digest is None:
            try:
                digest = kernel_digest(job.baseline)
            except OSError:
                digest = None
        if folder is not None and digest:
            job.baseline_entries, n = entries_in(
                folder, "baseline-*.json",
                lambda e: e.get("baseline") == digest and e.get("scenario") in names)
            rejected += n
    if st.peer_cache_dir and st.device == "cuda" and st.measure:
        job.peer_entries, n = entries_in(Path(st.peer_cache_dir), "*.json",
                                         lambda e: e.get("scenario") in names)
        rejected += n
    if st.device == "cuda" and not (st.matrix_tflops and st.copy_gbps):
        job.rates, n = known_rates()
        rejected += n
    return {"cache_rejected": rejected} if rejected else {}


def keep(job: Any, results: list[Any], device: dict[str, Any], proposals: list[tuple[int, dict[str, Any]]]) -> None:
    """After the job: what the worker proposed, judged and written by this process; and every
    cached number in the results replaced by this process's own copy of it (a worker's report of
    a cached time is not trusted)."""
    from harness.peer_cache import BaselineCache, PeerCache, kernel_digest

    st = job.settings
    by_name = {s.name: s for s in job.scenarios}
    measured = device.get("measured_rates")
    if isinstance(measured, dict) and job.rates is not None and isinstance(measured.get("gpu"), str):
        keep_rates(measured["gpu"], measured.get("matrix_tflops", 0.0), measured.get("copy_gbps", 0.0))
    folder = baseline_folder(st)
    digest = None
    if job.baseline is not None:
        try:
            digest = job.baseline.sha256 or kernel_digest(job.baseline)
        except OSError:
            digest = None
    alone = job.baseline is not None and job.candidate == job.baseline
    for idx, p in proposals:
        s = by_name.get(p.get("scenario", ""))
        r = results[idx] if 0 <= idx < len(results) else None
        entry = p.get("entry")
        if s is None or r is None or not isinstance(entry, dict) or r.scenario != s.name:
            continue
        found_dev = entry.get("device")
        dev: dict[str, Any] = found_dev if isinstance(found_dev, dict) else {}
        if p.get("kind") == "baseline" and alone and folder is not None and digest and not r.flags:
            try:
                ms, spread, reps = float(entry["median_ms"]), float(entry["spread"]), int(entry["reps"])
            except (KeyError, TypeError, ValueError):
                continue
            if math.isfinite(ms) and ms > 0:
                BaselineCache(folder, st.baseline_cache_max_age_s, dev, st, digest).put(s, ms, spread, reps)
        elif (p.get("kind") == "peer" and st.peer_cache_dir and st.hardening and st.integrity
              and r.status == "pass" and not r.flags):
            from harness.report import PeerResult

            try:
                result = PeerResult(status=str(entry["status"]), time_ms=entry.get("time_ms"),
                                    tflops=entry.get("tflops"), reason=str(entry.get("reason", "")))
            except (KeyError, TypeError):
                continue
            PeerCache(Path(st.peer_cache_dir), st.peer_cache_max_age_s, dev, st).put(str(p.get("peer")), s, result)
    _restore_cached(job, results, device, digest)


def _restore_cached(job: Any, results: list[Any], device: dict[str, Any], digest: str | None) -> None:
    from harness.peer_cache import BaselineCache, PeerCache

    st = job.settings
    base = (BaselineCache(job.baseline_entries, st.baseline_cache_max_age_s, device, st, digest)
            if digest else None)
    peers = PeerCache(job.peer_entries, st.peer_cache_max_age_s, device, st)
    by_name = {s.name: s for s in job.scenarios}
    for r in results:
        s = by_name.get(r.scenario)
        if s is None:
            continue
        if r.baseline_cached_at is not None:
            hit = base.get(s) if base is not None else None
            r.baseline_ms = hit.median_ms if hit is not None else None
            r.baseline_cached_at = hit.measured_at if hit is not None else None
            r.speedup_vs_baseline = (r.baseline_ms / r.time_ms if r.baseline_ms and r.time_ms else None)
        for pname, pr in list(r.peers.items()):
            if pr.cached_at is None:
                continue
            hit_p = peers.get(pname, s)
            if hit_p is None:
                r.peers.pop(pname)
                r.speedup_vs_peers.pop(pname, None)
                continue
            r.peers[pname] = hit_p
            if hit_p.status == "ok" and hit_p.time_ms and r.time_ms:
                r.speedup_vs_peers[pname] = hit_p.time_ms / r.time_ms

"""A cache of peer results (torch SDPA backends, FA3) across evaluations.

A peer is the same library code on the same GPU for every candidate, yet in a fresh worker
process it costs a plan build per shape (cuDNN: most of the peer time of an evaluation) and its
own timing loop. When an evaluation names a cache folder, each peer is checked and timed on a
scenario once; later evaluations with the same GPU, software, scenario, trial layout and timing
settings reuse the result until it is older than the cache's age limit, and the report marks
the ratio as cached with the time it was measured. Peer ratios of a cached result are therefore
not side by side; the candidate's time always is (the baseline's: see below). Evaluations that back a
claim against a peer run without a cache (the CLI's default).

One small JSON file per entry, written atomically, so that several worker processes can share
the folder without a lock; an unreadable or foreign entry is a miss.

The naive baseline's time is cached the same way (BaselineCache), by default for every
evaluation on a GPU: the baseline is the same code for every candidate, so its time on a GPU
changes only with the GPU, the software, the scenario, the baseline library and the timing
settings, all of which are in the key. A cached baseline time is marked in the report
(`baseline_cached_at`); the candidate and the peers are still timed side by side."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.report import PeerResult
from harness.scenario import Scenario
from harness.settings import EvalSettings

# 2: peers timed on fresh inputs with a softmax_scale drawn per call (harness/attention/fields.py)
# behind a device hold; FA3 joined the peers.
# 3: a peer that builds a plan per layout (cuDNN) runs every input set in one layout, contiguous
# copies of interleaved K and V (Problem.peer_layout).
# 4: with the harness's hardening on, every timed call (the peers' too) has the default streams
# fenced into it, as the candidate's has (harness/timing.py: stream_guards); the key names hardening.
FORMAT = 4
# Device facts that change what a peer does or how fast it does it.
DEVICE_KEYS = ("name", "capability", "sm_count", "torch", "cuda", "cudnn", "driver")


def _shape(scenario: Scenario) -> dict[str, Any]:
    """What the scenario asks of a kernel: its name, category and visibility do not matter."""
    shape = scenario.to_dict()
    for name in ("name", "hidden", "category"):
        shape.pop(name, None)
    return shape


def _key(device: dict[str, Any], scenario: Scenario, settings: EvalSettings,
         what: dict[str, Any]) -> str:
    """A hash of what an entry is (`what`) and everything that changes its measurement."""
    parts = {
        **what,
        "device": {k: device.get(k) for k in DEVICE_KEYS},
        "shape": _shape(scenario),
        "trials": settings.trials,
        "seed": settings.seed,
        "timing": asdict(settings.timing),
        "hardening": settings.hardening,  # the default-stream fence is in every timed call's time
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def entry_key(device: dict[str, Any], peer: str, scenario: Scenario, settings: EvalSettings) -> str:
    return _key(device, scenario, settings, {"format": FORMAT, "peer": peer})


def _read(path: Path) -> dict[str, Any] | None:
    """A verified entry (harness/signed_entries.py); a missing, unreadable or tampered file is a miss."""
    from harness.signed_entries import Rejected, read_signed

    try:
        return read_signed(path)
    except Rejected:
        return None


def _write(folder: Path, path: Path, entry: dict[str, Any]) -> None:
    """Signed and atomic; a cache that cannot be written costs the next evaluation a measurement and
    must never fail the scenario of the kernel under evaluation."""
    from harness.signed_entries import write_signed

    write_signed(path, entry)


# Where an entry comes from: a folder of signed files (the executor's process, and tests), or the
# entries the executor verified and passed in the job (the worker: `put` only proposes).
Source = Path | dict[str, dict[str, Any]]


class PeerCache:
    def __init__(self, folder: Source, max_age_s: float, device: dict[str, Any],
                 settings: EvalSettings) -> None:
        self.folder = folder
        self.max_age_s = max_age_s
        self.device = device
        self.settings = settings
        self.proposed: list[dict[str, Any]] = []  # what a worker measured, for the executor

    def _path(self, peer: str, scenario: Scenario) -> Path:
        assert isinstance(self.folder, Path)
        return self.folder / f"{entry_key(self.device, peer, scenario, self.settings)}.json"

    def _lookup(self, peer: str, scenario: Scenario) -> dict[str, Any] | None:
        if isinstance(self.folder, dict):
            return self.folder.get(entry_key(self.device, peer, scenario, self.settings))
        return _read(self._path(peer, scenario))

    def get(self, peer: str, scenario: Scenario, now: float | None = None) -> PeerResult | None:
        d = self._lookup(peer, scenario)
        if d is None:
            return None
        try:
            measured_at = float(d["measured_at"])
            result = PeerResult(status=str(d["status"]), time_ms=d.get("time_ms"),
                                tflops=d.get("tflops"), reason=str(d.get("reason", "")))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if d.get("peer") != peer or (result.status == "ok" and not result.time_ms):
            return None
        if (now if now is not None else time.time()) - measured_at > self.max_age_s:
            return None
        result.cached_at = measured_at
        return result

    def put(self, peer: str, scenario: Scenario, result: PeerResult) -> None:
        """Keep a peer result that was measured in this evaluation (a timed "ok", or a
        definite "unsupported"/"incorrect"); an error is not kept."""
        if result.cached_at is not None or result.status == "error":
            return
        if result.status == "ok" and not result.time_ms:
            return  # checked but not timed (a correctness-only evaluation)
        entry = {"peer": peer, "scenario": scenario.name, "device": {k: self.device.get(k) for k in DEVICE_KEYS},
                 "status": result.status, "time_ms": result.time_ms, "tflops": result.tflops,
                 "reason": result.reason, "measured_at": time.time()}
        if isinstance(self.folder, dict):
            self.proposed.append({"kind": "peer", "peer": peer, "scenario": scenario.name, "entry": entry})
            return
        _write(self.folder, self._path(peer, scenario), entry)


# 1: the baseline timed interleaved with the candidate and the peers on fresh inputs behind a
# device hold (harness/timing.py), the median of its calls.
# 2: fenced like every timed call when the hardening is on (FORMAT 4).
BASELINE_FORMAT = 2


def library_digest(path: Path) -> str:
    """sha256 of a built kernel library: its build hash covers the source, the contract header,
    the shim, nvcc's flags and version, so a changed baseline is another library."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def kernel_digest(spec: Any) -> str:
    """What identifies a kernel's code: a library's bytes, or a Python kernel's target and its
    module's source (the CPU backend's stand-ins)."""
    if spec.kind == "library":
        return library_digest(Path(spec.target))
    import importlib.util

    found = importlib.util.find_spec(spec.target.partition(":")[0])
    origin = found.origin if found is not None else None
    text = Path(origin).read_bytes() if origin and Path(origin).is_file() else b""
    return hashlib.sha256(spec.target.encode() + b"\0" + text).hexdigest()


def baseline_key(device: dict[str, Any], library_sha256: str, scenario: Scenario,
                 settings: EvalSettings) -> str:
    return _key(device, scenario, settings, {"format": BASELINE_FORMAT, "baseline": library_sha256})


@dataclass(frozen=True)
class BaselineTime:
    median_ms: float
    spread: float
    reps: int
    measured_at: float


class BaselineCache:
    """The naive baseline's median time per (GPU, software, scenario shape, baseline library,
    trials, seed, timing settings)."""

    def __init__(self, folder: Source, max_age_s: float, device: dict[str, Any],
                 settings: EvalSettings, library_sha256: str, writable: bool = True) -> None:
        self.folder = folder
        self.max_age_s = max_age_s
        self.device = device
        self.settings = settings
        self.library_sha256 = library_sha256
        # Written only by a process that evaluates the baseline alone (harness/worker.py): a
        # time measured beside a candidate could carry that candidate's influence to others.
        self.writable = writable
        self.proposed: list[dict[str, Any]] = []  # what a worker measured, for the executor

    def _path(self, scenario: Scenario) -> Path:
        assert isinstance(self.folder, Path)
        key = baseline_key(self.device, self.library_sha256, scenario, self.settings)
        return self.folder / f"baseline-{key}.json"

    def get(self, scenario: Scenario, now: float | None = None) -> BaselineTime | None:
        if isinstance(self.folder, dict):
            d = self.folder.get("baseline-" + baseline_key(self.device, self.library_sha256, scenario,
                                                           self.settings))
        else:
            d = _read(self._path(scenario))
        if d is None or d.get("baseline") != self.library_sha256:
            return None
        try:
            found = BaselineTime(float(d["median_ms"]), float(d["spread"]), int(d["reps"]),
                                 float(d["measured_at"]))
        except (KeyError, TypeError, ValueError):
            return None
        if not found.median_ms > 0:
            return None
        if (now if now is not None else time.time()) - found.measured_at > self.max_age_s:
            return None
        return found

    def put(self, scenario: Scenario, median_ms: float, spread: float, reps: int) -> None:
        if not self.writable or not median_ms > 0:
            return
        entry = {"baseline": self.library_sha256, "scenario": scenario.name,
                 "device": {k: self.device.get(k) for k in DEVICE_KEYS}, "median_ms": median_ms,
                 "spread": spread, "reps": reps, "measured_at": time.time()}
        if isinstance(self.folder, dict):
            self.proposed.append({"kind": "baseline", "scenario": scenario.name, "entry": entry})
            return
        _write(self.folder, self._path(scenario), entry)

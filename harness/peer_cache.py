"""A cache of peer results (torch SDPA backends, FA3) across evaluations.

A peer is the same library code on the same GPU for every candidate, yet in a fresh worker
process it costs a plan build per shape (cuDNN: most of the peer time of an evaluation) and its
own timing loop. When an evaluation names a cache folder, each peer is checked and timed on a
scenario once; later evaluations with the same GPU, software, scenario, trial layout and timing
settings reuse the result until it is older than the cache's age limit, and the report marks
the ratio as cached with the time it was measured. Peer ratios of a cached result are therefore
not side by side; the candidate's and the baseline's times always are. Evaluations that back a
claim against a peer run without a cache (the CLI's default).

One small JSON file per entry, written atomically, so that several worker processes can share
the folder without a lock; an unreadable or foreign entry is a miss."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.report import PeerResult
from harness.scenario import Scenario
from harness.settings import EvalSettings

# 2: peers timed on fresh inputs with a softmax_scale drawn per call (harness/attention/fields.py)
# behind a device hold; FA3 joined the peers.
FORMAT = 2
# Device facts that change what a peer does or how fast it does it.
DEVICE_KEYS = ("name", "capability", "sm_count", "torch", "cuda", "cudnn")


def entry_key(device: dict[str, Any], peer: str, scenario: Scenario, settings: EvalSettings) -> str:
    shape = scenario.to_dict()
    shape.pop("name", None)
    shape.pop("hidden", None)
    shape.pop("category", None)
    parts = {
        "format": FORMAT,
        "device": {k: device.get(k) for k in DEVICE_KEYS},
        "peer": peer,
        "shape": shape,
        "trials": settings.trials,
        "seed": settings.seed,
        "timing": asdict(settings.timing),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


class PeerCache:
    def __init__(self, folder: Path, max_age_s: float, device: dict[str, Any],
                 settings: EvalSettings) -> None:
        self.folder = folder
        self.max_age_s = max_age_s
        self.device = device
        self.settings = settings

    def _path(self, peer: str, scenario: Scenario) -> Path:
        return self.folder / f"{entry_key(self.device, peer, scenario, self.settings)}.json"

    def get(self, peer: str, scenario: Scenario, now: float | None = None) -> PeerResult | None:
        path = self._path(peer, scenario)
        try:
            d = json.loads(path.read_text())
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
        # A cache that cannot be written costs the next evaluation a peer measurement; it must
        # never fail the scenario of the kernel under evaluation.
        tmp: str | None = None
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump(entry, f)
            os.replace(tmp, self._path(peer, scenario))
        except OSError:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)

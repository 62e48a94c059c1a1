"""A synthetic speed model of the kernel family, for testing the offline agent on a machine
without a GPU: family kernels are rendered for real (their knob setting is read back from the
source's header comment), and a fixed table says how fast each setting is on each scenario.
Each layer has one knob that matters a lot somewhere (causal skipping on causal shapes,
split-KV on decode, ...) and tiles that matter a little, so a greedy search confined to
tiling plateaus, and a question that moves it to another layer pays.

`hopper=True` models an H100 for profiles (harness/profile.py): the Hopper layer (`mma=wgmma`,
then `wg_load=tma`) is worth most on every shape but decode, its shape knobs win back what short
calls, causal tiles, d64 and the main loop lose (`_hopper_shape`), and each report carries what a GPU
evaluation carries: the measured roofline rates, FLOPs, bytes, TFLOP/s and GB/s per scenario,
and the kernel's resources with its SASS mix (HGMMA or HMMA, UTMALDG where TMA loads). Chunked and
GQA calls also lose what no roofline share shows (the balanced split, the dynamic scheduler win it
back); `peers=True` reports FA3's ratio per call, FA3 being the gallery leader's setting timed here."""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

from app.services.evaluation import Evaluator, Implementation, resolve_path
from harness.attention.forward import attention_flops, attention_min_bytes
from harness.executor import Progress, ProgressFn
from harness.report import PASS, CompileInfo, EvaluationReport, ScenarioResult
from harness.scenario import Scenario
from harness.settings import EvalSettings
from harness.stats import geomean
from kernels.attention.family.render import recorded_knobs

ROOT = Path(__file__).resolve().parents[1]

BEST_TILES = {64: "128x64x4", 128: "128x64x8", 256: "64x64x4"}
# The synthetic H100's measured roofline, and the rates of a kernel of speed 1 (the baseline).
MATRIX_TFLOPS, COPY_GBPS = 800.0, 3000.0
BASE_TFLOPS, BASE_GBPS = 20.0, 60.0
CAUSAL_VISIBLE_RATE = 0.55  # causal_skip's 1.8x brings it to the full-mask rate


def knobs_of_source(text: str) -> dict[str, Any] | None:
    """The knob setting a rendered family kernel records in its header comment, read back
    through the family's parser (kernels/attention/family/render.py)."""
    return recorded_knobs(text)


def speed(knobs: dict[str, Any] | None, s: Scenario, hopper: bool = False) -> float:
    """Throughput relative to the baseline kernel (which has no knobs: 1.0)."""
    if knobs is None:
        return 1.0
    if hopper and knobs.get("mma") == "wgmma" and s.seqlen_q > 4:
        # warpgroup MMA doubles the matrix rate; the copy engine adds to it
        return _speed(knobs, s) * 2.2 * (1.12 if knobs.get("wg_load") == "tma" else 1.0) * _hopper_shape(knobs, s)
    return _speed(knobs, s)


def _hopper_shape(knobs: dict[str, Any], s: Scenario) -> float:
    """Where a Hopper kernel loses by shape, and the knobs that win it back (what the profile's
    shape findings read): the main loop (lazy rescaling, K ahead of V), the tile edges of short
    calls (the Q ring with the copy-engine epilogue), the uneven causal tiles (the dynamic
    scheduler) and d64's softmax (three consumers)."""
    v = (1.06 if knobs.get("rescale") == "lazy" else 1.0) * (1.03 if knobs.get("wg_kv_order") == "k_ahead" else 1.0)
    if s.seqlen_k <= 1024:
        v *= 0.7 * (1.2 if knobs.get("wg_q_stages") == 2 and knobs.get("wg_epilogue") == "tma" else 1.0)
    if s.causal and knobs.get("causal_skip"):
        v *= 1.0 if knobs.get("wg_scheduler") == "dynamic" else 0.8
    if s.head_dim == 64:
        v *= 0.75 * (1.2 if knobs.get("wg_wide_d64") else 1.0)
    # what the roofline shares do not show, only a peer's time (harness/profile.py: the peer findings)
    if s.category == "chunked":
        v *= 0.8 * (1.25 if knobs.get("wg_split_rule") == "balanced" else 1.0)
    if s.category == "gqa":
        v *= 0.85 * (1.18 if knobs.get("wg_scheduler") == "dynamic" else 1.0)
    return v


def _speed(knobs: dict[str, Any], s: Scenario) -> float:
    v = 2.0  # tensor cores at all
    tile = knobs[f"tile_d{s.head_dim}"]
    v *= 1.25 if tile == BEST_TILES[s.head_dim] else (1.1 if tile.startswith("128") else 1.0)
    v *= {1: 1.0, 2: 1.2, 3: 1.25}[knobs["stages"]]
    v *= 1.05 if knobs["smem_layout"] == "swizzle" else 1.0
    v *= 1.08 if knobs["softmax_exp"] == "exp2_folded" else 1.0
    if s.causal and s.seqlen_q > 1:
        v *= 1.8 if knobs["causal_skip"] else 1.0
        v *= 1.06 if knobs["mask_split"] else 1.0
    if s.seqlen_q <= 4:  # decode: only split-KV fills the machine
        v *= {"off": 1.0, "1wave": 3.0, "2wave": 3.2}[knobs["split_kv"]]
    return v


def fake_evaluate(candidate: Implementation, against: Implementation, scenarios: list[Scenario],
                  settings: EvalSettings, progress: ProgressFn | None, cancel: threading.Event,
                  suite: str = "all", one_device: bool = False, hopper: bool = False,
                  peers: bool = False) -> EvaluationReport:
    """Stands in for `Evaluator.evaluate` (app/services/evaluation.py): same arguments, a report from
    the table, and `progress` told of each scenario as the executor tells it."""
    mine = knobs_of_source(resolve_path(candidate.ref).read_text())
    theirs = knobs_of_source(Path(resolve_path(against.ref)).read_text())
    if hopper:
        report = _hopper_report(candidate, against, scenarios, suite, mine, theirs, peers)
    else:
        rows = []
        for s in scenarios:
            ratio = speed(mine, s) / speed(theirs, s)
            base_ms = 10.0 / speed(theirs, s)
            rows.append(ScenarioResult(s.name, s.category, s.hidden, PASS, time_ms=base_ms / ratio,
                                       baseline_ms=base_ms, speedup_vs_baseline=ratio, tflops=1.0))
        report = EvaluationReport(kernel=candidate.label, baseline=against.label, gpu="synthetic H200",
                                  suite=suite, scenarios=rows, compile=CompileInfo(ok=True))
    for i, row in enumerate(report.scenarios, 1):
        if progress is not None:
            progress(Progress(i, len(report.scenarios), row.scenario, row))
    return report


def _ms(knobs: dict[str, Any] | None, s: Scenario) -> float:
    """A call's time: decode streams bytes, everything else computes FLOPs."""
    if s.seqlen_q <= 4:
        return attention_min_bytes(s) / (BASE_GBPS * speed(knobs, s, True) * 1e9) * 1e3
    # a causal call's visible pairs at about half the full-mask rate until blocks past the diagonal are skipped
    visible = CAUSAL_VISIBLE_RATE if s.causal else 1.0
    return attention_flops(s) / (BASE_TFLOPS * visible * speed(knobs, s, True) * 1e12) * 1e3


def sass_of(knobs: dict[str, Any] | None) -> dict[str, int]:
    if knobs is None:
        return {"FFMA": 900, "total": 2000}
    mix = {"HGMMA": 96, "total": 6000} if knobs.get("mma") == "wgmma" else {"HMMA": 512, "LDSM": 96, "total": 4000}
    if knobs.get("wg_load") == "tma":
        mix["UTMALDG"] = 8
    elif knobs.get("loader") == "cp_async":
        mix["LDGSTS"] = 32
    return mix


@functools.cache
def fa3_knobs() -> dict[str, Any]:
    """The synthetic FA3: the gallery leader's setting timed by this model (a peer the agent never reads)."""
    knobs = recorded_knobs((ROOT / "kernels" / "attention" / "gallery" / "wgmma-tma-n.cu").read_text())
    assert knobs is not None
    return knobs


def _hopper_report(candidate: Implementation, against: Implementation, scenarios: list[Scenario], suite: str,
                   mine: dict[str, Any] | None, theirs: dict[str, Any] | None,
                   peers: bool = False) -> EvaluationReport:
    """`peers`: each row carries FA3's ratio, as an evaluation that times the peers does."""
    rows = []
    fa3 = fa3_knobs() if peers else None
    for s in scenarios:
        ms, base_ms = _ms(mine, s), _ms(theirs, s)
        flops, nbytes = attention_flops(s), attention_min_bytes(s)
        rows.append(ScenarioResult(s.name, s.category, s.hidden, PASS, flops=flops, bytes=nbytes, time_ms=ms,
                                   baseline_ms=base_ms, speedup_vs_baseline=base_ms / ms,
                                   tflops=flops / (ms * 1e-3) / 1e12, gbps=nbytes / (ms * 1e-3) / 1e9,
                                   speedup_vs_peers={"fa3": _ms(fa3, s) / ms} if fa3 else {}))
    resources = [{"name": "attention_kernel", "arch": "sm_90a", "registers": 168, "shared_bytes": 0,
                  "stack_bytes": 0, "spill_store_bytes": 0, "spill_load_bytes": 0, "sass": sass_of(mine)}]
    return EvaluationReport(kernel=candidate.label, baseline=against.label, gpu="synthetic H100", suite=suite,
                            scenarios=rows, compile=CompileInfo(ok=True, resources=resources),
                            settings={"device_info": {"name": "synthetic H100", "capability": "9.0",
                                                      "matrix_tflops": MATRIX_TFLOPS, "copy_gbps": COPY_GBPS}})


class SyntheticEvaluator(Evaluator):
    """The server's evaluator with the speed table in place of the harness: nothing runs on a
    GPU, so nothing is compiled first either (two shared CPU cores). `hopper`: the H100 model
    above, with what profiles read; `peers`: FA3's ratio per call, as the server's evaluations
    carry it on a GPU."""

    def __init__(self, hopper: bool = False, peers: bool = False) -> None:
        super().__init__()
        self.hopper, self.peers = hopper, peers

    def prebuild(self, candidate: Implementation, against: Implementation) -> None:
        return None

    def evaluate(self, candidate: Implementation, against: Implementation, scenarios: list[Scenario],
                 settings: EvalSettings, progress: ProgressFn | None, cancel: threading.Event,
                 suite: str = "all", one_device: bool = False) -> EvaluationReport:
        return fake_evaluate(candidate, against, scenarios, settings, progress, cancel, suite, one_device,
                             self.hopper, self.peers)


def geomean_speed(knobs: dict[str, Any], scenarios: list[Scenario], hopper: bool = False) -> float:
    return geomean(speed(knobs, s, hopper) for s in scenarios) or 1.0

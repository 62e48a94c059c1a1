"""What bounds a kernel, from its evaluation report: per scenario and per category the achieved
TFLOP/s and GB/s as a share of the roofline the harness measured on that GPU, compute- or
memory-bound, the SASS mix (HGMMA against HMMA, TMA loads, local memory), registers and spills,
optionally Nsight Compute's sections, and on top a diagnosis in words plus findings a program
can act on (a code per situation, the kernel family's layer and knob it points at, the
direction to move). A profile reads a report; it never changes a verdict."""

from __future__ import annotations

import csv
import io
import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.report import EvaluationReport, ScenarioResult

PROFILE_SCHEMA = 3  # 2: findings carry further moves; shape findings (tile edges, causal balance, the loop);
#                    3: the decode finding names the decode knobs after split-KV; categories carry
#                    their median call and their strongest peer's ratio (a category behind it is a finding)
COMPUTE, MEMORY, UNKNOWN = "compute", "memory", "unknown"
# Thresholds of the findings (shares of the measured roofline).
FAR_FROM_ROOFLINE = 0.5  # a compute-bound category below half the matrix rate
DECODE_FAR = 0.85  # decode below this share of the copy bandwidth: on the H100 (2026-12-06) a leader
#                    at 73% of it was 0.77x FA3 on the same decode calls, so FA3 reads them near 95%
CAUSAL_SKIP_RATIO = 0.65  # causal TFLOP/s below this share of full-mask TFLOP/s: masked blocks are computed
LOW_L2_HIT = 0.80  # Nsight Compute's L2 hit rate
CAUSAL_BALANCED = 0.90  # causal (skipping) TFLOP/s below this share of full-mask TFLOP/s: uneven tiles
SHORT_CALLS = 0.85  # short calls' TFLOP/s below this share of the long calls' at the same shape: tile edges
LOOP_SHARE = 0.90  # the longest full-mask calls below this share of the matrix rate: the main loop waits
# (FlashAttention-3 reaches 0.90-0.95 of the measured rate on long d128 calls on an H100)
HEAD_DIM_LAG = 0.80  # a head dim's long calls below this share of the best head dim's
SPILL_FLOOR = 64  # bytes a kernel may spill (a stack slot or two) before a finding names it
MATRIX_OPS = ("HGMMA", "QGMMA", "HMMA", "IMMA")
PEERS = (("fa3", "FA3"), ("cudnn", "cuDNN"), ("flash", "FA2"))  # the strongest first
PEER_BEHIND = 0.90  # a category below this share of its strongest peer's speed
LATENCY_MS = 0.05  # a category whose median call is shorter is bound by launch and fill, not by a roofline
# The family's decode knobs in the order to try: split-KV, a GQA group's heads packed into one tile (on
# the H100, 2026-12-06, decode 0.40 -> 0.75x FA3 from a leader without it), then what paid in
# docs/lab/family-measured.md: the Hopper kernel for decode (with two other knobs 0.89 -> 0.95x FA3),
# the wide combine (+5.6% on decode), the mma.sync kernel's two-warp decode tile.
DECODE_SETTINGS: tuple[tuple[str, str, str], ...] = (
    ("scheduling", "split_kv", "1wave"), ("scheduling", "pack_gqa", "decode"), ("tiling", "wg_decode", "wgmma"),
    ("scheduling", "split_combine", "wide"), ("scheduling", "split_combine", "burst"),
    ("tiling", "wg_solo_decode", "true"), ("tiling", "decode_tile", "32x64x2"), ("tiling", "decode_kv_warps", "2"))
# Where a category's gap to FA3 closed in the family, in the order to try (docs/lab/family-measured.md,
# H100, each measured over all 182 against the leader before it): the dynamic scheduler 1.073x on GQA
# (1.196x on causal GQA at tp4/tp8); the L2 sections 1.109x on prefill; the balanced split of the keys
# 1.170x on chunked; lazy rescaling 1.038x on GQA and chunked, 1.027x on prefill; for decode, its
# knobs above. The settings a move needs are listed after it (persistent CTAs and
# the Q ring for the dynamic scheduler, split-KV for the split rule): the agent measures a move with
# them where the family refuses it alone.
CATEGORY_MOVES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "gqa": (("scheduling", "wg_scheduler", "dynamic"), ("math", "rescale", "lazy"),
            ("scheduling", "persistent", "true"), ("memory", "wg_q_stages", "2")),
    "chunked": (("scheduling", "wg_split_rule", "balanced"), ("math", "rescale", "lazy"),
                ("scheduling", "wg_split_cost", "8"), ("scheduling", "split_kv", "1wave")),
    "prefill": (("scheduling", "wg_l2_sections", "32"), ("scheduling", "wg_scheduler", "dynamic"),
                ("math", "rescale", "lazy"), ("scheduling", "grid_order", "heavy_first"),
                ("scheduling", "persistent", "true"), ("memory", "wg_q_stages", "2")),
    "decode": DECODE_SETTINGS,
}


@dataclass(frozen=True)
class Finding:
    """One situation the profile recognises, and where in the kernel family it points."""

    code: str
    severity: float  # 0..1, the expected share of time at stake: findings are ranked by it
    message: str  # one line, in words
    layer: str  # a layer of kernels/attention/family (space.py: LAYERS)
    knob: str  # a knob of that layer
    value: str  # the value to try ("" where the direction is a range: smaller tiles)
    direction: str  # what should change when it is right
    expected: str  # the gain it may bring, in words
    categories: tuple[str, ...] = ()
    # further settings to try, in order, after (layer, knob, value): (layer, knob, value) each
    moves: tuple[tuple[str, str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["categories"] = list(self.categories)
        d["moves"] = [list(m) for m in self.moves]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Finding:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        known["categories"] = tuple(known.get("categories") or ())
        known["moves"] = tuple(tuple(str(x) for x in m) for m in known.get("moves") or () if len(m) == 3)
        return cls(**known)

    def settings(self) -> list[tuple[str, str, str]]:
        """Every setting it names, in the order to try them: its own, then its moves."""
        return [(self.layer, self.knob, self.value), *self.moves]


@dataclass
class ScenarioProfile:
    scenario: str
    category: str
    hidden: bool
    time_ms: float | None
    tflops: float | None
    gbps: float | None
    intensity: float | None  # FLOPs per byte of the compulsory traffic
    bound: str
    tensor_pct: float | None  # achieved TFLOP/s / measured matrix rate, in %
    bandwidth_pct: float | None  # achieved GB/s / measured copy rate, in %
    causal: bool
    vs_peers: dict[str, float] = field(default_factory=dict)  # peer -> the peer's time / this time (the report's)

    @property
    def roofline_pct(self) -> float | None:
        """The share of the ceiling that binds this scenario."""
        return self.tensor_pct if self.bound == COMPUTE else self.bandwidth_pct if self.bound == MEMORY else None


@dataclass
class CategoryProfile:
    category: str
    scenarios: int
    bound: str  # the majority
    tflops: float | None  # geomean over the timed scenarios
    gbps: float | None
    tensor_pct: float | None  # median over the category's scenarios
    bandwidth_pct: float | None
    roofline_pct: float | None  # median share of the binding ceiling
    median_ms: float | None = None  # the median call's time
    peer: str = ""  # the strongest peer the report times on most of the category's calls
    vs_peer: float | None = None  # geomean of the peer's time / this time over those calls

    @property
    def short(self) -> bool:
        """Calls too short for a roofline share to say what bounds them (launch, fill)."""
        return self.median_ms is not None and self.median_ms < LATENCY_MS


@dataclass
class Profile:
    kernel: str
    gpu: str
    arch: str
    matrix_tflops: float | None
    copy_gbps: float | None
    diagnosis: str
    findings: list[Finding]
    categories: list[CategoryProfile]
    scenarios: list[ScenarioProfile]
    sass: dict[str, int] | None  # opcode -> count over every kernel of the library
    kernels: list[dict[str, Any]]  # per kernel: name, registers, shared bytes, spills
    ncu: dict[str, dict[str, Any]] = field(default_factory=dict)  # category -> scenario, metrics
    notes: list[str] = field(default_factory=list)
    schema: int = PROFILE_SCHEMA

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["findings"] = [f.to_dict() for f in self.findings]
        return _finite(d)

    def visible(self) -> Profile:
        """The profile as an agent may read it: hidden scenarios counted, never named; the
        categories and findings (which name no scenario) stay."""
        shown = [s for s in self.scenarios if not s.hidden]
        hidden = len(self.scenarios) - len(shown)
        notes = list(self.notes) + ([f"{hidden} hidden scenario(s) are counted in the categories, not shown"]
                                    if hidden else [])
        ncu = {cat: {k: v for k, v in part.items() if k != "scenario"} for cat, part in self.ncu.items()}
        return Profile(self.kernel, self.gpu, self.arch, self.matrix_tflops, self.copy_gbps, self.diagnosis,
                       list(self.findings), list(self.categories), shown, self.sass, list(self.kernels), ncu, notes,
                       self.schema)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Profile:
        return cls(
            kernel=str(d.get("kernel", "")), gpu=str(d.get("gpu", "")), arch=str(d.get("arch", "")),
            matrix_tflops=d.get("matrix_tflops"), copy_gbps=d.get("copy_gbps"),
            diagnosis=str(d.get("diagnosis", "")),
            findings=[Finding.from_dict(f) for f in d.get("findings") or []],
            categories=[CategoryProfile(**c) for c in d.get("categories") or []],
            scenarios=[ScenarioProfile(**s) for s in d.get("scenarios") or []],
            sass=d.get("sass"), kernels=list(d.get("kernels") or []), ncu=dict(d.get("ncu") or {}),
            notes=list(d.get("notes") or []), schema=int(d.get("schema", PROFILE_SCHEMA)),
        )


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


# -- the pieces -------------------------------------------------------------------------------


def measured_rates(settings: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """The roofline the harness measured on the evaluation's GPU (a report's `settings`): its
    matrix TFLOP/s and copy GB/s, or (None, None) when the report carries none."""
    info = settings.get("device_info") if isinstance(settings, Mapping) else None
    info = info if isinstance(info, Mapping) else {}
    matrix, copy = info.get("matrix_tflops"), info.get("copy_gbps")
    ok = all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0
             for v in (matrix, copy))
    return (float(matrix), float(copy)) if ok else (None, None)  # type: ignore[arg-type]


def roofline_share(achieved: float | None, ceiling: float | None) -> float | None:
    """An achieved rate as a percentage of the measured ceiling (TFLOP/s of the matrix rate,
    GB/s of the copy rate); None when either is unknown."""
    return 100.0 * achieved / ceiling if achieved is not None and ceiling else None


def arch_of(report: EvaluationReport) -> str:
    """The compile target (ptxas's `sm_90a`), else the GPU's capability (`9.0` -> `sm_90`)."""
    for k in report.compile.resources:
        if k.get("arch"):
            return str(k["arch"])
    capability = str((report.settings.get("device_info") or {}).get("capability") or "")
    if capability.replace(".", "").isdigit():
        return "sm_" + capability.replace(".", "")
    return ""


def sass_mix(report: EvaluationReport) -> dict[str, int] | None:
    """Opcode counts summed over the library's kernels: the `sass` of each kernel's resources
    (harness/evaluate.py records it where cuobjdump exists), else None."""
    mixes = [k["sass"] for k in report.compile.resources if isinstance(k.get("sass"), dict)]
    if not mixes:
        return None
    total: dict[str, int] = {}
    for mix in mixes:
        for op, n in mix.items():
            total[op] = total.get(op, 0) + int(n)
    return total


def scenario_profile(r: ScenarioResult, matrix: float | None, copy: float | None) -> ScenarioProfile:
    timed = r.passed and r.time_ms is not None and r.time_ms > 0
    tflops = r.tflops if timed else None
    gbps = r.gbps if timed else None
    if timed and tflops is None and r.flops:
        tflops = r.flops / (r.time_ms * 1e-3) / 1e12  # type: ignore[operator]
    if timed and gbps is None and r.bytes:
        gbps = r.bytes / (r.time_ms * 1e-3) / 1e9  # type: ignore[operator]
    intensity = r.flops / r.bytes if r.flops and r.bytes else None
    bound = UNKNOWN
    if intensity is not None and matrix and copy:
        ridge = matrix * 1e12 / (copy * 1e9)  # FLOPs per byte where the two ceilings meet
        bound = COMPUTE if intensity >= ridge else MEMORY
    tensor = roofline_share(tflops, matrix)
    band = roofline_share(gbps, copy)
    peers = {str(k): float(v) for k, v in (r.speedup_vs_peers or {}).items()
             if timed and isinstance(v, int | float) and math.isfinite(v) and v > 0}
    return ScenarioProfile(r.scenario, r.category, r.hidden, r.time_ms if timed else None, tflops, gbps,
                           intensity, bound, tensor, band, "causal" in r.scenario.split("-"), peers)


def _median(values: Iterable[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def _gm(values: Iterable[float | None]) -> float | None:
    got = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in got) / len(got)) if got else None


def category_profiles(rows: Sequence[ScenarioProfile]) -> list[CategoryProfile]:
    out = []
    for cat in dict.fromkeys(r.category for r in rows):
        mine = [r for r in rows if r.category == cat]
        bounds = [r.bound for r in mine if r.bound != UNKNOWN]
        bound = max(set(bounds), key=lambda b: (bounds.count(b), b == COMPUTE)) if bounds else UNKNOWN
        timed = [r for r in mine if r.time_ms is not None]
        peer = next((name for name, _ in PEERS if 2 * sum(name in r.vs_peers for r in timed) >= max(1, len(timed))), "")
        out.append(CategoryProfile(cat, len(mine), bound, _gm(r.tflops for r in mine), _gm(r.gbps for r in mine),
                                   _median(r.tensor_pct for r in mine), _median(r.bandwidth_pct for r in mine),
                                   _median(r.roofline_pct for r in mine), _median(r.time_ms for r in mine), peer,
                                   _gm(r.vs_peers.get(peer) for r in timed) if peer else None))
    return out


def _smem(k: Mapping[str, Any]) -> str:
    """Shared memory per block: static (ptxas) plus dynamic (as the source sets it)."""
    static, dynamic = k.get("shared_bytes") or 0, k.get("dynamic_shared_bytes")
    if isinstance(dynamic, int):
        return f"smem {static} + {dynamic} B dynamic"
    return f"smem {static} B" + (" + dynamic set at run time" if k.get("dynamic_shared") else "")


def kernel_resources(report: EvaluationReport) -> list[dict[str, Any]]:
    keep = ("name", "arch", "registers", "shared_bytes", "dynamic_shared_bytes", "dynamic_shared", "stack_bytes",
            "spill_store_bytes", "spill_load_bytes")
    return [{k: r.get(k) for k in keep if k in r} for r in report.compile.resources]


def parse_ncu_csv(text: str) -> dict[str, Any]:
    """Nsight Compute's details page as CSV (`ncu -i R --page details --csv`): metric name ->
    value (a number where it reads as one), the first launch's. Units stay in the names' sense:
    'L2 Hit Rate' and 'DRAM Throughput' are percentages, 'Duration' what ncu printed."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return {}
    head = rows[0]
    try:
        name_i, unit_i, value_i = head.index("Metric Name"), head.index("Metric Unit"), head.index("Metric Value")
    except ValueError:
        return {}
    out: dict[str, Any] = {}
    for row in rows[1:]:
        if len(row) <= max(name_i, unit_i, value_i) or row[name_i] in out:
            continue
        raw = row[value_i].replace(",", "")
        try:
            value: Any = float(raw)
        except ValueError:
            value = row[value_i]
        out[row[name_i]] = value
        if row[unit_i]:
            out.setdefault("units", {})[row[name_i]] = row[unit_i]
    return out


# -- the findings -----------------------------------------------------------------------------


def _is_hopper(arch: str) -> bool:
    return arch.startswith("sm_90")


_SHAPE = re.compile(r"-d(\d+)-s(\d+)-")
_KERNEL_DIM = re.compile(r"ILi(\d+)E")


def _kernel_head_dim(name: str) -> int | None:
    """The head dim a family kernel's mangled name instantiates (`...ILi256E...`), if any."""
    found = _KERNEL_DIM.search(name)
    return int(found.group(1)) if found else None


def _shape(r: ScenarioProfile) -> tuple[int, int] | None:
    """(head_dim, sequence length) of a prefill scenario, read from its name."""
    found = _SHAPE.search(r.scenario) if r.category == "prefill" else None
    return (int(found.group(1)), int(found.group(2))) if found else None


def _causal_ratio(rows: Sequence[ScenarioProfile]) -> float | None:
    """The median over prefill shapes timed both ways of causal TFLOP/s (visible pairs) over
    full-mask TFLOP/s; None when no shape was timed both ways."""
    rates: dict[tuple[int, int], dict[bool, float]] = {}
    for r in rows:
        shape = _shape(r)
        if shape is not None and r.tflops:
            rates.setdefault(shape, {})[r.causal] = float(r.tflops)
    pairs = [v[True] / v[False] for v in rates.values() if True in v and False in v]
    return statistics.median(pairs) if pairs else None


def _shape_findings(rows: Sequence[ScenarioProfile], matrix: float | None) -> list[Finding]:
    """What the prefill shapes say about a Hopper (HGMMA) kernel: where its rate falls off
    (short calls against long ones of the same head dim, the longest calls against the matrix
    rate, one head dim against the others), each pointing at the family's knobs for that part
    of the kernel, most direct first."""
    out: list[Finding] = []
    shaped = [(_shape(r), r) for r in rows if r.tflops and not r.causal]
    by_dim: dict[int, dict[int, float]] = {}
    for shape, r in shaped:
        if shape is not None:
            by_dim.setdefault(shape[0], {})[shape[1]] = float(r.tflops or 0.0)
    short_long = []
    for lengths in by_dim.values():
        if len(lengths) >= 2 and max(lengths) >= 4 * min(lengths):
            short_long.append(lengths[min(lengths)] / lengths[max(lengths)])
    if short_long and statistics.median(short_long) < SHORT_CALLS:
        ratio = statistics.median(short_long)
        out.append(Finding(
            "tile_edges", 0.35 * (1 - ratio), f"the shortest prefill calls reach {ratio:.0%} of the longest "
            "calls' TFLOP/s at the same head dim: each tile's start (its Q load, the pipeline's fill) and end "
            "(the O stores) are not hidden behind another tile's work", "memory", "wg_q_stages", "2",
            "short calls' TFLOP/s toward the long calls': the next tile's Q loads while this one runs, "
            "O leaves through the copy engine", "5-15% on short calls", ("prefill",),
            (("memory", "wg_epilogue", "tma"), ("memory", "wg_epilogue", "smem"),
             ("scheduling", "wg_l2_sections", "32"), ("scheduling", "persistent", "true"))))
    longest = {d: lengths[max(lengths)] for d, lengths in by_dim.items() if lengths}
    if matrix and longest:
        best_dim = max(longest, key=lambda d: longest[d])
        share = longest[best_dim] / matrix
        if share < LOOP_SHARE:
            out.append(Finding(
                "loop_below_roofline", min(0.3, 0.5 * (1 - share / LOOP_SHARE) + 0.05),
                f"the longest full-mask calls (d{best_dim}) reach {share:.0%} of the matrix rate: in the main "
                "loop the tensor cores wait between the two products for the softmax (the exponentials, the "
                "rescaling) and for the next K/V block", "math", "softmax_exp", "exp2_folded",
                "long calls toward the matrix rate: fewer instructions between the products, the next "
                "block's K ahead of this block's V", "a few % each, 10-25% together on long calls", ("prefill",),
                (("math", "rescale", "lazy"), ("memory", "wg_kv_order", "k_ahead"), ("math", "wg_p_buffers", "2"),
                 ("memory", "wg_kv_fence", "cp_async"), ("math", "wg_desc", "offset"),
                 ("memory", "wg_stages", "3"))))
        if 64 in longest and len(longest) > 1 and longest[64] < HEAD_DIM_LAG * longest[best_dim]:
            lag = longest[64] / longest[best_dim]
            out.append(Finding(
                "small_head_dim_lags", 0.2 * (1 - lag), f"d64's long calls reach {lag:.0%} of d{best_dim}'s "
                "TFLOP/s: at d64 each key block's products are half as long while its softmax is not, so two "
                "consumer warpgroups cannot hide it", "tiling", "wg_wide_d64", "true",
                "d64 TFLOP/s toward the other head dims'", "5-15% on d64 calls", ("prefill",),
                (("memory", "wg_stages_d64", "4"),)))
    return out


def _peer_findings(cats: Sequence[CategoryProfile], found: Sequence[Finding]) -> list[Finding]:
    """A category well behind its strongest peer, where the family has settings that closed such
    a gap and no finding is about that category alone (the prefill shapes', decode's): the
    roofline shares miss it (on the H100, 2026-12-06, chunked calls at 69% of the matrix rate
    were 0.78x FA3). The ratio is the report's: side by side, or the peer's cached time where the
    evaluation used a peer cache (harness/peer_cache.py)."""
    own = {f.categories[0] for f in found if len(f.categories) == 1}
    out = []
    for c in cats:
        moves = CATEGORY_MOVES.get(c.category)
        if not moves or c.category in own or c.vs_peer is None or c.vs_peer >= PEER_BEHIND:
            continue
        label = dict(PEERS).get(c.peer, c.peer)
        (layer, knob, value), rest = moves[0], moves[1:]
        out.append(Finding(
            # below the specific findings' weights at the same gap: early on, the gap to a peer is mostly
            # what they name (the warpgroup MMA, TMA, the loop); the findings take turns anyway
            f"{c.category}_behind_peer", min(0.3, 0.5 * (1 - c.vs_peer)),
            f"{c.category} at {c.vs_peer:.2f}x {label} over its {c.scenarios} call(s): the roofline shares do not "
            "show what the peer does better", layer, knob, value,
            f"{c.category} toward {label}'s speed", f"up to {1 / c.vs_peer - 1:.0%} on {c.category}",
            (c.category,), rest))
    return out


def findings_for(arch: str, cats: Sequence[CategoryProfile], rows: Sequence[ScenarioProfile], matrix: float | None,
                 sass: Mapping[str, int] | None, kernels: Sequence[Mapping[str, Any]],
                 ncu: Mapping[str, Mapping[str, Any]]) -> list[Finding]:
    """Every situation the profile recognises, most at stake first."""
    out: list[Finding] = []
    compute = [c for c in cats if c.bound == COMPUTE and c.tensor_pct is not None and not c.short]
    worst_compute = min((c.tensor_pct for c in compute), default=None)  # type: ignore[type-var]
    compute_names = tuple(c.category for c in compute)
    at_stake = 1.0 - (worst_compute or 0.0) / 100.0 if worst_compute is not None else 0.5
    if sass is not None:
        matrix_ops = sum(sass.get(op, 0) for op in MATRIX_OPS)
        if matrix_ops == 0:
            out.append(Finding(
                "no_tensor_cores", max(0.9, at_stake), "no tensor-core instruction (HMMA/HGMMA) in the SASS: "
                "the matrix products run on the CUDA cores", "math", "mma", "mma_sync",
                "raise the tensor-core share of the compute-bound calls", "several x on compute-bound calls",
                compute_names))
        elif _is_hopper(arch) and sass.get("HGMMA", 0) == 0:
            out.append(Finding(
                "no_wgmma_on_hopper", max(0.8, at_stake), f"no HGMMA on {arch}: Hopper's warpgroup MMA is unused "
                f"({sass.get('HMMA', 0)} warp-level HMMA)", "math", "mma", "wgmma",
                "HGMMA appears in the SASS; compute-bound calls move toward the matrix roofline",
                "1.5-2.5x on compute-bound prefill and GQA (mma.sync tops out near half of Hopper's rate)",
                compute_names))
        elif _is_hopper(arch) and sass.get("UTMALDG", 0) == 0:
            out.append(Finding(
                "no_tma_on_hopper", 0.45, f"HGMMA but no TMA load (UTMALDG) on {arch}: K/V tiles arrive by "
                "per-thread copies", "memory", "wg_load", "tma",
                "UTMALDG appears; the producer's issue slots and registers go free", "10-15% on every category",
                compute_names))
        local = sass.get("LDL", 0) + sass.get("STL", 0)
        if local and not any(k.get("spill_store_bytes") for k in kernels):
            out.append(Finding(
                "local_memory", 0.2, f"{local} local-memory instructions (LDL/STL) in the SASS: an array "
                "indexed at run time lives in local memory", "math", "q_fragments", "smem",
                "no LDL/STL in the SASS", "a few % where the loop touches it"))
    spilled = [k for k in kernels if (k.get("spill_store_bytes") or 0) + (k.get("spill_load_bytes") or 0) > SPILL_FLOOR]
    if spilled:
        worst = max(spilled, key=lambda k: (k.get("spill_store_bytes") or 0) + (k.get("spill_load_bytes") or 0))
        dim = _kernel_head_dim(str(worst.get("name", "")))
        hopper_kernel = "sm90" in str(worst.get("name", ""))
        knob = (f"wg_block_n_d{dim}" if hopper_kernel else f"tile_d{dim}") if dim else "tile_d128"
        out.append(Finding(
            "spills", 0.3, f"{len(spilled)} kernel(s) spill to local memory ({worst.get('name', '?')}: "
            f"{worst.get('registers', '?')} registers, {worst.get('spill_store_bytes', 0)} bytes stored)",
            "tiling", knob, "", "smaller tiles or fewer fragments in registers until ptxas reports no spill",
            "a few % to 30% on the spilling kernel's shapes"))
    decode = next((c for c in cats if c.category == "decode"), None)
    if decode is not None and decode.bandwidth_pct is not None and decode.bandwidth_pct < 100 * DECODE_FAR:
        (layer, knob, value), rest = DECODE_SETTINGS[0], DECODE_SETTINGS[1:]
        out.append(Finding(
            "decode_far_from_bandwidth", 0.6 * (1 - decode.bandwidth_pct / 100),
            f"decode streams K/V at {decode.bandwidth_pct:.0f}% of the measured copy bandwidth: too few CTAs "
            "read the keys, or each reads them slowly", layer, knob, value,
            "decode GB/s toward the copy rate", "2-3x on decode (split-KV fills the SMs)", ("decode",), rest))
    wgmma = _is_hopper(arch) and sass is not None and sass.get("HGMMA", 0) > 0
    full = [r.tflops for r in rows if not r.causal and r.tflops and r.category == "prefill"]
    causal = [r.tflops for r in rows if r.causal and r.tflops and r.category == "prefill"]
    if full and causal:
        ratio = _causal_ratio(rows) or statistics.median(causal) / statistics.median(full)
        if ratio < CAUSAL_SKIP_RATIO:
            out.append(Finding(
                "causal_no_skip", 0.5 * (1 - ratio), f"causal prefill reaches {ratio:.0%} of the full-mask "
                "TFLOP/s (counting only visible pairs): key blocks past the diagonal are computed and masked",
                "masking", "causal_skip", "true", "causal TFLOP/s close to the full-mask TFLOP/s",
                "up to 2x on causal calls", ("prefill",)))
        elif wgmma and ratio < CAUSAL_BALANCED:
            out.append(Finding(
                "causal_imbalance", 0.5 * (1 - ratio), f"causal prefill reaches {ratio:.0%} of the full-mask "
                "TFLOP/s with the blocks past the diagonal skipped: the tiles' work is uneven (a tile near the "
                "diagonal has few blocks) and every block pays for the mask", "scheduling", "wg_scheduler",
                "dynamic", "causal TFLOP/s toward the full-mask TFLOP/s: the longest tiles start first and "
                "no SM waits for the last ones", "5-20% on causal calls, most on the longest",
                ("prefill",), (("scheduling", "grid_order", "heavy_first"), ("masking", "mask_split", "true"))))
    if wgmma:
        out.extend(_shape_findings(rows, matrix))
    if compute and worst_compute is not None and worst_compute < 100 * FAR_FROM_ROOFLINE and not any(
            f.code in ("no_tensor_cores", "no_wgmma_on_hopper", "loop_below_roofline") for f in out):
        hopper = sass is not None and sass.get("HGMMA", 0) > 0
        # with the warpgroup MMA, the tiles' start and end (prologue, epilogue) are what persistent
        # CTAs hide; without it, the loads the tensor cores wait for (a deeper K/V pipeline)
        out.append(Finding(
            "low_tensor_core_share", 0.4 * at_stake,
            f"compute-bound calls at {worst_compute:.0f}% of the tensor-core roofline: the matrix units wait "
            "for data, for the softmax or between tiles", "scheduling" if hopper else "memory",
            "persistent" if hopper else "stages", "true" if hopper else "2",
            "persistent CTAs overlap one tile's epilogue with the next one's loads" if hopper else
            "a deeper K/V pipeline keeps the tensor cores fed", "5-20% on compute-bound calls", compute_names,
            () if hopper else (("memory", "stages", "3"), ("memory", "smem_layout", "swizzle"))))
    for cat, part in ncu.items():
        metrics = part.get("metrics") or {}
        hit = metrics.get("L2 Hit Rate")
        if isinstance(hit, int | float) and hit < 100 * LOW_L2_HIT:
            out.append(Finding(
                "low_l2_hit_rate", 0.25, f"{cat}: L2 hit rate {hit:.0f}% (Nsight Compute): K/V blocks are "
                "fetched from device memory again", "scheduling", "wg_l2_sections", "32",
                "higher L2 hit rate, fewer DRAM bytes", "a few % to 25% on the short calls", (cat,)))
    out.extend(_peer_findings(cats, out))
    return sorted(out, key=lambda f: -f.severity)


def diagnosis_words(arch: str, cats: Sequence[CategoryProfile], findings: Sequence[Finding],
                    rates_known: bool) -> str:
    parts = []
    if not rates_known:
        parts.append("no roofline rates in this report (a CPU run or an old report): shares of the roofline unknown")
    else:
        # the categories the top finding is about first, then the furthest from their ceiling
        about = findings[0].categories if findings else ()
        ranked = sorted((c for c in cats if c.roofline_pct is not None and (not c.short or c.category in about)),
                        key=lambda c: (c.category not in about, c.roofline_pct or 0.0))
        for c in ranked[:2]:
            ceiling = "tensor-core" if c.bound == COMPUTE else "bandwidth"
            parts.append(f"{c.bound}-bound on {c.category} at {c.roofline_pct:.0f}% of the {ceiling} roofline")
    parts.extend(f.message for f in findings[:2])
    if not findings:
        parts.append("no finding: nothing in this report points at one layer")
    return "; ".join(parts)


def profile_report(report: EvaluationReport, *, ncu: Mapping[str, Mapping[str, Any]] | None = None,
                   sass: Mapping[str, int] | None = None) -> Profile:
    """The profile of one evaluation report. `sass` overrides the mix the report records;
    `ncu` maps a category to {"scenario": name, "metrics": parse_ncu_csv(...)}."""
    matrix, copy = measured_rates(report.settings)
    arch = arch_of(report)
    rows = [scenario_profile(r, matrix, copy) for r in report.scenarios]
    cats = category_profiles(rows)
    mix = dict(sass) if sass is not None else sass_mix(report)
    kernels = kernel_resources(report)
    ncu_parts = {str(k): dict(v) for k, v in (ncu or {}).items()}
    found = findings_for(arch, cats, rows, matrix, mix, kernels, ncu_parts)
    notes = []
    if mix is None:
        notes.append("no SASS mix in this report (cuobjdump was not found where it was built): the "
                     "tensor-core and TMA findings were not checked")
    if not report.compile.resources:
        notes.append("no ptxas resource report: registers and spills unknown")
    return Profile(report.kernel, report.gpu, arch, matrix, copy,
                   diagnosis_words(arch, cats, found, matrix is not None), found, cats, rows, mix, kernels,
                   ncu_parts, notes)


# -- for people -------------------------------------------------------------------------------


def _f(v: float | None, spec: str) -> str:
    return "-" if v is None else f"{v:{spec}}"


def render_profile(p: Profile) -> str:
    lines = [f"profile of {p.kernel} on {p.gpu or 'an unknown device'} ({p.arch or 'arch unknown'})",
             f"diagnosis: {p.diagnosis}"]
    if p.matrix_tflops:
        lines.append(f"roofline measured: {p.matrix_tflops:.0f} TFLOP/s matrix, {p.copy_gbps:.0f} GB/s copy")
    lines.append("")
    lines.append(f"{'category':<10} {'n':>3} {'bound':<8} {'TFLOP/s':>8} {'GB/s':>7} {'% tensor':>9} "
                 f"{'% bw':>6} {'% roof':>7} {'median us':>10} {'x peer':>12}")
    for c in p.categories:
        peer = f"{c.vs_peer:.2f} {dict(PEERS).get(c.peer, c.peer)}" if c.vs_peer is not None else "-"
        median = _f(c.median_ms * 1e3 if c.median_ms is not None else None, '.0f') + (" short" if c.short else "")
        lines.append(f"{c.category:<10} {c.scenarios:>3} {c.bound:<8} {_f(c.tflops, '.1f'):>8} {_f(c.gbps, '.0f'):>7} "
                     f"{_f(c.tensor_pct, '.1f'):>9} {_f(c.bandwidth_pct, '.1f'):>6} {_f(c.roofline_pct, '.1f'):>7} "
                     f"{median:>10} {peer:>12}")
    if p.findings:
        lines.append("")
        lines.append("findings (most at stake first):")
        for f in p.findings:
            setting = f"{f.knob}={f.value}" if f.value else f.knob
            lines.append(f"  {f.code}: {f.message}")
            lines.append(f"    -> {f.layer} layer, {setting}: {f.direction} (expected: {f.expected})")
            if f.moves:
                lines.append("       then: " + ", ".join(f"{knob}={value} ({layer})" for layer, knob, value in f.moves))
    if p.sass is not None:
        shown = [op for op in ("HGMMA", "HMMA", "UTMALDG", "LDGSTS", "LDSM", "MUFU", "LDL", "STL") if p.sass.get(op)]
        lines.append("")
        lines.append("SASS mix: " + (", ".join(f"{op} {p.sass[op]}" for op in shown) or "no counted opcode")
                     + f" (of {p.sass.get('total', 0)} instructions)")
    if p.kernels:
        lines.append("kernels: " + "; ".join(
            f"{k.get('name', '?')[:40]} {k.get('registers', '?')} regs, {_smem(k)}, spills "
            f"{k.get('spill_store_bytes', 0)}/{k.get('spill_load_bytes', 0)} B" for k in p.kernels[:4]))
    for cat, part in p.ncu.items():
        metrics = part.get("metrics") or {}
        shown_m = [m for m in ("Duration", "SM Busy", "DRAM Throughput", "L2 Hit Rate", "Achieved Occupancy")
                   if m in metrics]
        lines.append(f"ncu {cat} ({part.get('scenario', '')}): "
                     + ", ".join(f"{m} {metrics[m]}" for m in shown_m))
    lines.append("")
    lines.append(f"{'scenario':<44} {'bound':<8} {'ms':>9} {'TFLOP/s':>8} {'GB/s':>7} {'% roof':>7}")
    for s in p.scenarios:
        name = s.scenario + (" (h)" if s.hidden else "")
        lines.append(f"{name:<44.44} {s.bound:<8} {_f(s.time_ms, '.4f'):>9} {_f(s.tflops, '.1f'):>8} "
                     f"{_f(s.gbps, '.0f'):>7} {_f(s.roofline_pct, '.1f'):>7}")
    lines.extend(f"note: {n}" for n in p.notes)
    return "\n".join(lines)

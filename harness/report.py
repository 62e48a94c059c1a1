"""The evaluation report: per-scenario results and geomeans, as JSON for machines and a table
for people. Every client (CLI, server, agents) reads this one shape."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.stats import geomean

REPORT_SCHEMA = 1

# Scenario statuses. Only "pass" counts as correct; everything else fails a full-suite verdict.
PASS = "pass"
FAIL = "fail"  # wrong answer, NaN/Inf, unwritten output, inputs modified, non-deterministic
UNSUPPORTED = "unsupported"  # the kernel returned cudaErrorNotSupported
ERROR = "error"  # the kernel returned another CUDA error
CRASH = "crash"  # the evaluation process died or the CUDA context broke
TIMEOUT = "timeout"  # the scenario ran past its time limit
SKIPPED = "skipped"  # not run (the evaluation was abandoned after repeated crashes)
NOT_COMPILED = "not_compiled"  # the kernel did not pass static checks or did not compile
STATUSES = (PASS, FAIL, UNSUPPORTED, ERROR, CRASH, TIMEOUT, SKIPPED, NOT_COMPILED)

PEER_NAMES = ("cudnn", "flash", "fa3")
# How people read them: torch SDPA's cuDNN and flash (FlashAttention-2) backends, FlashAttention-3.
PEER_LABELS = {"cudnn": "cuDNN", "flash": "FA2", "fa3": "FA3"}
RATIO_LEGEND = ("x P = P's time / this kernel's time on a scenario; above 1 is faster than P. Geomeans are over "
                "the scenarios where both were timed")

# Verdicts of a whole evaluation (verifier rule 5): accepted needs every scenario passed,
# hidden ones included, and no sanity flag; a flag blocks the verdict until re-verified.
ACCEPTED = "accepted"
REJECTED = "rejected"
BLOCKED = "blocked"
# Scenario flags that block a verdict (the others, such as "baseline not timed", only inform).
BLOCKING_FLAG_PREFIXES = ("impossible", "wall-clock")
# Over-fitting shows as a visible geomean far above the hidden one; judged with enough of each.
OVERFIT_GAP = 1.5
OVERFIT_MIN_SCENARIOS = 5
MAX_REASONS = 6


@dataclass
class PeerResult:
    """A reference implementation timed by the same code (torch SDPA backends, FA3)."""

    status: str  # "ok", "unsupported", "incorrect", "error"
    time_ms: float | None = None
    tflops: float | None = None
    reason: str = ""
    # Set when the result came from the peer cache (harness/peer_cache.py): the Unix time it
    # was measured, in an earlier evaluation; the ratio against it is then not side by side.
    cached_at: float | None = None


@dataclass
class ScenarioResult:
    scenario: str
    category: str
    hidden: bool
    status: str
    reason: str = ""
    flops: int = 0
    bytes: int = 0
    max_error: float | None = None
    tolerance: float | None = None
    time_ms: float | None = None
    time_spread: float | None = None
    reps: int = 0
    tflops: float | None = None
    gbps: float | None = None
    baseline_ms: float | None = None
    speedup_vs_baseline: float | None = None
    # Set when baseline_ms came from the baseline cache (harness/peer_cache.py: BaselineCache):
    # the Unix time it was measured, in an earlier evaluation on the same GPU and software.
    baseline_cached_at: float | None = None
    peers: dict[str, PeerResult] = field(default_factory=dict)
    speedup_vs_peers: dict[str, float] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    seconds: float = 0.0  # wall time spent on this scenario
    # Where that time went (correctness, reference, peers, timing): to see what an
    # evaluation costs, not a measurement of the kernel.
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == PASS

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ScenarioResult:
        d = dict(d)
        d["peers"] = {k: PeerResult(**v) for k, v in d.get("peers", {}).items()}
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass
class GeomeanSummary:
    """Geomeans over the scenarios of one part of the suite that passed. A ratio exists only
    where both sides were timed: `timed` (and `peers_timed` per peer) counts the scenarios
    behind each geomean, which may be fewer than `passed` (a baseline or peer that returned an
    error, a correctness-only run)."""

    scenarios: int
    passed: int
    vs_baseline: float | None
    vs_peers: dict[str, float | None]
    tflops: float | None  # geomean TFLOP/s of the candidate
    timed: int = 0  # passed scenarios with a ratio against the baseline: what vs_baseline is over
    peers_timed: dict[str, int] = field(default_factory=dict)  # the same per peer

    @property
    def complete(self) -> bool:
        return self.scenarios > 0 and self.passed == self.scenarios

    @property
    def fully_timed(self) -> bool:
        """Every scenario passed and has a ratio against the baseline: vs_baseline is over all."""
        return self.complete and self.timed == self.scenarios

    def ratio_words(self, against: str = "the baseline") -> str:
        """The geomean with the scenarios it is over, never more than were timed on both sides:
        "10/10 passed, 1.091x over all 10" or "10/10 passed; 7 of 10 timed against leader #7,
        1.091x over those 7"."""
        head = f"{self.passed}/{self.scenarios} passed"
        if self.vs_baseline is None or self.timed == 0:
            return f"{head}; none timed against {against}, no ratio"
        ratio = f"{self.vs_baseline:.3f}x"
        if self.timed == self.scenarios:
            return f"{head}, {ratio} over all {self.timed}"
        return f"{head}; {self.timed} of {self.scenarios} timed against {against}, {ratio} over those {self.timed}"


@dataclass
class CompileInfo:
    ok: bool
    cached: bool = False
    seconds: float = 0.0
    log: str = ""
    command: str = ""
    library: str = ""
    source_sha256: str = ""
    # ptxas resource report per kernel (harness/resources.py): registers, smem, spills.
    resources: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Verdict:
    status: str  # ACCEPTED, REJECTED or BLOCKED
    reasons: list[str]

    def __str__(self) -> str:
        return f"{self.status}: " + "; ".join(self.reasons)


@dataclass
class EvaluationReport:
    kernel: str
    baseline: str | None
    gpu: str
    suite: str
    scenarios: list[ScenarioResult]
    compile: CompileInfo
    started_at: str = ""
    seconds: float = 0.0
    settings: dict[str, Any] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    schema: int = REPORT_SCHEMA

    def summary(self, part: str) -> GeomeanSummary:
        chosen = self.scenarios if part == "all" else [s for s in self.scenarios if s.hidden == (part == "hidden")]
        return summarize(chosen)

    @property
    def all_passed(self) -> bool:
        return bool(self.scenarios) and all(s.passed for s in self.scenarios)

    def verdict(self) -> Verdict:
        return judge(self)

    def cached_peer_note(self, now: float | None = None) -> str | None:
        """Says how many peer ratios rest on cached peer times, and how old the oldest is;
        None when every peer was timed side by side in this evaluation."""
        stamps = [p.cached_at for s in self.scenarios for p in s.peers.values() if p.cached_at is not None]
        if not stamps:
            return None
        total = sum(len(s.peers) for s in self.scenarios)
        age_h = ((now if now is not None else time.time()) - min(stamps)) / 3600
        return (f"{len(stamps)} of {total} peer results came from the peer cache (the oldest measured "
                f"{age_h:.1f} h earlier): those ratios are not side by side")

    def cached_baseline_note(self, now: float | None = None) -> str | None:
        """Says how many baseline times came from the baseline cache; None when the baseline
        was timed in this evaluation (or not at all)."""
        stamps = [s.baseline_cached_at for s in self.scenarios if s.baseline_cached_at is not None]
        if not stamps:
            return None
        total = sum(s.baseline_ms is not None for s in self.scenarios)
        age_h = ((now if now is not None else time.time()) - min(stamps)) / 3600
        return (f"{len(stamps)} of {total} baseline times came from the baseline cache (the oldest "
                f"measured {age_h:.1f} h earlier on this GPU and software): the naive baseline is "
                "not re-timed; the kernel and the peers were timed side by side")

    def time_note(self) -> str:
        """Where the evaluation's seconds went: the compile, the worker's setup and warm-up, and
        each scenario phase summed over the suite (the numbers the docs/lab/ passes tabulate)."""
        info = self.settings.get("device_info") or {}
        parts = ["compile " + ("cached" if self.compile.cached else f"{self.compile.seconds:.1f} s")]
        if "setup_s" in info:
            parts.append(f"worker setup {float(info['setup_s']):.1f} s")
        warm = info.get("warm_up")
        if warm:
            parts.append(f"warm-up {float(warm['seconds']):.1f} s beside the compile (peer plans for "
                         f"{warm['scenarios_with_plans']} of {len(self.scenarios)} scenarios)")
        totals: dict[str, float] = {}
        for s in self.scenarios:
            for phase, sec in s.phases.items():
                totals[phase] = totals.get(phase, 0.0) + sec
        order = ("correctness", "reference", "peers", "timing", "integrity", "profile")
        named = sorted(totals, key=lambda k: (order.index(k) if k in order else len(order), k))
        phases = ", ".join(f"{k} {totals[k]:.1f}" for k in named)
        return "; ".join(parts) + (f"; per phase (s): {phases}" if phases else "")

    def unavailable_peers(self) -> dict[str, str]:
        """Peers the evaluation asked for that could not run on its machine, with the reason."""
        info = self.settings.get("device_info") or {}
        return dict(info.get("peers_unavailable") or {})

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["geomean"] = {
            part: asdict(self.summary(part)) for part in ("visible", "hidden", "all")
        }
        d["verdict"] = asdict(self.verdict())
        return d

    def to_json(self) -> str:
        return json.dumps(_finite(self.to_dict()), indent=1, allow_nan=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvaluationReport:
        return cls(
            kernel=d["kernel"],
            baseline=d.get("baseline"),
            gpu=d.get("gpu", ""),
            suite=d.get("suite", ""),
            scenarios=[ScenarioResult.from_dict(s) for s in d.get("scenarios", [])],
            compile=CompileInfo(**d.get("compile", {"ok": False})),
            started_at=d.get("started_at", ""),
            seconds=d.get("seconds", 0.0),
            settings=d.get("settings", {}),
            flags=list(d.get("flags", [])),
            schema=d.get("schema", REPORT_SCHEMA),
        )


def _finite(value: Any) -> Any:
    """JSON has no inf or NaN: such values (a max error over NaN outputs) become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _plain_reason(reason: str) -> str:
    """The reason without the trial number, so equal failures group together."""
    if reason.startswith("trial ") and ": " in reason:
        return reason.split(": ", 1)[1]
    return reason


def _group_failures(failed: Sequence[ScenarioResult]) -> list[str]:
    groups: dict[str, list[ScenarioResult]] = {}
    for r in failed:
        groups.setdefault(f"{r.status}: {_plain_reason(r.reason)}", []).append(r)
    out = []
    for key, members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        first = members[0].scenario + (" (hidden)" if members[0].hidden else "")
        more = f" and {len(members) - 1} more" if len(members) > 1 else ""
        out.append(f"{key} [{first}{more}]")
    return out


def blocking_flags(r: ScenarioResult) -> list[str]:
    return [f for f in r.flags if f.startswith(BLOCKING_FLAG_PREFIXES)]


def judge(report: EvaluationReport) -> Verdict:
    """Accepted, rejected or blocked, with reasons a person can read."""
    results = report.scenarios
    if not results:
        return Verdict(BLOCKED, ["no scenario was evaluated"])
    not_compiled = [r for r in results if r.status == NOT_COMPILED]
    if not report.compile.ok or not_compiled:
        why = not_compiled[0].reason if not_compiled else "the kernel did not compile"
        return Verdict(REJECTED, [f"not run: {why}"])
    failed = [r for r in results if not r.passed]
    if failed:
        reasons = []
        visible = [r for r in results if not r.hidden]
        hidden = [r for r in results if r.hidden]
        hidden_failed = [r for r in failed if r.hidden]
        if visible and len(hidden_failed) == len(failed):
            reasons.append(
                f"over-fit to the visible scenarios: all {len(visible)} visible scenarios pass "
                f"but {len(hidden_failed)} of {len(hidden)} hidden ones fail"
            )
        reasons.extend(_group_failures(failed))
        return Verdict(REJECTED, reasons[:MAX_REASONS])
    reasons = []
    if not any(r.hidden for r in results):
        reasons.append(
            f"a verdict needs the hidden scenarios: this evaluation ran {len(results)} visible "
            "scenario(s) and no hidden one"
        )
    untimed = [r for r in results if r.time_ms is None]
    if untimed:
        reasons.append(
            f"{len(untimed)} scenario(s) were not timed (correctness only): the sanity checks "
            "(roofline, 100x bound, hidden work) did not run"
        )
    flagged = [(r, f) for r in results for f in blocking_flags(r)]
    for r, f in flagged[: MAX_REASONS - 2]:
        reasons.append(f"re-verify {r.scenario}: {f}")
    if len(flagged) > MAX_REASONS - 2:
        reasons.append(f"and {len(flagged) - (MAX_REASONS - 2)} more sanity flag(s)")
    vis, hid = report.summary("visible"), report.summary("hidden")
    if (
        vis.vs_baseline and hid.vs_baseline
        and min(vis.passed, hid.passed) >= OVERFIT_MIN_SCENARIOS
        and vis.vs_baseline > OVERFIT_GAP * hid.vs_baseline
    ):
        reasons.append(
            f"over-fit: the geomean speedup over the baseline is {vis.vs_baseline:.2f}x on "
            f"visible scenarios but {hid.vs_baseline:.2f}x on hidden ones"
        )
    if reasons:
        return Verdict(BLOCKED, reasons)
    n_hidden = sum(r.hidden for r in results)
    return Verdict(
        ACCEPTED,
        [f"all {len(results)} scenarios passed ({n_hidden} hidden) with no sanity flag"],
    )


def summarize(results: Sequence[ScenarioResult]) -> GeomeanSummary:
    passed = [r for r in results if r.passed]

    def gm(values: Iterable[float | None]) -> float | None:
        # None: not timed (correctness only, no baseline, a peer that did not run); the worker
        # records a time, a rate or a speedup only when it is positive.
        return geomean(v for v in values if v is not None)

    def counted(values: Iterable[float | None]) -> int:
        return sum(1 for v in values if v is not None)  # what gm() averages

    return GeomeanSummary(
        scenarios=len(results),
        passed=len(passed),
        vs_baseline=gm(r.speedup_vs_baseline for r in passed),
        vs_peers={p: gm(r.speedup_vs_peers.get(p) for r in passed) for p in PEER_NAMES},
        tflops=gm(r.tflops for r in passed),
        timed=counted(r.speedup_vs_baseline for r in passed),
        peers_timed={p: counted(r.speedup_vs_peers.get(p) for r in passed) for p in PEER_NAMES},
    )


def _fmt(v: float | None, spec: str, suffix: str = "") -> str:
    return "-" if v is None else f"{v:{spec}}{suffix}"


def render_table(report: EvaluationReport, width_reason: int = 48) -> str:
    """The report as a fixed-width table followed by the geomean lines."""
    head = (
        f"{'scenario':<44} {'status':<12} {'max err':>9} {'time ms':>9} {'TFLOP/s':>8} "
        f"{'GB/s':>7} {'x base':>7} {'x cuDNN':>7} {'x FA2':>7} {'x FA3':>7}  note"
    )
    lines = [head, "-" * len(head)]
    for r in report.scenarios:
        name = r.scenario + (" (h)" if r.hidden else "")
        note = (r.reason or "; ".join(r.flags)).replace("\n", " ")
        if len(note) > width_reason:
            note = note[: width_reason - 3] + "..."
        lines.append(
            f"{name:<44.44} {r.status:<12} {_fmt(r.max_error, '.2e'):>9} "
            f"{_fmt(r.time_ms, '.4f'):>9} {_fmt(r.tflops, '.1f'):>8} {_fmt(r.gbps, '.0f'):>7} "
            f"{_fmt(r.speedup_vs_baseline, '.2f', 'x'):>7} "
            f"{_fmt(r.speedup_vs_peers.get('cudnn'), '.2f', 'x'):>7} "
            f"{_fmt(r.speedup_vs_peers.get('flash'), '.2f', 'x'):>7} "
            f"{_fmt(r.speedup_vs_peers.get('fa3'), '.2f', 'x'):>7}  {note}"
        )
    lines.append("")
    lines.extend(render_geomeans(report))
    return "\n".join(lines)


def _over(timed: int, scenarios: int, ratio: float | None) -> str:
    """" (over 7 of 10)" when a geomean covers fewer scenarios than its part holds."""
    return f" (over {timed} of {scenarios})" if ratio is not None and timed < scenarios else ""


def render_geomeans(report: EvaluationReport) -> list[str]:
    out = []
    for part in ("visible", "hidden", "all"):
        s = report.summary(part)
        if s.scenarios == 0:
            continue
        peers = "  ".join(f"vs {PEER_LABELS.get(p, p)} {_fmt(v, '.3f', 'x')}"
                          f"{_over(s.peers_timed.get(p, 0), s.scenarios, v)}" for p, v in s.vs_peers.items())
        out.append(
            f"geomean {part:<7} passed {s.passed:>3}/{s.scenarios:<3} "
            f"vs baseline {_fmt(s.vs_baseline, '.3f', 'x')}{_over(s.timed, s.scenarios, s.vs_baseline)}  {peers}  "
            f"TFLOP/s {_fmt(s.tflops, '.1f')}"
        )
    out.append(f"ratios: {RATIO_LEGEND}")
    for note in (report.cached_peer_note(), report.cached_baseline_note()):
        if note:
            out.append(f"note: {note}")
    out.extend(f"note: peer {name} not timed: {why}" for name, why in report.unavailable_peers().items())
    if report.flags:
        out.append("flags: " + "; ".join(report.flags))
    v = report.verdict()
    out.append(f"verdict: {v.status.upper()}")
    out.extend(f"  - {reason}" for reason in v.reasons)
    return out

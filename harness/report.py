"""The evaluation report: per-scenario results and geomeans, as JSON for machines and a table
for people. Every client (CLI, server, agents) reads this one shape."""

from __future__ import annotations

import json
import math
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

PEER_NAMES = ("cudnn", "flash")


@dataclass
class PeerResult:
    """A reference implementation timed by the same code (torch SDPA backends)."""

    status: str  # "ok", "unsupported", "incorrect", "error"
    time_ms: float | None = None
    tflops: float | None = None
    reason: str = ""


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
    peers: dict[str, PeerResult] = field(default_factory=dict)
    speedup_vs_peers: dict[str, float] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    seconds: float = 0.0  # wall time spent on this scenario

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
    """Geomeans over the scenarios of one part of the suite that passed."""

    scenarios: int
    passed: int
    vs_baseline: float | None
    vs_peers: dict[str, float | None]
    tflops: float | None  # geomean TFLOP/s of the candidate

    @property
    def complete(self) -> bool:
        return self.scenarios > 0 and self.passed == self.scenarios


@dataclass
class CompileInfo:
    ok: bool
    cached: bool = False
    seconds: float = 0.0
    log: str = ""
    command: str = ""
    library: str = ""
    source_sha256: str = ""


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

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["geomean"] = {
            part: asdict(self.summary(part)) for part in ("visible", "hidden", "all")
        }
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, allow_nan=False)

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


def summarize(results: Sequence[ScenarioResult]) -> GeomeanSummary:
    passed = [r for r in results if r.passed]

    def gm(values: Iterable[float | None]) -> float | None:
        return geomean(v for v in values if v is not None and v > 0 and math.isfinite(v))

    return GeomeanSummary(
        scenarios=len(results),
        passed=len(passed),
        vs_baseline=gm(r.speedup_vs_baseline for r in passed),
        vs_peers={p: gm(r.speedup_vs_peers.get(p) for r in passed) for p in PEER_NAMES},
        tflops=gm(r.tflops for r in passed),
    )


def _fmt(v: float | None, spec: str, suffix: str = "") -> str:
    return "-" if v is None else f"{v:{spec}}{suffix}"


def render_table(report: EvaluationReport, width_reason: int = 48) -> str:
    """The report as a fixed-width table followed by the geomean lines."""
    head = (
        f"{'scenario':<44} {'status':<12} {'max err':>9} {'time ms':>9} {'TFLOP/s':>8} "
        f"{'GB/s':>7} {'x base':>7} {'x cudnn':>7} {'x flash':>7}  note"
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
            f"{_fmt(r.speedup_vs_peers.get('flash'), '.2f', 'x'):>7}  {note}"
        )
    lines.append("")
    lines.extend(render_geomeans(report))
    return "\n".join(lines)


def render_geomeans(report: EvaluationReport) -> list[str]:
    out = []
    for part in ("visible", "hidden", "all"):
        s = report.summary(part)
        if s.scenarios == 0:
            continue
        peers = "  ".join(f"vs {p} {_fmt(v, '.3f', 'x')}" for p, v in s.vs_peers.items())
        out.append(
            f"geomean {part:<7} passed {s.passed:>3}/{s.scenarios:<3} "
            f"vs baseline {_fmt(s.vs_baseline, '.3f', 'x')}  {peers}  "
            f"TFLOP/s {_fmt(s.tflops, '.1f')}"
        )
    if report.flags:
        out.append("flags: " + "; ".join(report.flags))
    return out

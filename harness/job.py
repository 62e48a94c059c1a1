"""What a worker is sent, free of torch: where a kernel comes from (KernelSpec) and the job
(WorkerJob: problem, kernels, scenarios, settings, where its answer key listens). The CLI, the
executors and the cluster build and ship jobs without importing torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.scenario import Scenario
from harness.settings import EvalSettings


@dataclass(frozen=True)
class KernelSpec:
    """Where a kernel comes from: a compiled shared library, or (CPU tests) a Python callable
    given as `module:function`."""

    label: str
    kind: str  # "library" | "python"
    target: str
    # The library's sha256 as the process that built it saw it: the worker loads it only if its
    # bytes still match (a compile cache is a folder an earlier process might have rewritten).
    sha256: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        return {"label": self.label, "kind": self.kind, "target": self.target, "sha256": self.sha256}

    @classmethod
    def from_dict(cls, d: dict[str, str]) -> KernelSpec:
        return cls(label=d["label"], kind=d["kind"], target=d["target"], sha256=d.get("sha256"))


@dataclass
class WorkerJob:
    problem: str
    candidate: KernelSpec
    baseline: KernelSpec | None
    scenarios: list[Scenario]
    settings: EvalSettings
    # Where the worker reaches the evaluation's answer key (harness/answer_key.py), when the
    # executor started one for this job.
    answer_key: dict[str, str] | None = None
    # Cache entries the executor read and verified (harness/trusted_cache.py), by key; the worker
    # reads no cache file and writes none. rates: roofline rates by GPU name.
    baseline_entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    peer_entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    rates: dict[str, dict[str, float]] | None = None
    # The harness's own libraries the caller built and signed (name -> {"path", "sha256"}): the
    # worker uses them only with that digest (the fresh-input kernels: harness/attention/fresh_fill.py).
    harness_libraries: dict[str, dict[str, str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "problem": self.problem,
            "candidate": self.candidate.to_dict(),
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "scenarios": [s.to_dict() for s in self.scenarios],
            "settings": self.settings.to_dict(),
            "answer_key": self.answer_key,
            "baseline_entries": self.baseline_entries,
            "peer_entries": self.peer_entries,
            "rates": self.rates,
            "harness_libraries": self.harness_libraries,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WorkerJob:
        return cls(
            problem=d["problem"],
            candidate=KernelSpec.from_dict(d["candidate"]),
            baseline=KernelSpec.from_dict(d["baseline"]) if d.get("baseline") else None,
            scenarios=[Scenario.from_dict(s) for s in d["scenarios"]],
            settings=EvalSettings.from_dict(d["settings"]),
            answer_key=d.get("answer_key"),
            baseline_entries=d.get("baseline_entries") or {},
            peer_entries=d.get("peer_entries") or {},
            rates=d.get("rates"),
            harness_libraries=d.get("harness_libraries") or {},
        )

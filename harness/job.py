"""What a worker is sent, free of torch: where a kernel comes from (KernelSpec) and the job
(WorkerJob: problem, kernels, scenarios, settings, where its answer key listens). The CLI, the
executors and the cluster build and ship jobs without importing torch."""

from __future__ import annotations

from dataclasses import dataclass
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

    def to_dict(self) -> dict[str, str]:
        return {"label": self.label, "kind": self.kind, "target": self.target}

    @classmethod
    def from_dict(cls, d: dict[str, str]) -> KernelSpec:
        return cls(label=d["label"], kind=d["kind"], target=d["target"])


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "problem": self.problem,
            "candidate": self.candidate.to_dict(),
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "scenarios": [s.to_dict() for s in self.scenarios],
            "settings": self.settings.to_dict(),
            "answer_key": self.answer_key,
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
        )

"""Built-in scripts of the scripted agent. Each one tells a small story the steering loop
must handle: candidates of known speed, a plateau, a question, a gain after it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Script:
    name: str
    candidate_kind: str
    baseline: str  # the session's baseline for this script
    description: str
    steps: list[dict[str, Any]]
    thresholds: dict[str, Any] = field(default_factory=dict)  # session defaults for this script


CPU = "tests.cpu_kernels"

# On the CPU: the baseline sleeps 10 ms per call; candidates sleep 5 ms (2x) or 2 ms (5x).
CPU_DEMO = Script(
    name="cpu-demo",
    candidate_kind="python-cpu",
    baseline=f"{CPU}:correct_10ms",
    description="CPU stand-in kernels: a leader, a plateau of variants, then a gain after a question",
    # Sleep-based CPU timings are noisy: only a 25% gain counts as a new leader here.
    thresholds={"min_leader_gain": 0.25, "plateau_window": 3},
    steps=[
        {"say": "I start from a port of the baseline.",
         "submit": {"target": f"{CPU}:correct_10ms", "title": "port of the baseline"}},
        {"say": "Halving the per-call overhead should double the speed.",
         "submit": {"target": f"{CPU}:correct_5ms", "title": "halve the overhead", "parent": 1}},
        {"say": "Writing only the first rows saves work.",
         "submit": {"target": f"{CPU}:missing_tail", "title": "skip the tail rows", "parent": 2}},
        {"say": "Retiling the loops may help.",
         "submit": {"target": f"{CPU}:correct_5ms_retiled", "title": "retile", "parent": 2}},
        {"say": "Another tile size.",
         "submit": {"target": f"{CPU}:correct_5ms_retiled", "title": "retile again", "parent": 4}},
        {"say": "Moving to another layer: overlap the waits.",
         "submit": {"target": f"{CPU}:correct_2ms", "title": "overlap the waits", "parent": 2}},
    ],
)

BASELINE_CU = "kernels/attention/baseline.cu"

# On a GPU: the baseline itself, then two variants of it that change the rows per warp.
GPU_DEMO = Script(
    name="gpu-demo",
    candidate_kind="cuda",
    baseline=BASELINE_CU,
    description="real CUDA kernels: the baseline and variants with other rows per warp",
    steps=[
        {"say": "I start from the baseline as it is.",
         "submit": {"path": BASELINE_CU, "title": "baseline, unchanged"}},
        {"say": "Fewer query rows per warp at head_dim 128 gives more CTAs.",
         "submit": {"path": BASELINE_CU, "title": "8 rows per warp at d128", "parent": 1,
                    "replace": [["case 128: return launch<128, 16>(a, stream);",
                                 "case 128: return launch<128, 8>(a, stream);"]]}},
        {"say": "Same at head_dim 64.",
         "submit": {"path": BASELINE_CU, "title": "8 rows per warp at d64 and d128", "parent": 2,
                    "replace": [["case 128: return launch<128, 16>(a, stream);",
                                 "case 128: return launch<128, 8>(a, stream);"],
                                ["case 64: return launch<64, 16>(a, stream);",
                                 "case 64: return launch<64, 8>(a, stream);"]]}},
        {"say": "This is the limit of what CUDA cores can do; I am done.",
         "declare_done": "the kernel is as fast as CUDA cores allow"},
    ],
)

BUILTIN_SCRIPTS: dict[str, Script] = {s.name: s for s in (CPU_DEMO, GPU_DEMO)}

"""Settings of one evaluation: trials, timing, peers, limits. Plain data, sent to workers."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from harness.timing import TimingSettings


@dataclass(frozen=True)
class EvalSettings:
    device: str = "cuda"  # "cuda" or "cpu" (the harness's own tests)
    trials: int = 2  # correctness trials, each with fresh inputs at fresh addresses
    seed: int = 0
    check_determinism: bool = True
    measure: bool = True  # False: correctness only (no timing, no peers timed)
    # Integrity checks of the timed phase (docs/verifier.md): input sets rewritten with fresh
    # random contents before every timed call and sampled rows of every timed output checked,
    # a workspace probe, a re-run on the validated inputs, the persisting-L2 reset and the
    # hidden-work checks. Off only to measure what they cost.
    integrity: bool = True
    # Profiler cross-check of kernel durations: "auto" (every flagged scenario, and once per
    # process a win over 30x the baseline or 2x the fastest peer), "always", "never".
    # CUPTI's start costs about a second per process.
    profile: str = "auto"
    # torch SDPA's cuDNN and flash (FA2) backends, and FlashAttention-3 where fa3-fwd loads.
    peers: tuple[str, ...] = ("cudnn", "flash", "fa3")
    timing: TimingSettings = field(default_factory=TimingSettings)
    scenario_timeout_s: float = 120.0
    setup_timeout_s: float = 300.0
    max_restarts: int = 3  # fresh processes after crashes before the rest is skipped
    max_workspace_bytes: int = 8 << 30
    # Roofline rates (TFLOP/s, GB/s); measured on the GPU once and cached when left empty.
    matrix_tflops: float | None = None
    copy_gbps: float | None = None
    max_speedup_vs_baseline: float = 100.0
    # Reuse peer results measured by earlier evaluations (harness/peer_cache.py): a folder, and
    # how old an entry may be. None: every peer is checked and timed side by side.
    peer_cache_dir: str | None = None
    peer_cache_max_age_s: float = 86400.0
    # The naive baseline's time, cached per GPU, software, scenario, baseline library and timing
    # settings (harness/peer_cache.py: BaselineCache); the report marks a cached baseline time.
    # On the GPU it is on by default, in `baseline_cache_dir` or the compile cache's folder
    # (`<cache>/baseline-times`); on the CPU backend only when a folder is named.
    baseline_cache: bool = True
    baseline_cache_dir: str | None = None
    baseline_cache_max_age_s: float = 86400.0  # a day, as the server's peer cache
    # Verifier v3 (issue 47): the worker's sandbox, the default streams fenced into the candidate's
    # timed calls and checked, timed outputs kept the moment their call ends and checked for
    # tampering. Off only to measure what they cost (tests/gpu/cheat_table.py); the settings come
    # from the caller, never from a candidate.
    hardening: bool = True

    def trial_seed(self, trial: int) -> int:
        """The seed of a correctness trial's inputs (the worker's, and the answer key's)."""
        return self.seed * 1_000_003 + trial

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["peers"] = list(self.peers)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalSettings:
        d = dict(d)
        d["timing"] = TimingSettings(**d.get("timing", {}))
        d["peers"] = tuple(d.get("peers", ()))
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

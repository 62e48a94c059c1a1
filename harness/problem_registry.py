"""The problems the harness knows, by name: the worker, the answer key and the CLI all look a
problem up here (attention forward, `harness/attention/forward.py`, is the first one)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.compile import KERNELS_DIR

if TYPE_CHECKING:  # this module stays free of torch: the CLI names a problem's baseline with it
    from harness.problem_interface import Problem

# Each problem's naive baseline, as its Problem.baseline_source names it (tests/app/faces/test_cli_startup.py
# checks that they agree: the problem's own module imports torch, this one may not).
BASELINES = {"attention-forward": KERNELS_DIR / "attention" / "baseline.cu"}


def baseline_source(name: str) -> Path:
    """The problem's naive baseline, without loading the problem (no torch)."""
    if name not in BASELINES:
        raise ValueError(f"unknown problem {name!r}")
    return BASELINES[name]


def get_problem(name: str) -> Problem:
    if name == "attention-forward":
        from harness.attention.forward import AttentionForward

        return AttentionForward()
    raise ValueError(f"unknown problem {name!r}")

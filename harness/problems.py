"""The problems the harness knows, by name: the worker, the answer key and the CLI all look a
problem up here (attention forward, `harness/attention/`, is the first one)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.compile import KERNELS_DIR

if TYPE_CHECKING:  # this module stays free of torch: the CLI names a problem's baseline with it
    from harness.problem import Problem

# Each problem's naive baseline (Problem.baseline_source; tests/test_cli.py checks they agree).
BASELINES = {"attention-forward": KERNELS_DIR / "attention" / "baseline.cu"}


def baseline_source(name: str) -> Path:
    """The problem's naive baseline, without loading the problem (no torch)."""
    if name not in BASELINES:
        raise ValueError(f"unknown problem {name!r}")
    return BASELINES[name]


def get_problem(name: str) -> Problem:
    if name == "attention-forward":
        from harness.attention.problem import AttentionForward

        return AttentionForward()
    raise ValueError(f"unknown problem {name!r}")

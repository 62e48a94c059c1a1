"""The problems the harness knows, by name: the worker, the answer key and the CLI all look a
problem up here (attention forward, `harness/attention/`, is the first one)."""

from __future__ import annotations

from harness.problem import Problem


def get_problem(name: str) -> Problem:
    if name == "attention-forward":
        from harness.attention.problem import AttentionForward

        return AttentionForward()
    raise ValueError(f"unknown problem {name!r}")

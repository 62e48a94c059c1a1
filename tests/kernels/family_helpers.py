"""Helpers shared by the family tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.compile import compile_kernel
from kernels.attention.family import (
    KNOB_LAYER,
    KNOB_SPACE,
    KnobError,
    Knobs,
    parse_knobs,
    render,
)
from kernels.attention.family.cli import add_family_commands
from tests.conftest import ROOT


def family_parser() -> Any:
    import argparse

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    add_family_commands(sub)
    return parser


def assert_spill_free(src: Path, keep: Callable[[str], bool], count: int) -> None:
    """Compiles `src` for sm_90a and checks that the `count` entry functions whose mangled names
    `keep` selects compiled without a spill (ptxas's report of each entry), and that ptxas kept
    every wgmma asynchronous (its C75xx warnings name the function it serialized)."""
    built = compile_kernel(src, arch="sm_90a")
    assert built.info.ok, built.info.log[-2000:]
    assert "instructions are serialized" not in built.info.log, built.info.log[-3000:]
    entries = built.info.log.split("Compiling entry function '")[1:]
    chosen = [b for b in entries if keep(b.split("'")[0])]
    assert len(chosen) == count, built.info.log[-3000:]
    for b in chosen:
        assert " 0 bytes spill stores, 0 bytes spill loads" in b, b[:600]


def gallery_f_knobs() -> Knobs:
    gallery = ROOT / "kernels" / "attention" / "gallery"
    f = parse_knobs(str(gallery / "wgmma-tma-f.knobs.json"))
    assert render(f) == (gallery / "wgmma-tma-f.cu").read_text()  # each knob's default keeps f's bytes
    return f


def hopper_knob_on_leader_j(name: str, values: tuple[str, ...], refused: str, rule: str) -> Knobs:
    """A memory-layer Hopper knob's contract: its values, refused without mma=wgmma and where
    `refused` breaks `rule`; the leader wgmma-tma-j's setting (which does not record it) returned."""
    assert KNOB_LAYER[name] == "memory" and KNOB_SPACE["memory"][name] == values
    with pytest.raises(KnobError, match=name):
        parse_knobs(f"{name}={values[1]}")  # a Hopper knob
    with pytest.raises(KnobError, match=rule):
        parse_knobs(refused)
    j = parse_knobs(str(ROOT / "kernels" / "attention" / "gallery" / "wgmma-tma-j.knobs.json"))
    assert name not in j.recorded()
    return j


def changed_lines(a: str, b: str) -> set[str]:
    """The lines of two renderings that differ, the knob record's comment lines left out: for a
    knob that is a constant in the CUDA source, its `constexpr` line and nothing else."""
    import difflib

    return {line[1:] for line in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---", "+//   ", "-//   "))}


def sched_source(src: str) -> str:
    """A rendered file's Sched (its forms and the `using` that picks one) with the constants that
    pick it, for the host builds (g++) of the planner's code in the tests."""
    knobs = src.split("// the Hopper scheduling knobs that shape Sched", 1)[1].split("\n", 1)[1].split("\n\n", 1)[0]
    start = src.index("// Launch-time schedule")
    end = src.index("\n", src.index("using Sched = ", start)) + 1
    return knobs + "\n" + src[start:end]

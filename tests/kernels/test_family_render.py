"""How render assembles a kernel: `#if SOCRATIC_<NAME>` blocks in the templates resolved for the
setting (resolve_blocks), the fragments inlined, the placeholders filled once each."""

from __future__ import annotations

import re

import pytest

from kernels.attention.family import parse_knobs, render
from kernels.attention.family.render import FRAGMENTS, TEMPLATE, resolve_blocks

SYMBOLS = ("SOCRATIC_MMA_WGMMA", "SOCRATIC_WG_LOAD_TMA")
BLOCK = "a\n#if X  // why\nyes\n#else\nno\n#endif  // X\nb\n"


def test_a_block_keeps_the_branch_its_symbol_takes_and_drops_its_directives() -> None:
    assert resolve_blocks(BLOCK, {"X": True}) == "a\nyes\nb\n"
    assert resolve_blocks(BLOCK, {"X": False}) == "a\nno\nb\n"
    assert resolve_blocks("#if X\nyes\n#endif\nb\n", {"X": False}) == "b\n"
    assert resolve_blocks("#if X\nyes\n#endif\n#if X\nagain\n#endif\n", {"X": True}) == "yes\nagain\n"


def test_directives_on_other_symbols_stay_as_written() -> None:
    assert resolve_blocks(BLOCK, {"Y": True}) == BLOCK
    other = "#ifdef S\n#if Y > 1\np\n#elif Z\nq\n#else\nr\n#endif\n#endif\n"
    assert resolve_blocks(other, {"X": True}) == other
    # kept inside a resolved branch, dropped with the other one
    text = "#if X\n#ifdef S\ns\n#endif\n#else\n#if Y\ny\n#endif\n#endif\n"
    assert resolve_blocks(text, {"X": True}) == "#ifdef S\ns\n#endif\n"
    assert resolve_blocks(text, {"X": False}) == "#if Y\ny\n#endif\n"
    # a resolved block inside a block that stays
    assert resolve_blocks("#ifdef S\n#if X\nx\n#endif\n#endif\n", {"X": True}) == "#ifdef S\nx\n#endif\n"


@pytest.mark.parametrize(("text", "error"), [
    ("#if X\nx\n", r"t:1: #if without its #endif"),
    ("x\n#endif\n", r"t:2: #endif without its #if"),
    ("#else\n", r"t:1: #else without its #if"),
    ("#if X\n#ifdef S\nx\n#endif\n", r"t:1: #if without its #endif"),
    ("#if X\na\n#else\nb\n#else\nc\n#endif\n", r"t:5: a second #else in the block on X"),
    ("#if X\na\n#elif Y\nb\n#endif\n", r"t:3: #elif in the block on X"),
    ("#if X\n#if X\nx\n#endif\n#endif\n", r"t:2: #if X inside another resolved block"),
    ("#ifdef X\nx\n#endif\n", r"t:1: '#ifdef X': X is resolved only as `#if X`"),
    ("#if !X\nx\n#endif\n", r"t:1: '#if !X': X is resolved only as `#if X`"),
    ("#if Y\n#elif X\n#endif\n", r"t:2: '#elif X': X is resolved only as `#if X`"),
    ("#if X && Y\nx\n#endif\n", r"X is resolved only as `#if X`"),
])
def test_a_block_render_cannot_resolve_is_an_error(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        resolve_blocks(text, {"X": True}, "t")


def test_every_template_resolves_for_every_value_and_names_its_symbols_only_as_blocks() -> None:
    sources = [TEMPLATE, TEMPLATE.with_name("template_sm90.cu.in"), *sorted(FRAGMENTS.glob("*.cuh"))]
    named = set()
    for path in sources:
        text = path.read_text()
        named |= {s for s in SYMBOLS if s in text}
        for wgmma in (False, True):
            for tma in (False, True):
                resolve_blocks(text, {"SOCRATIC_MMA_WGMMA": wgmma, "SOCRATIC_WG_LOAD_TMA": tma}, path.name)
    assert named == set(SYMBOLS)


@pytest.mark.parametrize("spec", ["", "mma=wgmma", "mma=wgmma,wg_load=tma"])
def test_a_rendered_kernel_has_no_resolved_directive_placeholder_or_template_include(spec: str) -> None:
    src = render(parse_knobs(spec))
    wgmma, tma = "wgmma" in spec, "tma" in spec
    assert not [s for s in SYMBOLS if s in src]
    assert "//@@" not in src
    assert re.findall(r'^#include "(.*)"$', src, flags=re.M) == ["contract.h"]
    assert ("attn_fwd_sm90" in src) == wgmma
    assert ("fam::launch_any<" in src, "fam::launch<" in src) == (wgmma, not wgmma)
    assert ("fam::workspace_any<" in src, "fam::workspace<" in src) == (wgmma, not wgmma)
    assert ("#include <cuda.h>" in src, "cuTensorMapEncodeTiled(" in src, "Sm90Maps maps" in src) == (tma,) * 3

"""A parameterized FlashAttention-style kernel family (ABI v1; mma.sync, and wgmma on Hopper with
mma=wgmma) with knobs grouped by layer: tiling, memory pipeline, math, scheduling, masking.
`render(knobs)` returns one .cu file."""

from kernels.attention.family.render import render, render_to
from kernels.attention.family.space import (
    HEAD_DIMS,
    KNOB_LAYER,
    KNOB_SPACE,
    LAYERS,
    KnobError,
    Knobs,
    default_knobs,
    iter_valid,
    knobs_from_mapping,
    neighbours,
    parse_knobs,
)

__all__ = [
    "HEAD_DIMS",
    "KNOB_LAYER",
    "KNOB_SPACE",
    "LAYERS",
    "KnobError",
    "Knobs",
    "default_knobs",
    "iter_valid",
    "knobs_from_mapping",
    "neighbours",
    "parse_knobs",
    "render",
    "render_to",
]

"""Render one self-contained ABI v1 kernel file (.cu) from a knob setting."""

from __future__ import annotations

import json
from pathlib import Path

from kernels.attention.family.space import HEAD_DIMS, Knobs

TEMPLATE = Path(__file__).with_name("template.cu.in")

_GRID_ORDER = {"m_fastest": 0, "head_fastest": 1, "heavy_first": 2}
_SPLIT = {"off": 0, "1wave": 1, "2wave": 2}
_PACK = {"off": 0, "decode": 1, "on": 2}


def _b(v: bool) -> str:
    return "true" if v else "false"


def knob_constants(k: Knobs) -> str:
    lines = [
        f"constexpr bool kBulk = {_b(k.loader == 'bulk')};  // loader={k.loader}",
        f"constexpr int kStages = {k.stages};",
        f"constexpr bool kSwizzle = {_b(k.smem_layout == 'swizzle')};  // smem_layout={k.smem_layout}",
        f"constexpr bool kQInRegs = {_b(k.q_fragments == 'registers')};  // q_fragments={k.q_fragments}",
        f"constexpr bool kExp2 = {_b(k.softmax_exp == 'exp2_folded')};  // softmax_exp={k.softmax_exp}",
        f"constexpr bool kLazyRescale = {_b(k.rescale == 'lazy')};  // rescale={k.rescale}",
        f"constexpr int kGridOrder = {_GRID_ORDER[k.grid_order]};  // grid_order={k.grid_order}",
        f"constexpr bool kPersistent = {_b(k.persistent)};",
        f"constexpr int kSplitWaves = {_SPLIT[k.split_kv]};  // split_kv={k.split_kv}",
        f"constexpr int kPackGqa = {_PACK[k.pack_gqa]};  // pack_gqa={k.pack_gqa}",
        f"constexpr bool kCausalSkip = {_b(k.causal_skip)};",
        f"constexpr bool kMaskSplit = {_b(k.mask_split)};",
        f"constexpr bool kDecodeTile = {_b(k.decode_tile != 'off')};  // decode_tile={k.decode_tile}",
        "",
        "template <int D, bool Dec>",
        "struct TileOf;",
    ]
    for d in HEAD_DIMS:
        for dec in (False, True):
            bm, bn, w = k.tile(d, dec)
            lines.append(
                f"template <>\nstruct TileOf<{d}, {_b(dec)}> {{\n"
                f"  static constexpr int BM = {bm}, BN = {bn}, W = {w};\n}};"
            )
    return "\n".join(lines)


def render(knobs: Knobs) -> str:
    """The kernel source for a valid setting (raises KnobError for an invalid one)."""
    knobs.validate()
    text = TEMPLATE.read_text()
    comment = "\n".join(
        "//   " + line for line in json.dumps(knobs.to_dict(), indent=1).splitlines()
    )
    return (
        text.replace("//@@KNOB_COMMENT@@", comment)
        .replace("//@@KNOB_CONSTANTS@@", knob_constants(knobs))
    )


def render_to(knobs: Knobs, path: Path | str) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(knobs))
    return out

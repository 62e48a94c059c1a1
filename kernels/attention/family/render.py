"""Render one self-contained ABI v1 kernel file (.cu) from a knob setting. Render chooses values: the
knobs become constants in the file's header, which the CUDA templates and their fragments
(`cuda/*.cuh`, inlined here) read with `if constexpr`; a knob that changes a declaration (a kernel's
parameters, an include) has both forms in the template under `#if SOCRATIC_<NAME>`, which render
resolves (`resolve_blocks`). docs/family.md, "How rendering works"."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernels.attention.family.space import HEAD_DIMS, Knobs, knobs_from_mapping

TEMPLATE = Path(__file__).with_name("template.cu.in")  # includes template_sm90.cu.in beside it
FRAGMENTS = Path(__file__).with_name("cuda")  # one header per concern, inlined by render
# Registers per thread after setmaxnreg: producer warpgroup, consumer warpgroups (2 consumers:
# 128 * (40 + 2 * 232) = 64512 of the 65536 per SM; 24 spills the producer, 224 the d256 consumer).
REGS_PRODUCER = 40
REGS_CONSUMER = 232
# wg_wide_d64 (wg_load=tma): head_dim 64 runs three consumer warpgroups (192 query rows per CTA, 512
# threads, 128 registers each at launch); setmaxnreg then gives the one-thread copy-engine producer 24
# and the consumers 160 (128 * (24 + 3 * 160) = 64512 of the 65536). The cp.async producer warpgroup
# would need 40 (and the consumers spill at the 152 left), so at d64 a call no tensor map describes
# runs the mma.sync kernel instead (WgC<64>::kMapsOnly).
REGS_WIDE_PRODUCER = 24
REGS_WIDE_CONSUMER = 160

_GRID_ORDER = {"m_fastest": 0, "head_fastest": 1, "heavy_first": 2}
_SPLIT = {"off": 0, "1wave": 1, "2wave": 2}
_PACK = {"off": 0, "decode": 1, "on": 2}
_COMBINE = {"serial": 0, "parallel": 1, "wide": 2, "burst": 3}
_V_RELEASE = {"after_softmax": 0, "mid_softmax": 1, "before_softmax": 2}


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
        f"constexpr int kDecodeKvWarps = {k.decode_kv_warps};  // decode_kv_warps",
        f"constexpr bool kDecodeTile = {_b(k.decode_tile != 'off')};  // decode_tile={k.decode_tile}",
        f"constexpr int kSplitCombine = {_COMBINE[k.split_combine]};  // split_combine={k.split_combine}",
        f"constexpr bool kCombinePdl = {_b(k.wg_combine_pdl)};  // wg_combine_pdl",
        "// the Hopper scheduling knobs that shape Sched (0 / false with mma=mma_sync)",
        f"constexpr int kWgL2Sections = {k.wg_l2_sections};  // wg_l2_sections (MB of L2 a section; 0: none)",
        f"constexpr bool kWgDynamic = {_b(k.wg_scheduler == 'dynamic')};  // wg_scheduler={k.wg_scheduler}",
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


def _acc_operands(n: int) -> tuple[str, str]:
    """`{%0, ..., %k}` and the matching "+f" constraints of an m64nNk16 fp32 accumulator."""
    regs = n // 2
    names = "{" + ", ".join(f"%{i}" for i in range(regs)) + "}"
    cons = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    return names, cons


def _wgmma_wrapper(name: str, n: int, params: str, a_operand: str, inputs: str, immediates: str) -> str:
    """One explicit specialization: `a_operand` and `inputs` number their operands from r = n / 2
    (after the accumulators); the predicate register (scale-d) is the last input."""
    names, cons = _acc_operands(n)
    r = n // 2
    pred = r + inputs.count('"') // 2 - 1
    a_ops = a_operand.format(r=r, r1=r + 1, r2=r + 2, r3=r + 3, r4=r + 4)
    return (
        f"template <>\n__device__ __forceinline__ void {name}<{n}>(float (&d)[{r}], {params}) {{\n"
        f'  asm volatile(\n      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{pred}, 0;\\n"\n'
        f'      "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {names}, {a_ops}, '
        f'p, {immediates};\\n}}\\n"\n'
        f"      : {cons}\n      : {inputs});\n}}"
    )


def wgmma_wrappers(ss: set[int], rs: set[int]) -> str:
    """wgmma_ss<N>: D (64 x N fp32) += A (smem, K-major) B (smem, K-major);
    wgmma_rs<N>: D += A (registers, bf16 m64k16 fragments) B (smem, MN-major: imm-trans-b 1)."""
    out = [
        "template <int N>",
        "__device__ void wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int accumulate);",
        "template <int N>",
        "__device__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db);",
    ]
    out += [_wgmma_wrapper("wgmma_ss", n, "uint64_t da, uint64_t db, int accumulate", "%{r}, %{r1}",
                           '"l"(da), "l"(db), "r"(accumulate)', "1, 1, 0, 0") for n in sorted(ss)]
    out += [_wgmma_wrapper("wgmma_rs", n, "const uint32_t (&a)[4], uint64_t db",
                           "{{%{r}, %{r1}, %{r2}, %{r3}}}, %{r4}",
                           '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1)', "1, 1, 1")
            for n in sorted(rs)]
    return "\n".join(out)


def sm90_constants(k: Knobs) -> str:
    lines = [
        f"constexpr int kWgConsumers = {k.wg_consumers};  // wg_consumers",
        f"constexpr int kWgStages = {k.wg_stages};  // wg_stages",
        f"constexpr bool kWgOverlap = {_b(k.wg_overlap)};  // wg_overlap",
        f"constexpr bool kWgPingpong = {_b(k.wg_pingpong)};  // wg_pingpong",
        f"constexpr bool kWgSplitBalanced = {_b(k.wg_split_rule == 'balanced')};  // wg_split_rule={k.wg_split_rule}",
        f"constexpr int kWgSplitCost = {k.wg_split_cost};  // wg_split_cost",
        f"constexpr bool kWgDecodeWgmma = {_b(k.wg_decode == 'wgmma')};  // wg_decode={k.wg_decode}",
        f"constexpr int kWgL2Promotion = {k.wg_l2_promotion};  // wg_l2_promotion",
        f"constexpr bool kWgDescOffset = {_b(k.wg_desc != 'fields')};  // wg_desc={k.wg_desc}",
        f"constexpr bool kWgDescHoist = {_b(k.wg_desc == 'hoist')};",
        f"constexpr bool kWgL2HintKv = {_b(k.wg_l2_hint != 'none')};  // wg_l2_hint={k.wg_l2_hint}",
        f"constexpr bool kWgL2HintQ = {_b(k.wg_l2_hint == 'kv_last_q_first')};",
        f"constexpr bool kWgIdleSkip = {_b(k.wg_idle_rows == 'skip')};  // wg_idle_rows={k.wg_idle_rows}",
        f"constexpr bool kWgKvFenceCpAsync = {_b(k.wg_kv_fence == 'cp_async')};  // wg_kv_fence={k.wg_kv_fence}",
        f"constexpr bool kWgKvWaitFirst = {_b(k.wg_kv_wait == 'first')};  // wg_kv_wait={k.wg_kv_wait}",
        f"constexpr bool kWgKBeforeTurn = {_b(k.wg_k_wait == 'before_turn')};  // wg_k_wait={k.wg_k_wait}",
        f"constexpr bool kWgEpilogueStaged = {_b(k.wg_epilogue != 'direct')};  // wg_epilogue={k.wg_epilogue}",
        f"constexpr bool kWgEpilogueTma = {_b(k.wg_epilogue == 'tma')};",
        f"constexpr bool kWgEpilogueOneQ = {_b(k.wg_epilogue_one_q)};  // wg_epilogue_one_q",
        f"constexpr int kWgVRelease = {_V_RELEASE[k.wg_v_release]};  // wg_v_release={k.wg_v_release}",
        f"constexpr bool kWgSoloDecode = {_b(k.wg_solo_decode)};  // wg_solo_decode",
        f"constexpr bool kWgKAhead = {_b(k.wg_kv_order == 'k_ahead')};  // wg_kv_order={k.wg_kv_order}",
        f"constexpr bool kWgFullOrderM = {_b(k.wg_full_order == 'm_fastest')};  // wg_full_order={k.wg_full_order}",
        f"constexpr bool kWgTilePublish = {_b(k.wg_tile_decode == 'producer')};  // wg_tile_decode={k.wg_tile_decode}",
        f"constexpr bool kWgTwoP = {_b(k.wg_p_buffers == 2)};  // wg_p_buffers={k.wg_p_buffers}",
        f"constexpr int kWgCluster = {k.wg_cluster};  // wg_cluster",
        f"constexpr int kRegsProducer = {REGS_PRODUCER};",
        f"constexpr int kRegsConsumer = {REGS_CONSUMER};",
        f"constexpr bool kWgWideD64 = {_b(k.wg_wide_d64)};  // wg_wide_d64",
        "// consumer warpgroups (HC), setmaxnreg targets (RP, RC), and whether the head_dim runs with tensor",
        "// maps only (no cp.async instantiation: the mma.sync kernel takes the rest)",
        "template <int D>",
        "struct WgC {",
        "  static constexpr int HC = kWgConsumers, RP = kRegsProducer, RC = kRegsConsumer;",
        "  static constexpr bool kMapsOnly = false;",
        "};",
        *([f"template <>\nstruct WgC<64> {{  // wg_wide_d64: three consumers at d64\n"
           f"  static constexpr int HC = 3, RP = {REGS_WIDE_PRODUCER}, RC = {REGS_WIDE_CONSUMER};\n"
           "  static constexpr bool kMapsOnly = true;\n};"] if k.wg_wide_d64 else []),
        "template <int D>",
        "struct WgBlockN;",
    ]
    for d in HEAD_DIMS:
        lines.append(f"template <>\nstruct WgBlockN<{d}> {{\n  static constexpr int value = {k.wg_block_n(d)};\n}};")
    lines += ["// wg_stages_d64 / wg_stages_d128: K/V stages per head_dim (kWgStages where unset)",
              "template <int D>\nstruct WgStages {\n  static constexpr int value = kWgStages;\n};"]
    lines += [f"template <>\nstruct WgStages<{d}> {{\n  static constexpr int value = {k.wg_stages_at(d)};\n}};"
              for d in HEAD_DIMS if k.wg_stages_at(d) != k.wg_stages]
    lines += [f"constexpr bool kWgQRing = {_b(k.wg_q_stages == 2)};  // wg_q_stages={k.wg_q_stages}",
              "// Q buffers per head_dim (two where shared memory holds them)",
              "template <int D>\nstruct WgQRing;"]
    lines += [f"template <>\nstruct WgQRing<{d}> {{\n  static constexpr int QS = {k.wg_q_buffers(d)};\n}};"
              for d in HEAD_DIMS]
    lines.append(f"constexpr long long kPLongBlocks = {k.wg_p_long_blocks};  // wg_p_long_blocks")
    lines += [f"// wg_v_ring={k.wg_v_ring}: V stages per head_dim (K's, or one more where shared memory holds it)",
              "template <int D>\nstruct WgVStages {\n  static constexpr int value = WgStages<D>::value;\n};"]
    lines += [f"template <>\nstruct WgVStages<{d}> {{\n  static constexpr int value = {k.wg_v_stages_at(d)};\n}};"
              for d in HEAD_DIMS if k.wg_v_stages_at(d) != k.wg_stages_at(d)]
    return "\n".join(lines)


_DIRECTIVE = re.compile(r"#\s*(ifdef|ifndef|if|elif|else|endif)\b(.*)")


@dataclass
class _Open:
    """One open conditional of resolve_blocks: its line, and for a block on a resolved symbol the
    symbol, whether the branch being read is kept and whether `#else` was passed."""

    line: int
    symbol: str | None = None
    kept: bool = True
    in_else: bool = False


def resolve_blocks(text: str, symbols: Mapping[str, bool], where: str = "template") -> str:
    """`text` with each `#if NAME` [`#else`] `#endif` block on a symbol of `symbols` replaced by the
    branch its value takes, the directive lines dropped; every other directive stays as written.
    Raises ValueError where a symbol of `symbols` appears in another form (`#ifdef`, `#elif`, an
    expression), a resolved block nests in another, a block has two `#else`, or the conditionals
    of `text` do not balance."""
    out: list[str] = []
    stack: list[_Open] = []
    for n, line in enumerate(text.splitlines(keepends=True), 1):
        keep = all(o.kept for o in stack)
        m = _DIRECTIVE.match(line.lstrip())
        if not m:
            if keep:
                out.append(line)
            continue
        kind, expr = m.group(1), re.split(r"//|/\*", m.group(2))[0].strip()
        if kind == "if" and expr in symbols:
            if any(o.symbol for o in stack):
                raise ValueError(f"{where}:{n}: #if {expr} inside another resolved block")
            stack.append(_Open(n, expr, symbols[expr]))
            continue
        named = sorted(set(re.findall(r"\w+", expr)) & symbols.keys())
        if named:
            raise ValueError(f"{where}:{n}: {line.strip()!r}: {named[0]} is resolved only as `#if {named[0]}`")
        if kind in ("if", "ifdef", "ifndef"):
            stack.append(_Open(n))
        elif not stack:
            raise ValueError(f"{where}:{n}: #{kind} without its #if")
        elif (top := stack[-1]).symbol is None:
            if kind == "endif":
                stack.pop()
        elif kind == "elif":
            raise ValueError(f"{where}:{n}: #elif in the block on {top.symbol} (only #if, #else, #endif)")
        elif kind == "else":
            if top.in_else:
                raise ValueError(f"{where}:{n}: a second #else in the block on {top.symbol}")
            top.kept, top.in_else = not symbols[top.symbol], True
            continue
        else:
            stack.pop()
            continue
        if keep:
            out.append(line)
    if stack:
        raise ValueError(f"{where}:{stack[-1].line}: #if without its #endif")
    return "".join(out)


def inline_fragments(text: str, symbols: Mapping[str, bool], where: str = TEMPLATE.name) -> str:
    """`text` with its blocks on `symbols` resolved and each remaining `#include "X.cuh"` line
    replaced by the fragment cuda/X.cuh (`"X.cu.in"`: the template X.cu.in), expanded the same way:
    a rendered kernel is one file (toolkit headers and contract.h only)."""
    def fragment(m: re.Match[str]) -> str:
        name = m.group(1)
        path = FRAGMENTS / name if name.endswith(".cuh") else TEMPLATE.with_name(name)
        return inline_fragments(path.read_text(), symbols, name)

    return re.sub(r'^#include "([\w.]+\.(?:cuh|cu\.in))"\n', fragment, resolve_blocks(text, symbols, where),
                  flags=re.M)


def render(knobs: Knobs) -> str:
    """The kernel source for a valid setting (raises KnobError for an invalid one)."""
    knobs.validate()
    wgmma = knobs.mma == "wgmma"
    symbols = {"SOCRATIC_MMA_WGMMA": wgmma, "SOCRATIC_WG_LOAD_TMA": wgmma and knobs.wg_load == "tma"}
    values = {
        "KNOB_COMMENT": "\n".join("//   " + line for line in json.dumps(knobs.recorded(), indent=1).splitlines()),
        "KNOB_CONSTANTS": knob_constants(knobs),
    }
    if wgmma:
        values["SM90_CONSTANTS"] = sm90_constants(knobs)
        values["SM90_WGMMA"] = wgmma_wrappers({knobs.wg_block_n(d) for d in HEAD_DIMS}, set(HEAD_DIMS))
    text = inline_fragments(TEMPLATE.read_text(), symbols)
    for name, value in values.items():
        marker = f"//@@{name}@@"
        if text.count(marker) != 1:
            raise RuntimeError(f"the templates name {marker} {text.count(marker)} times, not once")
        text = text.replace(marker, value)
    return text


def recorded_knobs(source: str) -> dict[str, Any] | None:
    """The knob setting a rendered file records in its header comment (what `render` writes),
    read back through the family's parser, so that knobs a record leaves out (the Hopper knobs
    with mma=mma_sync) come back at their defaults. None when the file records no setting; the
    record as written when the family no longer accepts it."""
    if "Knob setting:" not in source:
        return None
    body = []
    for line in source.split("Knob setting:", 1)[1].splitlines()[1:]:
        if not line.startswith("//   "):
            break
        body.append(line[5:])
    try:
        data = json.loads("\n".join(body))
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    try:
        return knobs_from_mapping(data).to_dict()
    except (ValueError, TypeError, KeyError):
        return dict(data)


def render_to(knobs: Knobs, path: Path | str) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(knobs))
    return out

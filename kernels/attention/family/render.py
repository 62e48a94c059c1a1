"""Render one self-contained ABI v1 kernel file (.cu) from a knob setting."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kernels.attention.family.space import HEAD_DIMS, Knobs, knobs_from_mapping

TEMPLATE = Path(__file__).with_name("template.cu.in")
TEMPLATE_SM90 = Path(__file__).with_name("template_sm90.cu.in")
TEMPLATE_SM90_TMA = Path(__file__).with_name("template_sm90_tma.cu.in")
# The Hopper section goes into the namespace after the mma.sync launchers, which it falls back
# to for decode shapes; the ABI entry points then call its dispatchers.
SM90_ANCHOR = "bool aligned16(const void* p)"
# Registers per thread after setmaxnreg: producer warpgroup, consumer warpgroups (2 consumers:
# 128 * (40 + 2 * 232) = 64512 of the 65536 per SM; 24 spills the producer, 224 the d256 consumer).
REGS_PRODUCER = 40
REGS_CONSUMER = 232

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
        f"constexpr int kRegsProducer = {REGS_PRODUCER};",
        f"constexpr int kRegsConsumer = {REGS_CONSUMER};",
        "template <int D>",
        "struct WgBlockN;",
    ]
    for d in HEAD_DIMS:
        lines.append(f"template <>\nstruct WgBlockN<{d}> {{\n  static constexpr int value = {k.wg_block_n(d)};\n}};")
    if _stages_by_dim(k):
        lines += ["// wg_stages_d64 / wg_stages_d128: K/V stages per head_dim",
                  "template <int D>\nstruct WgStages {\n  static constexpr int value = kWgStages;\n};"]
        lines += [f"template <>\nstruct WgStages<{d}> {{\n  static constexpr int value = {k.wg_stages_at(d)};\n}};"
                  for d in HEAD_DIMS if k.wg_stages_at(d) != k.wg_stages]
    if k.wg_p_long_blocks:
        lines.append(f"constexpr long long kPLongBlocks = {k.wg_p_long_blocks};  // wg_p_long_blocks")
    if k.wg_v_ring == "deeper":
        lines += ["// wg_v_ring=deeper: V stages per head_dim (K's, or one more where shared memory holds it)",
                  "template <int D>\nstruct WgVStages {\n  static constexpr int value = WgStages<D>::value;\n};"]
        lines += [f"template <>\nstruct WgVStages<{d}> {{\n  static constexpr int value = {k.wg_v_stages_at(d)};\n}};"
                  for d in HEAD_DIMS if k.wg_v_stages_at(d) != k.wg_stages_at(d)]
    return "\n".join(lines)


def _stages_by_dim(k: Knobs) -> bool:
    """The ring's depth comes from WgStages<D> (wg_v_ring=deeper builds on that form)."""
    return any(k.wg_stages_at(d) != k.wg_stages for d in HEAD_DIMS) or k.wg_v_ring != "same"


def _swap(text: str, old: str, new: str, count: int = 1) -> str:
    """Replace `old`, which must occur exactly `count` times (a template edit that moves it
    fails the render loudly instead of leaving a half-converted kernel)."""
    found = text.count(old)
    if found != count:
        raise RuntimeError(f"template: expected {count} of {old!r}, found {found}")
    return text.replace(old, new)


def _swap_each(text: str, edits: tuple[tuple[str, str], ...]) -> str:
    """_swap for each (old, new) of a splice's edits, in order."""
    for old, new in edits:
        text = _swap(text, old, new)
    return text


# wg_load=tma: the cp.async kernel becomes a template on kTma; the copy-engine producer and the
# host's tensor maps come from template_sm90_tma.cu.in. wg_load=cp_async renders the Hopper
# section unchanged, so its files keep their bytes.
_KERNEL_HEAD = "template <int D>\n__global__ void __launch_bounds__(Sm90Cfg<D>::kThreads, 1) attn_fwd_sm90("
_TMA_EDITS = (
    (_KERNEL_HEAD + "const SocraticAttentionArgs a, const Sched sc) {",
     "template <int D, bool kTma>\n__global__ void __launch_bounds__(Sm90Cfg<D>::kThreads, 1) attn_fwd_sm90(\n"
     "    const SocraticAttentionArgs a, const Sched sc, const __grid_constant__ Sm90Maps maps) {", 1),
    ("mbar_init(q_full, 128);", "mbar_init(q_full, kTma ? 1 : 128);", 1),
    ("mbar_init(k_full(s), 128);", "mbar_init(k_full(s), kTma ? 1 : 128);", 1),
    ("mbar_init(v_full(s), 128);", "mbar_init(v_full(s), kTma ? 1 : 128);", 1),
    ("    const int p = tid;  // 0..127\n",
     "    if constexpr (kTma) {\n"
     "      if (tid == 0) sm90_produce_tma<D>(a, sc, maps, q_s, k_s, v_s, bars);\n"
     "      return;\n"
     "    }\n"
     "    const int p = tid;  // 0..127\n", 1),
    ("template <int D>\nint prepare_sm90() {", "template <int D, bool kTma>\nint prepare_sm90() {", 1),
    ("cudaFuncSetAttribute(attn_fwd_sm90<D>,", "cudaFuncSetAttribute(attn_fwd_sm90<D, kTma>,", 1),
    ("  const int err = prepare_sm90<D>();\n",
     "  Sm90Maps maps{};\n"
     "  const bool tma = sm90_maps<D>(a, gp, &maps);\n"
     "#ifdef SOCRATIC_SM90_TMA_STRICT\n"
     "  if (!tma) return cudaErrorNotSupported;  // a check build: no silent cp.async fallback\n"
     "#endif\n"
     "  const int err = tma ? prepare_sm90<D, true>() : prepare_sm90<D, false>();\n", 1),
    ("  attn_fwd_sm90<D><<<grid, Sm90Cfg<D>::kThreads, Sm90Cfg<D>::kSmem, stream>>>(*a, s);\n",
     "  if (tma) {\n"
     "    attn_fwd_sm90<D, true><<<grid, Sm90Cfg<D>::kThreads, Sm90Cfg<D>::kSmem, stream>>>(*a, s, maps);\n"
     "  } else {\n"
     "    attn_fwd_sm90<D, false><<<grid, Sm90Cfg<D>::kThreads, Sm90Cfg<D>::kSmem, stream>>>(*a, s, maps);\n"
     "  }\n", 1),
)


def _with_tma(text: str) -> str:
    device, _, host = TEMPLATE_SM90_TMA.read_text().partition("//@@SM90_TMA_HOST@@\n")
    text = _swap(text, _KERNEL_HEAD, device + _KERNEL_HEAD)
    text = _swap(text, "template <int D>\nint prepare_sm90() {", host + "template <int D>\nint prepare_sm90() {")
    for old, new, count in _TMA_EDITS:
        text = _swap(text, old, new, count)
    return text


def q_ring_constants(k: Knobs) -> str:
    """wg_q_stages=2 (wg_load=tma): the Q buffers (QS) per head_dim; the second Q buffer's
    full/empty mbarriers follow the K/V ring's."""
    lines = [
        f"// wg_q_stages={k.wg_q_stages}: Q buffers per head_dim (two where shared memory holds them)",
        "template <int D>",
        "struct WgQRing;",
    ]
    for d in HEAD_DIMS:
        lines.append(
            f"template <>\nstruct WgQRing<{d}> {{\n  static constexpr int QS = {k.wg_q_buffers(d)};\n}};"
        )
    lines += [
        "// The mbarriers of tile t's Q buffer: buffer 0 keeps q_full/q_empty, buffer 1 sits after the ring's.",
        "__device__ __forceinline__ uint32_t q_full_bar(uint32_t bars, int t, int qs, int stages) {",
        "  return (qs == 2 && (t & 1)) ? bars + 8 * (2 + 4 * stages) : bars;",
        "}",
        "__device__ __forceinline__ uint32_t q_empty_bar(uint32_t bars, int t, int qs, int stages) {",
        "  return (qs == 2 && (t & 1)) ? bars + 8 * (3 + 4 * stages) : bars + 8;",
        "}",
    ]
    return "\n".join(lines)


# wg_q_stages=2: tile t's Q in buffer t % QS, so the producer loads the next tile's Q as soon as
# the tile before last has released its buffer. Applied after _with_tma.
_Q_CONSUMER_EDITS = (
    ("  static constexpr int kKVBytes = BN * D * 2;\n",
     "  static constexpr int kKVBytes = BN * D * 2;\n  static constexpr int QS = WgQRing<D>::QS;  // Q buffers\n"),
    ("kBarOff = kQBytes + 2 * kWgStages * kKVBytes;", "kBarOff = QS * kQBytes + 2 * kWgStages * kKVBytes;"),
    ("kBars = 2 + 4 * kWgStages;", "kBars = 2 * QS + 4 * kWgStages;"),
    ("  const uint32_t k_s = q_s + C::kQBytes;\n", "  const uint32_t k_s = q_s + C::QS * C::kQBytes;\n"),
    ("    asm volatile(\"fence.mbarrier_init.release.cluster;\\n\" ::: \"memory\");\n",
     "    if constexpr (C::QS == 2) {\n"
     "      mbar_init(q_full_bar(bars, 1, 2, S), kTma ? 1 : 128);\n"
     "      mbar_init(q_empty_bar(bars, 1, 2, S), 4 * kWgConsumers);\n"
     "    }\n"
     "    asm volatile(\"fence.mbarrier_init.release.cluster;\\n\" ::: \"memory\");\n"),
    ("  // The Q buffer is free once this tile's last S = Q K^T has completed.\n"
     "  auto release_q = [&]() { release(q_empty); };\n", ""),
    ("    mbar_wait(q_full, uint32_t(tc) & 1u);\n",
     "    const uint32_t q_cur = q_s + uint32_t(tc % C::QS) * C::kQBytes;  // this tile's Q buffer\n"
     "    // The Q buffer is free once this tile's last S = Q K^T has completed.\n"
     "    auto release_q = [&]() { release(q_empty_bar(bars, tc, C::QS, S)); };\n"
     "    mbar_wait(q_full_bar(bars, tc, C::QS, S), uint32_t(tc / C::QS) & 1u);\n"),
    ("desc_kmajor<BM>(q_s, c * 64, kk)", "desc_kmajor<BM>(q_cur, c * 64, kk)"),
)
# The cp.async producer (the fallback instantiation of a tma file, for layouts a tensor map
# cannot describe) fills the same Q ring.
_Q_CP_ASYNC_EDITS = (
    ("      if (tc > 0) mbar_wait(q_empty, uint32_t(tc - 1) & 1u);\n",
     "      if (tc >= C::QS) mbar_wait(q_empty_bar(bars, tc, C::QS, S), uint32_t(tc / C::QS - 1) & 1u);\n"),
    ("        cp_async16(q_s + 2 * sw_off<BM>(row, qc), src, ok);\n      }\n      cp_async_arrive(q_full);\n",
     "        cp_async16(q_s + uint32_t(tc % C::QS) * C::kQBytes + 2 * sw_off<BM>(row, qc), src, ok);\n      }\n"
     "      cp_async_arrive(q_full_bar(bars, tc, C::QS, S));\n"),
)
_Q_TMA_EDITS = (
    ("  const uint32_t q_full = bars, q_empty = bars + 8;\n  asm volatile(\"prefetch.tensormap",
     "  asm volatile(\"prefetch.tensormap"),
    ("    if (tc > 0) mbar_wait(q_empty, uint32_t(tc - 1) & 1u);\n"
     "    mbar_expect_tx(q_full, C::kQBytes);\n"
     "#pragma unroll\n"
     "    for (int p = 0; p < P; ++p)\n"
     "      tma_load_5d(q_s + p * BM * 128, &maps.q, q_full, p * 64, 0, x.m0 / sc.gp, x.id.head, x.id.batch);\n",
     "    if (tc >= C::QS) mbar_wait(q_empty_bar(bars, tc, C::QS, S), uint32_t(tc / C::QS - 1) & 1u);\n"
     "    const uint32_t q_full = q_full_bar(bars, tc, C::QS, S);\n"
     "    const uint32_t q_cur = q_s + uint32_t(tc % C::QS) * C::kQBytes;  // this tile's Q buffer\n"
     "    mbar_expect_tx(q_full, C::kQBytes);\n"
     "#pragma unroll\n"
     "    for (int p = 0; p < P; ++p)\n"
     "      tma_load_5d(q_cur + p * BM * 128, &maps.q, q_full, p * 64, 0, x.m0 / sc.gp, x.id.head, x.id.batch);\n"),
)


def _with_q_ring(text: str, k: Knobs) -> str:
    text = _swap(text, "//@@SM90_WGMMA@@", q_ring_constants(k) + "\n//@@SM90_WGMMA@@")
    return _swap_each(text, _Q_CONSUMER_EDITS + _Q_CP_ASYNC_EDITS + _Q_TMA_EDITS)


# wg_wide_d64 (wg_load=tma): head_dim 64 runs three consumer warpgroups (192 query rows per CTA,
# 512 threads, 128 registers each at launch); setmaxnreg then gives the one-thread copy-engine
# producer REGS_WIDE_PRODUCER and the consumers REGS_WIDE_CONSUMER (128 * (24 + 3 * 160) = 64512
# of the 65536). The cp.async producer warpgroup would need 40 (and the consumers spill at the
# 152 left), so at d64 a call no tensor map describes runs the mma.sync kernel instead.
REGS_WIDE_PRODUCER = 24
REGS_WIDE_CONSUMER = 160


def wide_constants() -> str:
    return "\n".join([
        "// wg_wide_d64: consumer warpgroups (HC), setmaxnreg targets (RP, RC), and whether the head_dim",
        "// runs with tensor maps only (no cp.async instantiation: the mma.sync kernel takes the rest).",
        "template <int D>",
        "struct WgC {",
        "  static constexpr int HC = kWgConsumers, RP = kRegsProducer, RC = kRegsConsumer;",
        "  static constexpr bool kMapsOnly = false;",
        "};",
        "template <>",
        "struct WgC<64> {",
        f"  static constexpr int HC = 3, RP = {REGS_WIDE_PRODUCER}, RC = {REGS_WIDE_CONSUMER};",
        "  static constexpr bool kMapsOnly = true;",
        "};",
    ])


_WIDE_EDITS = (
    ("  static constexpr int BM = 64 * kWgConsumers;", "  static constexpr int BM = 64 * WgC<D>::HC;", 1),
    ("  static constexpr int kThreads = 128 * (kWgConsumers + 1);",
     "  static constexpr int kThreads = 128 * (WgC<D>::HC + 1);", 1),
    ("4 * kWgConsumers)", "4 * WgC<D>::HC)", None),
    # setmaxnreg, in the producer and the consumers
    ("if constexpr (kWgConsumers > 1) asm volatile(", "if constexpr (WgC<D>::HC > 1) asm volatile(", 2),
    ("::\"n\"(kRegsProducer));", "::\"n\"(WgC<D>::RP));", 1),
    ("::\"n\"(kRegsConsumer));", "::\"n\"(WgC<D>::RC));", 1),
    ("#endif\n  const int err = tma ? prepare_sm90<D, true>() : prepare_sm90<D, false>();\n",
     "#endif\n"
     "  if constexpr (WgC<D>::kMapsOnly) {\n"
     "    if (!tma) return launch<D>(a, stream);  // no cp.async instantiation at this head_dim\n"
     "  }\n"
     "  int err = cudaSuccess;\n"
     "  if constexpr (WgC<D>::kMapsOnly) {\n"
     "    err = prepare_sm90<D, true>();\n"
     "  } else {\n"
     "    err = tma ? prepare_sm90<D, true>() : prepare_sm90<D, false>();\n"
     "  }\n", 1),
    ("  } else {\n    attn_fwd_sm90<D, false><<<",
     "  } else if constexpr (!WgC<D>::kMapsOnly) {\n    attn_fwd_sm90<D, false><<<", 1),
    ("  if (!use_sm90<D>(a, gp)) return workspace<D>(a);\n  return workspace_for<D>(plan_sm90<D>(a, gp), a);\n",
     "  if (!use_sm90<D>(a, gp)) return workspace<D>(a);\n"
     "  if constexpr (WgC<D>::kMapsOnly) {\n"
     "    Sm90Maps maps{};\n"
     "    if (!sm90_maps<D>(a, gp, &maps)) return workspace<D>(a);  // launch_any runs mma.sync then\n"
     "  }\n"
     "  return workspace_for<D>(plan_sm90<D>(a, gp), a);\n", 1),
    # Ping-pong round robin over HC consumers: c waits on barrier 1 + c, passes to the next one.
    ("::\"r\"(2 - c) : \"memory\");", "::\"r\"(1 + (c + 1) % WgC<D>::HC) : \"memory\");", 1),
    ("    if (c == 1) asm volatile(\"bar.arrive 1, 256;\\n\" ::: \"memory\");  // consumer 0 goes first",
     "    if (c == WgC<D>::HC - 1) asm volatile(\"bar.arrive 1, 256;\\n\" ::: \"memory\");  // consumer 0 goes first",
     1),
)


def _with_wide_d64(text: str) -> str:
    text = _swap(text, "//@@SM90_WGMMA@@", wide_constants() + "\n//@@SM90_WGMMA@@")
    for old, new, count in _WIDE_EDITS:
        text = _swap(text, old, new, text.count(old) if count is None else count)
    return text


# wg_l2_sections=N: the Hopper kernel's tiles (and so the order the persistent CTAs take them
# in) go heavy first inside sections of (head, batch, split) units whose distinct K and V fit in
# N MB. The budget is counted in K/V units (kv head, batch, split): without GQA packing the grid's
# heads are query heads and the `group` of them that share a K/V head are adjacent (kv head =
# head / group), so a section is a whole number of groups; with packing the grid's heads are K/V
# heads already (group 1). A call whose whole K/V fits is one section, exactly
# grid_order=heavy_first. The host sizes the sections once per call (Sched::l2_units); the
# producers and the consumers all decode tiles through sm90_tile, so one call there is the
# whole change on the device.
_TILE_FN = "template <int BM, int BN>\n__device__ __forceinline__ Sm90Tile sm90_tile("
_TILE_CALL = "  x.id = decode_tile(tile, sc, a.batch);\n"
L2_TILE_CALL = "decode_tile_l2(tile, sc, a.batch)"
_SCHED_TILES = "  int tiles;       // m_blocks * heads_grid * batch * splits\n"
_SCHED_SECTION = "  int l2_units;    // wg_l2_sections: units (head, batch, split) per section\n"
_SM90_LAUNCH = ("  if (s.tiles <= 0) return cudaSuccess;\n  int grid = s.tiles;\n"
                "  if constexpr (kPersistent) grid = grid < num_sms() ? grid : num_sms();\n")
L2_HOST_CALL = ("  s.l2_units = l2_section_units(s, a->batch, a->seqlen_k, a->head_dim,\n"
                "                               s.gp > 1 ? 1 : a->heads_q / a->heads_kv);\n")


def l2_section_order(k: Knobs) -> str:
    mb = k.wg_l2_sections
    return "\n".join([
        f"// wg_l2_sections={mb}: heavy first inside sections of (head, batch, split) units whose distinct",
        f"// K and V fit in {mb} MB of L2, so the m blocks that read one K/V head run within a section of",
        "// each other (with one grid-wide heavy-first order they are a whole layer of units apart, and at",
        "// short sequences that layer's K/V overflows L2: every m block re-reads its K/V from HBM).",
        "// group: the units (query heads, adjacent: kv head = head / group) that read one K/V head; 1 when",
        "// the grid's heads are K/V heads (GQA packing) or there is no GQA. A section is whole groups.",
        f"constexpr long long kWgL2SectionBytes = {mb}LL * 1024 * 1024;",
        "// Units per section, once per call on the host (after the split-KV choice): the tile decode",
        "// below runs for every tile in every producer and consumer, and this has a 64-bit division.",
        "inline int l2_section_units(const Sched& s, int batch, int seqlen_k, int head_dim, int group) {",
        "  const int units = s.heads_grid * batch * s.splits;",
        "  const int kv_units = units / group;  // distinct (kv head, batch, split)",
        "  const long long kv = 4LL * head_dim * ((seqlen_k + s.splits - 1) / s.splits);  // K + V of a K/V unit",
        "  long long fit = kWgL2SectionBytes / (kv > 0 ? kv : 1);  // K/V units per section",
        "  // the call's whole K/V (kv heads x batch x seqlen_k) fits: one section, exactly heavy_first",
        "  if (4LL * head_dim * seqlen_k * (kv_units / s.splits) <= kWgL2SectionBytes) fit = kv_units;",
        "  fit = fit < 1 ? 1 : (fit < kv_units ? fit : kv_units);",
        "  // as few sections as fit allows, of equal size: a small last section would run its heavy tiles",
        "  // alone at the end of the call (8 units at 7 a section: 4 + 4, not 7 + 1)",
        "  const long long sections = (kv_units + fit - 1) / fit;",
        "  return group * int((kv_units + sections - 1) / sections);",
        "}",
        "__device__ __forceinline__ TileId decode_tile_l2(int t, const Sched& s, int batch) {",
        "  const int units = s.heads_grid * batch * s.splits;",
        "  const int G = s.l2_units;  // units per section (l2_section_units)",
        "  const int sec = t / (G * s.m_blocks);",
        "  const int r = t - sec * G * s.m_blocks;",
        "  const int gs = min(G, units - sec * G);  // units of this section (the last may hold fewer)",
        "  int u = sec * G + r % gs;",
        "  TileId id;",
        "  id.head = u % s.heads_grid;",
        "  u /= s.heads_grid;",
        "  id.batch = u % batch;",
        "  id.split = u / batch;",
        "  id.mb = s.m_blocks - 1 - r / gs;",
        "  return id;",
        "}",
        "",
        "",
    ])


# wg_full_order=m_fastest: a call without the causal mask has tiles of equal weight, so heavy first
# has nothing to order; each section is then one K/V unit's group, which makes the m blocks fastest
# (after the group's query heads): the tiles that read one K/V head run side by side in the same
# wave and share its copy in L2, where sections of 32 MB spread them over several waves.
L2_FULL_ORDER = ("  if (!a->causal) s.l2_units = s.gp > 1 ? 1 : a->heads_q / a->heads_kv;"
                 "  // wg_full_order=m_fastest\n")


def _with_l2_sections(text: str, k: Knobs) -> str:
    """On the whole rendered file: the Sched field, the order's functions, the host's sizing
    after the split-KV choice (and wg_full_order's), and the one decode call."""
    text = _swap(text, _SCHED_TILES, _SCHED_TILES + _SCHED_SECTION)
    text = _swap(text, _TILE_FN, l2_section_order(k) + _TILE_FN)
    full = L2_FULL_ORDER if k.wg_full_order == "m_fastest" else ""
    text = _swap(text, _SM90_LAUNCH, L2_HOST_CALL + full + _SM90_LAUNCH)
    return _swap(text, _TILE_CALL, f"  x.id = {L2_TILE_CALL};\n")


# decode_kv_warps=N (N > 1): the decode tile's CTA gets N warps per row warp, and each block's keys
# are split among them (warp kw computes keys [kw * BN / N, (kw + 1) * BN / N) of every block with
# its own running max, sum and output); at the end of a tile they merge through the shared memory
# the K/V stages used: every key warp rescales its output to the rows' common max, and key warp 0
# adds them up and stores. All the CTA's threads issue the loads. The main tile keeps one key warp,
# and N = 1 renders the template unchanged, so its files keep their bytes.
_KV_CFG = (
    "  static constexpr int W = TileOf<D, Dec>::W;    // warps\n"
    "  static constexpr int kThreads = W * 32;\n"
    "  static constexpr int RPW = BM / W;            // query rows per warp\n"
    "  static constexpr int MT = RPW / 16;           // m16 tiles per warp\n"
    "  static constexpr int NT = BN / 8;             // n8 tiles of S per row block\n"
)
_KV_CFG_NEW = (
    "  static constexpr int KW = Dec ? kDecodeKvWarps : 1;  // key warps: each takes a slice of every block\n"
    "  static constexpr int WR = TileOf<D, Dec>::W;   // row warps\n"
    "  static constexpr int W = WR * KW;              // warps\n"
    "  static constexpr int BNW = BN / KW;            // keys per key warp per block\n"
    "  static constexpr int kThreads = W * 32;\n"
    "  static constexpr int RPW = BM / WR;           // query rows per warp\n"
    "  static constexpr int MT = RPW / 16;           // m16 tiles per warp\n"
    "  static constexpr int NT = BNW / 8;            // n8 tiles of S per row block\n"
)
_KV_EDITS: tuple[tuple[str, str, int | None], ...] = (
    (_KV_CFG, _KV_CFG_NEW, 1),
    ("  static constexpr int KN = BN / 16;            // k16 steps of P V\n",
     "  static constexpr int KN = BNW / 16;           // k16 steps of P V\n", 1),
    ("  static constexpr size_t kTileBytes = size_t(kQElems + 2 * kStages * kKVElems) * 2;\n",
     "  // the key warps' merge reuses the K/V stages: outputs of warps 1.. (fp32) and every warp's (max, sum)\n"
     "  static constexpr size_t kMergeBytes = KW > 1 ? size_t(KW - 1) * BM * D * 4 + size_t(KW) * BM * 8 : 0;\n"
     "  static constexpr size_t kLoadBytes = size_t(2 * kStages * kKVElems) * 2;\n"
     "  static constexpr size_t kTileBytes =\n"
     "      size_t(kQElems) * 2 + (kMergeBytes > kLoadBytes ? kMergeBytes : kLoadBytes);\n", 1),
    ("  static_assert(BN % 16 == 0, \"block_n must be a multiple of 16\");\n",
     "  static_assert(BNW % 16 == 0, \"keys per key warp must be a multiple of 16\");\n", 1),
    ("  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;\n",
     "  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;\n"
     "  const int rw = warp % C::WR, kw = warp / C::WR;  // row warp, key warp\n", 1),
    ("warp * C::RPW + mt * 16", "rw * C::RPW + mt * 16", 4),
    ("          const int row = np * 16 + (lane & 7) + ((lane >> 4) << 3);\n",
     "          const int row = kw * C::BNW + np * 16 + (lane & 7) + ((lane >> 4) << 3);\n", 1),
    ("              const int col = n0 + nt * 8 + 2 * t4 + (e & 1);\n",
     "              const int col = n0 + kw * C::BNW + nt * 8 + 2 * t4 + (e & 1);\n", 1),
    ("          const int row = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);\n",
     "          const int row = kw * C::BNW + kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);\n", 1),
    ("        if (r >= sc.mtotal) continue;\n",
     "        if (r >= sc.mtotal || kw != 0) continue;  // key warp 0 stores\n", 1),
)
_KV_EPILOGUE = (
    "        l_run[mt][h] = l;\n"
    "      }\n"
)
_KV_MERGE = r"""    if constexpr (C::KW > 1) {
      // Key warps merge (decode_kv_warps): (max, sum) of every key warp, then each output rescaled
      // to the rows' common max; key warp 0 adds the others' and stores below.
      __syncthreads();  // every warp is done with the K/V stages: the merge reuses them
      float* mo = reinterpret_cast<float*>(k_s);                        // [KW - 1][BM][D]
      float2* mml = reinterpret_cast<float2*>(mo + (C::KW - 1) * BM * D);  // [KW][BM]
      auto to_exp = [&](float x) { return kExp2 ? fast_exp2(x * sl2) : expf(x * scale); };
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          if (t4 == 0) mml[kw * BM + rw * C::RPW + mt * 16 + g + 8 * h] = make_float2(m_run[mt][h], l_run[mt][h]);
      __syncthreads();
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = rw * C::RPW + mt * 16 + g + 8 * h;
          float mx = neg_inf();
#pragma unroll
          for (int w = 0; w < C::KW; ++w) mx = fmaxf(mx, mml[w * BM + row].x);
          float l = 0.f;
#pragma unroll
          for (int w = 0; w < C::KW; ++w) {
            const float2 ml = mml[w * BM + row];
            if (ml.x != neg_inf()) l += ml.y * to_exp(ml.x - mx);
          }
          const float f = m_run[mt][h] == neg_inf() ? 0.f : to_exp(m_run[mt][h] - mx);
          m_run[mt][h] = mx;
          l_run[mt][h] = l;
#pragma unroll
          for (int dt = 0; dt < DT; ++dt) {
            o[mt][dt][2 * h] *= f;
            o[mt][dt][2 * h + 1] *= f;
            if (kw > 0)
              *reinterpret_cast<float2*>(mo + ((kw - 1) * BM + row) * D + dt * 8 + 2 * t4) =
                  make_float2(o[mt][dt][2 * h], o[mt][dt][2 * h + 1]);
          }
        }
      __syncthreads();
      if (kw == 0) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = rw * C::RPW + mt * 16 + g + 8 * h;
            for (int w = 1; w < C::KW; ++w)
#pragma unroll
              for (int dt = 0; dt < DT; ++dt) {
                const float2 v = *reinterpret_cast<const float2*>(mo + ((w - 1) * BM + row) * D + dt * 8 + 2 * t4);
                o[mt][dt][2 * h] += v.x;
                o[mt][dt][2 * h + 1] += v.y;
              }
          }
      }
    }
"""


def _with_decode_kv_warps(text: str, k: Knobs) -> str:
    """decode_kv_warps > 1 on the mma.sync kernel (the decode tile of either layer)."""
    text = _swap(text, "constexpr bool kDecodeTile = ",
                 f"constexpr int kDecodeKvWarps = {k.decode_kv_warps};  // decode_kv_warps\n"
                 "constexpr bool kDecodeTile = ")
    for old, new, count in _KV_EDITS:
        text = _swap(text, old, new, text.count(old) if count is None else count)
    return _swap(text, _KV_EPILOGUE, _KV_EPILOGUE + _KV_MERGE)


# split_combine=parallel: the split-KV combine reads a row's (max, sum) pairs with all 32 lanes at
# once (lane s of the warp takes splits s, s + 32, ...), reduces them across the warp, keeps each
# split's weight in shared memory, and only then accumulates the partial outputs, whose loads no
# longer wait on a pair loaded in the same iteration. The serial combine walks the splits one after
# another, each iteration's loads behind the previous pair: at batch 1 (up to 128 splits of a few
# blocks each) that chain is a large part of the call. Both merge in a fixed order.
_COMBINE_SERIAL = """  float mmax = neg_inf();
  for (int s = 0; s < sc.splits; ++s) mmax = fmaxf(mmax, sc.ws_ml[s * rows + row].x);
  constexpr int P = D / 64;  // float2 pairs per lane
  float2 acc[P];
#pragma unroll
  for (int i = 0; i < P; ++i) acc[i] = make_float2(0.f, 0.f);
  float lsum = 0.f;
  if (mmax != neg_inf()) {
    for (int s = 0; s < sc.splits; ++s) {
      const float2 ml = sc.ws_ml[s * rows + row];
      if (ml.x == neg_inf()) continue;
      const float w = fast_exp2(ml.x - mmax);
      lsum += w * ml.y;
      const float2* src = reinterpret_cast<const float2*>(sc.ws_o) + (s * rows + row) * (D / 2);
#pragma unroll
      for (int i = 0; i < P; ++i) {
        const float2 v = src[lane + 32 * i];
        acc[i].x += w * v.x;
        acc[i].y += w * v.y;
      }
    }
  }
"""
_COMBINE_PARALLEL = """  __shared__ float weight[4][kMaxSplits];  // this warp's row: each split's weight
  float* wt = weight[threadIdx.x >> 5];
  float mmax = neg_inf();
  for (int s = lane; s < sc.splits; s += 32) mmax = fmaxf(mmax, sc.ws_ml[s * rows + row].x);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mmax = fmaxf(mmax, __shfl_xor_sync(0xffffffffu, mmax, o));
  float lsum = 0.f;
  for (int s = lane; s < sc.splits; s += 32) {
    const float2 ml = sc.ws_ml[s * rows + row];
    const float w = (ml.x == neg_inf() || mmax == neg_inf()) ? 0.f : fast_exp2(ml.x - mmax);
    wt[s] = w;
    lsum += w * ml.y;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, o);
  __syncwarp();
  constexpr int P = D / 64;  // float2 pairs per lane
  float2 acc[P];
#pragma unroll
  for (int i = 0; i < P; ++i) acc[i] = make_float2(0.f, 0.f);
#pragma unroll 4
  for (int s = 0; s < sc.splits; ++s) {
    const float w = wt[s];
    if (w == 0.f) continue;  // a split that saw no key of this row
    const float2* src = reinterpret_cast<const float2*>(sc.ws_o) + (s * rows + row) * (D / 2);
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const float2 v = src[lane + 32 * i];
      acc[i].x += w * v.x;
      acc[i].y += w * v.y;
    }
  }
"""
_COMBINE_DOC = "// Split-KV combine: one warp per output row, splits merged in a fixed order (deterministic).\n"


def _with_parallel_combine(text: str) -> str:
    """split_combine=parallel on the whole rendered file (one combine kernel serves both layers);
    the split counts of both planners are capped at kMaxSplits."""
    text = _swap(text, _COMBINE_DOC,
                 "// The most splits a call is cut into (both planners cap their split count at it).\n"
                 "constexpr int kMaxSplits = 128;\n" + _COMBINE_DOC.replace(
                     "one warp per output row,", "one warp per output row, the splits' (max, sum) read by all lanes,"))
    cap = "      want = want < 128 ? want : 128;\n"
    text = _swap(text, cap, "      want = want < kMaxSplits ? want : kMaxSplits;\n", text.count(cap) or 1)
    return _swap(text, _COMBINE_SERIAL, _COMBINE_PARALLEL)


# split_combine=wide: split_combine=parallel, plus a second combine kernel for calls with few
# output rows (under two per SM): a CTA of four warps per row. At decode batch 1 (llama3-70b-tp8:
# 8 rows of 128 splits) one warp per row left the GPU nearly idle while each warp walked all the
# splits; here the CTA's threads read the (max, sum) pairs together, warp w accumulates splits
# w, w + 4, ..., and the four partial outputs add up in shared memory in a fixed order
# (deterministic).
_COMBINE_WIDE = r"""// split_combine=wide: a CTA of four warps per output row, for calls with few rows.
template <int D>
__global__ void __launch_bounds__(128) attn_combine_wide(const SocraticAttentionArgs a, const Sched sc) {
  __shared__ float weight[kMaxSplits];  // each split's weight
  __shared__ float red[4];              // the warps' max, then their sums
  __shared__ float2 part[3][D / 2];     // warps 1..3's partial outputs
  const long long rows = (long long)a.batch * a.heads_q * a.seqlen_q;
  const long long row = blockIdx.x;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int qi = int(row % a.seqlen_q);
  const long long bh = row / a.seqlen_q;
  const int hq = int(bh % a.heads_q);
  const int b = int(bh / a.heads_q);
  float mmax = neg_inf();
  for (int s = t; s < sc.splits; s += 128) mmax = fmaxf(mmax, sc.ws_ml[s * rows + row].x);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mmax = fmaxf(mmax, __shfl_xor_sync(0xffffffffu, mmax, o));
  if (lane == 0) red[warp] = mmax;
  __syncthreads();
  mmax = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
  __syncthreads();  // red holds the sums next
  float lsum = 0.f;
  for (int s = t; s < sc.splits; s += 128) {
    const float2 ml = sc.ws_ml[s * rows + row];
    const float w = (ml.x == neg_inf() || mmax == neg_inf()) ? 0.f : fast_exp2(ml.x - mmax);
    weight[s] = w;
    lsum += w * ml.y;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, o);
  if (lane == 0) red[warp] = lsum;
  __syncthreads();  // the weights and the sums are in
  lsum = (red[0] + red[1]) + (red[2] + red[3]);
  constexpr int P = D / 64;  // float2 pairs per lane
  float2 acc[P];
#pragma unroll
  for (int i = 0; i < P; ++i) acc[i] = make_float2(0.f, 0.f);
#pragma unroll 4
  for (int s = warp; s < sc.splits; s += 4) {
    const float w = weight[s];
    if (w == 0.f) continue;  // a split that saw no key of this row
    const float2* src = reinterpret_cast<const float2*>(sc.ws_o) + (s * rows + row) * (D / 2);
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const float2 v = src[lane + 32 * i];
      acc[i].x += w * v.x;
      acc[i].y += w * v.y;
    }
  }
  if (warp > 0) {
#pragma unroll
    for (int i = 0; i < P; ++i) part[warp - 1][lane + 32 * i] = acc[i];
  }
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int w = 0; w < 3; ++w)
#pragma unroll
    for (int i = 0; i < P; ++i) {
      acc[i].x += part[w][lane + 32 * i].x;
      acc[i].y += part[w][lane + 32 * i].y;
    }
  const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
  __nv_bfloat16* orow = static_cast<__nv_bfloat16*>(a.o) + b * a.o_batch_stride + hq * a.o_head_stride +
                        (long long)qi * a.o_row_stride;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    *reinterpret_cast<__nv_bfloat162*>(orow + 2 * (lane + 32 * i)) =
        __floats2bfloat162_rn(acc[i].x * inv, acc[i].y * inv);
  }
}

"""
_COMBINE_LAUNCH = "    attn_combine<D><<<int((rows + 3) / 4), 128, 0, stream>>>(*a, s);\n"
_COMBINE_LAUNCH_WIDE = (
    "    if (rows < 2LL * num_sms()) {  // split_combine=wide: few rows, a CTA of four warps each\n"
    "      attn_combine_wide<D><<<int(rows), 128, 0, stream>>>(*a, s);\n"
    "    } else {\n"
    "      attn_combine<D><<<int((rows + 3) / 4), 128, 0, stream>>>(*a, s);\n"
    "    }\n"
)


def _with_few_rows_combine(text: str, kernel: str, launch: str) -> str:
    """split_combine=wide or burst on the whole rendered file, after _with_parallel_combine: the
    few-rows `kernel` after the parallel one, and both planners' launches choosing by the row
    count (`launch`)."""
    head, sep, tail = text.partition("template <int D>\n__global__ void __launch_bounds__(128) attn_combine(")
    if not sep:
        raise RuntimeError("template: the combine kernel moved")
    end = tail.index("\n}\n") + 3
    text = head + sep + tail[:end] + "\n" + kernel.rstrip("\n") + "\n" + tail[end:]
    return _swap(text, _COMBINE_LAUNCH, launch, text.count(_COMBINE_LAUNCH) or 1)


# split_combine=burst: split_combine=parallel, plus a combine kernel for calls with few output rows
# (under two per SM) in which every load of a row's partials is in flight at once. The wide kernel's
# four warps each walked up to 32 splits four at a time, skipping a split without keys by a branch,
# so a warp waited for eight rounds of loads: at decode batch 1 (llama3-70b-tp8, 8-32 rows of 128
# splits) it took ~10 us against FA3's ~8 us for its own combine (scripts/kernel_spans_gpu.py,
# stop 35). Here sixteen warps take up to eight splits each and load all of them (a split past the
# last reads the last one's address) before any is summed; a split's weight selects its terms (a
# select, not a multiply), so a split of weight 0 adds nothing whatever its partial holds. The
# (max, sum) pairs are read once, one per thread; the sixteen partial outputs add up in shared
# memory in a fixed order (deterministic).
_COMBINE_BURST = r"""// split_combine=burst: a CTA of sixteen warps per output row, every partial loaded at once.
template <int D>
__global__ void __launch_bounds__(512) attn_combine_burst(const SocraticAttentionArgs a, const Sched sc) {
  constexpr int W = 16, PER = kMaxSplits / W, P = D / 64;  // warps, splits per warp, float2 per lane
  __shared__ float weight[kMaxSplits];  // each split's weight
  __shared__ float red[2][W];           // the warps' max, then their sums
  __shared__ float2 part[W][D / 2];     // each warp's partial output
  const long long rows = (long long)a.batch * a.heads_q * a.seqlen_q;
  const long long row = blockIdx.x;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int ns = sc.splits;
  const int qi = int(row % a.seqlen_q);
  const long long bh = row / a.seqlen_q;
  const int hq = int(bh % a.heads_q);
  const int b = int(bh / a.heads_q);
  // every partial of this warp's splits, requested before anything waits for the pairs
  float2 v[PER][P];
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int s = min(warp + W * i, ns - 1);
    const float2* src = reinterpret_cast<const float2*>(sc.ws_o) + (s * rows + row) * (D / 2);
#pragma unroll
    for (int p = 0; p < P; ++p) v[i][p] = src[lane + 32 * p];
  }
  const float2 ml = t < ns ? sc.ws_ml[t * rows + row] : make_float2(neg_inf(), 0.f);
  float mmax = ml.x;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mmax = fmaxf(mmax, __shfl_xor_sync(0xffffffffu, mmax, o));
  if (lane == 0) red[0][warp] = mmax;
  __syncthreads();
  mmax = red[0][0];
#pragma unroll
  for (int w = 1; w < W; ++w) mmax = fmaxf(mmax, red[0][w]);
  const float wt = (ml.x == neg_inf() || mmax == neg_inf()) ? 0.f : fast_exp2(ml.x - mmax);
  if (t < ns) weight[t] = wt;
  float lsum = wt * ml.y;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, o);
  if (lane == 0) red[1][warp] = lsum;
  __syncthreads();  // the weights and the sums are in
  float2 acc[P];
#pragma unroll
  for (int p = 0; p < P; ++p) acc[p] = make_float2(0.f, 0.f);
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int s = warp + W * i;
    const float w = s < ns ? weight[s] : 0.f;
#pragma unroll
    for (int p = 0; p < P; ++p) {  // a split without keys (weight 0) adds nothing, NaN poison included
      acc[p].x = w != 0.f ? fmaf(w, v[i][p].x, acc[p].x) : acc[p].x;
      acc[p].y = w != 0.f ? fmaf(w, v[i][p].y, acc[p].y) : acc[p].y;
    }
  }
#pragma unroll
  for (int p = 0; p < P; ++p) part[warp][lane + 32 * p] = acc[p];
  __syncthreads();
  if (t >= D / 2) return;
  lsum = red[1][0];
#pragma unroll
  for (int w = 1; w < W; ++w) lsum += red[1][w];
  float2 sum = part[0][t];
#pragma unroll
  for (int w = 1; w < W; ++w) {
    sum.x += part[w][t].x;
    sum.y += part[w][t].y;
  }
  const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
  __nv_bfloat16* orow = static_cast<__nv_bfloat16*>(a.o) + b * a.o_batch_stride + hq * a.o_head_stride +
                        (long long)qi * a.o_row_stride;
  *reinterpret_cast<__nv_bfloat162*>(orow + 2 * t) = __floats2bfloat162_rn(sum.x * inv, sum.y * inv);
}
"""
_COMBINE_LAUNCH_BURST = (
    "    if (rows < 2LL * num_sms()) {  // split_combine=burst: few rows, a CTA of sixteen warps each\n"
    "      attn_combine_burst<D><<<int(rows), 512, 0, stream>>>(*a, s);\n"
    "    } else {\n"
    "      attn_combine<D><<<int((rows + 3) / 4), 128, 0, stream>>>(*a, s);\n"
    "    }\n"
)


# wg_scheduler=dynamic (persistent, wg_q_stages=2, the copy-engine producer): on a causal call with
# more tiles than CTAs, a CTA's first tile is its block index as before, and each later one is
# claimed by its producer from a counter in the workspace (grid + the counter's old value), so the
# tiles still start in heavy_first's order but each goes to the CTA that is free first instead of
# every gridDim.x-th one (round robin leaves the CTAs that drew heavy tiles working long after the
# others; FA3 schedules causal tiles this way too). The producer leaves the claimed index in one of
# two slots beside the Q ring and arms the Q buffer's full barrier; the consumers read it after
# waiting on that barrier. Past the last tile it leaves `tiles` there and arrives on the barrier
# without a copy, which ends the consumers' loop. The host zeroes the counter on the stream before
# every such launch (the harness poisons the workspace); workspace_any asks for its 16 bytes.
_DYN_SLOT_HELPERS = (
    "// wg_scheduler=dynamic: the tile slots (two 32-bit words after the mbarriers).\n"
    "__device__ __forceinline__ void slot_store(uint32_t addr, int v) {\n"
    "  asm volatile(\"st.shared.b32 [%0], %1;\\n\" ::\"r\"(addr), \"r\"(v) : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ int slot_load(uint32_t addr) {\n"
    "  int v;\n"
    "  asm volatile(\"ld.shared.b32 %0, [%1];\\n\" : \"=r\"(v) : \"r\"(addr) : \"memory\");\n"
    "  return v;\n"
    "}\n\n"
)
_DYN_EDITS: tuple[tuple[str, str], ...] = (
    ("  float* ws_o;     // split partial outputs",
     "  unsigned int* tile_counter;  // wg_scheduler=dynamic: tiles claimed past the first wave (null: round robin)\n"
     "  float* ws_o;     // split partial outputs"),
    ("  static constexpr size_t kSmem = size_t(kBarOff + 8 * kBars) + 1024;  // + alignment slack\n",
     "  static constexpr int kSlotOff = kBarOff + 8 * kBars;  // wg_scheduler=dynamic: two tile slots\n"
     "  static constexpr size_t kSmem = size_t(kSlotOff + 16) + 1024;  // + alignment slack\n"),
    ("struct Sm90Tile {", _DYN_SLOT_HELPERS + "struct Sm90Tile {"),
    # the copy-engine producer claims the tiles
    ("  for (int tile = blockIdx.x; tile < sc.tiles; tile += step, ++tc) {\n"
     "    const Sm90Tile x = sm90_tile<BM, BN>(tile, a, sc);\n"
     "    if (tc >= C::QS) mbar_wait(q_empty_bar(bars, tc, C::QS, S), uint32_t(tc / C::QS - 1) & 1u);\n"
     "    const uint32_t q_full = q_full_bar(bars, tc, C::QS, S);\n",
     "  const bool dyn = sc.tile_counter != nullptr;  // wg_scheduler=dynamic on this call\n"
     "  for (int tile = blockIdx.x; tile < sc.tiles; ++tc) {\n"
     "    const Sm90Tile x = sm90_tile<BM, BN>(tile, a, sc);\n"
     "    if (tc >= C::QS) mbar_wait(q_empty_bar(bars, tc, C::QS, S), uint32_t(tc / C::QS - 1) & 1u);\n"
     "    const uint32_t q_full = q_full_bar(bars, tc, C::QS, S);\n"
     "    if (dyn) slot_store(bars + 8 * C::kBars + 4 * (tc & 1), tile);  // published by the arrival below\n"),
    ("    gb += uint32_t(x.nb);\n  }\n}\n",
     "    gb += uint32_t(x.nb);\n"
     "    // the next tile: round robin, or (dynamic) the next in heavy-first order, claimed now that\n"
     "    // this CTA's loads of this one are issued. The shuffle from lane 0 (the one thread here) marks\n"
     "    // the index warp-uniform, so the copies' coordinates stay in uniform registers (without it\n"
     "    // ptxas moves them per thread and spills the producer's registers).\n"
     "    tile = dyn ? __shfl_sync(1u, int(min(atomicAdd(sc.tile_counter, 1u) + gridDim.x, unsigned(sc.tiles))), 0)\n"
     "               : tile + step;\n"
     "  }\n"
     "  if (dyn) {  // no tile left: the consumers read the end from the slot, no copy arrives\n"
     "    if (tc >= C::QS) mbar_wait(q_empty_bar(bars, tc, C::QS, S), uint32_t(tc / C::QS - 1) & 1u);\n"
     "    slot_store(bars + 8 * C::kBars + 4 * (tc & 1), sc.tiles);\n"
     "    mbar_arrive(q_full_bar(bars, tc, C::QS, S));\n"
     "  }\n"
     "}\n"),
    # the consumers read them
    ("  for (int tile = blockIdx.x; tile < sc.tiles; tile += step, ++tc) {\n"
     "    const Sm90Tile x = sm90_tile<BM, BN>(tile, a, sc);\n"
     "    const TileId id = x.id;\n",
     "  const bool dyn = kTma && sc.tile_counter != nullptr;  // wg_scheduler=dynamic on this call\n"
     "  for (int tile = blockIdx.x;; ++tc) {\n"
     "    if (dyn) {  // the producer left this tile's index beside its Q\n"
     "      mbar_wait(q_full_bar(bars, tc, C::QS, S), uint32_t(tc / C::QS) & 1u);\n"
     "      tile = slot_load(bars + 8 * C::kBars + 4 * (tc & 1));\n"
     "    } else if (tc > 0) {\n"
     "      tile += step;\n"
     "    }\n"
     "    if (tile >= sc.tiles) break;\n"
     "    const Sm90Tile x = sm90_tile<BM, BN>(tile, a, sc);\n"
     "    const TileId id = x.id;\n"),
    # the host: a counter past the split partials, zeroed on the stream
    ("  if (tma) {\n    attn_fwd_sm90<D, true><<<",
     "  if (tma && a->causal && s.tiles > grid) {  // wg_scheduler=dynamic\n"
     "    const unsigned long long at = (workspace_for<D>(s, a) + 15ull) & ~15ull;\n"
     "    if (a->workspace != nullptr && a->workspace_bytes >= at + 16) {\n"
     "      s.tile_counter = reinterpret_cast<unsigned int*>(static_cast<unsigned char*>(a->workspace) + at);\n"
     "      const cudaError_t ce = cudaMemsetAsync(s.tile_counter, 0, sizeof(unsigned int), stream);\n"
     "      if (ce != cudaSuccess) return ce;\n"
     "    }\n"
     "  }\n"
     "  if (tma) {\n    attn_fwd_sm90<D, true><<<"),
    ("  return workspace_for<D>(plan_sm90<D>(a, gp), a);\n}\n",
     "  const Sched s = plan_sm90<D>(a, gp);\n"
     "  const unsigned long long need = workspace_for<D>(s, a);\n"
     "  // wg_scheduler=dynamic: the tile counter, 16-byte aligned after the split partials\n"
     "  if (a->causal && s.tiles > num_sms()) return ((need + 15ull) & ~15ull) + 16;\n"
     "  return need;\n}\n"),
)


def _with_dynamic_scheduler(text: str) -> str:
    """wg_scheduler=dynamic on the whole rendered file (after the tma and Q-ring splices)."""
    return _swap_each(text, _DYN_EDITS)


# wg_tile_decode=producer (wg_scheduler=dynamic): the copy-engine producer decodes each tile once
# (sm90_tile: the section order's divisions, the GQA head, the causal key range) and leaves the
# whole decode, not just the index, in the tile's slot beside its Q; the consumers read it after
# the Q buffer's full barrier, whichever order the call takes (the producer marks the end in the
# static order too). Measured on the H200 (Nsight Compute, d128 s512 full), each consumer warp
# spent about 436 instructions with eight integer divisions before a tile's first wgmma, 14% of
# the samples, where FA3 spends 38. The consumers' query row -> (query, head) mapping also skips
# its division when no GQA group is packed (gp 1). The cp.async build decodes as before.
_TILE_SLOT_HELPERS = (
    "// wg_tile_decode=producer: a tile's decode in its slot (12 words, the last unused; word 0 the index).\n"
    "__device__ __forceinline__ void tile_publish(uint32_t addr, int tile, const Sm90Tile& x) {\n"
    "  asm volatile(\"st.shared.v4.b32 [%0], {%1, %2, %3, %4};\\n\" ::\"r\"(addr), \"r\"(tile), \"r\"(x.id.mb),\n"
    "               \"r\"(x.id.head), \"r\"(x.id.batch) : \"memory\");\n"
    "  asm volatile(\"st.shared.v4.b32 [%0+16], {%1, %2, %3, %4};\\n\" ::\"r\"(addr), \"r\"(x.id.split), \"r\"(x.m0),\n"
    "               \"r\"(x.kv_head), \"r\"(x.hbase) : \"memory\");\n"
    "  asm volatile(\"st.shared.v4.b32 [%0+32], {%1, %2, %3, %4};\\n\" ::\"r\"(addr), \"r\"(x.b_lo), \"r\"(x.nb),\n"
    "               \"r\"(x.n_full), \"r\"(0) : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ int tile_read(uint32_t addr, Sm90Tile& x) {\n"
    "  int tile;\n"
    "  asm volatile(\"ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\\n\"\n"
    "               : \"=r\"(tile), \"=r\"(x.id.mb), \"=r\"(x.id.head), \"=r\"(x.id.batch)\n"
    "               : \"r\"(addr)\n"
    "               : \"memory\");\n"
    "  asm volatile(\"ld.shared.v4.b32 {%0, %1, %2, %3}, [%4+16];\\n\"\n"
    "               : \"=r\"(x.id.split), \"=r\"(x.m0), \"=r\"(x.kv_head), \"=r\"(x.hbase)\n"
    "               : \"r\"(addr)\n"
    "               : \"memory\");\n"
    "  asm volatile(\"ld.shared.v2.b32 {%0, %1}, [%3+32];\\n\\tld.shared.b32 %2, [%3+40];\\n\"\n"
    "               : \"=r\"(x.b_lo), \"=r\"(x.nb), \"=r\"(x.n_full) : \"r\"(addr) : \"memory\");\n"
    "  return tile;\n"
    "}\n"
)
_TILE_SLOT = "bars + 8 * C::kBars + 48 * (tc & 1)"
_TILE_EDITS: tuple[tuple[str, str], ...] = (
    ("  int n_full;    // key blocks below n_full need no mask\n};\n",
     "  int n_full;    // key blocks below n_full need no mask\n};\n" + _TILE_SLOT_HELPERS),
    ("  static constexpr size_t kSmem = size_t(kSlotOff + 16) + 1024;  // + alignment slack\n",
     "  static constexpr size_t kSmem = size_t(kSlotOff + 96) + 1024;  // 48-byte slots; + alignment slack\n"),
    ("    if (dyn) slot_store(bars + 8 * C::kBars + 4 * (tc & 1), tile);  // published by the arrival below\n",
     f"    tile_publish({_TILE_SLOT}, tile, x);  // wg_tile_decode=producer: published by the arrival below\n"),
    ("  if (dyn) {  // no tile left: the consumers read the end from the slot, no copy arrives\n",
     "  {  // no tile left (in either order): the consumers read the end from the slot, no copy arrives\n"),
    ("    slot_store(bars + 8 * C::kBars + 4 * (tc & 1), sc.tiles);\n",
     f"    slot_store({_TILE_SLOT}, sc.tiles);\n"),
    ("  const bool dyn = kTma && sc.tile_counter != nullptr;  // wg_scheduler=dynamic on this call\n"
     "  for (int tile = blockIdx.x;; ++tc) {\n"
     "    if (dyn) {  // the producer left this tile's index beside its Q\n"
     "      mbar_wait(q_full_bar(bars, tc, C::QS, S), uint32_t(tc / C::QS) & 1u);\n"
     "      tile = slot_load(bars + 8 * C::kBars + 4 * (tc & 1));\n"
     "    } else if (tc > 0) {\n"
     "      tile += step;\n"
     "    }\n"
     "    if (tile >= sc.tiles) break;\n"
     "    const Sm90Tile x = sm90_tile<BM, BN>(tile, a, sc);\n",
     "  for (int tile = blockIdx.x;; ++tc) {\n"
     "    Sm90Tile x;\n"
     "    if constexpr (kTma) {  // wg_tile_decode=producer: the producer left this tile's decode beside its Q\n"
     "      mbar_wait(q_full_bar(bars, tc, C::QS, S), uint32_t(tc / C::QS) & 1u);\n"
     f"      tile = tile_read({_TILE_SLOT}, x);\n"
     "      if (tile >= sc.tiles) break;\n"
     "    } else {\n"
     "      if (tc > 0) tile += step;\n"
     "      if (tile >= sc.tiles) break;\n"
     "      x = sm90_tile<BM, BN>(tile, a, sc);\n"
     "    }\n"),
    ("      const int qi = r / sc.gp;\n      kmax[h]",
     "      const int qi = sc.gp == 1 ? r : r / sc.gp;  // no division without a GQA pack\n      kmax[h]"),
    ("      const int qi = r / sc.gp;\n      const int hq = hbase + r % sc.gp;\n",
     "      const int qi = sc.gp == 1 ? r : r / sc.gp;\n      const int hq = hbase + (r - qi * sc.gp);\n"),
    ("        const int qi = r / sc.gp, hq = hbase + r % sc.gp;\n",
     "        const int qi = sc.gp == 1 ? r : r / sc.gp, hq = hbase + (r - qi * sc.gp);\n"),
)


def _with_published_tiles(text: str) -> str:
    """wg_tile_decode=producer on the whole rendered file (after the dynamic scheduler's edits)."""
    return _swap_each(text, _TILE_EDITS)


# wg_split_rule=balanced: the Hopper planner picks the split-KV count (1 up to the same cap) whose
# estimated makespan is least, instead of the smallest count that fills kSplitWaves waves. With one
# CTA per SM taking tiles in turn, a call lasts at least its heaviest tile, at least its work spread
# over the SMs, and, when its tiles take W rounds, about W - 1 of its lightest tiles plus the
# heaviest: 144 equal tiles on 132 SMs take two whole rounds, which the fill rule chose for a 16-tile
# chunked prefill (9 splits) where 8 splits take one. A tile costs its key blocks (as sm90_tile counts
# them) plus one block of fixed cost; more splits must be 2% better (their partials are written and
# combined).
_SPLIT_FILL = (
    "    const long long target = (long long)kSplitWaves * num_sms();\n"
    "    const int kv_blocks = (a->seqlen_k + C::BN - 1) / C::BN;\n"
    "    if (base < target && kv_blocks >= 4) {\n"
    "      long long want = (target + base - 1) / base;\n"
    "      want = want < kv_blocks / 2 ? want : kv_blocks / 2;\n"
    "      want = want < 128 ? want : 128;\n"
    "      s.splits = want > 1 ? int(want) : 1;\n"
    "    }\n"
)
_SPLIT_BALANCED = (
    "    const long long target = (long long)kSplitWaves * num_sms();\n"
    "    const int kv_blocks = (a->seqlen_k + C::BN - 1) / C::BN;\n"
    "    if (base < target && kv_blocks >= 4) {\n"
    "      long long want = kv_blocks / 2;  // the most splits considered\n"
    "      want = want < 128 ? want : 128;\n"
    "      s.splits = balanced_splits(a, s, C::BM, C::BN, int(want));\n"
    "    }\n"
)
_BALANCED_FN = (
    "// wg_split_rule=balanced: the split count in [1, most] with the least estimated makespan (see "
    "render.py).\n"
) + """inline int balanced_splits(const SocraticAttentionArgs* a, const Sched& s, int bm, int bn, int most) {
  const int sk = a->seqlen_k, offset = a->seqlen_k - a->seqlen_q;
  long long sum = 0;  // key blocks over the m blocks of one (head, batch) unit
  int heavy = 0, light = 1 << 30;
  for (int mb = 0; mb < s.m_blocks; ++mb) {  // as sm90_tile counts them
    const int qi_last = (min((mb + 1) * bm, s.mtotal) - 1) / s.gp;
    int kv_hi = sk;
    if (kCausalSkip && a->causal) kv_hi = max(0, min(sk, qi_last + offset + 1));
    const int nb = (kv_hi + bn - 1) / bn;
    sum += nb;
    heavy = nb > heavy ? nb : heavy;
    light = nb < light ? nb : light;
  }
  const long long units = (long long)s.heads_grid * a->batch, sms = num_sms();
  const double fixed = 1.0;  // a tile's fixed cost, in key blocks
  double best = 0.0;
  int pick = 1;
  for (int n = 1; n <= most; ++n) {
    const double top = (heavy + n - 1) / n + fixed, low = light / n + fixed;
    const long long rounds = (units * s.m_blocks * n + sms - 1) / sms;
    const double spread = double(units) * (double(sum) + fixed * n * s.m_blocks) / double(sms);
    double est = top > spread ? top : spread;
    const double tail = double(rounds - 1) * low + top;
    est = est > tail ? est : tail;
    if (n == 1 || est < 0.98 * best) {
      best = est;
      pick = n;
    }
  }
  return pick;
}

"""


def _with_balanced_splits(text: str) -> str:
    """wg_split_rule=balanced on the Hopper section (before the parallel combine's cap edit)."""
    text = _swap(text, _SPLIT_FILL, _SPLIT_BALANCED)
    return _swap(text, "template <int D>\nSched plan_sm90(", _BALANCED_FN + "template <int D>\nSched plan_sm90(")


# wg_split_cost=N (wg_split_rule=balanced): a plan with more than one split also pays for its fp32
# partials and the combine kernel (a second launch behind the first), charged as N key blocks on
# top of its makespan estimate. Without the charge the rule split the suite's ragged causal calls of
# ~128 tiles in two (9 -> 6.5 estimated blocks), where `wgmma-tma-g` measured 0.71-0.86x FA3; charged
# 8 blocks they run as one launch, 1.29-1.52x faster (stop 30; docs/family.md).
_SPLIT_COST = (
    ("  const double fixed = 1.0;  // a tile's fixed cost, in key blocks\n",
     "  const double fixed = 1.0;  // a tile's fixed cost, in key blocks\n"
     "  const double combine = {cost}.0;  // wg_split_cost: a split plan's partials and combine, in key blocks\n"),
    ("    est = est > tail ? est : tail;\n",
     "    est = est > tail ? est : tail;\n"
     "    if (n > 1) est += combine;\n"),
)


def _with_split_cost(text: str, cost: int) -> str:
    """wg_split_cost on the balanced planner."""
    for old, new in _SPLIT_COST:
        text = _swap(text, old, new.replace("{cost}", str(cost)))
    return text


# wg_epilogue=smem (wg_q_stages=2): at the head dims with two Q buffers, a tile's unsplit output is
# staged in that tile's Q buffer, which the producer refills only for the tile after next: each
# thread stores its bf16 pairs to shared memory (the Q tile's swizzled layout, conflict-free), the
# warpgroup meets at a named barrier, and its 128 threads write the 64 rows to global memory in
# 16-byte chunks, a row's chunks on consecutive threads. The Q buffer goes back to the producer after
# the epilogue instead of after the tile's last S = Q K^T. Measured on the H200 (Nsight Compute, d128
# s512 full), the direct epilogue issued 524,288 global stores (4 bytes each) where FA3 issued 32,768,
# and its warps stalled on the load/store queue and on the stores' source registers.
_EPI_HELPERS = (
    "// wg_epilogue=smem: shared-memory stores and loads by address.\n"
    "__device__ __forceinline__ void sts_b32(uint32_t addr, uint32_t v) {\n"
    "  asm volatile(\"st.shared.b32 [%0], %1;\\n\" ::\"r\"(addr), \"r\"(v) : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ uint4 lds_b128(uint32_t addr) {\n"
    "  uint4 v;\n"
    "  asm volatile(\"ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\\n\"\n"
    "               : \"=r\"(v.x), \"=r\"(v.y), \"=r\"(v.z), \"=r\"(v.w)\n"
    "               : \"r\"(addr)\n"
    "               : \"memory\");\n"
    "  return v;\n"
    "}\n\n"
)
_EPI_EDITS: tuple[tuple[str, str], ...] = (
    ("struct Sm90Tile {", _EPI_HELPERS + "struct Sm90Tile {"),
    ("    // The Q buffer is free once this tile's last S = Q K^T has completed.\n"
     "    auto release_q = [&]() { release(q_empty_bar(bars, tc, C::QS, S)); };\n",
     "    // The Q buffer is free once this tile's last S = Q K^T has completed; with wg_epilogue=smem\n"
     "    // it stages the unsplit output first, and goes back after the epilogue.\n"
     "    auto release_q_now = [&]() { release(q_empty_bar(bars, tc, C::QS, S)); };\n"
     "    const bool stage_o = C::QS == 2 && sc.splits == 1;\n"
     "    auto release_q = [&]() {\n"
     "      if (!stage_o) release_q_now();\n"
     "    };\n"),
    ("        const float inv = l_run[h] > 0.f ? 1.f / l_run[h] : 0.f;\n"
     "        __nv_bfloat16* orow = static_cast<__nv_bfloat16*>(a.o) + id.batch * a.o_batch_stride +\n"
     "                              hq * a.o_head_stride + (long long)qi * a.o_row_stride;\n"
     "#pragma unroll\n"
     "        for (int dt = 0; dt < DT; ++dt)\n"
     "          *reinterpret_cast<__nv_bfloat162*>(orow + dt * 8 + 2 * t4) =\n"
     "              __floats2bfloat162_rn(o[dt * 4 + 2 * h] * inv, o[dt * 4 + 2 * h + 1] * inv);\n",
     "        const float inv = l_run[h] > 0.f ? 1.f / l_run[h] : 0.f;\n"
     "        if (stage_o) {  // into this warpgroup's rows of the Q buffer, as the producer lays Q out\n"
     "          const int R = c * 64 + w * 16 + g + 8 * h;\n"
     "#pragma unroll\n"
     "          for (int dt = 0; dt < DT; ++dt)\n"
     "            sts_b32(q_cur + 2u * uint32_t(sw_off<BM>(R, dt)) + 4u * uint32_t(t4),\n"
     "                    pack_bf16(o[dt * 4 + 2 * h] * inv, o[dt * 4 + 2 * h + 1] * inv));\n"
     "          continue;\n"
     "        }\n"
     "        __nv_bfloat16* orow = static_cast<__nv_bfloat16*>(a.o) + id.batch * a.o_batch_stride +\n"
     "                              hq * a.o_head_stride + (long long)qi * a.o_row_stride;\n"
     "#pragma unroll\n"
     "        for (int dt = 0; dt < DT; ++dt)\n"
     "          *reinterpret_cast<__nv_bfloat162*>(orow + dt * 8 + 2 * t4) =\n"
     "              __floats2bfloat162_rn(o[dt * 4 + 2 * h] * inv, o[dt * 4 + 2 * h + 1] * inv);\n"),
    ("    gb += uint32_t(nb);\n  }\n  // Consumer 0 takes the turn",
     "    if (stage_o) {\n"
     "      // wg_epilogue=smem: the warpgroup's 64 rows go out in 16-byte chunks (a row's on consecutive\n"
     "      // threads), then the Q buffer goes back to the producer\n"
     "      asm volatile(\"bar.sync %0, 128;\\n\" ::\"r\"(8 + c) : \"memory\");  // the warpgroup's rows are in\n"
     "      const int wt = tid & 127;\n"
     "#pragma unroll\n"
     "      for (int k = 0; k < CH / 2; ++k) {\n"
     "        const int lr = (wt + 128 * k) / CH, ch = (wt + 128 * k) % CH;\n"
     "        const int r = m0 + c * 64 + lr;\n"
     "        if (r >= sc.mtotal) continue;\n"
     "        const uint4 v = lds_b128(q_cur + 2u * uint32_t(sw_off<BM>(c * 64 + lr, ch)));\n"
     "        const int qi = r / sc.gp, hq = hbase + r % sc.gp;\n"
     "        __nv_bfloat16* orow = static_cast<__nv_bfloat16*>(a.o) + id.batch * a.o_batch_stride +\n"
     "                              hq * a.o_head_stride + (long long)qi * a.o_row_stride;\n"
     "        *reinterpret_cast<uint4*>(orow + ch * 8) = v;\n"
     "      }\n"
     "      fence_async_smem();  // these reads come before the producer's next copy into the buffer\n"
     "      release_q_now();\n"
     "    }\n"
     "    gb += uint32_t(nb);\n  }\n  // Consumer 0 takes the turn"),
)


def _with_smem_epilogue(text: str) -> str:
    """wg_epilogue=smem on the Hopper section (after the Q ring's edits)."""
    return _swap_each(text, _EPI_EDITS)


# wg_epilogue=tma: as wg_epilogue=smem, the warpgroup stages its 64 rows of O in the tile's Q
# buffer; then one thread hands them to the copy engine (cp.async.bulk.tensor, one store per
# 64-column panel, through a fourth tensor map: O's, shaped as Q's with a box of 64 rows) and
# waits only until the engine has read the buffer before the warp gives it back. The other 127
# threads go straight to the next tile instead of issuing 16-byte global stores and waiting on
# the load/store queue, and rows past seqlen_q are clipped by the engine. A call whose O no map
# describes (pointer or stride not 16-byte aligned, a GQA pack that does not divide 64 rows)
# keeps the threads' stores; the split-KV partials are fp32 and keep them too.
_EPI_TMA_STORE = (
    "__device__ __forceinline__ void tma_store_5d(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2,\n"
    "                                             int c3, int c4) {\n"
    "  asm volatile(\"cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3, %4, %5}], \"\n"
    "               \"[%6];\\n\" ::\"l\"(reinterpret_cast<uint64_t>(map)),\n"
    "               \"r\"(c0), \"r\"(c1), \"r\"(c2), \"r\"(c3), \"r\"(c4), \"r\"(src)\n"
    "               : \"memory\");\n"
    "}\n\n"
)
_EPI_TMA_EDITS: tuple[tuple[str, str], ...] = (
    ("  CUtensorMap v;\n};\n",
     "  CUtensorMap v;\n"
     "  CUtensorMap o;  // wg_epilogue=tma: as q, a box of one consumer warpgroup's 64 rows\n"
     "  int o_ok;       // whether o describes the call (else the threads store O)\n"
     "};\n"),
    ("// The producer of wg_load=tma:", _EPI_TMA_STORE + "// The producer of wg_load=tma:"),
    ("  const cuuint32_t ones[5] = {1, 1, 1, 1, 1};\n  if (!ok) return false;\n",
     "  const cuuint32_t ones[5] = {1, 1, 1, 1, 1};\n  if (!ok) return false;\n"
     "  // wg_epilogue=tma: O's map when one describes it (the stride checks clear ok otherwise)\n"
     "  const cuuint64_t os[4] = {stride(a->o_head_stride, gp), stride(a->o_row_stride, a->seqlen_q),\n"
     "                            stride(a->o_head_stride * gp, a->heads_q / gp),\n"
     "                            stride(a->o_batch_stride, a->batch)};\n"
     "  const cuuint32_t ob[5] = {64, cuuint32_t(gp), cuuint32_t(64 / gp), 1, 1};\n"
     "  m->o_ok = ok && 64 % gp == 0 && (reinterpret_cast<unsigned long long>(a->o) & 15) == 0;\n"),
    ("  return encode(&m->q, a->q, 5, qd, qs, qb) && encode(&m->k, a->k, 4, kd, ks, kb) &&\n"
     "         encode(&m->v, a->v, 4, kd, vs, kb);\n",
     "  if (!(encode(&m->q, a->q, 5, qd, qs, qb) && encode(&m->k, a->k, 4, kd, ks, kb) &&\n"
     "        encode(&m->v, a->v, 4, kd, vs, kb)))\n"
     "    return false;\n"
     "  if (m->o_ok) m->o_ok = encode(&m->o, a->o, 5, qd, os, ob);\n"
     "  return true;\n"),
    ("    if (stage_o) {\n      // wg_epilogue=smem:",
     "    if (stage_o && kTma && maps.o_ok) {\n"
     "      // wg_epilogue=tma: the copy engine stores the warpgroup's rows, then the Q buffer goes back\n"
     "      fence_async_smem();  // this thread's rows, visible to the copy engine\n"
     "      asm volatile(\"bar.sync %0, 128;\\n\" ::\"r\"(8 + c) : \"memory\");  // the warpgroup's rows are in\n"
     "      if ((tid & 127) == 0) {\n"
     "        const int q0 = (m0 + c * 64) / sc.gp;\n"
     "#pragma unroll\n"
     "        for (int p = 0; p < D / 64; ++p)\n"
     "          tma_store_5d(&maps.o, q_cur + uint32_t(p * BM * 128 + c * 64 * 128), p * 64, 0, q0, id.head,\n"
     "                       id.batch);\n"
     "        asm volatile(\"cp.async.bulk.commit_group;\\n\" ::: \"memory\");\n"
     "        asm volatile(\"cp.async.bulk.wait_group.read 0;\\n\" ::: \"memory\");  // the engine has read them\n"
     "      }\n"
     "      release_q_now();\n"
     "    } else if (stage_o) {\n      // wg_epilogue=smem:"),
    ("  // Consumer 0 takes the turn consumer 1 passed last",
     "  // wg_epilogue=tma: the last stores complete before the CTA ends\n"
     "  if (kTma && (tid & 127) == 0) asm volatile(\"cp.async.bulk.wait_group 0;\\n\" ::: \"memory\");\n"
     "  // Consumer 0 takes the turn consumer 1 passed last"),
)


# wg_epilogue_one_q (wg_epilogue=tma): a head dim with one Q buffer (d256 beside two K/V stages)
# stages its unsplit output there too, when O's map describes the call, and gives the buffer back
# after the copy engine has read it; the producer then loads the next tile's Q only after this
# tile's epilogue. Measured on the H200 (Nsight Compute, d256 s512 full, stop 28), the direct
# epilogue's global stores held about 29% of the samples (load/store queue throttle); FA3 stores
# through the copy engine there.
_ONE_Q_STAGE = (
    "    const bool stage_o = C::QS == 2 && sc.splits == 1;\n",
    "    const bool stage_o = (C::QS == 2 || (kTma && maps.o_ok)) && sc.splits == 1;  // wg_epilogue_one_q\n",
)


def _with_tma_epilogue(text: str) -> str:
    """wg_epilogue=tma on the Hopper section (after the staged epilogue's edits)."""
    return _swap_each(text, _EPI_TMA_EDITS)


# wg_desc=offset: a wgmma descriptor is its tile's descriptor plus the k-step's byte offset >> 4,
# added to the low word: ptxas then spends about three uniform operations per wgmma (the add and
# the constant high words) where it repacked the three fields in about six. The consumer's
# warpgroup index comes from lane 0, so that Q's descriptors are uniform too instead of sixteen
# per-thread registers read back with R2UR. Measured alone 0.995x, with wg_epilogue=smem 1.005x.
_DESC_AT = (
    "// wg_desc=offset: the descriptor of tile + off from the tile's own. The start-address field\n"
    "// holds addr >> 4 in 14 bits and a shared-memory address stays below 2^18, so off >> 4 adds to\n"
    "// the low word without a carry out of the field.\n"
    "__device__ __forceinline__ uint64_t wg_desc_at(uint32_t tile, uint32_t off, uint32_t lbo, uint32_t sbo) {\n"
    "  const uint32_t lo = ((tile & 0x3FFFF) >> 4) | (((lbo >> 4) & 0x3FFF) << 16);\n"
    "  const uint32_t hi = ((sbo >> 4) & 0x3FFF) | (1u << 30);\n"
    "  uint64_t d;\n"
    "  asm(\"mov.b64 %0, {%1, %2};\" : \"=l\"(d) : \"r\"(lo + (off >> 4)), \"r\"(hi));\n"
    "  return d;\n"
    "}\n"
)
_DESC_EDITS: tuple[tuple[str, str], ...] = (
    ("         (uint64_t((sbo >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);\n}\n",
     "         (uint64_t((sbo >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);\n}\n" + _DESC_AT),
    ("  return wg_desc(tile + (kk >> 2) * (ROWS * 128) + row0 * 128 + (kk & 3) * 32, 16, 1024);\n",
     "  return wg_desc_at(tile, (kk >> 2) * (ROWS * 128) + row0 * 128 + (kk & 3) * 32, 16, 1024);\n"),
    ("  return wg_desc(tile + kk * 2048, 1024, ROWS * 128);\n",
     "  return wg_desc_at(tile, kk * 2048, 1024, ROWS * 128);\n"),
    ("  return wg_desc(tile + kk * 2048, ROWS * 128, 1024);\n",
     "  return wg_desc_at(tile, kk * 2048, ROWS * 128, 1024);\n"),
    ("  const int c = wg - 1;\n",
     "  const int c = __shfl_sync(0xffffffffu, wg - 1, 0);  // wg_desc=offset: warp-uniform\n"),
)


# wg_kv_order=k_ahead (wg_load=tma): the copy-engine producer issues block j + 1's K before block
# j's V, the order the consumers need them in with wg_overlap (S of block j + 1 is issued before
# P V of block j), so the next S's copy is not queued behind a V the consumers need later. The
# stages, barriers and phases are unchanged: K and V keep their own full/empty barriers, so only
# the order of the waits and copies moves. K(j + 1) waits for K(j + 1 - S)'s release, which the
# consumers give after S of that block, and needs nothing issued after it: no wait cycle.
_KV_IN_ORDER = (
    "    for (int j = 0; j < x.nb; ++j) {\n"
    "      const uint32_t gj = gb + uint32_t(j);\n"
    "      const int st = int(gj % S);\n"
    "      const uint32_t ph = (gj / S) & 1u;\n"
    "      const int n0 = (x.b_lo + j) * BN;\n"
    "      const uint32_t k_full = bars + 8 * (2 + st), v_full = bars + 8 * (2 + S + st);\n"
    "      const uint32_t k_empty = bars + 8 * (2 + 2 * S + st), v_empty = bars + 8 * (2 + 3 * S + st);\n"
    "      if (gj >= uint32_t(S)) mbar_wait(k_empty, ph ^ 1u);\n"
    "      mbar_expect_tx(k_full, C::kKVBytes);\n"
    "#pragma unroll\n"
    "      for (int p = 0; p < P; ++p)\n"
    "        tma_load_4d(k_s + st * C::kKVBytes + p * BN * 128, &maps.k, k_full, p * 64, n0, x.kv_head, x.id.batch);\n"
    "      if (gj >= uint32_t(S)) mbar_wait(v_empty, ph ^ 1u);\n"
    "      mbar_expect_tx(v_full, C::kKVBytes);\n"
    "#pragma unroll\n"
    "      for (int p = 0; p < P; ++p)\n"
    "        tma_load_4d(v_s + st * C::kKVBytes + p * BN * 128, &maps.v, v_full, p * 64, n0, x.kv_head, x.id.batch);\n"
    "    }\n"
)
_KV_K_AHEAD = (
    "    // wg_kv_order=k_ahead: K of block j + 1, then V of block j (block kb's stage: kb % S).\n"
    "    for (int kb = 0, vb = 0; vb < x.nb;) {\n"
    "      const bool is_k = kb < x.nb && kb <= vb + 1;\n"
    "      const int j = is_k ? kb++ : vb++;\n"
    "      const uint32_t gj = gb + uint32_t(j);\n"
    "      const int st = int(gj % S);\n"
    "      const uint32_t ph = (gj / S) & 1u;\n"
    "      const int n0 = (x.b_lo + j) * BN;\n"
    "      const uint32_t full = bars + 8 * (2 + (is_k ? 0 : S) + st), "
    "empty = bars + 8 * (2 + (is_k ? 2 : 3) * S + st);\n"
    "      if (gj >= uint32_t(S)) mbar_wait(empty, ph ^ 1u);\n"
    "      mbar_expect_tx(full, C::kKVBytes);\n"
    "      const uint32_t dst = (is_k ? k_s : v_s) + st * C::kKVBytes;\n"
    "      const CUtensorMap* map = is_k ? &maps.k : &maps.v;\n"
    "#pragma unroll\n"
    "      for (int p = 0; p < P; ++p) tma_load_4d(dst + p * BN * 128, map, full, p * 64, n0, x.kv_head, x.id.batch);\n"
    "    }\n"
)


# wg_stages_d64 / wg_stages_d128: each head dim's ring depth from WgStages<D> (sm90_constants)
# instead of the one kWgStages; the ring's buffers, barriers and both producers follow C::S.
def _with_stages_by_dim(text: str, k: Knobs) -> str:
    text = _swap(text, "  static constexpr int kKVBytes = BN * D * 2;\n",
                 "  static constexpr int kKVBytes = BN * D * 2;\n"
                 "  static constexpr int S = WgStages<D>::value;  // K/V stages (wg_stages_d64/d128)\n")
    text = _swap(text, "2 * kWgStages * kKVBytes;", "2 * S * kKVBytes;")
    text = _swap(text, "4 * kWgStages;  // q_full", "4 * S;  // q_full")
    return _swap(text, "S = kWgStages", "S = C::S", 2 if k.wg_load == "tma" else 1)


# wg_v_ring=deeper (wg_load=tma, wg_kv_order=k_ahead; after every other edit of the loop): V's ring
# gets its own depth, S = WgVStages<D> (one more than K's at d128 and d256 where shared memory holds
# it), and K's ring keeps SK = WgStages<D>. S also spaces the ring's barriers, so every barrier
# address and the Q ring's barriers after them keep their form; K uses the first SK of each kind.
# Why: a consumer releases block j's V stage after block j + 1's softmax, and with two stages the
# producer then has about one turn to bring block j + 2's V; in the k_ahead order its next K copy
# waits behind that V. Stop 31's profile had the d128 turns waiting on K and V blocks 3-4x as often
# as FA3's; an earlier release (wg_v_release) stalled the warpgroup on its P V instead.
_DEEP_V_CFG = (
    ("  static constexpr int S = WgStages<D>::value;  // K/V stages (wg_stages_d64/d128)\n",
     "  static constexpr int SK = WgStages<D>::value;  // K stages (wg_stages_d64/d128)\n"
     "  static constexpr int S = WgVStages<D>::value;  // wg_v_ring=deeper: V stages, and the barriers' spacing\n"),
    ("  constexpr int BM = C::BM, BN = C::BN, S = C::S, P = D / 64;\n",
     "  constexpr int BM = C::BM, BN = C::BN, S = C::S, SK = C::SK, P = D / 64;\n"),
    ("  constexpr int BM = C::BM, BN = C::BN, CH = C::CH, S = C::S;\n",
     "  constexpr int BM = C::BM, BN = C::BN, CH = C::CH, S = C::S, SK = C::SK;\n"),
    ("  const uint32_t v_s = k_s + S * C::kKVBytes;\n", "  const uint32_t v_s = k_s + SK * C::kKVBytes;\n"),
    # the copy-engine producer (k_ahead): each copy's stage and phase in its own ring
    ("      const int st = int(gj % S);\n      const uint32_t ph = (gj / S) & 1u;\n"
     "      const int n0 = (x.b_lo + j) * BN;\n",
     "      const uint32_t R = is_k ? uint32_t(SK) : uint32_t(S);  // wg_v_ring=deeper: this copy's ring\n"
     "      const int st = int(is_k ? gj % SK : gj % S);\n"
     "      const uint32_t ph = (is_k ? gj / SK : gj / S) & 1u;\n"
     "      const int n0 = (x.b_lo + j) * BN;\n"),
    ("      if (gj >= uint32_t(S)) mbar_wait(empty, ph ^ 1u);\n", "      if (gj >= R) mbar_wait(empty, ph ^ 1u);\n"),
    # the cp.async producer of the same kernel (a call no tensor map describes)
    ("        if (gj >= uint32_t(S)) mbar_wait(k_empty(st), ph ^ 1u);\n"
     "        load_tile(k_s + st * C::kKVBytes, Kb, a.k_row_stride, n0);\n"
     "        cp_async_arrive(k_full(st));\n",
     "        const int sk = int(gj % SK);  // wg_v_ring=deeper: K's stage in its own ring\n"
     "        if (gj >= uint32_t(SK)) mbar_wait(k_empty(sk), ((gj / SK) & 1u) ^ 1u);\n"
     "        load_tile(k_s + sk * C::kKVBytes, Kb, a.k_row_stride, n0);\n"
     "        cp_async_arrive(k_full(sk));\n"),
    # the consumers: K's stage of block j
    ("    auto slot = [&](int j) { return int((gb + uint32_t(j)) % S); };\n",
     "    auto slot = [&](int j) { return int((gb + uint32_t(j)) % S); };\n"
     "    auto kslot = [&](int j) { return int((gb + uint32_t(j)) % SK); };  // wg_v_ring=deeper\n"),
)


def _with_deep_v(text: str) -> str:
    """wg_v_ring=deeper on the Hopper section, after every other edit of the loop: K's stage and
    phase use SK wherever the consumers name K (issue_qk's wait, each K release, wg_k_wait's
    wait before the turn), V's keep S."""
    text = _swap_each(text, _DEEP_V_CFG)
    q = "QS * kQBytes" if "kBarOff = QS * kQBytes + " in text else "kQBytes"  # one Q buffer: no QS
    text = _swap(text, f"  static constexpr int kBarOff = {q} + 2 * S * kKVBytes;\n",
                 "  static_assert(S >= SK, \"V's ring is at least as deep as K's\");\n"
                 f"  static constexpr int kBarOff = {q} + (SK + S) * kKVBytes;\n")
    qk = text.index("    auto issue_qk = [&](int j) {\n")
    end = text.index("    };\n", qk)
    body = text[qk:end]
    # the phase's wait is in issue_qk unless wg_k_wait=before_turn moved it to wait_k (below)
    if body.count("% S);") != 1 or body.count("/ S) & 1u") > 1:
        raise RuntimeError("template: expected issue_qk's stage and phase of K")
    text = text[:qk] + body.replace("% S);", "% SK);").replace("/ S) & 1u", "/ SK) & 1u") + text[end:]
    released = text.count("release(k_empty(slot(")
    if not released:
        raise RuntimeError("template: expected the consumers' K releases")
    text = text.replace("release(k_empty(slot(", "release(k_empty(kslot(")
    before_turn = "mbar_wait(k_full(int((gb + uint32_t(j)) % S)), ((gb + uint32_t(j)) / S) & 1u);"
    return text.replace(before_turn, "mbar_wait(k_full(int((gb + uint32_t(j)) % SK)), ((gb + uint32_t(j)) / SK) & 1u);")


# wg_cluster=2 (wg_load=tma, wg_full_order=m_fastest): a call without the causal mask at a head dim
# of whole pairs of 64-column panels (d128, d256) runs clusters of two CTAs that take tiles in pairs
# reading the same K/V blocks (m_fastest keeps a pair inside one K/V head's group: the host checks
# that a group's tiles come in pairs), and each block is copied from L2 once for both: each CTA's
# producer copies half the panels with the copy engine's multicast into both CTAs' stages (FA3's
# non-causal setting). Each CTA's full barrier still expects the whole block. A stage is refilled
# when the consumers of both CTAs have released it, so a consumer warp's release also arrives on the
# peer's empty barrier, and a producer ends only after its CTA's stages have seen every release
# (no arrival can reach a CTA that has exited). Both CTAs start after a cluster barrier, once the
# barriers of both are initialized. Causal calls, d64 and calls whose tiles do not pair keep the
# one-CTA kernel.
_CLUSTER_DEVICE = """// wg_cluster=2: the CTA's rank in its cluster, a K/V panel copied into both CTAs of the cluster
// (multicast), and an arrival on the peer CTA's barrier at the same shared-memory offset.
__device__ __forceinline__ int cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\\n" : "=r"(r));
  return int(r);
}
__device__ __forceinline__ void tma_load_4d_mc(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0,
                                               int c1, int c2, int c3, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, "
      "{%2, %3, %4, %5}], [%6], %7;\\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "h"(mask)
      : "memory");
}
template <int kCl>
__device__ __forceinline__ void kv_load(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1,
                                        int c2, int c3) {
  if constexpr (kCl > 1) {
    tma_load_4d_mc(dst, map, bar, c0, c1, c2, c3, uint16_t((1u << kCl) - 1u));
  } else {
    tma_load_4d(dst, map, bar, c0, c1, c2, c3);
  }
}
__device__ __forceinline__ void mbar_arrive_peer(uint32_t bar, int peer) {
  asm volatile(
      "{\\n.reg .b32 r;\\nmapa.shared::cluster.u32 r, %0, %1;\\n"
      "mbarrier.arrive.shared::cluster.b64 _, [r];\\n}\\n" ::"r"(bar),
      "r"(peer)
      : "memory");
}

"""
_PRODUCER_HEAD = "// The producer of wg_load=tma: one thread walks the same tiles and key blocks as the consumers\n"
_CLUSTER_EDITS = (
    ("template <int D>\n__device__ __forceinline__ void sm90_produce_tma(",
     "template <int D, int kCl = 1>\n__device__ __forceinline__ void sm90_produce_tma("),
    ("  const int step = kPersistent ? int(gridDim.x) : sc.tiles;\n  uint32_t gb = 0;  // K/V blocks loaded so far",
     "  const int step = kPersistent ? int(gridDim.x) : sc.tiles;\n"
     "  const int rank = kCl > 1 ? cluster_rank() : 0;  // wg_cluster: this CTA copies panels rank, rank + kCl, ...\n"
     "  uint32_t gb = 0;  // K/V blocks loaded so far"),
    # the producer's end (the function's last brace, just before the kernel) and the kernel's head
    ("\n}\n\ntemplate <int D, bool kTma>\n__global__ void __launch_bounds__(Sm90Cfg<D>::kThreads, 1) attn_fwd_sm90(",
     "\n  if constexpr (kCl > 1) {  // wg_cluster: every stage's last fill released by both CTAs' consumers\n"
     "    for (int st = 0; st < S; ++st) {\n"
     "      if (gb <= uint32_t(st)) continue;\n"
     "      const uint32_t last = uint32_t(st) + uint32_t(S) * ((gb - 1u - uint32_t(st)) / uint32_t(S));\n"
     "      mbar_wait(bars + 8 * (2 + 2 * S + st), (last / S) & 1u);\n"
     "      mbar_wait(bars + 8 * (2 + 3 * S + st), (last / S) & 1u);\n"
     "    }\n"
     "  }\n"
     "}\n\ntemplate <int D, bool kTma, int kCl = 1>\n"
     "__global__ void __launch_bounds__(Sm90Cfg<D>::kThreads, 1) attn_fwd_sm90("),
    ("    asm volatile(\"fence.mbarrier_init.release.cluster;\\n\" ::: \"memory\");\n  }\n  __syncthreads();\n",
     "    asm volatile(\"fence.mbarrier_init.release.cluster;\\n\" ::: \"memory\");\n  }\n  __syncthreads();\n"
     "  if constexpr (kCl > 1) {  // wg_cluster: the peer's barriers are initialized before any copy or arrival\n"
     "    asm volatile(\"barrier.cluster.arrive.release.aligned;\\n"
     "barrier.cluster.wait.acquire.aligned;\\n\" ::: \"memory\");\n"
     "  }\n"),
    ("      if (tid == 0) sm90_produce_tma<D>(a, sc, maps, q_s, k_s, v_s, bars);\n",
     "      if (tid == 0) sm90_produce_tma<D, kCl>(a, sc, maps, q_s, k_s, v_s, bars);\n"),
    ("  auto release = [&](uint32_t bar) {\n    __syncwarp();\n    if (lane == 0) mbar_arrive(bar);\n  };\n",
     "  auto release = [&](uint32_t bar) {\n    __syncwarp();\n    if (lane == 0) mbar_arrive(bar);\n  };\n"
     "  // a K/V stage: with wg_cluster, the peer CTA's producer fills it too, so both hear of the release\n"
     "  const int peer = kCl > 1 ? cluster_rank() ^ 1 : 0;\n"
     "  auto release_kv = [&](uint32_t bar) {\n"
     "    __syncwarp();\n"
     "    if (lane == 0) {\n"
     "      mbar_arrive(bar);\n"
     "      if constexpr (kCl > 1) mbar_arrive_peer(bar, peer);\n"
     "    }\n"
     "  };\n"),
    ("template <int D, bool kTma>\nint prepare_sm90() {",
     "template <int D, bool kTma, int kCl = 1>\nint prepare_sm90() {"),
    ("cudaFuncSetAttribute(attn_fwd_sm90<D, kTma>,", "cudaFuncSetAttribute(attn_fwd_sm90<D, kTma, kCl>,"),
    ("  if (tma) {\n    attn_fwd_sm90<D, true><<<",
     "  // wg_cluster=2: tiles in pairs of one K/V group (m_fastest sections of an even tile count)\n"
     "  bool clustered = false;\n"
     "  if constexpr (D >= 128) {\n"
     "    if (tma && !a->causal && s.tiles % 2 == 0 && (s.l2_units * s.m_blocks) % 2 == 0 && grid % 2 == 0) {\n"
     "      const int ce = prepare_sm90<D, true, 2>();\n"
     "      if (ce != cudaSuccess) return ce;\n"
     "      cudaLaunchConfig_t cfg{};\n"
     "      cfg.gridDim = dim3(unsigned(grid));\n"
     "      cfg.blockDim = dim3(unsigned(Sm90Cfg<D>::kThreads));\n"
     "      cfg.dynamicSmemBytes = Sm90Cfg<D>::kSmem;\n"
     "      cfg.stream = stream;\n"
     "      cudaLaunchAttribute attr[1];\n"
     "      attr[0].id = cudaLaunchAttributeClusterDimension;\n"
     "      attr[0].val.clusterDim.x = 2;\n"
     "      attr[0].val.clusterDim.y = 1;\n"
     "      attr[0].val.clusterDim.z = 1;\n"
     "      cfg.attrs = attr;\n"
     "      cfg.numAttrs = 1;\n"
     "      const cudaError_t le = cudaLaunchKernelEx(&cfg, attn_fwd_sm90<D, true, 2>, *a, s, maps);\n"
     "      if (le != cudaSuccess) return le;\n"
     "      clustered = true;\n"
     "    }\n"
     "  }\n"
     "  if (clustered) {\n"
     "  } else if (tma) {\n    attn_fwd_sm90<D, true><<<"),
)
# The K/V copies of either copy order: the panels this CTA copies, each into every CTA of the cluster.
_KV_PANEL_LOOPS = (
    ("      for (int p = 0; p < P; ++p)\n        tma_load_4d(k_s + st",
     "      for (int p = rank; p < P; p += kCl)\n        kv_load<kCl>(k_s + st"),
    ("      for (int p = 0; p < P; ++p)\n        tma_load_4d(v_s + st",
     "      for (int p = rank; p < P; p += kCl)\n        kv_load<kCl>(v_s + st"),
    ("      for (int p = 0; p < P; ++p) tma_load_4d(dst + p * BN * 128, map,",
     "      for (int p = rank; p < P; p += kCl) kv_load<kCl>(dst + p * BN * 128, map,"),
)


def _with_cluster(text: str) -> str:
    """wg_cluster=2 on the whole rendered file (after every other Hopper edit)."""
    text = _swap(text, _PRODUCER_HEAD, _CLUSTER_DEVICE + _PRODUCER_HEAD)
    text = _swap_each(text, _CLUSTER_EDITS)
    # the stages' empty barriers count both CTAs' consumer warps (kWgConsumers, or WgC<D>::HC with
    # wg_wide_d64)
    text, n = re.subn(r"(      mbar_init\(k_empty\(s\), 4 \* [\w:<>]+)\);\n"
                      r"(      mbar_init\(v_empty\(s\), 4 \* [\w:<>]+)\);\n",
                      r"\1 * kCl);  // wg_cluster: both CTAs' consumer warps\n\2 * kCl);\n", text)
    if n != 1:
        raise RuntimeError(f"template: expected one pair of empty-barrier inits, found {n}")
    loops = 0
    for old, new in _KV_PANEL_LOOPS:
        loops += text.count(old)
        text = text.replace(old, new)
    if loops not in (1, 2):
        raise RuntimeError(f"template: expected the K/V copy loops of one copy order, found {loops}")
    for bar in ("k_empty(", "v_empty("):
        if text.count(f"release({bar}") < 2:
            raise RuntimeError(f"template: expected the consumers' releases of {bar!r}")
        text = text.replace(f"release({bar}", f"release_kv({bar}")
    return text


# wg_kv_fence=cp_async (wg_load=tma): the consumers fence the async proxy after a K/V block's full
# barrier only in the cp.async build. There the producer's cp.async writes are generic-proxy writes
# that wgmma (an async-proxy reader) must be fenced from; the copy engine's writes are async-proxy
# writes whose completion the barrier's transaction count already orders before the wait returns
# (CUTLASS and FA3 issue no fence there). The fence compiles to MEMBAR.ALL.CTA + FENCE.VIEW.ASYNC,
# twice per block, inside the warpgroup's turn to issue its wgmmas.
_KV_FENCES = tuple(
    (f"      mbar_wait({bar}(st), ((gb + uint32_t(j)) / S) & 1u);\n      fence_async_smem();\n",
     f"      mbar_wait({bar}(st), ((gb + uint32_t(j)) / S) & 1u);\n"
     "      if constexpr (!kTma) fence_async_smem();  // wg_kv_fence=cp_async: copy-engine data needs none\n")
    for bar in ("k_full", "v_full"))


# wg_kv_wait=first (wg_load=tma, wg_pingpong): in the copy-engine build only the first consumer
# warpgroup in the turn order (c == 0) waits for a K/V block's full barrier; the others issue their
# wgmmas on that block only after it has passed them the turn (named barriers, which order memory
# among the warpgroups), so the block has landed by then. FA3's consumers do the same. The wait is
# a shared-memory barrier probe and a branch on its result, inside each warpgroup's turn.
_KV_WAITS = tuple(
    (f"      mbar_wait({bar}(st), ((gb + uint32_t(j)) / S) & 1u);\n",
     f"      if (!kTma || c == 0) mbar_wait({bar}(st), ((gb + uint32_t(j)) / S) & 1u);  // wg_kv_wait=first\n")
    for bar in ("k_full", "v_full"))


# wg_k_wait=before_turn (wg_kv_wait=each): a consumer warpgroup waits for block j's K before it
# takes its turn to issue wgmmas, not inside the turn (FA3's order: its consumer_wait on K comes
# before the scheduler barrier; V's wait stays between the two products). The turn then holds the
# two wgmma chains and V's wait only. Stop 33's profile of wgmma-tma-j against FA3 (d128 causal
# s8192) put 32% of our samples in the turn's 125 instructions against FA3's 15% in its 27.
# Measured on wgmma-tma-j (stop 33): no change, with or without wg_desc=hoist (docs/family.md).
_K_WAIT_LINE = "      mbar_wait(k_full(st), ((gb + uint32_t(j)) / S) & 1u);\n"
_K_WAIT_BEFORE_TURN = (
    ("    // S = Q K^T of block j, issued (not waited for).\n",
     "    // wg_k_wait=before_turn: block j's K landed, waited for before the turn\n"
     "    auto wait_k = [&](int j) { "
     "mbar_wait(k_full(int((gb + uint32_t(j)) % S)), ((gb + uint32_t(j)) / S) & 1u); };\n"
     "    // S = Q K^T of block j, issued (not waited for).\n"),
    ("        turn_wait();\n        issue_qk(0);\n",
     "        wait_k(0);\n        turn_wait();\n        issue_qk(0);\n"),
    ("          turn_wait();\n          issue_qk(j);\n",
     "          wait_k(j);\n          turn_wait();\n          issue_qk(j);\n"),
    ("        turn_wait();\n        issue_qk(j);\n",
     "        wait_k(j);\n        turn_wait();\n        issue_qk(j);\n"),
)


def _with_k_wait_before_turn(text: str) -> str:
    """wg_k_wait=before_turn on the Hopper section (issue_qk keeps the stage, loses the wait)."""
    qk = text.index("    auto issue_qk = [&](int j) {\n")
    end = text.index("    };\n", qk)
    body = text[qk:end]
    if body.count(_K_WAIT_LINE) != 1:
        raise RuntimeError("template: expected issue_qk's wait for K")
    text = text[:qk] + body.replace(_K_WAIT_LINE, "") + text[end:]
    return _swap_each(text, _K_WAIT_BEFORE_TURN)


# wg_v_release=mid_softmax (wg_overlap): in the overlapped loop, block j - 1's P V (issued in the
# turn after block j's S) is waited for, and its V stage released, inside block j's softmax instead
# of after it. The source calls it after the first of each thread's two rows; ptxas places the wait
# after both rows' maxima, before the exponentials (a probe of V's full barrier ends its basic block
# there: without the probe it moved the wait to the softmax's start). The producer copies V of
# block j + 1 into that stage, so the copy can start earlier. FA3's SASS waits for its P V after
# the maxima and 13 of its 66 exp2. Measured on wgmma-tma-j (stop 33): slower, see docs/family.md.
_V_RELEASE_MID = (
    ("    auto softmax = [&](int j, float (&alpha)[2], bool& any_rescale, auto masked_tag) {\n",
     "    auto softmax = [&](int j, float (&alpha)[2], bool& any_rescale, auto masked_tag, auto mid) {\n"),
    ("        l_run[h] = l_run[h] * al + rs;\n      }\n    };\n",
     "        l_run[h] = l_run[h] * al + rs;\n"
     "        if (h == 0) mid();  // wg_v_release=mid_softmax: between the two rows\n      }\n    };\n"),
    ("    auto softmax_any = [&](int j, float (&alpha)[2], bool& any_rescale) {\n",
     "    auto softmax_any = [&](int j, float (&alpha)[2], bool& any_rescale, auto mid) {\n"),
    ("          softmax(j, alpha, any_rescale, FalseTag{});\n",
     "          softmax(j, alpha, any_rescale, FalseTag{}, mid);\n"),
    ("        softmax_any(0, alpha, any);\n",
     "        softmax_any(0, alpha, any, [] {});  // no P V in flight yet\n"),
    ("          softmax_any(j, alpha, any);\n          wg_wait0();\n          wg_fence_regs(o);\n"
     "          release(v_empty(slot(j - 1)));\n",
     "          softmax_any(j, alpha, any, [&] {  // P V of block j - 1: done, and its V stage free\n"
     "            wg_fence_regs(s);  // the first row's probabilities first (else the wait moves up)\n"
     "            // a probe of V's full barrier (passed already: its next fill waits for this release)\n"
     "            // ends ptxas's basic block, which would otherwise hoist the wait above the first row\n"
     "            mbar_wait(v_full(slot(j - 1)), ((gb + uint32_t(j - 1)) / S) & 1u);\n"
     "            wg_wait0();\n            wg_fence_regs(o);\n            release(v_empty(slot(j - 1)));\n"
     "          });\n"),
    ("        softmax_any(j, alpha, any);\n        rescale(alpha, any);\n",
     "        softmax_any(j, alpha, any, [] {});\n        rescale(alpha, any);\n"),
)


# wg_v_release=before_softmax (wg_overlap): block j - 1's P V waited for, and its V stage released,
# before block j's softmax starts: the earliest release, the softmax behind both products.
_V_RELEASE_BEFORE = (
    "          softmax_any(j, alpha, any);\n          wg_wait0();\n          wg_fence_regs(o);\n"
    "          release(v_empty(slot(j - 1)));\n",
    "          wg_wait0();  // wg_v_release=before_softmax: P V of block j - 1 first, its V stage free\n"
    "          wg_fence_regs(o);\n          release(v_empty(slot(j - 1)));\n          softmax_any(j, alpha, any);\n",
)


def _with_v_release_mid(text: str) -> str:
    """wg_v_release=mid_softmax on the Hopper section."""
    text = _swap(text, "softmax(j, alpha, any_rescale, TrueTag{});\n",
                 "softmax(j, alpha, any_rescale, TrueTag{}, mid);\n", count=2)
    return _swap_each(text, _V_RELEASE_MID)


# wg_p_buffers=2 (wg_overlap, wg_load=tma; d128 and d256): two register sets for P's bf16
# fragments, the block loop unrolled by two so that each names its set. Block j's softmax packs
# each row's probabilities beside its exponentials into the set block j - 1's P V (in flight) does
# not read; with one set the packing waits for that P V, after the last exponential (stop 33's
# SASS: the wait, the vote and 32 F2FP alone after 66 MUFU, where FA3 runs its packing in the
# exponentials' shadow). The pack stays inside the softmax's basic block: ptxas sinks a pack
# written after it to its use, past the wait. d64's three consumer warpgroups (160 registers) and
# the cp.async build (a call no tensor map describes) keep one set: both spill with two.
_P_BUFFER_DECL = (
    "    uint32_t pf[KN][4];  // P of the block whose P V is next, as bf16 A fragments\n",
    "    uint32_t pf[KN][4];  // P of the block whose P V is next, as bf16 A fragments\n"
    "    // wg_p_buffers=2: P's second register set (d128, d256, the copy-engine build)\n"
    "    constexpr bool kTwoP = D >= 128 && kTma;\n"
    "    uint32_t pg[kTwoP ? KN : 1][4];\n",
)
_P_BUFFER_EDITS = (
    ("    auto issue_pv = [&](int j) {\n",
     "    auto issue_pv = [&](int j, const uint32_t (&pa)[KN][4]) {\n"),
    ("wgmma_rs<D>(o, pf[kk], ", "wgmma_rs<D>(o, pa[kk], "),
    # a pointer, not a reference to the array: cicc 13.0 crashed on the generic lambda with one
    ("    auto softmax = [&](int j, float (&alpha)[2], bool& any_rescale, auto masked_tag) {\n",
     "    auto softmax = [&](int j, float (&alpha)[2], bool& any_rescale, auto masked_tag, uint32_t (*pn)[4]) {\n"),
    ("            s[nt * 4 + 2 * h + e] = pv;\n            rs += pv;\n          }\n",
     "            s[nt * 4 + 2 * h + e] = pv;\n            rs += pv;\n          }\n"
     "        if constexpr (kTwoP) {  // wg_p_buffers=2: the row's P packed beside its exponentials\n"
     "#pragma unroll\n"
     "          for (int nt = 0; nt < NT; ++nt)\n"
     "            pn[nt / 2][(nt & 1) * 2 + h] = pack_bf16(s[nt * 4 + 2 * h], s[nt * 4 + 2 * h + 1]);\n"
     "        }\n"),
    ("    auto softmax_any = [&](int j, float (&alpha)[2], bool& any_rescale) {\n",
     "    auto softmax_any = [&](int j, float (&alpha)[2], bool& any_rescale, uint32_t (*pn)[4]) {\n"),
    ("          softmax(j, alpha, any_rescale, FalseTag{});\n",
     "          softmax(j, alpha, any_rescale, FalseTag{}, pn);\n"),
    ("        softmax_any(0, alpha, any);\n        pack();\n        for (int j = 1; j < nb; ++j) {\n",
     "        softmax_any(0, alpha, any, pf);\n"
     "        if constexpr (kTwoP) {\n"
     "          // wg_p_buffers=2: block j's softmax packs into the set P V of block j - 1 does not read\n"
     "          auto step = [&](int j, uint32_t (&pn)[KN][4], const uint32_t (&pp)[KN][4]) {\n"
     "            turn_wait();\n"
     "            issue_qk(j);\n"
     "            issue_pv(j - 1, pp);\n"
     "            turn_pass();\n"
     "            asm volatile(\"wgmma.wait_group.sync.aligned 1;\\n\" ::: \"memory\");\n"
     "            wg_fence_regs(s);\n"
     "            release(k_empty(slot(j)));\n"
     "            if (j == nb - 1) release_q();\n"
     "            softmax_any(j, alpha, any, pn);\n"
     "            wg_wait0();\n"
     "            wg_fence_regs(o);\n"
     "            release(v_empty(slot(j - 1)));\n"
     "            rescale(alpha, any);\n"
     "          };\n"
     "          for (int j = 1; j < nb; j += 2) {  // odd blocks' P in pg, even blocks' in pf\n"
     "            step(j, pg, pf);\n"
     "            if (j + 1 == nb) break;\n"
     "            step(j + 1, pf, pg);\n"
     "          }\n"
     "          turn_wait();\n"
     "          if ((nb - 1) & 1) {\n"
     "            issue_pv(nb - 1, pg);\n"
     "          } else {\n"
     "            issue_pv(nb - 1, pf);\n"
     "          }\n"
     "          turn_pass();\n"
     "        } else {\n"
     "        pack();\n"
     "        for (int j = 1; j < nb; ++j) {\n"),
    ("          issue_pv(j - 1);\n", "          issue_pv(j - 1, pf);\n"),
    ("        turn_wait();\n        issue_pv(nb - 1);\n        turn_pass();\n",
     "        turn_wait();\n        issue_pv(nb - 1, pf);\n        turn_pass();\n        }\n"),
    ("        softmax_any(j, alpha, any);\n        rescale(alpha, any);\n        pack();\n",
     "        softmax_any(j, alpha, any, pf);\n        rescale(alpha, any);\n"
     "        if constexpr (!kTwoP) pack();  // wg_p_buffers=2: packed in the softmax (no P V in flight)\n"),
    ("        issue_pv(j);\n", "        issue_pv(j, pf);\n"),
)


def _with_p_buffers(text: str) -> str:
    """wg_p_buffers=2 on the Hopper section (the overlapped loop as the template writes it)."""
    text = _swap(text, "softmax(j, alpha, any_rescale, TrueTag{});\n",
                 "softmax(j, alpha, any_rescale, TrueTag{}, pn);\n", count=2)
    text = _swap(text, "          softmax_any(j, alpha, any);\n", "          softmax_any(j, alpha, any, pf);\n")
    return _swap_each(text, (_P_BUFFER_DECL, *_P_BUFFER_EDITS))


# wg_desc=hoist (after wg_desc=offset's edits): Q's descriptors are formed once per tile, before
# the block loop, where the head dim's S = Q K^T has at most 8 k16 steps (d64, d128). ptxas then
# keeps each step's Q half in a uniform-register quad of its own and writes only K's half before
# the chain, which issues back to back: FA3's SASS. Formed inside the loop, the descriptors were
# rebuilt every block (~25 uniform operations) and copied into one quad before every wgmma (stop
# 31's Nsight Compute source pages and cuobjdump). At d256 (16 steps) the 16 descriptors do not
# fit the uniform registers (ptxas moved them through R2UR: 79 against 26), so d256 keeps the
# loop's own.
def _with_desc_hoist(text: str) -> str:
    """wg_desc=hoist on the Hopper section (after the offset form's edits). The tile's Q buffer is
    `q_cur` with the Q ring (wg_q_stages=2) and the one buffer `q_s` without it."""
    q = "q_cur" if "wgmma_ss<BN>(s, desc_kmajor<BM>(q_cur, c * 64, kk), " in text else "q_s"
    return _swap_each(text, (
        ("    // S = Q K^T of block j, issued (not waited for).\n",
         "    // wg_desc=hoist: Q's descriptors once per tile (at most 8 steps: d64, d128)\n"
         "    constexpr bool kHoistQ = KD <= 8;\n"
         "    uint64_t qd[kHoistQ ? KD : 1];\n"
         "    if constexpr (kHoistQ) {\n"
         "#pragma unroll\n"
         f"      for (int kk = 0; kk < KD; ++kk) qd[kk] = desc_kmajor<BM>({q}, c * 64, kk);\n"
         "    }\n"
         "    auto q_desc = [&](int kk) {\n"
         "      if constexpr (kHoistQ) return qd[kk];\n"
         f"      else return desc_kmajor<BM>({q}, c * 64, kk);\n"
         "    };\n"
         "    // S = Q K^T of block j, issued (not waited for).\n"),
        (f"        wgmma_ss<BN>(s, desc_kmajor<BM>({q}, c * 64, kk), ",
         "        wgmma_ss<BN>(s, q_desc(kk), "),
    ))


# wg_idle_rows=skip: a consumer warpgroup whose 64 query rows all lie past the tile's rows (a
# decode tile holds at most 64 packed rows, so the second warpgroup of every decode tile; a
# ragged call's last tile) issues no wgmma and runs no softmax: a loop of its own, so that the
# computing loops stay as they are (wgmma inside a branch of theirs made ptxas serialize them,
# C7514). It takes the same turns (the other warpgroup's turns wait for its arrivals), waits for
# each block's full barrier before it releases the block (an arrival before the fill could count
# toward the slot's previous phase), releases its Q buffer, and its epilogue stores nothing, as
# before (its rows are past the tile's).
_IDLE_LOOP = (
    "    if constexpr (kWgOverlap) {\n      // Softmax of block j runs",
    "    const bool idle = m0 + c * 64 >= sc.mtotal;  // wg_idle_rows=skip: no row of this warpgroup\n"
    "    if (idle) {\n"
    "      auto filled = [&](uint32_t bar, int j) { mbar_wait(bar, ((gb + uint32_t(j)) / S) & 1u); };\n"
    "      if constexpr (kWgOverlap) {\n"
    "        for (int j = 0; j < nb + (nb > 0); ++j) {  // turn j: S of block j, P V of block j - 1\n"
    "          turn_wait();\n"
    "          turn_pass();\n"
    "          if (j < nb) {\n"
    "            filled(k_full(slot(j)), j);\n"
    "            release(k_empty(slot(j)));\n"
    "            if (j == nb - 1) release_q();\n"
    "          }\n"
    "          if (j > 0) {\n"
    "            filled(v_full(slot(j - 1)), j - 1);\n"
    "            release(v_empty(slot(j - 1)));\n"
    "          }\n"
    "        }\n"
    "      } else {\n"
    "        for (int j = 0; j < nb; ++j) {  // two turns a block: S, then P V\n"
    "          turn_wait();\n"
    "          turn_pass();\n"
    "          filled(k_full(slot(j)), j);\n"
    "          release(k_empty(slot(j)));\n"
    "          if (j == nb - 1) release_q();\n"
    "          turn_wait();\n"
    "          turn_pass();\n"
    "          filled(v_full(slot(j)), j);\n"
    "          release(v_empty(slot(j)));\n"
    "        }\n"
    "      }\n"
    "    } else if constexpr (kWgOverlap) {\n      // Softmax of block j runs",
)


def _with_desc_offset(text: str) -> str:
    """wg_desc=offset on the Hopper section."""
    return _swap_each(text, _DESC_EDITS)


# wg_solo_decode (wg_load=tma, wg_decode=wgmma): a call whose packed query rows fit the first
# consumer warpgroup (sc.mtotal <= 64, so one m block and no row for any other warpgroup: decode)
# runs a second instantiation of the copy-engine kernel, kSolo, launched with 256 threads: the
# producer warpgroup and one consumer warpgroup. Its empty barriers expect that warpgroup's four
# warps, it takes no turns (a named barrier of 256 threads would wait for a warpgroup that is not
# there), and it keeps the registers it was compiled with (no setmaxnreg: nothing to hand over).
# The shared-memory layout, the tile order and the tensor maps are the ordinary instantiation's
# (BM stays 64 x wg_consumers; the rows of Q past the first warpgroup's are loaded as before and
# nothing reads them), so the host plans the call as before. Every other call runs the kSolo = false
# instantiation, whose SASS is the file's without the knob. Why: FA3 runs decode at head_dim 128 on
# one MMA warpgroup (use_one_mma_wg); the second warpgroup's empty rows and the turns it shares cost
# the call. Stop 36: +1.0% on decode against wgmma-tma-k (docs/family.md).
_SOLO_HEAD = (
    "template <int D, bool kTma>\n__global__ void __launch_bounds__(Sm90Cfg<D>::kThreads, 1) attn_fwd_sm90(\n"
    "    const SocraticAttentionArgs a, const Sched sc, const __grid_constant__ Sm90Maps maps) {\n"
    "  using C = Sm90Cfg<D>;\n",
    "template <int D, bool kTma, bool kSolo = false>\n"
    "__global__ void __launch_bounds__(kSolo ? 256 : Sm90Cfg<D>::kThreads, 1) attn_fwd_sm90(\n"
    "    const SocraticAttentionArgs a, const Sched sc, const __grid_constant__ Sm90Maps maps) {\n"
    "  using C = Sm90Cfg<D>;\n"
    "  constexpr int HC = kSolo ? 1 : {hc};  // wg_solo_decode: consumer warpgroups launched\n",
)
_SOLO_HOST = (
    ("template <int D, bool kTma>\nint prepare_sm90() {",
     "template <int D, bool kTma, bool kSolo = false>\nint prepare_sm90() {"),
    ("cudaFuncSetAttribute(attn_fwd_sm90<D, kTma>,", "cudaFuncSetAttribute(attn_fwd_sm90<D, kTma, kSolo>,"),
    ("  if (tma) {\n    attn_fwd_sm90<D, true><<<",
     "  if (tma && s.mtotal <= 64) {  // wg_solo_decode: every row in the first consumer warpgroup\n"
     "    const int se = prepare_sm90<D, true, true>();\n"
     "    if (se != cudaSuccess) return se;\n"
     "    attn_fwd_sm90<D, true, true><<<grid, 256, Sm90Cfg<D>::kSmem, stream>>>(*a, s, maps);\n"
     "  } else if (tma) {\n    attn_fwd_sm90<D, true><<<"),
)


def _with_solo(text: str, k: Knobs) -> str:
    """wg_solo_decode on a file with the copy-engine Hopper kernel (after every other edit of the
    kernel and of its launch: the dynamic scheduler's counter comes before the launch it edits).
    The consumer count is `WgC<D>::HC` where wg_wide_d64 gave each head dim its own, else
    `kWgConsumers`; the turns' own arithmetic (which consumer is next) is left as it is, inside the
    `HC > 1` branches the one-consumer instantiation discards."""
    hc = "WgC<D>::HC" if k.wg_wide_d64 else "kWgConsumers"
    text = _swap(text, _SOLO_HEAD[0], _SOLO_HEAD[1].replace("{hc}", hc))
    # the empty barriers: Q's, K's and V's, and the second Q buffer's with wg_q_stages=2
    text = _swap(text, f", 4 * {hc});", ", 4 * HC);", 4 if k.wg_q_stages == 2 else 3)
    text = _swap(text, f"if constexpr ({hc} > 1) asm volatile(\"setmaxnreg.",
                 "if constexpr (HC > 1) asm volatile(\"setmaxnreg.", 2)
    text = _swap(text, "if constexpr (kWgPingpong) ", "if constexpr (kWgPingpong && HC > 1) ", 4)
    return _swap_each(text, _SOLO_HOST)


# wg_p_long_blocks (wg_p_buffers=2): the two-register-set loop only in an instantiation of its own,
# kLong, that the host picks for a call of at least N key blocks per SM (every tile's blocks over
# the SMs, as the balanced split rule counts them; one d128 block of 128 x 128 is ~1.6 us of an SM
# at FA3's rate, so 64 is ~0.1 ms). Every other call, decode's solo instantiation included, runs a
# one-set kernel (kTwoP is false there, so its loop is the one-set file's). Why: stop 34 measured
# the second set 2-3% faster on long d128 calls and ~2 us slower on every short one (the larger
# code; docs/family.md), so one kernel for both lost 0.5% overall.
_P_LONG_HOST = """// wg_p_long_blocks: whether a call is long enough for the two-register-set instantiation (kLong):
// its key blocks over every tile, per SM, at least kPLongBlocks. Only head dims with two sets.
template <int D>
bool long_call(const SocraticAttentionArgs* a, const Sched& s) {
  if constexpr (D < 128) {
    (void)a;
    (void)s;
    return false;
  } else {
    using C = Sm90Cfg<D>;
    const int sk = a->seqlen_k, offset = a->seqlen_k - a->seqlen_q;
    long long sum = 0;  // key blocks over the m blocks of one (head, batch) unit
    for (int mb = 0; mb < s.m_blocks; ++mb) {  // as sm90_tile counts them
      const int qi_last = (min((mb + 1) * C::BM, s.mtotal) - 1) / s.gp;
      int kv_hi = sk;
      if (kCausalSkip && a->causal) kv_hi = max(0, min(sk, qi_last + offset + 1));
      sum += (kv_hi + C::BN - 1) / C::BN;
    }
    return sum * s.heads_grid * a->batch >= (long long)kPLongBlocks * num_sms();
  }
}

"""


def _with_p_long(text: str, k: Knobs) -> str:
    """wg_p_long_blocks on a file with the two-set loop (after wg_solo_decode's edits, which give
    the kernel and its prepare a third template argument)."""
    solo = "false, " if k.wg_solo_decode else ""
    args = "bool kTma, bool kSolo = false" if k.wg_solo_decode else "bool kTma"
    text = _swap(text, "    constexpr bool kTwoP = D >= 128 && kTma;\n",
                 "    constexpr bool kTwoP = D >= 128 && kTma && kLong;  // wg_p_long_blocks: long calls only\n")
    text = _swap(text, f"template <int D, {args}>\n__global__ void __launch_bounds__(",
                 f"template <int D, {args}, bool kLong = false>\n__global__ void __launch_bounds__(")
    text = _swap(text, f"template <int D, {args}>\nint prepare_sm90() {{",
                 f"template <int D, {args}, bool kLong = false>\nint prepare_sm90() {{")
    kernel_args = "D, kTma, kSolo" if k.wg_solo_decode else "D, kTma"
    text = _swap(text, f"cudaFuncSetAttribute(attn_fwd_sm90<{kernel_args}>,",
                 f"cudaFuncSetAttribute(attn_fwd_sm90<{kernel_args}, kLong>,")
    text = _swap(text, "if (tma) {\n    attn_fwd_sm90<D, true><<<",
                 "if (tma && long_call<D>(a, s)) {  // wg_p_long_blocks: P's second register set\n"
                 "    if constexpr (D >= 128) {\n"
                 f"      const int le = prepare_sm90<D, true, {solo}true>();\n"
                 "      if (le != cudaSuccess) return le;\n"
                 f"      attn_fwd_sm90<D, true, {solo}true><<<grid, Sm90Cfg<D>::kThreads, Sm90Cfg<D>::kSmem, "
                 "stream>>>(*a, s, maps);\n"
                 "    }\n"
                 "  } else if (tma) {\n    attn_fwd_sm90<D, true><<<")
    return _swap(text, "template <int D>\nSched plan_sm90(", _P_LONG_HOST + "template <int D>\nSched plan_sm90(")


# wg_decode=wgmma: the Hopper kernel takes every call, decode shapes included; the mma.sync kernels
# stay in the file, unused (a call no tensor map describes takes the Hopper kernel's cp.async build).
_DECODE_USE = (
    "  return (long long)a->seqlen_q * gp > kDecodeRows;\n",
    "  (void)a;  // wg_decode=wgmma: decode shapes too\n  (void)gp;\n  return kDecodeRows > 0;\n",
)


def sm90_section(k: Knobs) -> str:
    text = TEMPLATE_SM90.read_text()
    ss = {k.wg_block_n(d) for d in HEAD_DIMS}
    rs = set(HEAD_DIMS)
    text = text.replace("//@@SM90_CONSTANTS@@", sm90_constants(k))
    if k.wg_load == "tma":
        text = _with_tma(text)
    if k.wg_q_stages != 1:
        text = _with_q_ring(text, k)
    if k.wg_wide_d64:
        text = _with_wide_d64(text)
    if k.wg_split_rule == "balanced":
        text = _with_balanced_splits(text)
    if k.wg_split_cost:
        text = _with_split_cost(text, k.wg_split_cost)
    if k.wg_epilogue in ("smem", "tma"):
        text = _with_smem_epilogue(text)
    if k.wg_epilogue == "tma":
        text = _with_tma_epilogue(text)
    if k.wg_epilogue_one_q:
        text = _swap(text, *_ONE_Q_STAGE)
    if k.wg_desc in ("offset", "hoist"):
        text = _with_desc_offset(text)
    if k.wg_desc == "hoist":
        text = _with_desc_hoist(text)
    if _stages_by_dim(k):
        text = _with_stages_by_dim(text, k)
    if k.wg_kv_fence == "cp_async":
        text = _swap_each(text, _KV_FENCES)
    if k.wg_kv_wait == "first":
        text = _swap_each(text, _KV_WAITS)
    if k.wg_kv_order == "k_ahead":
        text = _swap(text, _KV_IN_ORDER, _KV_K_AHEAD)
    if k.wg_idle_rows == "skip":
        text = _swap(text, *_IDLE_LOOP)
    if k.wg_k_wait == "before_turn":
        text = _with_k_wait_before_turn(text)
    if k.wg_v_release == "mid_softmax":
        text = _with_v_release_mid(text)
    elif k.wg_v_release == "before_softmax":
        text = _swap(text, *_V_RELEASE_BEFORE)
    if k.wg_p_buffers == 2:
        text = _with_p_buffers(text)
    if k.wg_decode == "wgmma":
        text = _swap(text, *_DECODE_USE)
    if k.wg_v_ring == "deeper":
        text = _with_deep_v(text)
    return text.replace("//@@SM90_WGMMA@@", wgmma_wrappers(ss, rs))


# wg_l2_hint (wg_load=tma): the copy engine's loads carry an L2 eviction policy (PTX createpolicy,
# the .L2::cache_hint operand of cp.async.bulk.tensor). kv_last: K and V, which every query tile of
# a head (and every head of a GQA group) reads again, are evicted last; kv_last_q_first: Q, read
# once per tile, also evicted first. Edits the load helpers, so every K/V (and Q) copy of the
# producer carries it, the cluster's multicast copies included.
def _l2_policy(kind: str) -> str:
    return (
        f"__device__ __forceinline__ uint64_t l2_policy_evict_{kind}() {{\n"
        "  uint64_t p;\n"
        f'  asm("createpolicy.fractional.L2::evict_{kind}.b64 %0, 1.0;\\n" : "=l"(p));\n'
        "  return p;\n"
        "}\n"
    )


_L2_HINT_4D = (
    "      \"cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, \"\n"
    "      \"%5}], [%6];\\n\" ::\"r\"(dst),\n"
    "      \"l\"(reinterpret_cast<uint64_t>(map)), \"r\"(c0), \"r\"(c1), \"r\"(c2), \"r\"(c3), \"r\"(bar)\n",
    "      \"cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, \"\n"
    "      \"{%2, %3, %4, %5}], [%6], %7;\\n\" ::\"r\"(dst),\n"
    "      \"l\"(reinterpret_cast<uint64_t>(map)), \"r\"(c0), \"r\"(c1), \"r\"(c2), \"r\"(c3), \"r\"(bar),\n"
    "      \"l\"(l2_policy_evict_last())\n",
)
_L2_HINT_4D_MC = (
    "      \"cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
    "[%0], [%1, \"\n"
    "      \"{%2, %3, %4, %5}], [%6], %7;\\n\" ::\"r\"(dst),\n"
    "      \"l\"(reinterpret_cast<uint64_t>(map)), \"r\"(c0), \"r\"(c1), \"r\"(c2), \"r\"(c3), \"r\"(bar), "
    "\"h\"(mask)\n",
    "      \"cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster\"\n"
    "      \".L2::cache_hint [%0], [%1, {%2, %3, %4, %5}], [%6], %7, %8;\\n\" ::\"r\"(dst),\n"
    "      \"l\"(reinterpret_cast<uint64_t>(map)), \"r\"(c0), \"r\"(c1), \"r\"(c2), \"r\"(c3), \"r\"(bar), "
    "\"h\"(mask),\n"
    "      \"l\"(l2_policy_evict_last())\n",
)
_L2_HINT_5D = (
    "      \"cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, \"\n"
    "      \"%5, %6}], [%7];\\n\" ::\"r\"(dst),\n"
    "      \"l\"(reinterpret_cast<uint64_t>(map)), \"r\"(c0), \"r\"(c1), \"r\"(c2), \"r\"(c3), \"r\"(c4), \"r\"(bar)\n",
    "      \"cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, \"\n"
    "      \"{%2, %3, %4, %5, %6}], [%7], %8;\\n\" ::\"r\"(dst),\n"
    "      \"l\"(reinterpret_cast<uint64_t>(map)), \"r\"(c0), \"r\"(c1), \"r\"(c2), \"r\"(c3), \"r\"(c4), \"r\"(bar),\n"
    "      \"l\"(l2_policy_evict_first())\n",
)


def _with_l2_hint(text: str, hint: str) -> str:
    """wg_l2_hint on a file with the copy-engine producer (after wg_cluster's edits)."""
    policies = ("last", "first") if hint == "kv_last_q_first" else ("last",)
    text = _swap(text, "struct Sm90Maps {\n", "// wg_l2_hint: the L2 eviction policies of the copy engine's loads.\n"
                 + "".join(_l2_policy(p) for p in policies) + "struct Sm90Maps {\n")
    text = _swap(text, *_L2_HINT_4D)
    if "tma_load_4d_mc(" in text:
        text = _swap(text, *_L2_HINT_4D_MC)
    if hint == "kv_last_q_first":
        text = _swap(text, *_L2_HINT_5D)
    return text


# wg_l2_promotion (wg_load=tma): the L2 promotion of every tensor map the host encodes (Q, K, V, O).
# 256 (the template's): a copy's 128-byte request makes L2 fetch the 256 bytes around it; 128: the
# request's line only (CUTLASS's default, so FA3's); 0: no promotion. Why: Nsight Compute on
# decode-gemma2-9b-tp1-q4-b64-k8192 (stop 39) had both kernels at 96% of L2 throughput, this one
# moving 4.05 TB/s from DRAM with a 26% L2 hit rate and FA3 4.45 TB/s with 0.8%. The likeliest
# reading (not isolated further): the promoted halves are fetched ahead and then requested again by
# the next box of the block, so L2 does more work per DRAM byte; 128 gives +3% on decode.
_L2_PROMOTION = {128: "CU_TENSOR_MAP_L2_PROMOTION_L2_128B", 0: "CU_TENSOR_MAP_L2_PROMOTION_NONE"}


def _with_l2_promotion(text: str, promotion: int) -> str:
    """wg_l2_promotion on a file with the copy-engine build's map encoder."""
    return _swap(text, "CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,",
                 f"CU_TENSOR_MAP_SWIZZLE_128B, {_L2_PROMOTION[promotion]},  // wg_l2_promotion")


# wg_combine_pdl (split_kv): the Hopper launch path starts the combine kernel behind a split call
# as a programmatic dependent of the attention kernel (cudaLaunchKernelEx with programmatic stream
# serialization). The attention kernel's CTAs allow it at their start (griddepcontrol
# .launch_dependents), so the combine grid is launched once every CTA has started and its CTAs
# take SMs as the attention CTAs leave them, instead of after the stream's kernel boundary; each
# combine CTA first waits (griddepcontrol.wait) until the attention grid has completed and its
# writes are visible. Launched the ordinary way (the mma.sync path), the wait returns at once.
_PDL_WAIT = "  asm volatile(\"griddepcontrol.wait;\\n\" ::: \"memory\");  // wg_combine_pdl: the partials are in\n"
_PDL_HOST = """// wg_combine_pdl: a combine kernel launched as a programmatic dependent of the kernel before it.
template <typename Kernel>
cudaError_t launch_combine_pdl(Kernel kernel, int grid, const SocraticAttentionArgs* a, const Sched& s,
                               cudaStream_t stream) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(grid));
  cfg.blockDim = dim3(128u);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, *a, s);
}

"""


def _with_combine_pdl(text: str) -> str:
    """wg_combine_pdl on the whole rendered file (after the combine kernels' and the cluster's edits)."""
    # after the kernel's constants (the line before them names the ring depth, which knobs change)
    consts = "  constexpr int NT = BN / 8, DT = D / 8, KD = D / 16, KN = BN / 16;\n"
    text = _swap(text, consts, consts + "  asm volatile(\"griddepcontrol.launch_dependents;\\n\" ::: \"memory\");"
                 "  // wg_combine_pdl\n")
    heads = re.findall(r"__global__ void __launch_bounds__\(128\) attn_combine\w*\(const SocraticAttentionArgs a, "
                       r"const Sched sc\) \{\n", text)
    if not heads:
        raise RuntimeError("template: the combine kernels moved")
    for head in heads:
        text = _swap(text, head, head + _PDL_WAIT)
    top = "template <int D>\nint launch_any(const SocraticAttentionArgs* a, cudaStream_t stream) {\n"
    head, sep, tail = text.partition(top)
    if not sep:
        raise RuntimeError("template: launch_any moved")
    end = tail.index("\n}\n")
    body, n = re.subn(r"(attn_combine\w*<D>)<<<(int\([^;]*\)), 128, 0, stream>>>\(\*a, s\);",
                      r"if (const cudaError_t pe = launch_combine_pdl(\1, \2, a, s, stream); "
                      r"pe != cudaSuccess) return pe;",
                      tail[:end])
    if n == 0:
        raise RuntimeError("template: launch_any launches no combine kernel")
    return head + _PDL_HOST + sep + body + tail[end:]


def render(knobs: Knobs) -> str:
    """The kernel source for a valid setting (raises KnobError for an invalid one)."""
    knobs.validate()
    text = TEMPLATE.read_text()
    comment = "\n".join(
        "//   " + line for line in json.dumps(knobs.recorded(), indent=1).splitlines()
    )
    text = (
        text.replace("//@@KNOB_COMMENT@@", comment)
        .replace("//@@KNOB_CONSTANTS@@", knob_constants(knobs))
    )
    if knobs.decode_kv_warps != 1:
        text = _with_decode_kv_warps(text, knobs)
    if knobs.mma == "wgmma":
        head, anchor, tail = text.partition(SM90_ANCHOR)
        if not anchor:
            raise RuntimeError(f"template.cu.in lost the anchor {SM90_ANCHOR!r} of the Hopper section")
        tail = tail.replace("fam::launch<", "fam::launch_any<").replace("fam::workspace<", "fam::workspace_any<")
        text = head + sm90_section(knobs) + anchor + tail
        if knobs.wg_load == "tma":
            text = _swap(text, "#include <cuda_runtime.h>\n", "#include <cuda.h>\n#include <cuda_runtime.h>\n")
        if knobs.wg_l2_sections:
            text = _with_l2_sections(text, knobs)
        if knobs.wg_scheduler == "dynamic":
            text = _with_dynamic_scheduler(text)
        if knobs.wg_tile_decode == "producer":
            text = _with_published_tiles(text)
        if knobs.wg_cluster == 2:
            text = _with_cluster(text)
        if knobs.wg_l2_hint != "none":
            text = _with_l2_hint(text, knobs.wg_l2_hint)
        if knobs.wg_l2_promotion != 256:
            text = _with_l2_promotion(text, knobs.wg_l2_promotion)
        if knobs.wg_solo_decode:
            text = _with_solo(text, knobs)
        if knobs.wg_p_long_blocks:
            text = _with_p_long(text, knobs)
    if knobs.split_combine in ("parallel", "wide", "burst"):
        text = _with_parallel_combine(text)
    if knobs.split_combine == "wide":
        text = _with_few_rows_combine(text, _COMBINE_WIDE, _COMBINE_LAUNCH_WIDE)
    if knobs.split_combine == "burst":
        text = _with_few_rows_combine(text, _COMBINE_BURST, _COMBINE_LAUNCH_BURST)
    if knobs.wg_combine_pdl:
        text = _with_combine_pdl(text)
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

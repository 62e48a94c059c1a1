"""Scheduling knobs: L2 sections, the dynamic tile scheduler, the split-KV rule and the producer's
tile decode."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness.compile import compile_kernel
from harness.static_checks import check_source
from kernels.attention.family import (
    KNOB_LAYER,
    KNOB_SPACE,
    KnobError,
    neighbours,
    parse_knobs,
    render,
)
from kernels.attention.family.space import covering_sample
from tests.conftest import HAS_NVCC, ROOT
from tests.kernels.family_helpers import assert_spill_free, changed_lines, sched_source

needs_nvcc = pytest.mark.skipif(not HAS_NVCC, reason="nvcc not installed")


# -- wg_l2_sections: heavy first inside L2-sized sections of (head, batch, split) units ---------


def test_l2_sections_is_a_hopper_scheduling_knob_that_needs_heavy_first() -> None:
    assert KNOB_LAYER["wg_l2_sections"] == "scheduling"
    assert KNOB_SPACE["scheduling"]["wg_l2_sections"] == (0, 32, 16)
    with pytest.raises(KnobError, match="wg_l2_sections=32 belongs to the Hopper layer"):
        parse_knobs("wg_l2_sections=32")
    with pytest.raises(KnobError, match="it needs grid_order=heavy_first, not m_fastest"):
        parse_knobs("mma=wgmma,wg_l2_sections=16,grid_order=m_fastest")
    with pytest.raises(KnobError, match="not one of"):
        parse_knobs("mma=wgmma,wg_l2_sections=8")
    wg = parse_knobs("mma=wgmma,wg_load=tma")
    assert {n.wg_l2_sections for n in neighbours(wg, "scheduling")} >= {16, 32}
    k = parse_knobs("mma=wgmma,wg_load=tma,wg_q_stages=2,wg_wide_d64=true,wg_l2_sections=32")
    assert k.slug().endswith("-tma-q2-wide64-l2s32")


def test_l2_sections_render_one_decode_call_and_round_trip() -> None:
    gallery = ROOT / "kernels" / "attention" / "gallery"
    base = parse_knobs(str(gallery / "wgmma-tma-b.knobs.json"))
    k = base.replace(wg_l2_sections=16).validate()
    src = render(k)
    assert not [str(f) for f in check_source(src) if f.blocking]
    assert "constexpr int kWgL2Sections = 16;  // wg_l2_sections" in src
    assert "constexpr long long kWgL2SectionBytes = kWgL2Sections * 1024LL * 1024;" in src
    # sm90_tile is where the producers (cp.async and tensor-map) and the consumers decode a tile;
    # the host sizes the sections once per call, after the split-KV choice, into Sched::l2_units
    # (the group of query heads sharing a K/V head: heads_q / heads_kv, or 1 where the grid's
    # heads are K/V heads), so no tile pays for the sizing's 64-bit division.
    assert src.count("decode_tile_l2(tile, sc, a.batch)") == 1
    assert src.count("  int l2_units;") == 2 and "using Sched = SchedOf<(kWgL2Sections > 0), kWgDynamic>;" in src
    sizing = "    s.l2_units = l2_section_units(s, a->batch, a->seqlen_k, a->head_dim, group);\n"
    assert src.count(sizing) == 1
    assert src.index(sizing) < src.index("  if (s.tiles <= 0) return cudaSuccess;", src.index(sizing))
    assert src.index("s.splits = 1;\n      s.tiles = s.m_blocks") < src.index(sizing)
    decode = src.split("__device__ __forceinline__ TileId decode_tile_l2(", 1)[1].split("\n}\n", 1)[0]
    assert "long long" not in decode and "kWgL2SectionBytes" not in decode
    assert src.count("sm90_tile<BM, BN>(tile, a, sc)") == 3
    sm90 = src.split("struct Sm90Tile {", 1)[1]
    assert "  if constexpr (kWgL2Sections > 0) x.id = decode_tile_l2(tile, sc, a.batch);" in sm90
    header = src.split("Knob setting:", 1)[1].split("#include", 1)[0]
    record = json.loads("\n".join(line[5:] for line in header.splitlines() if line.startswith("//   ")))
    assert record["wg_l2_sections"] == 16 and parse_knobs(json.dumps(record)) == k
    # Off (the gallery files): not recorded, and Sched has no l2_units field.
    off = render(base)
    assert "wg_l2_sections" not in off.split("Knob setting:", 1)[1].split("#include", 1)[0]
    assert "constexpr int kWgL2Sections = 0;" in off and "decode_tile_l2(tile, sc, a.batch)" in off


_ORDER_MAIN = r"""
#include <cstdio>
#include <cstdlib>
int main(int argc, char** argv) {
  Sched s{};
  s.heads_grid = atoi(argv[1]); const int batch = atoi(argv[2]); s.splits = atoi(argv[3]);
  s.m_blocks = atoi(argv[4]); const int sk = atoi(argv[5]), d = atoi(argv[6]);
  const int group = argc > 7 ? atoi(argv[7]) : 1;
  const int tiles = s.m_blocks * s.heads_grid * batch * s.splits;
  s.l2_units = l2_section_units(s, batch, sk, d, group);
  for (int t = 0; t < tiles; ++t) {
    const TileId id = decode_tile_l2(t, s, batch);
    printf("%d %d %d %d\n", id.mb, id.head, id.batch, id.split);
  }
}
"""


def _section_order(tmp_path: Path, src: str) -> Any:
    """Build the rendered kernel's own Sched, TileId, l2_section_units (the host's sizing) and
    decode_tile_l2 as host code (g++) and
    return a function (heads, batch, splits, m_blocks, seqlen_k, head_dim[, group]) -> tile ids in
    order; group is the grid heads that share one K/V head (1 when omitted)."""
    import shutil
    import subprocess

    if not shutil.which("g++"):
        pytest.skip("g++ not installed")
    sched = sched_source(src)
    tile_id = "struct TileId {" + src.split("struct TileId {", 1)[1].split("};", 1)[0] + "};\n"
    start = src.index("constexpr long long kWgL2SectionBytes")
    fn = src[start:src.index("template <int BM, int BN>\n__device__ __forceinline__ Sm90Tile sm90_tile(")]
    prog = tmp_path / "order.cpp"
    prog.write_text("#include <algorithm>\nusing std::min;\n#define __device__\n#define __forceinline__ inline\n"
                    "struct float2 { float x, y; };\n" + sched + tile_id + fn + _ORDER_MAIN)
    exe = tmp_path / "order"
    subprocess.run(["g++", "-std=c++17", "-O1", "-o", str(exe), str(prog)], check=True)

    def order(*shape: int) -> list[tuple[int, ...]]:
        out = subprocess.run([str(exe), *map(str, shape)], check=True, capture_output=True, text=True).stdout
        return [tuple(int(x) for x in line.split()) for line in out.splitlines()]

    return order


def _heavy_first(heads: int, batch: int, splits: int, m_blocks: int) -> list[tuple[int, ...]]:
    """grid_order=heavy_first's decode_tile: heads fastest, then batch, split, m blocks descending."""
    out = []
    for t in range(m_blocks * heads * batch * splits):
        head, t = t % heads, t // heads
        b, t = t % batch, t // batch
        split, t = t % splits, t // splits
        out.append((m_blocks - 1 - t, head, b, split))
    return out


def _balanced(units: int, fit: int) -> int:
    """Units per section: as few sections as `fit` units each allows, of equal size."""
    fit = max(1, min(units, fit))
    sections = -(-units // fit)
    return -(-units // sections)


def test_l2_sections_are_even_so_no_small_section_runs_alone_at_the_end(tmp_path: Path) -> None:
    # ragged-d256-q4224-k4224-causal: 8 heads of 4.3 MB of K/V, 7 fit in 32 MB. Sections of 7 and 1
    # left the last head's 33 m blocks, heaviest first, to run nearly alone at the end of the call:
    # measured 0.82x of heavy_first on the H200 (stop 26), against 1.29x for the even split.
    order = _section_order(tmp_path, render(parse_knobs("mma=wgmma,wg_load=tma,wg_l2_sections=32")))
    got = order(8, 1, 1, 33, 4224, 256)
    heads_per_section = [len({h for _, h, *_ in got[i:i + 4 * 33]}) for i in range(0, len(got), 4 * 33)]
    assert heads_per_section == [4, 4]
    assert _balanced(10, 4) == 4 and _balanced(9, 4) == 3 and _balanced(512, 128) == 128


def test_l2_section_order_visits_every_tile_once_heavy_first_per_section(tmp_path: Path) -> None:
    k = parse_knobs("mma=wgmma,wg_load=tma,wg_l2_sections=32")
    order = _section_order(tmp_path, render(k))
    mb32 = 32 * 1024 * 1024
    # The gallery's short prefill, d128 s512 b32 h16: 128 units of 256 KB of K/V per 32 MB
    # section; one grid-wide order would put a head's 4 m blocks 512 tiles apart.
    for heads, batch, splits, m_blocks, sk, d in (
        (16, 32, 1, 4, 512, 128), (8, 32, 1, 4, 512, 256), (16, 16, 1, 8, 1024, 128),
        (16, 1, 1, 128, 16384, 128), (7, 5, 3, 6, 1000, 64), (8, 1, 4, 16, 65536, 128),
        (12, 11, 1, 3, 3000, 256),  # 10 units a section: the last of 14 holds 2
    ):
        got = order(heads, batch, splits, m_blocks, sk, d)
        units = heads * batch * splits
        assert sorted(got) == sorted(_heavy_first(heads, batch, splits, m_blocks)), "not a permutation"
        kv = 4 * d * -(-sk // splits)
        g = _balanced(units, mb32 // kv)
        if g == units:  # one section: exactly grid_order=heavy_first
            assert got == _heavy_first(heads, batch, splits, m_blocks)
        for sec in range(0, len(got), g * m_blocks):
            part = got[sec:sec + g * m_blocks]
            unit_ids = {(h, b, s) for _, h, b, s in part}
            # A section holds whole units (every m block of each), at most g of them, m blocks
            # descending (the heaviest causal tiles first), whose K and V fit in the budget.
            assert len(part) == len(unit_ids) * m_blocks and len(unit_ids) <= g
            assert [mb for mb, *_ in part] == sorted((mb for mb, *_ in part), reverse=True)
            assert len(unit_ids) * kv <= max(mb32, kv)
    short = order(16, 32, 1, 4, 512, 128)
    at: dict[tuple[int, int], list[int]] = {}
    for t, (_, h, b, _) in enumerate(short):
        at.setdefault((h, b), []).append(t)
    assert max(ts[-1] - ts[0] for ts in at.values()) == 3 * 128  # 3 * 512 with one section


def test_l2_sections_count_kv_heads_and_keep_a_gqa_group_in_one_section(tmp_path: Path) -> None:
    order = _section_order(tmp_path, render(parse_knobs("mma=wgmma,wg_load=tma,wg_l2_sections=32")))
    mb32 = 32 * 1024 * 1024
    # (grid heads, batch, splits, m_blocks, seqlen_k, head_dim, group): without GQA packing the grid's
    # heads are the query heads and group = heads_q / heads_kv (kv head = head / group); with it
    # they are the K/V heads and group = 1.
    for heads, batch, splits, m_blocks, sk, d, group in (
        (64, 2, 1, 32, 4096, 128, 8),   # llama3-70b tp1 s4096 b2: K/V 8 x 2 x 2 MB = 32 MB, one section
        (8, 2, 1, 32, 4096, 128, 8),    # llama3-70b tp8 (hq 8, hkv 1): 4 MB, one section
        (64, 16, 1, 8, 1024, 128, 8),   # short GQA prefill: 128 K/V units of 512 KB, 64 a section
        (8, 16, 1, 16, 16384, 128, 8),  # hkv 1, long: 8 MB units, 4 a section = 32 query heads
        (32, 2, 1, 32, 4096, 256, 4),   # hq 32, hkv 8 at d256: 4 MB units, 8 a section
        (16, 2, 1, 32, 4096, 256, 2),   # gemma2-9b tp1 (hq 16, hkv 8): 64 MB in two sections
        (28, 7, 1, 5, 3000, 128, 7),    # qwen2.5-7b-like: 21 K/V units a section, not whole batches
        (32, 1, 4, 4, 65536, 128, 4),   # split KV: (kv head, split) units of 8 MB, 4 a section
        (32, 1, 3, 2, 16384, 128, 4),   # 11 K/V units a section, across the split boundary
        (8, 4, 1, 1, 8192, 128, 1),     # packed (pack_gqa=decode: 65-128 rows, one m block) K/V heads
        (8, 1, 16, 2, 65536, 128, 1),   # packed (pack_gqa=on) and split: 128 units of 2 MB, 16 a section
        (8, 1, 3, 2, 8192, 128, 1),     # the whole K/V is exactly 32 MB (ceil(sk / 3) would not fit)
        (8, 1, 1, 33, 4224, 256, 1),    # ragged d256 q4224: 8 units of 4.3 MB, 7 fit: 4 + 4, not 7 + 1
    ):
        got = order(heads, batch, splits, m_blocks, sk, d, group)
        heavy = _heavy_first(heads, batch, splits, m_blocks)
        assert sorted(got) == sorted(heavy), "not a permutation"
        kv = 4 * d * -(-sk // splits)  # K + V bytes of one (kv head, batch, split)
        kv_units = heads // group * batch * splits
        if 4 * d * sk * (heads // group) * batch <= mb32:  # the whole K/V fits: exactly heavy_first
            assert got == heavy, (heads, batch, splits, group)
            continue
        g_kv = _balanced(kv_units, mb32 // kv)  # K/V units a section: as many as fit, evened out
        step = g_kv * group * m_blocks
        sections: dict[tuple[int, int, int], set[int]] = {}
        for n, sec in enumerate(range(0, len(got), step)):
            part = got[sec:sec + step]
            units = {(h, b, s) for _, h, b, s in part}
            kvs = {(h // group, b, s) for h, b, s in units}
            for u in kvs:
                sections.setdefault(u, set()).add(n)
            # whole units and whole groups (every query head of each K/V unit), m blocks descending
            assert len(part) == len(units) * m_blocks and len(units) == len(kvs) * group
            assert [mb for mb, *_ in part] == sorted((mb for mb, *_ in part), reverse=True)
            # budget counted per K/V unit: as many as fit in 32 MB (the last section may hold fewer)
            assert len(kvs) * kv <= max(mb32, kv)
            assert len(kvs) == g_kv or sec + step >= len(got)
        assert all(len(v) == 1 for v in sections.values()), "a GQA group split across sections"
        assert len(sections) == kv_units


@needs_nvcc
def test_l2_sections_compile_without_spills(tmp_path: Path) -> None:
    gallery = ROOT / "kernels" / "attention" / "gallery"
    src = tmp_path / "l2s.cu"
    src.write_text(render(parse_knobs(str(gallery / "wgmma-tma-b.knobs.json")).replace(wg_l2_sections=32)))
    built = compile_kernel(src, arch="sm_90a")
    assert built.info.ok, built.info.log[-2000:]
    log = built.info.log
    blocks = [b for b in log.split("Compiling entry function '")[1:] if b.startswith("_ZN3fam13attn_fwd_sm90")]
    assert len(blocks) == 5, log[-3000:]  # d128/d256 with maps and cp.async, d64 with maps only
    for b in blocks:
        assert " 0 bytes spill stores, 0 bytes spill loads" in b, b[:600]
    assert "C7510" not in log and "C7508" not in log


# -- wg_scheduler: causal tiles past the first wave go to the CTA that is free first -------------


def test_wg_scheduler_is_a_scheduling_knob_that_needs_persistent_ctas_and_the_q_ring() -> None:
    assert KNOB_LAYER["wg_scheduler"] == "scheduling"
    assert KNOB_SPACE["scheduling"]["wg_scheduler"] == ("static", "dynamic")
    for spec in ("mma=wgmma,wg_load=tma,wg_q_stages=2,wg_scheduler=dynamic",  # not persistent
                 "mma=wgmma,wg_load=tma,persistent=true,wg_scheduler=dynamic"):  # one Q buffer
        with pytest.raises(KnobError, match="it needs persistent=True and wg_q_stages=2"):
            parse_knobs(spec)
    with pytest.raises(KnobError, match="wg_scheduler='dynamic' belongs to the Hopper layer"):
        parse_knobs("persistent=true,wg_scheduler=dynamic")
    k = parse_knobs("mma=wgmma,wg_load=tma,wg_q_stages=2,persistent=true,wg_scheduler=dynamic")
    static = k.replace(wg_scheduler="static")
    for d in (64, 128, 256):  # the two tile slots
        assert k.wg_smem_bytes(d) == static.wg_smem_bytes(d) + 16
    assert k.slug().endswith("-dyn") and not static.slug().endswith("-dyn")
    assert "wg_scheduler" not in static.recorded() and k.recorded()["wg_scheduler"] == "dynamic"
    assert any(s.wg_scheduler == "dynamic" for s in covering_sample())


def test_wg_scheduler_dynamic_renders_the_claim_and_its_counter_and_static_keeps_the_bytes() -> None:
    gallery = ROOT / "kernels" / "attention" / "gallery"
    c = parse_knobs(str(gallery / "wgmma-tma-c.knobs.json"))
    assert render(c.replace(wg_scheduler="static")) == (gallery / "wgmma-tma-c.cu").read_text()
    src = render(c.replace(wg_scheduler="dynamic"))
    assert not [str(f) for f in check_source(src) if f.blocking]  # cudaMemsetAsync on the stream is allowed
    # only the producer claims, and only past the CTA's first tile (its block index)
    assert src.count("atomicAdd(sc.tile_counter, 1u)") == 1
    assert src.count("slot_store(") == 3 and src.count("slot_load(") == 2  # definitions included
    # the consumers of the copy-engine instantiation read the slot; the cp.async one never does
    assert "const bool dyn = kWgDynamic && kTma && sc.tile_counter != nullptr;" in src
    assert "constexpr bool kWgDynamic = true;  // wg_scheduler=dynamic" in src
    assert "unsigned int* tile_counter;" in src.split("using Sched = SchedOf<(kWgL2Sections > 0), kWgDynamic>;")[0]
    # the host zeroes the counter on the stream for causal calls with more tiles than CTAs, and
    # asks for its 16 bytes (after the split partials) on every call that may use it
    assert "if (tma && a->causal && s.tiles > grid) {  // wg_scheduler=dynamic" in src
    assert "cudaMemsetAsync(s.tile_counter, 0, sizeof(unsigned int), stream)" in src
    assert "if (kWgDynamic && a->causal && s.tiles > num_sms()) return ((need + 15ull) & ~15ull) + 16;" in src
    assert "static constexpr int kSlotBytes = kWgDynamic ? 2 * kSlot : 0;" in src
    assert "static constexpr int kSlot = kWgTilePublish ? 48 : 4;" in src  # one word a slot here
    assert json.loads(src.split("Knob setting:")[1].split("#include")[0].replace("//   ", ""))[
        "wg_scheduler"] == "dynamic"


@needs_nvcc
def test_the_leader_with_the_dynamic_scheduler_compiles_without_spills() -> None:
    # The claimed index comes from a global atomic in one thread; unless it is marked warp-uniform
    # (the shuffle from lane 0), ptxas keeps the tensor-map coordinates per thread and spills the
    # producer's 40 (24 at d64) registers. wgmma-tma-d has every scheduling knob of stop 26 on.
    gallery = ROOT / "kernels" / "attention" / "gallery"
    k = parse_knobs(str(gallery / "wgmma-tma-d.knobs.json"))
    assert (k.wg_scheduler, k.wg_l2_sections, k.wg_split_rule) == ("dynamic", 32, "balanced")
    built = compile_kernel(gallery / "wgmma-tma-d.cu", arch="sm_90a")
    assert built.info.ok, built.info.log[-2000:]
    log = built.info.log
    blocks = [b for b in log.split("Compiling entry function '")[1:] if b.startswith("_ZN3fam13attn_fwd_sm90")]
    assert len(blocks) == 5, log[-3000:]  # d128/d256 with maps and cp.async, d64 with maps only
    for b in blocks:
        assert " 0 bytes spill stores, 0 bytes spill loads" in b, b[:600]
    assert "C7510" not in log and "C7508" not in log


# -- wg_split_rule: the split-KV count with the least estimated makespan ------------------------

_SPLITS_MAIN = r"""
#include <cstdio>
#include <cstdlib>
static int g_sms = 132;
int num_sms() { return g_sms; }
int main(int argc, char** argv) {
  SocraticAttentionArgs a{};
  a.batch = atoi(argv[1]); a.seqlen_q = atoi(argv[2]); a.seqlen_k = atoi(argv[3]);
  a.heads_q = atoi(argv[4]); a.causal = atoi(argv[5]);
  const int bm = atoi(argv[6]), bn = atoi(argv[7]), most = atoi(argv[8]);
  g_sms = atoi(argv[9]);
  Sched s{};
  s.gp = 1; s.mtotal = a.seqlen_q; s.m_blocks = (s.mtotal + bm - 1) / bm; s.heads_grid = a.heads_q;
  printf("%d\n", balanced_splits(&a, s, bm, bn, most));
}
"""


def _balanced_splits(tmp_path: Path, src: str) -> Any:
    """The rendered file's own balanced_splits (the host planner of wg_split_rule=balanced), built
    with g++: (batch, seqlen_q, seqlen_k, heads, causal, bm, bn, most, sms) -> split count."""
    import shutil
    import subprocess

    if not shutil.which("g++"):
        pytest.skip("g++ not installed")
    contract = (ROOT / "kernels" / "attention" / "contract.h").read_text()
    args = "typedef struct {" + contract.split("typedef struct {", 1)[1].split("} SocraticAttentionArgs;")[0]
    sched = sched_source(src)
    fn = src[src.index("inline int balanced_splits("):src.index("template <int D>\nSched plan_sm90(")]
    prog = tmp_path / "splits.cpp"
    cost = "constexpr int kWgSplitCost = " + src.split("constexpr int kWgSplitCost = ")[1].split(";")[0] + ";\n"
    prog.write_text("#include <algorithm>\nusing std::min; using std::max;\nint num_sms();\n"
                    "constexpr bool kCausalSkip = true;\nstruct float2 { float x, y; };\n" + cost
                    + args + "} SocraticAttentionArgs;\n" + sched + fn + _SPLITS_MAIN)
    exe = tmp_path / "splits"
    subprocess.run(["g++", "-std=c++17", "-O1", "-o", str(exe), str(prog)], check=True)

    def splits(*shape: int) -> int:
        return int(subprocess.run([str(exe), *map(str, shape)], check=True, capture_output=True, text=True).stdout)

    return splits


def test_wg_split_rule_is_a_scheduling_knob_that_needs_split_kv() -> None:
    assert KNOB_LAYER["wg_split_rule"] == "scheduling"
    assert KNOB_SPACE["scheduling"]["wg_split_rule"] == ("fill", "balanced")
    with pytest.raises(KnobError, match="wg_split_rule=balanced chooses how many pieces"):
        parse_knobs("mma=wgmma,split_kv=off,wg_split_rule=balanced")
    k = parse_knobs("mma=wgmma,wg_split_rule=balanced")
    assert k.slug().endswith("-balsplit") and k.recorded()["wg_split_rule"] == "balanced"
    assert "wg_split_rule" not in k.replace(wg_split_rule="fill").recorded()


def test_balanced_splits_fill_whole_rounds_and_keep_splitting_uneven_causal_tiles(tmp_path: Path) -> None:
    gallery = ROOT / "kernels" / "attention" / "gallery"
    c = parse_knobs(str(gallery / "wgmma-tma-c.knobs.json"))
    assert render(c.replace(wg_split_rule="fill")) == (gallery / "wgmma-tma-c.cu").read_text()
    src = render(c.replace(wg_split_rule="balanced", split_combine="parallel"))
    assert not [str(f) for f in check_source(src) if f.blocking]
    assert "want = want < kMaxSplits ? want : kMaxSplits;" in src.split("Sched plan_sm90(")[1]  # capped
    splits = _balanced_splits(tmp_path, src)
    # chunk-llama3-70b-tp8-q256-k65536 (d128: 128 x 128 tiles): 16 tiles of 512 key blocks. The fill
    # rule takes 9 splits, 144 equal tiles on 132 SMs: two rounds. 8 splits are one round of 128.
    assert splits(1, 256, 65536, 8, 1, 128, 128, 128, 132) == 8
    # chunk-llama3-8b-tp1-q256-k8192: 64 tiles; fill takes 3 (192 tiles, two rounds), 2 fill one
    assert splits(1, 256, 8192, 32, 1, 128, 128, 32, 132) == 2
    # ragged-d128-q1000-k1000-causal: 128 causal tiles of 1-8 blocks. Unsplit, the call lasts the
    # heaviest tile (8 blocks + 1), about twice the work per SM; two splits halve it
    assert splits(2, 1000, 1000, 8, 1, 128, 128, 4, 132) == 2
    # the same shape without the mask: 128 equal tiles already fill one round
    assert splits(2, 1000, 1000, 8, 0, 128, 128, 4, 132) == 1
    # on a GPU with 64 SMs the 16 chunked tiles take 4 splits (one round of 64), not 8 (two)
    assert splits(1, 256, 65536, 8, 1, 128, 128, 128, 64) == 4


def test_wg_split_cost_charges_a_split_plan_for_its_combine(tmp_path: Path) -> None:
    assert KNOB_LAYER["wg_split_cost"] == "scheduling"
    assert KNOB_SPACE["scheduling"]["wg_split_cost"] == (0, 2, 4, 8)
    with pytest.raises(KnobError, match=r"wg_split_cost=4 charges a split plan .* needs wg_split_rule=balanced"):
        parse_knobs("mma=wgmma,wg_split_cost=4")
    gallery = ROOT / "kernels" / "attention" / "gallery"
    g = parse_knobs(str(gallery / "wgmma-tma-g.knobs.json"))
    assert "wg_split_cost" not in g.recorded() and render(g) == (gallery / "wgmma-tma-g.cu").read_text()
    k = g.replace(wg_split_cost=4).validate()
    assert k.recorded()["wg_split_cost"] == 4 and "-balsplit-splitcost4-" in k.slug()
    src = render(k)
    assert not [str(f) for f in check_source(src) if f.blocking]
    planner = src.split("inline int balanced_splits(")[1].split("Sched plan_sm90(")[0]
    assert "const double combine = kWgSplitCost;" in planner and "if (n > 1) est += combine;" in planner
    assert changed_lines(render(g), src) == {"constexpr int kWgSplitCost = 0;  // wg_split_cost",
                                             "constexpr int kWgSplitCost = 4;  // wg_split_cost"}
    splits = _balanced_splits(tmp_path, src)
    # ragged-d128-q1000-k1000-causal: two splits were estimated at 6.5 blocks against 9 unsplit;
    # with the combine's 4 blocks on top (10.5) the call stays one launch
    assert splits(2, 1000, 1000, 8, 1, 128, 128, 4, 132) == 1
    # chunk-llama3-70b-tp8-q256-k65536: 16 tiles of 512 blocks still take 8 splits (65 against 513)
    assert splits(1, 256, 65536, 8, 1, 128, 128, 128, 132) == 8
    # chunk-llama3-8b-tp1-q256-k8192: 64 tiles of 64 blocks, 2 splits (one round of 128) still pay
    assert splits(1, 256, 8192, 32, 1, 128, 128, 32, 132) == 2
    # 8 blocks also keep chunk-llama3-70b-tp8-q2048-k16384 (128 tiles of ~121-128 blocks) whole
    (tmp_path / "8").mkdir()
    (tmp_path / "0").mkdir()
    eight = _balanced_splits(tmp_path / "8", render(g.replace(wg_split_cost=8).validate()))
    assert eight(1, 2048, 16384, 8, 1, 128, 128, 64, 132) == 1
    assert _balanced_splits(tmp_path / "0", render(g))(1, 2048, 16384, 8, 1, 128, 128, 64, 132) == 2


def test_wg_tile_decode_is_a_scheduling_knob_that_needs_the_dynamic_slots() -> None:
    assert KNOB_LAYER["wg_tile_decode"] == "scheduling"
    assert KNOB_SPACE["scheduling"]["wg_tile_decode"] == ("consumers", "producer")
    with pytest.raises(KnobError, match=r"wg_tile_decode=producer .* it needs wg_scheduler=dynamic"):
        parse_knobs("mma=wgmma,wg_load=tma,wg_q_stages=2,persistent=true,wg_tile_decode=producer")
    k = parse_knobs("mma=wgmma,wg_load=tma,wg_q_stages=2,persistent=true,wg_scheduler=dynamic,"
                    "wg_tile_decode=producer")
    consumers = k.replace(wg_tile_decode="consumers")
    for d in (64, 128, 256):  # two 48-byte slots instead of two words
        assert k.wg_smem_bytes(d) == consumers.wg_smem_bytes(d) + 80
    assert k.slug().endswith("-pubtile") and k.recorded()["wg_tile_decode"] == "producer"
    assert "wg_tile_decode" not in consumers.recorded()


def test_wg_tile_decode_producer_publishes_the_whole_decode_and_the_end_in_either_order() -> None:
    gallery = ROOT / "kernels" / "attention" / "gallery"
    e = parse_knobs(str(gallery / "wgmma-tma-e.knobs.json"))
    assert render(e.replace(wg_tile_decode="consumers")) == (gallery / "wgmma-tma-e.cu").read_text()
    src = render(e.replace(wg_tile_decode="producer"))
    assert not [str(f) for f in check_source(src) if f.blocking]
    assert "constexpr bool kWgTilePublish = true;  // wg_tile_decode=producer" in src
    assert "static constexpr int kSlot = kWgTilePublish ? 48 : 4;" in src  # two 48-byte slots
    # the slot's words: what tile_publish stores at each offset, tile_read loads from the same one
    publish = src.split("void tile_publish(")[1].split("\n}\n")[0]
    read = src.split("int tile_read(")[1].split("\n}\n")[0]
    stored = re.findall(r'"r"\((tile|x\.[a-z0-9_.]+|0)\)', publish)
    loaded = re.findall(r'"=r"\((tile|x\.[a-z0-9_.]+)\)', read)
    assert stored[:11] == loaded and stored[11:] == ["0"], (stored, loaded)
    fields = {"x.id.mb", "x.id.head", "x.id.batch", "x.id.split", "x.m0", "x.kv_head", "x.hbase", "x.b_lo",
              "x.nb", "x.n_full"}
    assert set(loaded) == fields | {"tile"}  # every field of Sm90Tile
    assert [int(o or 0) for o in re.findall(r"\[%\d+\+?(\d*)\]", publish)] == [0, 16, 32]
    assert [int(o or 0) for o in re.findall(r"\[%\d+\+?(\d*)\]", read)] == [0, 16, 32, 40]
    producer = src.split("void sm90_produce_tma(")[1].split("\n}\n")[0]
    consumer = src.split("// ---- consumer warpgroups")[1].split("const TileId id = x.id;")[0]
    # the producer publishes every tile and, in the static order too, the end
    assert "if constexpr (kWgTilePublish) tile_publish(bars + 8 * C::kBars + C::kSlot * (tc & 1), tile, x);" in producer
    assert "  if (kWgTilePublish || dyn) {\n" in producer
    assert "slot_store(bars + 8 * C::kBars + C::kSlot * (tc & 1), sc.tiles);" in producer
    # the copy-engine consumers read it after the Q buffer's full barrier and never decode; the
    # cp.async build (no publishing producer thread) still does
    tma, cp_async = consumer.split("if constexpr (kWgTilePublish && kTma) {")[1].split("} else {", 1)
    read_slot = "tile = tile_read(bars + 8 * C::kBars + C::kSlot * (tc & 1), x);"
    assert tma.index("mbar_wait(q_full_bar(") < tma.index(read_slot)
    assert "sm90_tile<" not in tma and "x = sm90_tile<BM, BN>(tile, a, sc);" in cp_async
    # no division of a row index without a GQA pack
    assert "r / sc.gp;" not in src.split("// ---- consumer warpgroups")[1].split("template <int D>")[0].replace(
        "sc.gp == 1 ? r : r / sc.gp", "")


@needs_nvcc
def test_the_leader_compiles_without_spills() -> None:
    # wgmma-tma-j = wgmma-tma-d + wg_epilogue=smem + wg_desc=offset + wg_decode=wgmma (wgmma-tma-e)
    # + wg_epilogue=tma + wg_tile_decode=producer (wgmma-tma-f) + wg_kv_order=k_ahead,
    # wg_stages_d64=4, wg_full_order=m_fastest (wgmma-tma-g) + wg_kv_fence=cp_async, wg_split_cost=8
    # (wgmma-tma-h) + wg_epilogue_one_q=true (wgmma-tma-i) + wg_l2_hint=kv_last
    gallery = ROOT / "kernels" / "attention" / "gallery"
    j = parse_knobs(str(gallery / "wgmma-tma-j.knobs.json"))
    i = j.replace(wg_l2_hint="none")
    assert i == parse_knobs(str(gallery / "wgmma-tma-i.knobs.json"))
    h = i.replace(wg_epilogue_one_q=False)
    assert h == parse_knobs(str(gallery / "wgmma-tma-h.knobs.json"))
    k = h.replace(wg_kv_fence="every_block", wg_split_cost=0)
    assert k == parse_knobs(str(gallery / "wgmma-tma-g.knobs.json"))
    f = k.replace(wg_kv_order="kv", wg_stages_d64=0, wg_full_order="sections")
    assert f == parse_knobs(str(gallery / "wgmma-tma-f.knobs.json"))
    assert f.replace(wg_epilogue="smem", wg_tile_decode="consumers") == parse_knobs(
        str(gallery / "wgmma-tma-e.knobs.json"))
    assert f.replace(wg_epilogue="direct", wg_desc="fields", wg_decode="mma_sync",
                     wg_tile_decode="consumers") == parse_knobs(str(gallery / "wgmma-tma-d.knobs.json"))
    assert render(k) == (gallery / "wgmma-tma-g.cu").read_text()
    assert render(h) == (gallery / "wgmma-tma-h.cu").read_text()
    assert render(i) == (gallery / "wgmma-tma-i.cu").read_text()
    assert render(j) == (gallery / "wgmma-tma-j.cu").read_text()
    assert_spill_free(gallery / "wgmma-tma-j.cu", lambda name: name.startswith("_ZN3fam13attn_fwd_sm90"), 5)

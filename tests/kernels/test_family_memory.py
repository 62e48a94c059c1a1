"""The memory layer on Hopper: tensor maps, the Q ring, the staged epilogue, L2 hints and promotion."""

from __future__ import annotations

import json
import re
from pathlib import Path

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
from tests.conftest import HAS_NVCC, ROOT
from tests.kernels.family_helpers import changed_lines

needs_nvcc = pytest.mark.skipif(not HAS_NVCC, reason="nvcc not installed")


# -- wg_load=tma: tensor maps and the copy engine ----------------------------------------------


def test_tma_load_is_a_hopper_knob_of_the_memory_layer() -> None:
    assert KNOB_LAYER["wg_load"] == "memory" and KNOB_SPACE["memory"]["wg_load"] == ("cp_async", "tma")
    with pytest.raises(KnobError, match="wg_load='tma' belongs to the Hopper layer: it needs mma=wgmma"):
        parse_knobs("wg_load=tma")
    with pytest.raises(KnobError, match="not one of"):
        parse_knobs("mma=wgmma,wg_load=bulk")
    wg = parse_knobs("mma=wgmma")
    assert any(n.wg_load == "tma" for n in neighbours(wg, "memory"))
    assert parse_knobs("mma=wgmma,wg_load=tma").slug().endswith("-pingpong-tma")


def test_tma_render_builds_maps_per_call_and_keeps_the_cp_async_fallback() -> None:
    k = parse_knobs("mma=wgmma,wg_load=tma,persistent=true")
    src = render(k)
    assert not [str(f) for f in check_source(src) if f.blocking]
    for needle in ("#include <cuda.h>", "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier",
                   "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier", "prefetch.tensormap",
                   "const __grid_constant__ Sm90Maps maps", "CU_TENSOR_MAP_SWIZZLE_128B",
                   "mbar_init(k_full(s), kTma ? 1 : 128);", "sm90_produce_tma<D, kCl>(a, sc, maps",
                   "attn_fwd_sm90<D, true><<<", "attn_fwd_sm90<D, false><<<"):
        assert needle in src, needle
    # The maps come from the call's own strides (K and V interleaved in one buffer get theirs).
    assert "stride(a->k_row_stride, a->seqlen_k)" in src and "stride(a->v_row_stride, a->seqlen_k)" in src
    # One encoder call site, the only driver function named anywhere in the file.
    assert src.count("cuTensorMapEncodeTiled(") == 1
    header = src.split("Knob setting:", 1)[1].split("#include", 1)[0]
    record = json.loads("\n".join(line[5:] for line in header.splitlines() if line.startswith("//   ")))
    assert record["wg_load"] == "tma" and parse_knobs(json.dumps(record)) == k
    # wg_load=cp_async renders the Hopper section as before: no tensor maps, no record entry.
    plain = render(parse_knobs("mma=wgmma,persistent=true"))
    assert "cuTensorMapEncodeTiled" not in plain and '"wg_load"' not in plain and "<cuda.h>" not in plain


@needs_nvcc


def test_tma_kernel_compiles_without_spills(tmp_path: Path) -> None:
    src = tmp_path / "tma.cu"
    src.write_text(render(parse_knobs("mma=wgmma,wg_load=tma,persistent=true")))
    built = compile_kernel(src, arch="sm_90a")
    log = built.info.log
    blocks = log.split("Compiling entry function '")[1:]
    sm90 = [b for b in blocks if b.startswith("_ZN3fam13attn_fwd_sm90")]
    assert len(sm90) == 6, log[-3000:]  # d64/128/256, each with tensor maps and with cp.async
    for b in sm90:
        assert " 0 bytes spill stores, 0 bytes spill loads" in b, b[:600]
    assert "C7510" not in log and "C7508" not in log


# -- wg_q_stages and wg_wide_d64: the Q ring and three consumer warpgroups at d64 ---------------


def test_q_ring_and_wide_d64_are_hopper_knobs_that_need_tensor_maps() -> None:
    assert KNOB_LAYER["wg_q_stages"] == "memory" and KNOB_SPACE["memory"]["wg_q_stages"] == (1, 2)
    assert KNOB_LAYER["wg_wide_d64"] == "tiling" and KNOB_SPACE["tiling"]["wg_wide_d64"] == (False, True)
    with pytest.raises(KnobError, match="wg_q_stages=2 belongs to the Hopper layer"):
        parse_knobs("wg_q_stages=2")
    with pytest.raises(KnobError, match="wg_q_stages=2 double-buffers Q for the copy-engine producer"):
        parse_knobs("mma=wgmma,wg_q_stages=2")
    with pytest.raises(KnobError, match="wg_wide_d64=True gives head_dim 64 a third consumer"):
        parse_knobs("mma=wgmma,wg_wide_d64=true")
    with pytest.raises(KnobError, match="wg_wide_d64=True gives head_dim 64 a third consumer"):
        parse_knobs("mma=wgmma,wg_load=tma,wg_wide_d64=true,wg_consumers=1,wg_pingpong=false")
    # Three consumers leave 160 registers: a 192-key d64 block (96 + 32 + 48 fragments) is refused.
    with pytest.raises(KnobError, match=r"wg_block_n_d64=192: S, O and P need 176 registers .* over the 128"):
        parse_knobs("mma=wgmma,wg_load=tma,wg_wide_d64=true,wg_block_n_d64=192")
    tma = parse_knobs("mma=wgmma,wg_load=tma")
    assert {n.wg_q_stages for n in neighbours(tma, "memory")} >= {2}
    assert any(n.wg_wide_d64 for n in neighbours(tma, "tiling"))
    k = parse_knobs("mma=wgmma,wg_load=tma,wg_q_stages=2,wg_wide_d64=true")
    assert k.slug().endswith("-pingpong-tma-q2-wide64")
    # A second Q tile fits beside the K/V ring at d64 and d128, not at d256 with 64-key blocks
    # (2 * 64 KB of Q + 128 KB of K/V is over 227 KB); with 32-key blocks it does.
    assert [k.wg_q_buffers(d) for d in (64, 128, 256)] == [2, 2, 1]
    assert k.replace(wg_block_n_d256=32).wg_q_buffers(256) == 2
    assert [k.wg_consumers_at(d) for d in (64, 128, 256)] == [3, 2, 2]
    # d64: two 192-row Q tiles, two stages of 128-key K and V, 2 * 2 + 4 * 2 mbarriers, slack.
    assert k.wg_smem_bytes(64) == (2 * 192 + 2 * 2 * 128) * 64 * 2 + 8 * (2 * 2 + 4 * 2) + 1024
    assert k.wg_smem_bytes(256) == (128 + 2 * 2 * 64) * 256 * 2 + 8 * (2 + 4 * 2) + 1024


def test_q_ring_and_wide_d64_render_into_the_kernel_and_round_trip() -> None:
    from kernels.attention.family.render import REGS_WIDE_CONSUMER, REGS_WIDE_PRODUCER

    k = parse_knobs("mma=wgmma,persistent=true,wg_load=tma,wg_q_stages=2,wg_wide_d64=true")
    src = render(k)
    assert not [str(f) for f in check_source(src) if f.blocking]
    for d, qs in ((64, 2), (128, 2), (256, 1)):
        assert f"struct WgQRing<{d}> {{\n  static constexpr int QS = {qs};\n}};" in src
    for needle in (
        # the consumers read this tile's buffer, wait and release its own barriers
        "desc_kmajor<BM>(q_cur, c * 64, kk)", "mbar_wait(q_full_bar(bars, tc, C::QS, S), uint32_t(tc / C::QS) & 1u);",
        "release(q_empty_bar(bars, tc, C::QS, S))",
        # both producers wait for the buffer of the tile before last, and fill this tile's buffer
        "if (tc >= C::QS) mbar_wait(q_empty_bar(bars, tc, C::QS, S), uint32_t(tc / C::QS - 1) & 1u);",
        "tma_load_5d(q_cur + p * BM * 128, &maps.q, q_full,",
        "cp_async16(q_s + uint32_t(tc % C::QS) * C::kQBytes + 2 * sw_off<BM>(row, qc), src, ok);",
        "kBarOff = QS * kQBytes + (SK + S) * kKVBytes;", "kBars = 2 * QS + 4 * S;",
        # three consumers at d64: round-robin turns, registers, no cp.async instantiation there
        "static constexpr int BM = 64 * WgC<D>::HC;", "::\"r\"(kWgWideD64 ? 1 + (c + 1) % WgC<D>::HC : 2 - c)",
        "if (c == WgC<D>::HC - 1) asm volatile(\"bar.arrive 1, 256;\\n\"",
        "if (!tma) return launch<D>(a, stream);", "} else if constexpr (!WgC<D>::kMapsOnly) {",
        "if (!sm90_maps<D>(a, gp, &maps)) return workspace<D>(a);",
    ):
        assert needle in src, needle
    assert src.count("4 * HC)") + src.count("4 * HC * kCl)") == 4
    assert "  constexpr int HC = kSolo ? 1 : WgC<D>::HC;" in src
    # 512 threads launch with 128 registers each: setmaxnreg may hand out no more than that.
    assert 128 * (REGS_WIDE_PRODUCER + 3 * REGS_WIDE_CONSUMER) <= 512 * 128
    assert f"HC = 3, RP = {REGS_WIDE_PRODUCER}, RC = {REGS_WIDE_CONSUMER};" in src
    header = src.split("Knob setting:", 1)[1].split("#include", 1)[0]
    record = json.loads("\n".join(line[5:] for line in header.splitlines() if line.startswith("//   ")))
    assert record["wg_q_stages"] == 2 and record["wg_wide_d64"] is True and parse_knobs(json.dumps(record)) == k
    # Either knob alone renders only its own part (the Q ring is constants: one buffer each without
    # it); at their defaults neither is recorded.
    q_only = render(k.replace(wg_wide_d64=False))
    assert "struct WgQRing<64> {\n  static constexpr int QS = 2;" in q_only and "struct WgC<64>" not in q_only
    assert "constexpr bool kWgWideD64 = false;  // wg_wide_d64" in q_only
    wide_only = render(k.replace(wg_q_stages=1))
    assert "WgC<64>" in wide_only and "constexpr bool kWgQRing = false;  // wg_q_stages=1" in wide_only
    assert all(f"struct WgQRing<{d}> {{\n  static constexpr int QS = 1;" in wide_only for d in (64, 128, 256))
    plain = render(k.replace(wg_q_stages=1, wg_wide_d64=False))
    assert '"wg_q_stages"' not in plain and '"wg_wide_d64"' not in plain  # the record leaves both out


@needs_nvcc
def test_q_ring_and_wide_d64_compile_without_spills(tmp_path: Path) -> None:
    gallery = ROOT / "kernels" / "attention" / "gallery"
    built = compile_kernel(gallery / "wgmma-tma-b.cu", arch="sm_90a")
    assert built.info.ok, built.info.log[-2000:]
    log = built.info.log
    blocks = log.split("Compiling entry function '")[1:]
    sm90 = {b.split("'", 1)[0] for b in blocks if b.startswith("_ZN3fam13attn_fwd_sm90")}
    # d128 and d256 with tensor maps and with cp.async; d64 (three consumers) with maps only.
    assert len(sm90) == 5 and not any(n.startswith("_ZN3fam13attn_fwd_sm90ILi64ELb0E") for n in sm90), sm90
    for b in blocks:
        if b.startswith("_ZN3fam13attn_fwd_sm90"):
            assert " 0 bytes spill stores, 0 bytes spill loads" in b, b[:600]
    assert "C7510" not in log and "C7508" not in log


# -- wg_epilogue: the output staged in the tile's Q buffer ----------------------------------------


def test_wg_epilogue_is_a_memory_knob_that_needs_the_q_ring() -> None:
    assert KNOB_LAYER["wg_epilogue"] == "memory"
    assert KNOB_SPACE["memory"]["wg_epilogue"] == ("direct", "smem", "tma")
    with pytest.raises(KnobError, match="wg_epilogue=smem stages the output in the tile's Q buffer"):
        parse_knobs("mma=wgmma,wg_load=tma,wg_epilogue=smem")
    k = parse_knobs("mma=wgmma,wg_load=tma,wg_q_stages=2,wg_epilogue=smem")
    assert k.slug().endswith("-smemepi") and k.recorded()["wg_epilogue"] == "smem"
    assert "wg_epilogue" not in k.replace(wg_epilogue="direct").recorded()
    # no shared memory of its own: it reuses the Q buffer
    assert k.wg_smem_bytes(128) == k.replace(wg_epilogue="direct").wg_smem_bytes(128)
    with pytest.raises(KnobError, match="wg_epilogue=tma stages the output in the tile's Q buffer"):
        parse_knobs("mma=wgmma,wg_load=tma,wg_epilogue=tma")
    t = k.replace(wg_epilogue="tma")
    assert t.slug().endswith("-tmaepi") and t.recorded()["wg_epilogue"] == "tma"
    assert t.wg_smem_bytes(128) == k.wg_smem_bytes(128)


def test_wg_epilogue_smem_stages_in_the_q_buffer_and_releases_it_after_the_epilogue() -> None:
    gallery = ROOT / "kernels" / "attention" / "gallery"
    d = parse_knobs(str(gallery / "wgmma-tma-d.knobs.json"))
    assert render(d.replace(wg_epilogue="direct")) == (gallery / "wgmma-tma-d.cu").read_text()
    src = render(d.replace(wg_epilogue="smem"))
    assert not [str(f) for f in check_source(src) if f.blocking]
    # staged only where the head dim has two Q buffers (the producer refills this one two tiles
    # later) and the output is not split; d256's single buffer and the split partials store directly
    stage_o = ("const bool stage_o = kWgEpilogueStaged && (C::QS == 2 || (kWgEpilogueOneQ && kTma && maps.o_ok))"
               " && sc.splits == 1;")
    assert stage_o in src
    assert "constexpr bool kWgEpilogueStaged = true;  // wg_epilogue=smem" in src
    assert "constexpr bool kWgEpilogueTma = false;" in src
    assert "if (!stage_o) release_q_now();" in src
    consumer = src.split("const bool stage_o")[1]
    # the warpgroup meets, writes 16-byte chunks, fences the generic reads, then releases the buffer
    write_out = consumer.split("wg_epilogue=smem: the warpgroup's 64 rows go out")[1].split("gb += uint32_t(nb);")[0]
    order = ["bar.sync %0, 128;", "lds_b128(", "*reinterpret_cast<uint4*>(orow + ch * 8) = v;",
             "fence_async_smem();", "release_q_now();"]
    positions = [write_out.index(x) for x in order]
    assert positions == sorted(positions)
    assert "pack_bf16(o[dt * 4 + 2 * h] * inv" in consumer  # the bf16 pairs go to shared memory
    assert consumer.count("*reinterpret_cast<__nv_bfloat162*>(orow + dt * 8 + 2 * t4)") == 1  # direct kept


def test_wg_epilogue_tma_hands_the_staged_rows_to_the_copy_engine_through_o_s_own_map() -> None:
    gallery = ROOT / "kernels" / "attention" / "gallery"
    e = parse_knobs(str(gallery / "wgmma-tma-e.knobs.json"))
    assert e.wg_epilogue == "smem" and render(e) == (gallery / "wgmma-tma-e.cu").read_text()
    src = render(e.replace(wg_epilogue="tma"))
    assert not [str(f) for f in check_source(src) if f.blocking]  # the same driver call, one more map
    assert "using Sm90Maps = Sm90MapsOf<kWgEpilogueTma>;" in src and "constexpr bool kWgEpilogueTma = true;" in src
    maps = src.split("struct Sm90MapsOf<true> {")[1].split("};")[0]
    assert "CUtensorMap o;" in maps and "int o_ok;" in maps
    # O's map is shaped as Q's, with a box of one consumer warpgroup's 64 rows; a call it cannot
    # describe (a pack that does not divide 64 rows, an unaligned pointer or stride) keeps the
    # tensor-map loads and stores O from the threads
    host = src.split("bool sm90_maps(")[1].split("\n}\n")[0]
    assert "const cuuint32_t ob[5] = {64, cuuint32_t(gp), cuuint32_t(64 / gp), 1, 1};" in host
    assert "mo->o_ok = ok && 64 % gp == 0 && (reinterpret_cast<unsigned long long>(a->o) & 15) == 0;" in host
    assert "if (mo->o_ok) mo->o_ok = encode(&mo->o, a->o, 5, qd, os, ob);" in host
    assert host.index("if (!ok) return false;") < host.index("const cuuint64_t os[4]")  # Q/K/V checked first
    # every thread fences its staged rows for the async proxy before the warpgroup meets; one thread
    # issues a store per 64-column panel and waits only until the engine has read the buffer; then
    # the buffer goes back to the producer
    consumer = src.split("const bool stage_o")[1]
    tma = consumer.split("if (kWgEpilogueTma && stage_o && kTma && maps.o_ok) {")[1].split("} else if (stage_o) {")[0]
    order = ["fence_async_smem();", "bar.sync %0, 128;", "if ((tid & 127) == 0) {",
             "tma_store_5d(&dependent<D>(maps).o,", "cp.async.bulk.commit_group;",
             "cp.async.bulk.wait_group.read 0;", "release_q_now();"]
    positions = [tma.index(x) for x in order]
    assert positions == sorted(positions)
    assert "q_cur + uint32_t(p * BM * 128 + c * 64 * 128)" in tma  # the warpgroup's rows of each panel
    # the threads' 16-byte stores stay for calls without O's map; the stores end before the CTA does
    assert "*reinterpret_cast<uint4*>(orow + ch * 8) = v;" in consumer.split("} else if (stage_o) {")[1]
    assert consumer.index("cp.async.bulk.wait_group 0;") > consumer.index("} else if (stage_o) {")
    assert "cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group" in src


def test_wg_epilogue_one_q_stages_the_one_q_buffer_head_dim_only_for_the_copy_engine() -> None:
    assert KNOB_LAYER["wg_epilogue_one_q"] == "memory"
    gallery = ROOT / "kernels" / "attention" / "gallery"
    f = parse_knobs(str(gallery / "wgmma-tma-f.knobs.json"))
    assert not f.wg_epilogue_one_q and render(f) == (gallery / "wgmma-tma-f.cu").read_text()
    with pytest.raises(KnobError, match=r"wg_epilogue_one_q=True .* it needs wg_epilogue=tma, not smem"):
        f.replace(wg_epilogue="smem", wg_epilogue_one_q=True).validate()
    k = f.replace(wg_epilogue_one_q=True).validate()
    assert k.slug().endswith("-oneq") and k.recorded()["wg_epilogue_one_q"] is True
    assert "wg_epilogue_one_q" not in f.recorded()
    assert k.wg_smem_bytes(256) == f.wg_smem_bytes(256) and k.wg_q_buffers(256) == 1  # no buffer of its own
    src = render(k)
    assert not [str(x) for x in check_source(src) if x.blocking]
    # two Q buffers stage as before; one (d256) only when the copy engine stores (the threads' stores
    # from shared memory would only add a step), and never split partials
    stage_o = ("const bool stage_o = kWgEpilogueStaged && (C::QS == 2 || (kWgEpilogueOneQ && kTma && maps.o_ok))"
               " && sc.splits == 1;")
    assert stage_o in src and "constexpr bool kWgEpilogueOneQ = true;  // wg_epilogue_one_q" in src
    assert stage_o in render(f) and "constexpr bool kWgEpilogueOneQ = false;  // wg_epilogue_one_q" in render(f)
    # the staged tile keeps its Q buffer until the epilogue: the producer's next Q load waits on it
    assert "if (!stage_o) release_q_now();" in src


# -- wg_tile_decode=producer: the producer decodes each tile once --------------------------------


# -- wg_l2_hint: an L2 eviction policy on the copy engine's loads (stop 32) ----------------------


def _tensor_loads(src: str) -> list[str]:
    """Each tensor-copy load instruction of a rendered file (up to its operands)."""
    return re.findall(r'"cp\.async\.bulk\.tensor\.\dd\.shared::cluster\.global[^\[]*', src.replace('"\n      "', ""))


def test_wg_l2_hint_puts_an_eviction_policy_on_every_copy_engine_load() -> None:
    assert KNOB_LAYER["wg_l2_hint"] == "memory"
    assert KNOB_SPACE["memory"]["wg_l2_hint"] == ("none", "kv_last", "kv_last_q_first")
    with pytest.raises(KnobError, match=r"wg_l2_hint=kv_last .* it needs wg_load=tma"):
        parse_knobs("mma=wgmma,wg_l2_hint=kv_last")
    with pytest.raises(KnobError, match="wg_l2_hint"):
        parse_knobs("wg_l2_hint=kv_last")  # a Hopper knob
    gallery = ROOT / "kernels" / "attention" / "gallery"
    i = parse_knobs(str(gallery / "wgmma-tma-i.knobs.json"))
    assert "wg_l2_hint" not in i.recorded()  # the default keeps every gallery file's bytes
    plain = render(i)
    kv = i.replace(wg_l2_hint="kv_last").validate()
    assert kv.slug().endswith("-kvlast") and kv.recorded()["wg_l2_hint"] == "kv_last"
    src = render(kv)
    assert changed_lines(plain, src) == {"constexpr bool kWgL2HintKv = false;  // wg_l2_hint=none",
                                         "constexpr bool kWgL2HintKv = true;  // wg_l2_hint=kv_last"}
    assert not [str(f) for f in check_source(src) if f.blocking]
    # each load helper holds the hinted copy (taken with the knob) and the plain one
    for helper, flag, policy, operands in (("tma_load_4d", "kWgL2HintKv", "last", "[%6], %7;"),
                                           ("tma_load_5d", "kWgL2HintQ", "first", "[%7], %8;")):
        body = src.split(f"void {helper}(")[1].split("\n}\n")[0]
        hinted, plain_copy = body.split("} else {")
        assert f"if constexpr ({flag}) {{" in hinted and f'"l"(l2_policy_evict_{policy}())' in hinted
        assert operands in hinted and "cache_hint" not in plain_copy
        assert f'asm("createpolicy.fractional.L2::evict_{policy}.b64 %0, 1.0;\\n" : "=l"(p));' in src
        assert len(_tensor_loads(body)) == 2 and len([x for x in _tensor_loads(body) if "cache_hint" in x]) == 1
    # every K and V copy of the producer goes through the helpers (kv_load: tma_load_4d, or wg_cluster's
    # multicast tma_load_4d_mc): no other 4d load in the file
    producer = src.split("void sm90_produce_tma(")[1].split("\n}\n")[0]
    assert "kv_load<kCl>(" in producer and "tma_load_4d(" not in producer
    assert src.count("cp.async.bulk.tensor.4d") == 4
    both = render(i.replace(wg_l2_hint="kv_last_q_first", wg_cluster=2).validate())
    assert "constexpr bool kWgL2HintQ = true;" in both
    mc = both.split("void tma_load_4d_mc(")[1].split("\n}\n")[0]
    hinted = mc.split("} else {")[0]
    assert "if constexpr (kWgL2HintKv) {" in hinted
    assert ".multicast::cluster.L2::cache_hint" in hinted.replace('"\n        "', "") and "[%6], %7, %8;" in hinted


# -- wg_l2_promotion: the tensor maps' L2 promotion (stop 39) ------------------------------------


def test_wg_l2_promotion_sets_the_promotion_of_every_tensor_map_the_host_encodes() -> None:
    assert KNOB_LAYER["wg_l2_promotion"] == "memory" and KNOB_SPACE["memory"]["wg_l2_promotion"] == (256, 128, 0)
    with pytest.raises(KnobError, match="wg_l2_promotion"):
        parse_knobs("wg_l2_promotion=128")  # a Hopper knob
    with pytest.raises(KnobError, match=r"wg_l2_promotion=128 .* it needs wg_load=tma"):
        parse_knobs("mma=wgmma,wg_l2_promotion=128")  # the cp.async producer has no tensor map
    gallery = ROOT / "kernels" / "attention" / "gallery"
    m = parse_knobs(str(gallery / "wgmma-tma-m.knobs.json"))
    assert "wg_l2_promotion" not in m.recorded() and m.wg_l2_promotion == 256  # every earlier file's bytes
    base = render(m)
    encoder = base.split("  auto encode = [&](CUtensorMap* map,")[1].split("\n  };\n")[0]
    assert "CU_TENSOR_MAP_SWIZZLE_128B, kL2Promotion," in encoder
    # the one promotion of the encoder, from the knob's value
    promotion = base.split("constexpr CUtensorMapL2promotion kL2Promotion = ")[1].split(";")[0]
    arms = [" ".join(arm.split()) for arm in promotion.split(":")]
    assert arms == ["kWgL2Promotion == 128 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B",
                    "kWgL2Promotion == 0 ? CU_TENSOR_MAP_L2_PROMOTION_NONE", "CU_TENSOR_MAP_L2_PROMOTION_L2_256B"]
    for value in (128, 0):
        k = m.replace(wg_l2_promotion=value).validate()
        assert k.slug().endswith(f"-prom{value}") and k.recorded()["wg_l2_promotion"] == value
        src = render(k)
        assert not [str(f) for f in check_source(src) if f.blocking]
        # one encoder for Q, K, V and O: its one promotion changes, nothing else in the file
        # (O's map is reached through mo, the maps made dependent: only wg_epilogue=tma's form has it)
        for maps, name in (("m", "q"), ("m", "k"), ("m", "v"), ("mo", "o")):
            assert f"encode(&{maps}->{name}, a->{name}, " in src
        assert changed_lines(base, src) == {"constexpr int kWgL2Promotion = 256;  // wg_l2_promotion",
                                            f"constexpr int kWgL2Promotion = {value};  // wg_l2_promotion"}
    # the gallery's wgmma-tma-n is wgmma-tma-m with 128
    n = parse_knobs(str(gallery / "wgmma-tma-n.knobs.json"))
    assert n == m.replace(wg_l2_promotion=128) and render(n) == (gallery / "wgmma-tma-n.cu").read_text()

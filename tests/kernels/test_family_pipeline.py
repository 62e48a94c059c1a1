"""The Hopper pipeline: descriptors, idle rows, key-block sizes, the K/V copy order, stages, cluster
and fences."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.static_checks import check_source
from kernels.attention.family import (
    KNOB_LAYER,
    KNOB_SPACE,
    KnobError,
    parse_knobs,
    render,
)
from kernels.attention.family.space import covering_sample
from tests.conftest import HAS_NVCC, ROOT
from tests.kernels.family_helpers import assert_spill_free, changed_lines, gallery_f_knobs

needs_nvcc = pytest.mark.skipif(not HAS_NVCC, reason="nvcc not installed")


# -- wg_desc=offset: a descriptor as the tile's plus the k-step's offset ---------------------------


def test_wg_desc_is_a_math_knob_whose_offset_form_renders_one_add_per_step() -> None:
    assert KNOB_LAYER["wg_desc"] == "math" and KNOB_SPACE["math"]["wg_desc"] == ("fields", "offset", "hoist")
    gallery = ROOT / "kernels" / "attention" / "gallery"
    d = parse_knobs(str(gallery / "wgmma-tma-d.knobs.json"))
    assert render(d.replace(wg_desc="fields")) == (gallery / "wgmma-tma-d.cu").read_text()
    k = d.replace(wg_desc="offset")
    assert k.slug().endswith("-descoff") and k.recorded()["wg_desc"] == "offset"
    assert "wg_desc" not in d.recorded()
    src = render(k)
    assert changed_lines(render(d), src) == {"constexpr bool kWgDescOffset = false;  // wg_desc=fields",
                                             "constexpr bool kWgDescOffset = true;  // wg_desc=offset"}
    assert not [str(f) for f in check_source(src) if f.blocking]
    kmajor = src.split("__device__ __forceinline__ uint64_t desc_kmajor(")[1].split("\n}\n")[0]
    mnmajor = src.split("__device__ __forceinline__ uint64_t desc_mnmajor(")[1].split("\n}\n")[0]
    assert "const uint32_t off = (kk >> 2) * (ROWS * 128) + row0 * 128 + (kk & 3) * 32;" in kmajor
    assert "if constexpr (kWgDescOffset) return wg_desc_at(tile, off, 16, 1024);" in kmajor
    assert "if constexpr (kWgDescOffset) return wg_desc_at(tile, kk * 2048, ROWS * 128, 1024);" in mnmajor
    assert "const int c = kWgDescOffset ? __shfl_sync(0xffffffffu, wg - 1, 0) : wg - 1;" in src


def test_wg_desc_offset_adds_inside_the_start_address_field_for_every_shared_address() -> None:
    # The offset form relies on (tile + off) >> 4 == (tile >> 4) + (off >> 4) inside the 14-bit
    # start-address field: true while tile + off stays below 2^18, and every wgmma kernel's shared
    # memory (with the 1024-byte alignment slack) is below that at every head dim.
    def packed(addr: int) -> int:  # wg_desc's start-address field
        return (addr & 0x3FFFF) >> 4

    def offset_form(tile: int, off: int) -> int:  # wg_desc_at's low 14 bits
        return (((tile & 0x3FFFF) >> 4) + (off >> 4)) & 0x3FFF

    for k in covering_sample():
        if k.mma != "wgmma":
            continue
        for d in (64, 128, 256):
            assert k.wg_smem_bytes(d) + 1024 < 2**18, (k.slug(), d)
    top = 233472  # the highest shared address of an sm_90 block: 227 KB dynamic + 1 KB reserved
    for tile in range(0, top, 1024):
        for off in (0, 32, 64, 96, 2048, 8192, 16384 + 96, 32768 + 2048 * 7):
            if tile + off < top:
                assert packed(tile + off) == offset_form(tile, off), (tile, off)


def test_wg_desc_hoist_forms_qs_descriptors_once_per_tile_where_they_fit() -> None:

    gallery = ROOT / "kernels" / "attention" / "gallery"
    i = parse_knobs(str(gallery / "wgmma-tma-i.knobs.json"))
    k = i.replace(wg_desc="hoist")
    assert "-deschoist-" in k.slug() and k.recorded()["wg_desc"] == "hoist"
    src = render(k)
    assert not [str(f) for f in check_source(src) if f.blocking]
    # against the offset form (i): one constant
    assert changed_lines(render(i), src) == {"constexpr bool kWgDescHoist = false;",
                                             "constexpr bool kWgDescHoist = true;",
                                             "constexpr bool kWgDescOffset = true;  // wg_desc=offset",
                                             "constexpr bool kWgDescOffset = true;  // wg_desc=hoist"}
    hoisted = src.split("    constexpr bool kHoistQ = ")[1].split("    auto issue_qk = [&](int j) {\n")[0]
    # formed before the block loop's lambdas, from the tile's Q buffer, at d64/d128 only (8 steps)
    assert hoisted.startswith("kWgDescHoist && KD <= 8;")
    assert "for (int kk = 0; kk < KD; ++kk) qd[kk] = desc_kmajor<BM>(q_cur, c * 64, kk);" in hoisted
    assert "else return desc_kmajor<BM>(q_cur, c * 64, kk);" in hoisted  # d256: the loop's own
    assert src.count("wgmma_ss<BN>(s, q_desc(kk), desc_kmajor<BN>(k_s + st * C::kKVBytes, 0, kk), kk > 0);") == 1
    # without the Q ring (wg_q_stages=1) the tile's Q buffer is the one buffer (QS = 1: q_cur is q_s)
    plain = render(parse_knobs("mma=wgmma,wg_desc=hoist"))
    assert "qd[kk] = desc_kmajor<BM>(q_cur, c * 64, kk);" in plain and "wgmma_ss<BN>(s, q_desc(kk), " in plain
    assert "struct WgQRing<128> {\n  static constexpr int QS = 1;\n};" in plain
    assert not [str(f) for f in check_source(plain) if f.blocking]


# -- wg_idle_rows=skip: a consumer warpgroup without rows only takes its turns (stop 32) ----------


def test_wg_idle_rows_skip_gives_a_warpgroup_without_rows_a_loop_without_products() -> None:
    assert KNOB_LAYER["wg_idle_rows"] == "tiling" and KNOB_SPACE["tiling"]["wg_idle_rows"] == ("compute", "skip")
    with pytest.raises(KnobError, match="wg_idle_rows"):
        parse_knobs("wg_idle_rows=skip")  # a Hopper knob
    gallery = ROOT / "kernels" / "attention" / "gallery"
    i = parse_knobs(str(gallery / "wgmma-tma-i.knobs.json"))
    assert "wg_idle_rows" not in i.recorded()
    k = i.replace(wg_idle_rows="skip").validate()
    assert k.slug().endswith("-idleskip") and k.recorded()["wg_idle_rows"] == "skip"
    src = render(k)
    assert not [str(f) for f in check_source(src) if f.blocking]
    kernel = src.split("attn_fwd_sm90(\n    const SocraticAttentionArgs a")[1].split("\n}\n")[0]
    # idle: every one of the warpgroup's 64 rows at or past the tile's packed rows
    assert "const bool idle = kWgIdleSkip && m0 + c * 64 >= sc.mtotal;" in kernel
    assert changed_lines(render(i), src) == {"constexpr bool kWgIdleSkip = false;  // wg_idle_rows=compute",
                                             "constexpr bool kWgIdleSkip = true;  // wg_idle_rows=skip"}
    idle = kernel.split("    if (idle) {\n")[1].split("    } else if constexpr (kWgOverlap) {\n")[0]
    busy = kernel.split("    } else if constexpr (kWgOverlap) {\n")[1].split("    // Epilogue:")[0]
    # no product, softmax or rescale of its own; the computing loops are the gallery file's
    for word in ("wgmma", "issue_", "softmax", "rescale(", "pack("):
        assert word not in idle, word
    assert busy in render(i)
    # the same turns as the computing loops: with the overlap nb + 1 (S of the first block, S and
    # P V of each next one, P V of the last), two a block without it
    overlap_idle, plain_idle = idle.split("      } else {\n")
    assert "for (int j = 0; j < nb + (nb > 0); ++j) {" in overlap_idle and overlap_idle.count("turn_wait();") == 1
    overlap_busy = busy.split("\n    } else {\n")[0]
    # (the loop with one set of P registers: wg_p_buffers=2's is left out)
    two_p, rest = overlap_busy.split("        if constexpr (kTwoP) {\n")
    overlap_busy = two_p + rest.split("        } else {\n          pack();\n", 1)[1]
    assert overlap_busy.count("turn_wait();") == 3 and overlap_busy.count("for (int j = 1; j < nb; ++j) {") == 1
    assert plain_idle.count("turn_wait();") == 2 and plain_idle.count("turn_pass();") == 2
    # each block's K and V released once, after its full barrier; the Q buffer after the last K
    for part, v in ((overlap_idle, "j - 1"), (plain_idle, "j")):
        assert "filled(k_full(slot(j)), j);\n" in part and part.count("release_kv(k_empty(kslot(j)));") == 1
        assert f"filled(v_full(slot({v})), {v});\n" in part and part.count(f"release_kv(v_empty(slot({v})));") == 1
        assert part.index("release_kv(k_empty(kslot(j)));") < part.index("if (j == nb - 1) release_q();")
    assert "mbar_wait(bar, ((gb + uint32_t(j)) / S) & 1u);" in idle  # the block's fill phase
    # its K/V releases go through release_kv, which with clusters reaches the peer CTA's barriers too
    assert "release(k_empty(" not in idle and idle.count("release_kv(k_empty(kslot(j)));") == 2


# -- wg_block_n_d128=176: FA3's non-causal d128 key block -----------------------------------------


@needs_nvcc
def test_176_key_blocks_at_d128_fit_the_register_budget_and_leave_one_q_buffer(tmp_path: Path) -> None:
    gallery = ROOT / "kernels" / "attention" / "gallery"
    k = parse_knobs(str(gallery / "wgmma-tma-d.knobs.json")).replace(wg_block_n_d128=176).validate()
    assert k.wg_fragment_regs(128) == 88 + 64 + 44
    assert k.wg_q_buffers(128) == 1 and k.wg_q_buffers(64) == 2  # two 176-key stages leave room for one Q
    src = tmp_path / "b176.cu"
    src.write_text(render(k))
    # with tensor maps and the cp.async fallback
    assert_spill_free(src, lambda name: name.startswith("_ZN3fam13attn_fwd_sm90ILi128E"), 2)


# -- wg_kv_order, wg_stages_d64/d128, wg_full_order, wg_cluster (stop 29) -------------------------


def test_wg_kv_order_k_ahead_copies_the_next_blocks_k_before_this_blocks_v() -> None:
    assert KNOB_LAYER["wg_kv_order"] == "memory" and KNOB_SPACE["memory"]["wg_kv_order"] == ("kv", "k_ahead")
    with pytest.raises(KnobError, match=r"wg_kv_order=k_ahead .* it needs wg_load=tma"):
        parse_knobs("mma=wgmma,wg_kv_order=k_ahead")
    f = gallery_f_knobs()
    k = f.replace(wg_kv_order="k_ahead").validate()
    assert k.slug().endswith("-kahead") and "wg_kv_order" not in f.recorded()
    src = render(k)
    assert not [str(x) for x in check_source(src) if x.blocking]
    assert "constexpr bool kWgKAhead = true;  // wg_kv_order=k_ahead" in src
    assert "constexpr bool kWgKAhead = false;  // wg_kv_order=kv" in render(f)
    # both orders are in the producer, the constant picks one
    producer = src.split("void sm90_produce_tma(")[1].split("\n}\n")[0]
    producer = producer.split("if constexpr (kWgKAhead) {")[1].split("    } else {")[0]
    assert "tma_load_4d(k_s + st" not in producer  # the block-by-block loop is the other branch
    # the copy order the rendered condition makes, for every block count: K0, K1, V0, K2, V1, ...
    cond = re.search(r"const bool is_k = (.*);\n", producer).group(1).replace("&&", "and")
    assert cond == "kb < x.nb and kb <= vb + 1"
    for nb in range(0, 7):
        kb = vb = 0
        order = []
        while vb < nb:
            if eval(cond, {}, {"kb": kb, "vb": vb, "x": type("X", (), {"nb": nb})}):
                order.append(("K", kb))
                kb += 1
            else:
                order.append(("V", vb))
                vb += 1
        want = [("K", 0)][:nb] + [x for j in range(nb) for x in ([("K", j + 1)] if j + 1 < nb else []) + [("V", j)]]
        assert order == want, (nb, order)
    # K and V keep their own stage, barriers and phase: block j's stage is j % S for both
    assert ("const uint32_t full = bars + 8 * (2 + (is_k ? 0 : S) + st), "
            "empty = bars + 8 * (2 + (is_k ? 2 : 3) * S + st);") in producer
    assert "if (gj >= R) mbar_wait(empty, ph ^ 1u);" in producer  # R: S for both rings (wg_v_ring=same)


def test_wg_stages_per_head_dim_sizes_each_ring_and_its_q_buffers() -> None:
    assert KNOB_SPACE["memory"]["wg_stages_d64"] == (0, 3, 4) and KNOB_SPACE["memory"]["wg_stages_d128"] == (0, 3)
    f = gallery_f_knobs()
    with pytest.raises(KnobError, match=r"wg_stages_d128=4 is not one of"):
        f.replace(wg_stages_d128=4).validate()
    with pytest.raises(KnobError, match=r"belongs to the Hopper layer"):
        parse_knobs("wg_stages_d64=4")
    d64 = f.replace(wg_stages_d64=4).validate()
    assert [d64.wg_stages_at(d) for d in (64, 128, 256)] == [4, 2, 2]
    assert d64.wg_q_buffers(64) == 2 and d64.wg_smem_bytes(64) > f.wg_smem_bytes(64)
    d128 = f.replace(wg_stages_d128=3).validate()
    assert d128.wg_q_buffers(128) == 1 and f.wg_q_buffers(128) == 2  # a third stage leaves room for one Q
    assert d128.wg_smem_bytes(128) <= 232448
    assert d128.recorded()["wg_stages_d128"] == 3 and "wg_stages_d64" not in d128.recorded()
    src = render(d64)
    assert "template <>\nstruct WgStages<64> {\n  static constexpr int value = 4;\n};" in src
    assert "struct WgStages<128>" not in src and "struct WgStages<256>" not in src  # kWgStages there
    assert "static constexpr int SK = WgStages<D>::value;" in src  # K's ring; V's is as deep (wg_v_ring)
    assert "kBarOff = QS * kQBytes + (SK + S) * kKVBytes;" in src and "kBars = 2 * QS + 4 * S;" in src
    assert src.count("S = C::S") == 2 and "S = kWgStages" not in src  # consumers and the producer
    src128 = render(d128)
    assert "template <>\nstruct WgQRing<128> {\n  static constexpr int QS = 1;\n};" in src128
    assert "template <>\nstruct WgStages<128> {\n  static constexpr int value = 3;\n};" in src128


def test_wg_full_order_runs_a_kv_groups_m_blocks_side_by_side_without_the_causal_mask() -> None:
    assert KNOB_LAYER["wg_full_order"] == "scheduling"
    with pytest.raises(KnobError, match=r"wg_full_order=m_fastest .* it needs wg_l2_sections"):
        parse_knobs("mma=wgmma,wg_load=tma,wg_full_order=m_fastest")
    f = gallery_f_knobs()
    src = render(f.replace(wg_full_order="m_fastest").validate())
    host = src.split("int launch_any(")[1].split("\n}\n")[0]
    assert "constexpr bool kWgFullOrderM = true;  // wg_full_order=m_fastest" in src
    line = "    if (kWgFullOrderM && !a->causal) s.l2_units = group;\n"
    # after the sections are sized, before the grid: one section per K/V group, so the order's unit
    # (r % group) and m block (r / group) walk the group's tiles with its query heads fastest
    assert host.index("s.l2_units = l2_section_units(") < host.index(line) < host.index("int grid = s.tiles;")
    order = src.split("TileId decode_tile_l2(")[1].split("\n}\n")[0]
    assert "int u = sec * G + r % gs;" in order and "id.mb = s.m_blocks - 1 - r / gs;" in order


def test_wg_cluster_pairs_tiles_and_multicasts_each_kv_copy() -> None:
    assert KNOB_LAYER["wg_cluster"] == "memory" and KNOB_SPACE["memory"]["wg_cluster"] == (1, 2)
    f = gallery_f_knobs()
    with pytest.raises(KnobError, match=r"wg_cluster=2 .* it needs wg_load=tma and wg_full_order=m_fastest"):
        f.replace(wg_cluster=2).validate()
    k = f.replace(wg_full_order="m_fastest", wg_cluster=2).validate()
    assert k.slug().endswith("-fullm-cl2") and k.recorded()["wg_cluster"] == 2
    loops = 3  # K and V of the block-by-block order, and the k_ahead loop's one copy (kWgKAhead picks)
    for kv_order in ("kv", "k_ahead"):
        src = render(k.replace(wg_kv_order=kv_order))
        assert not [str(x) for x in check_source(src) if x.blocking]  # a runtime launch, no driver call
        producer = src.split("void sm90_produce_tma(")[1].split("\n}\n")[0]
        # each CTA copies every other 64-column panel of a block, into both CTAs
        assert producer.count("for (int p = rank; p < P; p += kCl)") == loops
        assert producer.count("kv_load<kCl>(") == loops and "tma_load_4d(" not in producer
        assert "mbar_expect_tx(" in producer and "C::kKVBytes" in producer  # each CTA expects whole blocks
        # it ends once both CTAs' consumers have released its stages' last fills
        tail = producer.split("if constexpr (kCl > 1) {  // wg_cluster: every stage's")[1]
        assert "mbar_wait(bars + 8 * (2 + 2 * S + st), (last / S) & 1u);" in tail
        assert "mbar_wait(bars + 8 * (2 + 3 * S + st), (last / S) & 1u);" in tail
        kernel = src.split("attn_fwd_sm90(\n    const SocraticAttentionArgs a")[1].split("\n}\n")[0]
        assert "mbar_init(k_empty(s), 4 * HC * kCl);" in kernel
        assert kernel.index("__syncthreads();") < kernel.index("barrier.cluster.wait.acquire.aligned;")
        # every K/V release reaches the peer; the Q buffer's stays local
        assert "release(k_empty(" not in kernel and "release(v_empty(" not in kernel
        assert kernel.count("release_kv(k_empty(") >= 2 and kernel.count("release_kv(v_empty(") >= 2
        assert "mbar_arrive_peer(bar, peer);" in kernel and "release(q_empty_bar(" in kernel
        # launched as clusters of two only at d128/d256, without the causal mask, for tiles in pairs
        host = src.split("int launch_any(")[1].split("\n}\n")[0]
        assert "if constexpr (kWgCluster > 1 && D >= 128) {" in host
        assert "constexpr int kWgCluster = 2;  // wg_cluster" in src
        assert ("if (tma && !a->causal && s.tiles % 2 == 0 && (s.l2_units * s.m_blocks) % 2 == 0 && "
                "grid % 2 == 0) {") in host
        assert "attr[0].val.clusterDim.x = 2;" in host
        assert "cudaLaunchKernelEx(&cfg, attn_fwd_sm90<D, true, false, false, 2>, *a, s, maps);" in host
    assert "multicast::cluster" in src and "mapa.shared::cluster.u32" in src
    # no cluster-scope fence on each release (it would be a GPU-wide membar per arrival)
    assert "mbarrier.arrive.release.cluster" not in src


def test_wg_kv_fence_keeps_the_proxy_fence_only_where_generic_writes_fill_the_stages() -> None:
    assert KNOB_LAYER["wg_kv_fence"] == "memory"
    assert KNOB_SPACE["memory"]["wg_kv_fence"] == ("every_block", "cp_async")
    with pytest.raises(KnobError, match=r"wg_kv_fence=cp_async .* it needs wg_load=tma"):
        parse_knobs("mma=wgmma,wg_kv_fence=cp_async")
    gallery = ROOT / "kernels" / "attention" / "gallery"
    g = parse_knobs(str(gallery / "wgmma-tma-g.knobs.json"))
    assert render(g) == (gallery / "wgmma-tma-g.cu").read_text()
    k = g.replace(wg_kv_fence="cp_async").validate()
    assert k.slug().endswith("-nofence") and "wg_kv_fence" not in g.recorded()
    src = render(k)
    assert not [str(x) for x in check_source(src) if x.blocking]
    fence = "if constexpr (!kWgKvFenceCpAsync || !kTma) fence_async_smem();"
    assert changed_lines(render(g), src) == {
        "constexpr bool kWgKvFenceCpAsync = false;  // wg_kv_fence=every_block",
        "constexpr bool kWgKvFenceCpAsync = true;  // wg_kv_fence=cp_async"}
    consumer = src.split("// ---- consumer warpgroups")[1].split("// Epilogue:")[0]
    issue = {name: consumer.split(f"auto {name} = [&](int j")[1].split("};")[0]
             for name in ("issue_qk", "issue_pv")}
    for name, bar in (("issue_qk", "k_full"), ("issue_pv", "v_full")):
        body = issue[name]
        # the wait, then the fence (with the knob: only in the cp.async instantiation), then the wgmmas
        assert body.index(f"mbar_wait({bar}(st)") < body.index(fence) < body.index("wg_fence();")
        assert "\n      fence_async_smem();" not in body
    # the Q buffer keeps its fence (its tile may have staged the output there with generic stores)
    assert "mbar_wait(q_full_bar(bars, tc, C::QS, S), uint32_t(tc / C::QS) & 1u);\n    fence_async_smem();" in src


# -- wg_block_n_d256=80: FA3's d256 key block ------------------------------------------------------


def test_d256_takes_fa3s_80_key_block_with_one_q_buffer_and_two_stages() -> None:
    from kernels.attention.family.space import MAX_SMEM_BYTES, WG_MAX_FRAGMENT_REGS

    assert KNOB_SPACE["tiling"]["wg_block_n_d256"] == (64, 32, 80)
    gallery = ROOT / "kernels" / "attention" / "gallery"
    h = parse_knobs(str(gallery / "wgmma-tma-h.knobs.json"))
    k = h.replace(wg_block_n_d256=80).validate()
    # 128 query rows + 2 stages of 80-key K and V at d256, bf16: 224 KB, under the 227 KB limit
    assert k.wg_q_buffers(256) == 1 and (128 + 2 * 2 * 80) * 256 * 2 < k.wg_smem_bytes(256) <= MAX_SMEM_BYTES
    assert k.wg_fragment_regs(256) == 40 + 128 + 20 <= WG_MAX_FRAGMENT_REGS
    assert "-n128-128-80-" in k.slug() and k.recorded()["wg_block_n_d256"] == 80
    with pytest.raises(KnobError, match=r"wg_block_n_d256=80 with wg_stages=3.* over the sm_90 limit"):
        h.replace(wg_block_n_d256=80, wg_stages=3).validate()
    src = render(k)
    assert not [str(f) for f in check_source(src) if f.blocking]
    # the key block is the one constant the d256 instantiation reads; the rest of the file is h's
    assert "struct WgBlockN<256> {\n  static constexpr int value = 80;\n};" in src
    base = render(h)
    assert "struct WgBlockN<256> {\n  static constexpr int value = 64;\n};" in base
    import difflib

    diff = list(difflib.unified_diff(base.splitlines(), src.splitlines(), lineterm="", n=0))
    removed = [d[1:] for d in diff if d.startswith("-") and not d.startswith("---")]
    assert removed[:2] == ['//    "wg_block_n_d256": 64,', "  static constexpr int value = 64;"]
    # past those, only the n64 wrapper of S = Q K^T goes (d256 was its one user), and an n80 one
    # (shared-memory operands, 40 accumulators) comes
    wrapper = "\n".join(removed[2:])
    assert removed[2].startswith("__device__ __forceinline__ void wgmma_ss<64>(float (&d)[32]")
    assert "m64n64k16" in wrapper and "static constexpr" not in wrapper and "wgmma_ss<64>" not in src
    assert "void wgmma_ss<80>(float (&d)[40], uint64_t da, uint64_t db, int accumulate)" in src
    assert "wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16" in src

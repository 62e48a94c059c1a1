"""Decode and split-KV: key warps of the decode tile, the combine kernels, PDL, wg_decode."""

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
    Knobs,
    default_knobs,
    neighbours,
    parse_knobs,
    render,
)
from tests.conftest import HAS_NVCC, ROOT
from tests.kernels.family_helpers import assert_spill_free, changed_lines

needs_nvcc = pytest.mark.skipif(not HAS_NVCC, reason="nvcc not installed")


# -- decode_kv_warps: the decode tile's warps split each block's keys ---------------------------


def test_decode_kv_warps_is_a_tiling_knob_checked_against_the_decode_tile() -> None:
    assert KNOB_LAYER["decode_kv_warps"] == "tiling"
    assert KNOB_SPACE["tiling"]["decode_kv_warps"] == (1, 2, 4)
    with pytest.raises(KnobError, match="decode_kv_warps=2 splits the decode tile's keys among warps"):
        parse_knobs("decode_tile=off,decode_kv_warps=2")
    # 16x32x1 with 4 key warps: 8 keys each, under an m16n8k16 step
    with pytest.raises(KnobError, match="each key warp takes 8 keys of a block, which must be a multiple of 16"):
        parse_knobs("decode_tile=16x32x1,decode_kv_warps=4")
    k = parse_knobs("decode_kv_warps=4")
    assert k.kv_warps(decode=True) == 4 and k.kv_warps(decode=False) == 1
    # the key warps' merge reuses the K/V stages: with one stage it needs more than they hold
    one = parse_knobs("decode_tile=32x32x2,decode_kv_warps=2,stages=1")
    assert one.smem_bytes(256, decode=True) == 32 * 256 * 2 + 32 * 256 * 4 + 2 * 32 * 8
    assert one.smem_bytes(256) == Knobs(stages=1).smem_bytes(256)  # the main tile is unchanged
    assert {n.decode_kv_warps for n in neighbours(default_knobs(), "tiling")} >= {2, 4}
    assert "_dec-16x64x1-kw4_" in k.slug()


def test_decode_kv_warps_render_the_split_and_the_merge_and_one_keeps_the_bytes() -> None:
    gallery = ROOT / "kernels" / "attention" / "gallery"
    base = parse_knobs(str(gallery / "wgmma-tma-b.knobs.json"))
    assert render(base.replace(decode_kv_warps=1)) == (gallery / "wgmma-tma-b.cu").read_text()
    src = render(base.replace(decode_kv_warps=2))
    assert not [str(f) for f in check_source(src) if f.blocking]
    assert "constexpr int kDecodeKvWarps = 2;" in src
    assert "static constexpr int KW = Dec ? kDecodeKvWarps : 1;" in src  # the main tile keeps one
    # every key offset of the warp's slice: K rows, V rows and the mask's columns
    assert src.count("kw * C::BNW + ") == 3
    assert "Key warps merge (decode_kv_warps)" in src
    assert "if (r >= sc.mtotal || kw != 0) continue;  // key warp 0 stores" in src
    assert json.loads(src.split("Knob setting:")[1].split("#include")[0].replace("//   ", ""))[
        "decode_kv_warps"] == 2
    c = parse_knobs(str(gallery / "wgmma-tma-c.knobs.json"))  # the gallery's leader
    assert (c.decode_tile, c.decode_kv_warps, c.stages) == ("32x64x2", 2, 3)


@needs_nvcc
def test_the_decode_kernels_with_key_warps_compile_without_spills() -> None:
    gallery = ROOT / "kernels" / "attention" / "gallery"
    built = compile_kernel(gallery / "wgmma-tma-c.cu", arch="sm_90a")
    assert built.info.ok, built.info.log[-2000:]
    blocks = built.info.log.split("Compiling entry function '")[1:]
    decode = [b for b in blocks if b.startswith("_ZN3fam8attn_fwdILi") and "ELb1EE" in b.split("'", 1)[0]]
    assert len(decode) == 3, built.info.log[-3000:]  # d64, d128, d256
    for b in decode:
        assert " 0 bytes spill stores, 0 bytes spill loads" in b, b[:600]


# -- split_combine: the split-KV combine's (max, sum) pairs read by all lanes at once -----------


def test_split_combine_is_a_scheduling_knob_that_needs_split_kv() -> None:
    assert KNOB_LAYER["split_combine"] == "scheduling"
    assert KNOB_SPACE["scheduling"]["split_combine"] == ("serial", "parallel", "wide", "burst")
    for value in ("parallel", "wide", "burst"):
        with pytest.raises(KnobError, match=f"split_combine={value} changes how split-KV partials merge"):
            parse_knobs(f"split_kv=off,split_combine={value}")
    assert "_split-1wave-pcomb_" in parse_knobs("split_combine=parallel").slug()
    assert "_split-1wave-wcomb_" in parse_knobs("split_combine=wide").slug()
    assert "_split-1wave-bcomb_" in parse_knobs("split_combine=burst").slug()
    assert {n.split_combine for n in neighbours(default_knobs(), "scheduling")} >= {"parallel", "wide"}


def test_split_combine_is_one_constant_that_the_combine_of_both_layers_reads() -> None:
    gallery = ROOT / "kernels" / "attention" / "gallery"
    for name in ("wgmma-tma-c", "fa2-mma-a"):
        base = parse_knobs(str(gallery / f"{name}.knobs.json"))
        serial = render(base.replace(split_combine="serial"))
        assert serial == (gallery / f"{name}.cu").read_text()
        src = render(base.replace(split_combine="parallel"))
        assert changed_lines(serial, src) == {"constexpr int kSplitCombine = 0;  // split_combine=serial",
                                              "constexpr int kSplitCombine = 1;  // split_combine=parallel"}
        assert not [str(f) for f in check_source(src) if f.blocking]
        assert src.count("__global__ void __launch_bounds__(128) attn_combine(") == 1
        assert "__shared__ float weight[4][kMaxSplits];" in src
        # every planner caps its splits at the combine's shared array (the Hopper layer's two rules too)
        assert "want < 128" not in src
        assert src.count("want = want < kMaxSplits ? want : kMaxSplits;") == (3 if "wgmma" in name else 1)
        # and launches it through one helper
        assert src.count("launch_combine<D, ") == (2 if "wgmma" in name else 1)


def _few_rows_combine(value: str, kernel: str, threads: int, names: tuple[str, ...]) -> str:
    code, enum = {"wide": (2, "kCombineWide"), "burst": (3, "kCombineBurst")}[value]
    """split_combine=`value` on each gallery setting of `names`: the parallel combine stays for
    many rows, `kernel` is added beside it once, and every launch of a combine (one per planner)
    chooses by the row count. Returns the last rendering."""
    gallery = ROOT / "kernels" / "attention" / "gallery"
    src = ""
    for name in names:
        base = parse_knobs(str(gallery / f"{name}.knobs.json"))
        parallel = render(base.replace(split_combine="parallel"))
        src = render(base.replace(split_combine=value))
        assert changed_lines(parallel, src) == {"constexpr int kSplitCombine = 1;  // split_combine=parallel",
                                                f"constexpr int kSplitCombine = {code};  // split_combine={value}"}
        assert not [str(f) for f in check_source(src) if f.blocking]
        assert src.count("__global__ void __launch_bounds__(128) attn_combine(") == 1
        assert src.count(f"__global__ void __launch_bounds__({threads}) {kernel}(") == 1
        # one launch helper, which both planners call, picks the few-rows kernel by the row count
        launch = src.split("cudaError_t launch_combine(const SocraticAttentionArgs* a")[1].split("\n}\n")[0]
        assert f"if constexpr (kSplitCombine == {enum}) {{\n    if (rows < 2LL * num_sms()) {{" in launch
        assert f"{kernel}<D><<<int(rows), {threads}, 0, stream>>>(*a, s);" in launch
        assert "attn_combine<D><<<int((rows + 3) / 4), 128, 0, stream>>>(*a, s);" in launch
        assert src.count("launch_combine<D, ") == (2 if "wgmma" in name else 1)
    return src


def test_split_combine_wide_adds_a_cta_per_row_combine_for_few_rows_in_both_planners() -> None:
    src = _few_rows_combine("wide", "attn_combine_wide", 128, ("wgmma-tma-d", "fa2-mma-a"))
    # warp w takes splits w, w + 4, ...; the partials add up in a fixed order
    assert "for (int s = warp; s < sc.splits; s += 4) {" in src
    assert "for (int w = 0; w < 3; ++w)" in src


def test_split_combine_burst_loads_every_partial_of_a_row_before_it_sums_them() -> None:
    with pytest.raises(KnobError, match="split_combine=burst's few-rows kernel runs sixteen"):
        parse_knobs("mma=wgmma,split_combine=burst,wg_combine_pdl=true")
    src = _few_rows_combine("burst", "attn_combine_burst", 512, ("fa2-mma-a", "wgmma-tma-j"))
    # the few-rows launch is burst's, not wide's (both kernels are in the file; one is launched)
    assert "constexpr int kSplitCombine = 3;  // split_combine=burst" in src
    body = src.split("attn_combine_burst(const SocraticAttentionArgs a, const Sched sc) {\n")[1].split("\n}\n")[0]
    # the loads come first, all of them, before the first barrier (nothing waits for the pairs first)
    assert body.index("v[i][p] = src[lane + 32 * p];") < body.index("sc.ws_ml[") < body.index("__syncthreads();")
    w = int(re.search(r"constexpr int W = (\d+), PER = kMaxSplits / W", body).group(1))
    per = 128 // w
    assert w * 32 == 512 and per * w == 128  # the block's warps, kMaxSplits = 128 splits at most
    load = re.search(r"const int s = (min\(warp \+ W \* i, ns - 1\));", body).group(1)
    summed = re.search(r"const int s = (warp \+ W \* i);\n    const float w = s < ns \? weight\[s\] : 0\.f;", body)
    assert summed
    # for every split count a call can have, each split's partial is summed exactly once, every load
    # reads a split that exists, and the terms of the rest are selected away
    for ns in range(2, 129):
        sums = []
        for warp in range(w):
            for i in range(per):
                env = {"warp": warp, "W": w, "i": i, "ns": ns, "min": min}
                assert 0 <= eval(load, env) < ns
                s = eval(summed.group(1), env)
                if s < ns:
                    sums.append(s)
        assert sorted(sums) == list(range(ns))
    # a zero weight selects the old sum (0 * NaN would poison it); the warps' partials add up in order
    assert "acc[p].x = w != 0.f ? fmaf(w, v[i][p].x, acc[p].x) : acc[p].x;" in body
    assert "for (int w = 1; w < W; ++w) {\n    sum.x += part[w][t].x;" in body


@needs_nvcc
def test_split_combine_wide_compiles_without_spills(tmp_path: Path) -> None:
    gallery = ROOT / "kernels" / "attention" / "gallery"
    src = tmp_path / "wide.cu"
    src.write_text(render(parse_knobs(str(gallery / "wgmma-tma-d.knobs.json")).replace(split_combine="wide")))
    assert_spill_free(src, lambda name: "attn_combine_wide" in name, 3)  # d64, d128, d256
    src.write_text(render(parse_knobs(str(gallery / "wgmma-tma-j.knobs.json")).replace(split_combine="burst")))
    assert_spill_free(src, lambda name: "attn_combine_burst" in name, 3)


# -- wg_combine_pdl: the combine kernel as a programmatic dependent (stop 32) ---------------------


def test_wg_combine_pdl_launches_the_hopper_paths_combine_as_a_programmatic_dependent() -> None:
    assert KNOB_LAYER["wg_combine_pdl"] == "scheduling" and KNOB_SPACE["scheduling"]["wg_combine_pdl"] == (False, True)
    with pytest.raises(KnobError, match=r"wg_combine_pdl=True .* it needs split_kv"):
        parse_knobs("mma=wgmma,split_kv=off,wg_combine_pdl=true")
    gallery = ROOT / "kernels" / "attention" / "gallery"
    i = parse_knobs(str(gallery / "wgmma-tma-i.knobs.json"))
    assert "wg_combine_pdl" not in i.recorded()
    k = i.replace(wg_combine_pdl=True).validate()
    assert k.slug().endswith("-pdl") and k.recorded()["wg_combine_pdl"] is True
    src = render(k)
    assert changed_lines(render(i), src) == {"constexpr bool kCombinePdl = false;  // wg_combine_pdl",
                                             "constexpr bool kCombinePdl = true;  // wg_combine_pdl"}
    assert not [str(f) for f in check_source(src) if f.blocking]  # a runtime launch, no driver call
    # every combine kernel of four warps waits for the attention grid's writes before its first read
    wait = '  if constexpr (kCombinePdl) asm volatile("griddepcontrol.wait;\\n" ::: "memory");'
    for name in ("attn_combine", "attn_combine_wide"):
        body = src.split(f"__launch_bounds__(128) {name}(const SocraticAttentionArgs a, const Sched sc) {{\n")[1]
        assert body.startswith(wait), name
    # the attention kernel lets its dependents launch from its start, in every instantiation
    kernel = src.split("attn_fwd_sm90(\n    const SocraticAttentionArgs a")[1].split("\n}\n")[0]
    assert kernel.index('if constexpr (kCombinePdl) asm volatile("griddepcontrol.launch_dependents;') < kernel.index(
        "__syncthreads();")
    # the Hopper path launches the four-warp combines with programmatic stream serialization and
    # returns the launch's error; the mma.sync path keeps its ordinary launches (the wait returns at once)
    hopper = src.split("int launch_any(const SocraticAttentionArgs* a, cudaStream_t stream) {\n")[1].split("\n}\n")[0]
    assert "launch_combine<D, kCombinePdl>(a, s, stream)" in hopper and "attn_combine" not in hopper
    plain = src.split("int launch_cfg(const SocraticAttentionArgs* a, cudaStream_t stream, int gp) {\n")[1]
    assert "launch_combine<D, false>(a, s, stream)" in plain.split("\n}\n")[0]
    launch = src.split("cudaError_t launch_combine(const SocraticAttentionArgs* a")[1].split("\n}\n")[0]
    for call in ("launch_combine_pdl(attn_combine_wide<D>, int(rows), a, s, stream)",
                 "launch_combine_pdl(attn_combine<D>, int((rows + 3) / 4), a, s, stream)"):
        assert "if constexpr (kPdl) {\n" in launch and f"return {call};" in launch
    # the same on the other Hopper settings: the cp.async producer with the default ring (whose
    # stage constant reads differently), one combine kernel (serial or parallel), no ping-pong
    for spec in ("mma=wgmma,wg_combine_pdl=true",
                 "mma=wgmma,persistent=true,split_combine=parallel,wg_combine_pdl=true",
                 "mma=wgmma,split_combine=serial,wg_pingpong=false,wg_combine_pdl=true,wg_idle_rows=skip"):
        other = render(parse_knobs(spec))
        assert other.count("griddepcontrol.launch_dependents;") == 1 and other.count("griddepcontrol.wait;") == 2
        assert "constexpr bool kCombinePdl = true;" in other
        assert not [str(f) for f in check_source(other) if f.blocking]
    helper = src.split("cudaError_t launch_combine_pdl(")[1].split("\n}\n")[0]
    assert "attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;" in helper
    assert "attr[0].val.programmaticStreamSerializationAllowed = 1;" in helper
    assert "cfg.blockDim = dim3(128u);" in helper and "return cudaLaunchKernelEx(&cfg, kernel, *a, s);" in helper


@needs_nvcc
@pytest.mark.parametrize(("changes", "entries"), [
    # Q's descriptors hoisted out of the block loop
    (dict(wg_desc="hoist"), 5),
    # stop 32's knobs together: the idle warpgroup's loop, both L2 policies, the multicast copies'
    # hint form, the dependents' trigger and waits (five entries and the cluster's d128 and d256)
    (dict(wg_idle_rows="skip", wg_combine_pdl=True, wg_l2_hint="kv_last_q_first", wg_cluster=2), 7),
    # stop 33's wait for the previous block's P V inside and before the softmax
    (dict(wg_v_release="mid_softmax"), 5),
    (dict(wg_v_release="before_softmax"), 5),
    # and block j's K waited for before the turn, with Q's descriptors hoisted
    (dict(wg_k_wait="before_turn", wg_desc="hoist"), 5),
    # stop 34's second register set for P (d128 and d256 of the copy-engine build; the unrolled loop)
    (dict(wg_p_buffers=2), 5),
    # stop 35's V ring a stage deeper than K's (d128 and d256)
    (dict(wg_v_ring="deeper"), 5),
    # stop 36's one-consumer instantiation of the copy-engine kernel beside the ordinary one (d64,
    # d128, d256), launched with 256 threads and compiled for them (no setmaxnreg)
    (dict(wg_solo_decode=True), 8),
    # this stop's two-set loop in a kLong instantiation of its own (d128 and d256) beside the one-set
    # kernel every other call runs
    (dict(wg_p_buffers=2, wg_p_long_blocks=64), 7),
], ids=["desc-hoist", "idle-pdl-l2-cluster", "v-mid", "v-before", "k-wait-hoist", "p-buffers", "v-ring", "solo",
        "p-long"])
def test_leader_variants_compile_without_spills_or_serialized_wgmma(
        changes: dict[str, Any], entries: int, tmp_path: Path) -> None:
    gallery = ROOT / "kernels" / "attention" / "gallery"
    k = parse_knobs(str(gallery / "wgmma-tma-i.knobs.json")).replace(**changes)
    src = tmp_path / "variant.cu"
    src.write_text(render(k.validate()))
    assert_spill_free(src, lambda name: name.startswith("_ZN3fam13attn_fwd_sm90"), entries)


# -- wg_decode=wgmma: decode shapes on the Hopper kernel ---------------------------------------


def test_wg_decode_sends_decode_shapes_to_the_hopper_kernel() -> None:
    assert KNOB_LAYER["wg_decode"] == "tiling" and KNOB_SPACE["tiling"]["wg_decode"] == ("mma_sync", "wgmma")
    gallery = ROOT / "kernels" / "attention" / "gallery"
    d = parse_knobs(str(gallery / "wgmma-tma-d.knobs.json"))
    assert render(d.replace(wg_decode="mma_sync")) == (gallery / "wgmma-tma-d.cu").read_text()
    k = d.replace(wg_decode="wgmma")
    assert k.slug().endswith("-wgdec") and k.recorded()["wg_decode"] == "wgmma"
    with pytest.raises(KnobError, match="wg_decode"):
        parse_knobs("wg_decode=wgmma")  # a Hopper knob: mma=mma_sync leaves it at its default
    src = render(k)
    assert changed_lines(render(d), src) == {"constexpr bool kWgDecodeWgmma = false;  // wg_decode=mma_sync",
                                             "constexpr bool kWgDecodeWgmma = true;  // wg_decode=wgmma"}
    assert not [str(f) for f in check_source(src) if f.blocking]
    use = src.split("bool use_sm90(const SocraticAttentionArgs* a, int gp) {")[1].split("\n}\n")[0]
    taken, rest = use.split("} else {")
    assert taken.startswith("\n  if constexpr (kWgDecodeWgmma) {") and "return kDecodeRows > 0;" in taken
    assert "seqlen_q" not in taken and "return (long long)a->seqlen_q * gp > kDecodeRows;" in rest

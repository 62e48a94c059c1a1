"""Rendered family kernels pass a subset of the suite through the real harness (needs a GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.attention.suite import default_suite
from harness.evaluate import evaluate_source
from harness.settings import EvalSettings
from kernels.attention.family import default_knobs, parse_knobs, render
from kernels.attention.family.space import covering_sample

SCENARIOS = (
    "prefill-d64-s512-b32-h32-causal",
    "prefill-d128-s1024-b16-h16-full",
    "gqa-gemma2-9b-tp8-s4096-b2-causal",
    "chunk-llama3-70b-tp8-q256-k8192",
    "decode-llama3-8b-tp1-q4-b1-k32768",
    "decode-gemma2-9b-tp1-q1-b128-k1024",
    "ragged-d128-q113-k203-causal",
    "ragged-d256-q239-k1-full",
)


@pytest.mark.gpu
@pytest.mark.parametrize("which", [0, 1, 2])
def test_family_kernels_pass_a_subset(which: int, tmp_path: Path) -> None:
    knobs = [default_knobs(), *covering_sample()[1:3]][which]
    src = tmp_path / f"family_{which}.cu"
    src.write_text(render(knobs))
    chosen = [s for s in default_suite() if s.name in SCENARIOS]
    assert len(chosen) == len(SCENARIOS)
    report = evaluate_source(src, chosen, settings=EvalSettings(measure=False, peers=()))
    assert report.compile.ok, report.compile.log[-2000:]
    bad = [(s.scenario, s.status, s.reason) for s in report.scenarios if not s.passed]
    assert not bad, (knobs.slug(), bad)


# The Hopper layer (mma=wgmma): every head_dim, causal and not, GQA, chunked prefill, ragged
# tails, and decode shapes (which fall back to the file's mma.sync kernel).
WGMMA_SCENARIOS = (
    *SCENARIOS,
    "prefill-d64-s2048-b8-h32-full",
    "prefill-d128-s4096-b4-h16-full",
    "prefill-d256-s2048-b8-h8-full",
    "prefill-d256-s8192-b2-h8-causal",
    "chunk-llama3-8b-tp1-q256-k65536",
    "ragged-d64-q77-k77-causal",
    "ragged-d256-q2049-k4097-causal",
    "ragged-d128-q3001-k3001-full",
)


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [
    "mma=wgmma,persistent=true",  # the gallery's wgmma-ws-a
    "mma=wgmma,wg_overlap=false,wg_pingpong=false,wg_consumers=1,wg_stages=3,wg_block_n_d128=64",
    "mma=wgmma,wg_block_n_d64=192,wg_block_n_d256=32,wg_stages=1,split_kv=off,mask_split=false",
    # the cp.async producer with descriptors as the tile's plus each step's offset
    pytest.param("mma=wgmma,persistent=true,wg_desc=offset", id="cp-async-desc-offset"),
])
def test_wgmma_family_kernels_pass_a_subset(spec: str, tmp_path: Path) -> None:
    knobs = parse_knobs(spec)
    src = tmp_path / "family_wgmma.cu"
    src.write_text(render(knobs))
    chosen = [s for s in default_suite() if s.name in WGMMA_SCENARIOS]
    assert len(chosen) == len(set(WGMMA_SCENARIOS))
    assert not _failures(src, chosen), knobs.slug()


def _failures(src: Path, chosen: list) -> list[tuple[str, str, str]]:
    """Correctness of `src` on `chosen` (no timing): the scenarios that did not pass."""
    report = evaluate_source(src, chosen, settings=EvalSettings(measure=False, peers=()))
    assert report.compile.ok, report.compile.log[-2000:]
    return [(s.scenario, s.status, s.reason) for s in report.scenarios if not s.passed]


@pytest.mark.gpu
def test_wgmma_descriptors_match_a_cpu_product() -> None:
    """One warpgroup's S = Q K^T and O = P V through the kernel's own descriptors and wrappers."""
    from kernels.attention.family.hopper_check import probe
    from tests.conftest import ROOT

    kernel = ROOT / "kernels" / "attention" / "gallery" / "wgmma-ws-a.cu"
    assert probe(kernel, ROOT / "kernels" / "attention") == 0


# the gallery's wgmma-tma-e (kernels/attention/gallery/wgmma-tma-e.knobs.json)
LEADER_E = ("mma=wgmma,persistent=true,wg_load=tma,wg_q_stages=2,wg_wide_d64=true,decode_tile=32x64x2,"
            "decode_kv_warps=2,stages=3,tile_d256=64x32x4,wg_scheduler=dynamic,wg_l2_sections=32,"
            "wg_split_rule=balanced,split_combine=wide,rescale=lazy,wg_epilogue=smem,wg_desc=offset,"
            "wg_decode=wgmma")
# the gallery's wgmma-tma-f (LEADER_E + the copy engine's epilogue and the producer's tile decode)
LEADER_F = LEADER_E + ",wg_epilogue=tma,wg_tile_decode=producer"
# the gallery's wgmma-tma-g (K a block ahead of V, four d64 stages, FA3's non-causal order)
LEADER_G = LEADER_F + ",wg_kv_order=k_ahead,wg_stages_d64=4,wg_full_order=m_fastest"
# the gallery's wgmma-tma-h (no proxy fence after a copy-engine K/V block; a split plan charged 8 key
# blocks for its combine, so ragged causal and long chunked calls of ~128 tiles stay one launch)
LEADER_H = LEADER_G + ",wg_kv_fence=cp_async,wg_split_cost=8"
# the gallery's wgmma-tma-i (wgmma-tma-h with d256's output staged in its one Q buffer)
LEADER_I = LEADER_H + ",wg_epilogue_one_q=true"
# the gallery's wgmma-tma-j (wgmma-tma-i with the copy engine's K/V loads evicted from L2 last)
LEADER_J = LEADER_I + ",wg_l2_hint=kv_last"
# the gallery's wgmma-tma-k (wgmma-tma-j with every split's partial loaded at once where rows are few)
LEADER_K = LEADER_J + ",split_combine=burst"


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [
    "mma=wgmma,persistent=true,wg_load=tma",  # the gallery's wgmma-tma-a
    # The gallery's wgmma-tma-b: a Q ring of two, three consumer warpgroups at d64.
    "mma=wgmma,persistent=true,wg_load=tma,wg_q_stages=2,wg_wide_d64=true",
    # wgmma-tma-b with heavy first inside 32 MB sections of (head, batch, split) units.
    "mma=wgmma,persistent=true,wg_load=tma,wg_q_stages=2,wg_wide_d64=true,wg_l2_sections=32",
    # GQA packs of 2-8 heads through the 5D query map (box {64, pack, rows / pack}).
    "mma=wgmma,wg_load=tma,pack_gqa=on,split_kv=2wave",
    "mma=wgmma,wg_load=tma,wg_consumers=1,wg_pingpong=false,wg_stages=3,wg_block_n_d128=64",
    # the gallery's wgmma-tma-d with its unsplit output staged in the Q buffer (d64, d128; d256 has
    # one Q buffer and stores directly)
    pytest.param(
        "mma=wgmma,persistent=true,wg_load=tma,wg_q_stages=2,wg_wide_d64=true,decode_tile=32x64x2,"
        "decode_kv_warps=2,stages=3,tile_d256=64x32x4,wg_scheduler=dynamic,wg_l2_sections=32,"
        "wg_split_rule=balanced,split_combine=wide,rescale=lazy,wg_epilogue=smem", id="leader-smem-epilogue"),
    # the gallery's wgmma-tma-d with FA3's 176-key blocks at d128 (11 k-steps of P V, one Q buffer)
    pytest.param(
        "mma=wgmma,persistent=true,wg_load=tma,wg_q_stages=2,wg_wide_d64=true,decode_tile=32x64x2,"
        "decode_kv_warps=2,stages=3,tile_d256=64x32x4,wg_scheduler=dynamic,wg_l2_sections=32,"
        "wg_split_rule=balanced,split_combine=wide,rescale=lazy,wg_block_n_d128=176", id="leader-176-keys"),
    # the gallery's wgmma-tma-d with descriptors as the tile's plus each step's offset, on every
    # head dim and with three consumer warpgroups at d64; and on one consumer with 64-key blocks
    pytest.param(
        "mma=wgmma,persistent=true,wg_load=tma,wg_q_stages=2,wg_wide_d64=true,decode_tile=32x64x2,"
        "decode_kv_warps=2,stages=3,tile_d256=64x32x4,wg_scheduler=dynamic,wg_l2_sections=32,"
        "wg_split_rule=balanced,split_combine=wide,rescale=lazy,wg_desc=offset", id="leader-desc-offset"),
    pytest.param("mma=wgmma,wg_load=tma,wg_consumers=1,wg_pingpong=false,wg_stages=3,wg_block_n_d128=64,"
                 "wg_desc=offset", id="one-consumer-desc-offset"),
    # the gallery's wgmma-tma-e with the output stored by the copy engine through O's map and each
    # tile decoded once by the producer
    pytest.param(LEADER_E + ",wg_epilogue=tma,wg_tile_decode=producer", id="leader-e-tma-epilogue-producer"),
    # the gallery's wgmma-tma-f with d256's one Q buffer staging the output for the copy engine
    pytest.param(LEADER_E + ",wg_epilogue=tma,wg_tile_decode=producer,wg_epilogue_one_q=true", id="leader-f-one-q"),
    # the gallery's wgmma-tma-i with Q's descriptors formed once per tile (wg_desc=hoist)
    pytest.param(LEADER_I + ",wg_desc=hoist", id="leader-i-desc-hoist"),
    # the gallery's wgmma-tma-j with block j - 1's P V waited for inside block j's softmax, and
    # before it (wg_v_release)
    pytest.param(LEADER_J + ",wg_v_release=mid_softmax", id="leader-j-v-mid"),
    pytest.param(LEADER_J + ",wg_v_release=before_softmax", id="leader-j-v-before"),
    # and with block j's K waited for before the warpgroup's turn (wg_k_wait), Q's descriptors hoisted
    pytest.param(LEADER_J + ",wg_k_wait=before_turn,wg_desc=hoist", id="leader-j-k-wait-hoist"),
    # and with P's fragments in two register sets, packed beside the exponentials (wg_p_buffers)
    pytest.param(LEADER_J + ",wg_p_buffers=2", id="leader-j-p2"),
    # and with V's ring a stage deeper than K's at d128 and d256 (wg_v_ring)
    pytest.param(LEADER_J + ",wg_v_ring=deeper", id="leader-j-vdeep"),
    # the gallery's wgmma-tma-l with the two sets in a kLong instantiation for calls of 32 key
    # blocks per SM or more (wg_p_long_blocks): the long prefill, chunked and GQA calls of the
    # subset take it, the short ragged, decode and small GQA calls the one-set kernel
    pytest.param(LEADER_K + ",wg_solo_decode=true,wg_p_buffers=2,wg_p_long_blocks=32", id="leader-l-p-long"),
    # and with the tensor maps' L2 promotion at 128 bytes and off (wg_l2_promotion; the gallery's
    # wgmma-tma-n has 128)
    pytest.param(LEADER_K + ",wg_solo_decode=true,wg_p_buffers=2,wg_p_long_blocks=32,wg_l2_promotion=128",
                 id="leader-n-promotion-128"),
    pytest.param(LEADER_K + ",wg_solo_decode=true,wg_l2_promotion=0", id="leader-k-promotion-off"),
])
def test_tma_family_kernels_pass_a_subset_without_the_cp_async_fallback(spec: str, tmp_path: Path) -> None:
    # The check build: a call whose tensor maps cannot be encoded fails instead of silently
    # running the cp.async kernel, so a pass here is a pass of the tensor-map path.
    src = tmp_path / "family_tma.cu"
    src.write_text("#define SOCRATIC_SM90_TMA_STRICT 1\n" + render(parse_knobs(spec)))
    chosen = [s for s in default_suite() if s.name in WGMMA_SCENARIOS or s.category == "gqa"]
    if "pack_gqa=on" in spec:
        # A pack of 7 heads does not divide the 128-row query tile: no query map describes it,
        # and those calls take the cp.async kernel (an error in this build), so they sit out.
        chosen = [s for s in chosen if 128 % (s.heads_q // s.heads_kv) == 0]
    bad = _failures(src, chosen)
    assert not bad, (spec, bad)


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [
    # mma.sync family, 2 key warps per row warp, with expf, lazy rescale and no split-KV
    "decode_kv_warps=2,softmax_exp=expf,rescale=lazy,split_kv=off",
    # the gallery's wgmma-tma-b with 4 key warps and 3 stages; a 32-row tile with 2 key warps
    "mma=wgmma,persistent=true,wg_load=tma,wg_q_stages=2,wg_wide_d64=true,decode_kv_warps=4,stages=3,"
    "tile_d256=64x32x4",
    "mma=wgmma,persistent=true,wg_load=tma,decode_tile=32x64x2,decode_kv_warps=2,pack_gqa=on",
    # the gallery's wgmma-tma-c with the parallel split-KV combine (both layers' splits)
    "mma=wgmma,persistent=true,wg_load=tma,wg_q_stages=2,wg_wide_d64=true,decode_tile=32x64x2,"
    "decode_kv_warps=2,stages=3,tile_d256=64x32x4,split_combine=parallel",
    # the gallery's wgmma-tma-d, with the wide combine: a CTA of four warps per row where rows are
    # few (decode at batch 1-8), the parallel combine elsewhere
    pytest.param(
        "mma=wgmma,persistent=true,wg_load=tma,wg_q_stages=2,wg_wide_d64=true,decode_tile=32x64x2,"
        "decode_kv_warps=2,stages=3,tile_d256=64x32x4,wg_scheduler=dynamic,wg_l2_sections=32,"
        "wg_split_rule=balanced,split_combine=wide,rescale=lazy", id="leader-wide-combine"),
    # the gallery's wgmma-tma-e: decode on the Hopper kernel (a packed group in a mostly empty
    # 128-row tile, tensor-map loads, the Hopper planner's splits); the same on the cp.async
    # producer, and on one consumer warpgroup (a 64-row tile)
    pytest.param(LEADER_E, id="leader-e-hopper-decode"),
    # and with O stored by the copy engine (packs of 2-8 heads in its 64-row box) and the producer's
    # tile decode
    pytest.param(LEADER_E + ",wg_epilogue=tma,wg_tile_decode=producer", id="leader-e-tma-epilogue-producer"),
    pytest.param("mma=wgmma,persistent=true,wg_decode=wgmma", id="cp-async-hopper-decode"),
    pytest.param("mma=wgmma,wg_load=tma,wg_consumers=1,wg_pingpong=false,wg_decode=wgmma",
                 id="one-consumer-hopper-decode"),
    # the gallery's wgmma-tma-j with the second warpgroup of a decode tile (no row of its own) only
    # taking its turns and releasing the blocks (wg_idle_rows=skip);
    # and the idle loop of the block-by-block (not overlapped) consumers, on the cp.async producer
    pytest.param(LEADER_J + ",wg_idle_rows=skip", id="leader-i-idle-skip-kv-last"),
    pytest.param("mma=wgmma,persistent=true,wg_decode=wgmma,wg_overlap=false,wg_idle_rows=skip",
                 id="no-overlap-idle-skip"),
    # the gallery's wgmma-tma-j with the combine kernel launched as a programmatic dependent of the
    # attention kernel (it waits in griddepcontrol for the partials)
    pytest.param(LEADER_J + ",wg_combine_pdl=true", id="leader-i-kv-last-pdl"),
    # the gallery's wgmma-tma-j with two P register sets: decode tiles' few key blocks per
    # split end the unrolled loop on either set
    pytest.param(LEADER_J + ",wg_p_buffers=2", id="leader-j-p2-decode"),
    # the gallery's wgmma-tma-j with V's ring deeper than K's: split tiles of a block or two
    pytest.param(LEADER_J + ",wg_v_ring=deeper", id="leader-j-vdeep-decode"),
    # the few-rows combine with every partial loaded at once, behind both layers' split plans
    pytest.param(LEADER_J + ",split_combine=burst", id="leader-j-burst-decode"),
    pytest.param("decode_kv_warps=2,split_combine=burst", id="mma-sync-burst-decode"),
])
def test_decode_key_warps_pass_every_decode_scenario(spec: str, tmp_path: Path) -> None:
    # decode_kv_warps splits each block's keys among warps that merge at the end of a tile: every
    # decode shape (1-4 queries, GQA groups of 2-8, causal bottom-right, split-KV or not).
    src = tmp_path / "family_decode.cu"
    src.write_text(render(parse_knobs(spec)))
    chosen = [s for s in default_suite() if s.category == "decode" or s.name in SCENARIOS]
    bad = _failures(src, chosen)
    assert not bad, (spec, bad)


@pytest.mark.gpu
def test_solo_decode_passes_every_decode_scenario_and_the_row_counts_around_one_warpgroup(tmp_path: Path) -> None:
    # wg_solo_decode launches a call whose packed rows fit one consumer warpgroup (at most 64) on
    # the one-consumer instantiation: every decode shape (split or not, GQA packs of 1-8, d128 and
    # d256), head_dim 64 (three consumer warpgroups otherwise; no decode in the suite), and the
    # edges: exactly 64 packed rows (solo) and 72 (two warpgroups, the ordinary instantiation).
    from harness.scenario import Scenario

    src = tmp_path / "family_solo.cu"
    src.write_text(render(parse_knobs(LEADER_K + ",wg_solo_decode=true")))
    extra = [
        Scenario(name="solo-d64-q1-b4-k3001", category="decode", batch=4, seqlen_q=1, seqlen_k=3001,
                 heads_q=16, heads_kv=4, head_dim=64, causal=True),
        Scenario(name="solo-d64-q16-b2-k777", category="decode", batch=2, seqlen_q=16, seqlen_k=777,
                 heads_q=8, heads_kv=2, head_dim=64, causal=True),
        Scenario(name="solo-d128-q8-b2-k5000-64rows", category="decode", batch=2, seqlen_q=8, seqlen_k=5000,
                 heads_q=8, heads_kv=1, head_dim=128, causal=True),
        Scenario(name="solo-d128-q9-b2-k5000-72rows", category="decode", batch=2, seqlen_q=9, seqlen_k=5000,
                 heads_q=8, heads_kv=1, head_dim=128, causal=True),
        Scenario(name="solo-d256-q3-b3-k999-full", category="decode", batch=3, seqlen_q=3, seqlen_k=999,
                 heads_q=16, heads_kv=8, head_dim=256, causal=False),
    ]
    chosen = [s for s in default_suite() if s.category == "decode" or s.name in SCENARIOS] + extra
    bad = _failures(src, chosen)
    assert not bad, bad


@pytest.mark.gpu
def test_deep_v_ring_passes_on_both_producers(tmp_path: Path) -> None:
    # wg_v_ring=deeper edits the copy-engine producer and the cp.async one of the same kernel (a
    # call no tensor map describes). With every GQA group packed, a group of 7 heads does not
    # divide the 128-row query tile, so Qwen2.5-7B's calls take the cp.async producer; the rest
    # take the copy engine.
    src = tmp_path / "family_vdeep.cu"
    src.write_text(render(parse_knobs(LEADER_J + ",wg_v_ring=deeper,pack_gqa=on")))
    chosen = [s for s in default_suite() if s.name in WGMMA_SCENARIOS or s.name.startswith("gqa-qwen2.5-7b")]
    assert any(128 % (s.heads_q // s.heads_kv) for s in chosen)
    bad = _failures(src, chosen)
    assert not bad, bad


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [
    # the gallery's wgmma-tma-c (three d64 consumers, a Q ring of two) with the tiles past the first
    # wave claimed from the counter, heavy first inside even 32 MB sections, the split count with
    # the least estimated makespan, the wide combine and lazy rescaling: the gallery's wgmma-tma-d
    "mma=wgmma,persistent=true,wg_load=tma,wg_q_stages=2,wg_wide_d64=true,decode_tile=32x64x2,"
    "decode_kv_warps=2,stages=3,tile_d256=64x32x4,wg_scheduler=dynamic,wg_l2_sections=32,"
    "wg_split_rule=balanced,split_combine=wide,rescale=lazy",
    # GQA packs through the 5D query map, and 2-wave split-KV: the partials and the counter share
    # the workspace, and a split's tile may have no key block at all
    "mma=wgmma,persistent=true,wg_load=tma,wg_q_stages=2,pack_gqa=on,split_kv=2wave,wg_scheduler=dynamic",
    # the same with the producer's tile decode (its end mark in the round-robin order too) and O
    # stored through its map in boxes of {64 columns, pack, 64 / pack rows}
    pytest.param("mma=wgmma,persistent=true,wg_load=tma,wg_q_stages=2,pack_gqa=on,split_kv=2wave,"
                 "wg_scheduler=dynamic,wg_tile_decode=producer,wg_epilogue=tma", id="packs-tma-epilogue-producer"),
])
def test_scheduling_knobs_pass_every_causal_scenario(spec: str, tmp_path: Path) -> None:
    # Strict build: every call runs the copy-engine kernel, the one that claims tiles. Causal calls
    # with more tiles than CTAs take the counter; the full ones in WGMMA_SCENARIOS keep round robin.
    src = tmp_path / "family_dyn.cu"
    src.write_text("#define SOCRATIC_SM90_TMA_STRICT 1\n" + render(parse_knobs(spec)))
    chosen = [s for s in default_suite()
              if (s.causal and s.category != "decode") or s.name in WGMMA_SCENARIOS]
    if "pack_gqa=on" in spec:  # a pack of 7 heads does not divide the 128-row tile (no query map)
        chosen = [s for s in chosen if 128 % (s.heads_q // s.heads_kv) == 0]
    bad = _failures(src, chosen)
    assert not bad, (spec, bad)


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [
    # wgmma-tma-f with K copied a block ahead of V, four K/V stages at d64, a K/V head's m blocks side
    # by side when there is no causal mask, and there clusters of two CTAs sharing each K/V copy
    pytest.param(LEADER_G + ",wg_cluster=2", id="leader-f-cluster"),
    # the same pairs with each block's K then V (the other copy loop), GQA packs through the query
    # map, and split-KV: a pair shares its split's key range
    pytest.param("mma=wgmma,persistent=true,wg_load=tma,wg_q_stages=2,pack_gqa=on,split_kv=2wave,"
                 "grid_order=heavy_first,wg_l2_sections=32,wg_full_order=m_fastest,wg_cluster=2",
                 id="packs-splits-cluster"),
    # three K/V stages at d128 (one Q buffer there) with the output staged in it for the copy engine
    pytest.param(LEADER_F + ",wg_stages_d128=3,wg_epilogue_one_q=true", id="leader-f-d128-three-stages"),
    # wgmma-tma-g without the proxy fence after each copy-engine K/V block, and with only the first
    # consumer warpgroup in the turn order waiting for each block (both passed on the H200, stop 30)
    pytest.param(LEADER_G + ",wg_kv_fence=cp_async", id="leader-g-no-kv-fence"),
    pytest.param(LEADER_G + ",wg_kv_fence=cp_async,wg_kv_wait=first", id="leader-g-first-waits"),
])
def test_cluster_pairs_pass_every_full_scenario(spec: str, tmp_path: Path) -> None:
    # Strict build. Every call without the causal mask (prefill, GQA, ragged; d128 and d256 pairs
    # share K/V copies where a K/V group's tiles pair up; d64, odd pairs such as
    # ragged-d256-q799-k3-full and causal calls keep one CTA), plus the causal subset.
    src = tmp_path / "family_cluster.cu"
    src.write_text("#define SOCRATIC_SM90_TMA_STRICT 1\n" + render(parse_knobs(spec)))
    chosen = [s for s in default_suite() if not s.causal or s.name in WGMMA_SCENARIOS]
    if "pack_gqa=on" in spec:  # a pack of 7 heads does not divide the 128-row tile (no query map)
        chosen = [s for s in chosen if 128 % (s.heads_q // s.heads_kv) == 0]
    bad = _failures(src, chosen)
    assert not bad, (spec, bad)


@pytest.mark.gpu
def test_leader_h_passes_every_scenario_its_split_plans_touch(tmp_path: Path) -> None:
    # Strict build over the categories whose split counts the charge moves or keeps: ragged (now
    # unsplit where two splits were planned), chunked (the q2048 calls unsplit, q256-q1024 still
    # split) and decode (every call split, packed).
    src = tmp_path / "leader_h.cu"
    src.write_text("#define SOCRATIC_SM90_TMA_STRICT 1\n" + render(parse_knobs(LEADER_H)))
    chosen = [s for s in default_suite() if s.category in ("ragged", "chunked", "decode")]
    bad = _failures(src, chosen)
    assert not bad, bad


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [
    pytest.param("wg_block_n_d256=80", id="80-keys"),
    # and the output staged in d256's one Q buffer for the copy engine (the next Q waits for it)
    pytest.param("wg_block_n_d256=80,wg_epilogue_one_q=true", id="80-keys-one-q"),
    pytest.param("wg_epilogue_one_q=true", id="leader-i"),
])
def test_leader_h_d256_variants_pass_every_d256_scenario(spec: str, tmp_path: Path) -> None:
    # Strict builds over every d256 scenario: prefill, GQA, ragged tails of 1-799 keys, decode
    # (split-KV plans), causal and not. FA3's d256 key block (80 keys: n80 products, 10 KB panels,
    # two stages and one Q buffer in 225 KB), and the leader wgmma-tma-i's one-Q-buffer epilogue
    # (the next tile's Q waits for the copy engine to read the staged output). The first two passed
    # on the H200 in stop 31.
    src = tmp_path / "leader_h_d256.cu"
    src.write_text("#define SOCRATIC_SM90_TMA_STRICT 1\n" + render(parse_knobs(LEADER_H + "," + spec)))
    chosen = [s for s in default_suite() if s.head_dim == 256]
    assert len(chosen) >= 30
    bad = _failures(src, chosen)
    assert not bad, (spec, bad)

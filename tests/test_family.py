"""The attention kernel family: knob space, validation, rendering, and nvcc builds of a sample
of settings that covers every knob value (sm_90a; no GPU needed)."""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from harness.compile import compile_kernel
from harness.static_checks import check_source
from kernels.attention.family import (
    KNOB_LAYER,
    KNOB_SPACE,
    LAYERS,
    KnobError,
    Knobs,
    default_knobs,
    neighbours,
    parse_knobs,
    render,
)
from kernels.attention.family.cli import add_family_commands
from kernels.attention.family.space import covering_sample
from tests.conftest import HAS_NVCC, ROOT

needs_nvcc = pytest.mark.skipif(not HAS_NVCC, reason="nvcc not installed")


def test_space_is_grouped_by_the_five_layers() -> None:
    assert LAYERS == ("tiling", "memory", "math", "scheduling", "masking")
    for layer, knobs in KNOB_SPACE.items():
        assert knobs, layer
        for name, values in knobs.items():
            assert len(values) >= 2, name
            assert KNOB_LAYER[name] == layer
    assert set(KNOB_LAYER) == set(Knobs.__dataclass_fields__)


def test_default_is_valid_and_renders_an_abi_v1_file() -> None:
    k = default_knobs()
    src = render(k)
    assert 'extern "C" int socratic_attention_forward' in src
    assert "socratic_attention_workspace" in src
    assert "mma.sync.aligned.m16n8k16" in src and "ldmatrix" in src
    assert '#include "contract.h"' in src
    assert not [f for f in check_source(src) if f.blocking]
    # The knob setting is recorded in the file.
    assert '"tile_d128": "' + k.tile_d128 + '"' in src


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("loader=bulk", "use smem_layout=pad"),
        ("stages=3", "over the sm_90 limit"),
        ("q_fragments=registers", "registers per thread"),
        ("tile_d64=64x32x8", "not one of"),
        ("decode_tile=8x64x1", "not one of"),
        ("stages=4", "not one of"),
        ("persistent=maybe", "true or false"),
        ("warps=4", "unknown knob"),
        ("loader", "not key=value"),
        ("{not json", "not valid JSON"),
    ],
)
def test_invalid_settings_are_refused_with_a_reason(spec: str, needle: str) -> None:
    with pytest.raises(KnobError, match=needle):
        parse_knobs(spec)


def test_parse_forms_agree(tmp_path: Path) -> None:
    a = parse_knobs("tile_d128=128x64x8, rescale=lazy,persistent=true")
    b = parse_knobs(json.dumps({"tile_d128": "128x64x8", "rescale": "lazy", "persistent": True}))
    f = tmp_path / "k.json"
    f.write_text(json.dumps({"knobs": {"tile_d128": "128x64x8", "rescale": "lazy", "persistent": "1"}}))
    c = parse_knobs(str(f))
    assert a == b == c
    assert a.persistent is True and a.rescale == "lazy"
    assert parse_knobs("") == default_knobs()


def test_a_spec_longer_than_a_file_name_parses_and_the_last_value_wins() -> None:
    """Every knob named (as the offline agent's first port plus one change) is longer than a
    file name may be; it is a spec, never looked up as a path."""
    spec = ",".join(f"{name}={value}".lower() for name, value in default_knobs().recorded().items())
    spec += ",tile_d128=64x128x4"
    assert len(spec) > 255
    assert parse_knobs(spec).tile_d128 == "64x128x4"
    with pytest.raises(KnobError, match="not key=value"):  # too long to be a path, and no "="
        parse_knobs("x" * 300)


def test_neighbours_stay_in_their_layer_and_are_valid() -> None:
    base = default_knobs()
    for layer in LAYERS:
        found = neighbours(base, layer)
        assert found, layer
        for n in found:
            changed = [k for k, v in n.to_dict().items() if v != getattr(base, k)]
            assert len(changed) == 1 and KNOB_LAYER[changed[0]] == layer
            assert n.is_valid()
    with pytest.raises(KnobError):
        neighbours(base, "nope")


def test_covering_sample_uses_every_value() -> None:
    sample = covering_sample()
    assert all(k.is_valid() for k in sample)
    for layer in KNOB_SPACE.values():
        for name, values in layer.items():
            seen = {getattr(k, name) for k in sample}
            assert seen == set(values), name
    # Every knob changes the rendered source.
    base = default_knobs()
    src = render(base)
    for layer in LAYERS:
        for n in neighbours(base, layer):
            assert render(n) != src


def _family_parser() -> Any:
    import argparse

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    add_family_commands(sub)
    return parser


def test_cli_renders_to_a_file(tmp_path: Path) -> None:
    parser = _family_parser()
    out = tmp_path / "k.cu"
    args = parser.parse_args(["family", "render", "split_kv=off,grid_order=m_fastest", "-o", str(out)])
    assert args.func(args) == 0
    assert "constexpr int kSplitWaves = 0;" in out.read_text()
    bad = parser.parse_args(["family", "render", "loader=bulk"])
    assert bad.func(bad) == 2


def test_gallery_kernels_match_their_knob_files() -> None:
    gallery = ROOT / "kernels" / "attention" / "gallery"
    for knob_file in sorted(gallery.glob("*.knobs.json")):
        kernel = gallery / knob_file.name.replace(".knobs.json", ".cu")
        assert kernel.read_text() == render(parse_knobs(str(knob_file))), kernel.name


def _sample_for_build() -> list[Knobs]:
    sample = covering_sample()
    base = default_knobs()
    extra = [base.replace(mask_split=False), base.replace(persistent=True, split_kv="2wave"),
             base.replace(loader="bulk", smem_layout="pad", rescale="lazy")]
    return sample + [k for k in extra if k.is_valid() and k not in sample]


@needs_nvcc
def test_sample_of_settings_compiles_for_sm90a(tmp_path: Path) -> None:
    settings = _sample_for_build()
    assert 12 <= len(settings) <= 20
    paths = []
    for i, k in enumerate(settings):
        p = tmp_path / f"family_{i:02d}.cu"
        p.write_text(render(k))
        paths.append(p)

    def build(p: Path) -> tuple[Path, bool, str]:
        try:
            built = compile_kernel(p, arch="sm_90a")
            return p, built.info.ok, built.info.log
        except Exception as exc:  # CompileError carries nvcc's log
            return p, False, f"{exc}\n{getattr(exc, 'log', '')}"

    workers = max(2, min(8, os.cpu_count() or 2))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(build, paths))
    failed = [(p.name, log[-2000:]) for p, ok, log in results if not ok]
    assert not failed, failed


# -- the Hopper layer (mma=wgmma) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("wg_stages=3", "belongs to the Hopper layer: it needs mma=wgmma"),
        ("wg_block_n_d128=64", "needs mma=wgmma"),
        ("wg_pingpong=false", "needs mma=wgmma"),
        ("mma=wgmma,wg_consumers=1", "wg_pingpong=True alternates two consumer warpgroups"),
        ("mma=wgmma,wg_stages=3",
         "wg_block_n_d256=64 with wg_stages=3, wg_consumers=2: 263280 bytes of shared memory at head_dim 256"),
        ("mma=wgmma,wg_block_n_d256=96", "not one of"),
        ("mma=tcgen05", "not one of"),
    ],
)
def test_hopper_settings_are_refused_with_a_reason(spec: str, needle: str) -> None:
    with pytest.raises(KnobError, match=needle):
        parse_knobs(spec)


def test_hopper_layer_is_reachable_from_the_default_inside_the_math_layer() -> None:
    base = default_knobs()
    assert base.mma == "mma_sync"
    (wg,) = [n for n in neighbours(base, "math") if n.mma == "wgmma"]
    # Once there, the tiling, memory, math and scheduling layers offer the Hopper knobs.
    offered = {k for layer in LAYERS for n in neighbours(wg, layer)
               for k, v in n.to_dict().items() if v != getattr(wg, k)}
    assert {"wg_block_n_d64", "wg_block_n_d128", "wg_block_n_d256", "wg_stages", "wg_overlap",
            "wg_pingpong", "mma"} <= offered
    # Smallest valid shared-memory footprint rule: 3 stages fit when d256 takes 32-key blocks.
    assert parse_knobs("mma=wgmma,wg_stages=3,wg_block_n_d256=32").wg_smem_bytes(128) == (
        (128 + 2 * 3 * 128) * 128 * 2 + 8 * (2 + 4 * 3) + 1024)


def test_wgmma_render_has_the_warp_specialized_kernel_and_keeps_the_record_readable() -> None:
    k = parse_knobs("mma=wgmma,persistent=true,wg_block_n_d64=192,wg_overlap=false")
    src = render(k)
    assert not [f for f in check_source(src) if f.blocking]
    for needle in ("wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16",   # S = Q K^T at d64
                   "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16",   # O += P V at d256
                   "setmaxnreg.dec.sync.aligned.u32", "setmaxnreg.inc.sync.aligned.u32",
                   "cp.async.mbarrier.arrive.noinc", "constexpr bool kWgOverlap = false;",
                   "return fam::launch_any<128>(a, stream);", "return fam::workspace_any<64>(a);"):
        assert needle in src, needle
    # The mma.sync kernel stays in the file: decode shapes fall back to it.
    assert "mma.sync.aligned.m16n8k16" in src and "return launch<D>(a, stream);" in src
    # The knob record in the header parses back to the same setting, Hopper knobs included.
    header = src.split("Knob setting:", 1)[1].split("#include", 1)[0]
    record = json.loads("\n".join(line[5:] for line in header.splitlines() if line.startswith("//   ")))
    assert record["wg_block_n_d64"] == 192 and parse_knobs(json.dumps(record)) == k
    # With mma=mma_sync the record leaves the Hopper knobs out (older files keep their bytes).
    assert "wg_stages" not in render(default_knobs()) and '"mma"' not in render(default_knobs())


def test_offline_agent_hears_hopper_words_as_the_math_layer() -> None:
    from app.agents.offline import layer_mentions

    assert set(layer_mentions("Could wgmma with warp-specialized warpgroups help on Hopper?")) == {"math"}


@needs_nvcc
def test_wgmma_gallery_kernel_compiles_without_spills(tmp_path: Path) -> None:
    gallery = ROOT / "kernels" / "attention" / "gallery"
    built = compile_kernel(gallery / "wgmma-ws-a.cu", arch="sm_90a")
    assert built.info.ok, built.info.log[-2000:]
    log = built.info.log
    # ptxas reports each kernel's registers and spills; the three warp-specialized instances
    # (d64/128/256) must not spill and must keep wgmma asynchronous (no C7510 serialization).
    blocks = log.split("Compiling entry function '")[1:]
    sm90 = [b for b in blocks if b.startswith("_ZN3fam13attn_fwd_sm90")]
    assert len(sm90) == 3, log[-3000:]
    for b in sm90:
        assert " 0 bytes spill stores, 0 bytes spill loads" in b, b[:600]
    assert "C7510" not in log and "C7508" not in log


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
                   "mbar_init(k_full(s), kTma ? 1 : 128);", "sm90_produce_tma<D>(a, sc, maps",
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
    assert "cuTensorMapEncodeTiled" not in plain and "wg_load" not in plain and "<cuda.h>" not in plain


@needs_nvcc
def _spill_free(src: Path, keep: Callable[[str], bool], count: int) -> None:
    """Compiles `src` for sm_90a and checks that the `count` entry functions whose mangled names
    `keep` selects compiled without a spill (ptxas's report of each entry), and that ptxas kept
    every wgmma asynchronous (its C75xx warnings name the function it serialized)."""
    built = compile_kernel(src, arch="sm_90a")
    assert built.info.ok, built.info.log[-2000:]
    assert "instructions are serialized" not in built.info.log, built.info.log[-3000:]
    entries = built.info.log.split("Compiling entry function '")[1:]
    chosen = [b for b in entries if keep(b.split("'")[0])]
    assert len(chosen) == count, built.info.log[-3000:]
    for b in chosen:
        assert " 0 bytes spill stores, 0 bytes spill loads" in b, b[:600]


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


@pytest.mark.parametrize("name", ["wgmma-tma-a", "wgmma-tma-b", "wgmma-tma-c", "wgmma-tma-d", "wgmma-tma-e",
                                  "wgmma-tma-f", "wgmma-tma-g", "wgmma-tma-h",
                                  "wgmma-tma-i", "wgmma-tma-j", "wgmma-tma-k", "wgmma-tma-l",
                                  "wgmma-tma-m", "wgmma-tma-n"])
def test_tma_gallery_reports_were_measured_on_the_strict_build_of_the_gallery_file(name: str) -> None:
    import hashlib

    gallery = ROOT / "kernels" / "attention" / "gallery"
    report = json.loads((gallery / f"{name}.json").read_text())
    strict = "#define SOCRATIC_SM90_TMA_STRICT 1\n" + (gallery / f"{name}.cu").read_text()
    assert report["compile"]["source_sha256"] == hashlib.sha256(strict.encode()).hexdigest()
    assert report["verdict"]["status"] == "accepted"
    assert report["geomean"]["all"]["passed"] == report["geomean"]["all"]["scenarios"] == 182
    assert set(report["settings"]["peers"]) == {"cudnn", "flash", "fa3"}


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
        "kBarOff = QS * kQBytes + 2 * kWgStages * kKVBytes;", "kBars = 2 * QS + 4 * kWgStages;",
        # three consumers at d64: round-robin turns, registers, no cp.async instantiation there
        "static constexpr int BM = 64 * WgC<D>::HC;", "::\"r\"(1 + (c + 1) % WgC<D>::HC)",
        "if (c == WgC<D>::HC - 1) asm volatile(\"bar.arrive 1, 256;\\n\"",
        "if (!tma) return launch<D>(a, stream);", "} else if constexpr (!WgC<D>::kMapsOnly) {",
        "if (!sm90_maps<D>(a, gp, &maps)) return workspace<D>(a);",
    ):
        assert needle in src, needle
    assert src.count("4 * WgC<D>::HC)") == 4 and "kWgConsumers)" not in src.split("struct WgC<64>")[1]
    # 512 threads launch with 128 registers each: setmaxnreg may hand out no more than that.
    assert 128 * (REGS_WIDE_PRODUCER + 3 * REGS_WIDE_CONSUMER) <= 512 * 128
    assert f"HC = 3, RP = {REGS_WIDE_PRODUCER}, RC = {REGS_WIDE_CONSUMER};" in src
    header = src.split("Knob setting:", 1)[1].split("#include", 1)[0]
    record = json.loads("\n".join(line[5:] for line in header.splitlines() if line.startswith("//   ")))
    assert record["wg_q_stages"] == 2 and record["wg_wide_d64"] is True and parse_knobs(json.dumps(record)) == k
    # Either knob alone renders only its own part; at their defaults neither is recorded.
    q_only = render(k.replace(wg_wide_d64=False))
    assert "WgQRing<64>" in q_only and "WgC<" not in q_only
    wide_only = render(k.replace(wg_q_stages=1))
    assert "WgC<64>" in wide_only and "WgQRing" not in wide_only and "q_cur" not in wide_only
    plain = render(k.replace(wg_q_stages=1, wg_wide_d64=False))
    assert "wg_q_stages" not in plain and "wg_wide_d64" not in plain


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


def test_family_cli_shows_and_renders_l2_sections(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = _family_parser()
    space = parser.parse_args(["family", "space"])
    assert space.func(space) == 0
    scheduling = capsys.readouterr().out.split("scheduling:", 1)[1].split("masking:", 1)[0]
    assert "wg_l2_sections   0 | 32 | 16" in scheduling
    out = tmp_path / "k.cu"
    args = parser.parse_args(["family", "render", "mma=wgmma,wg_l2_sections=32", "-o", str(out)])
    assert args.func(args) == 0
    assert "kWgL2SectionBytes = 32LL * 1024 * 1024;" in out.read_text()
    bad = parser.parse_args(["family", "render", "mma=wgmma,wg_l2_sections=32,grid_order=head_fastest"])
    assert bad.func(bad) == 2


def test_l2_sections_render_one_decode_call_and_round_trip() -> None:
    gallery = ROOT / "kernels" / "attention" / "gallery"
    base = parse_knobs(str(gallery / "wgmma-tma-b.knobs.json"))
    k = base.replace(wg_l2_sections=16).validate()
    src = render(k)
    assert not [str(f) for f in check_source(src) if f.blocking]
    assert "constexpr long long kWgL2SectionBytes = 16LL * 1024 * 1024;" in src
    # sm90_tile is where the producers (cp.async and tensor-map) and the consumers decode a tile;
    # the host sizes the sections once per call, after the split-KV choice, into Sched::l2_units
    # (the group of query heads sharing a K/V head: heads_q / heads_kv, or 1 where the grid's
    # heads are K/V heads), so no tile pays for the sizing's 64-bit division.
    assert src.count("decode_tile_l2(tile, sc, a.batch)") == 1
    assert src.count("  int l2_units;") == 1
    sizing = ("  s.l2_units = l2_section_units(s, a->batch, a->seqlen_k, a->head_dim,\n"
              "                               s.gp > 1 ? 1 : a->heads_q / a->heads_kv);\n"
              "  if (s.tiles <= 0) return cudaSuccess;")
    assert src.count(sizing) == 1
    assert src.index("s.splits = 1;\n      s.tiles = s.m_blocks") < src.index(sizing)
    decode = src.split("__device__ __forceinline__ TileId decode_tile_l2(", 1)[1].split("\n}\n", 1)[0]
    assert "long long" not in decode and "kWgL2SectionBytes" not in decode
    assert src.count("sm90_tile<BM, BN>(tile, a, sc)") == 3
    sm90 = src.split("struct Sm90Tile {", 1)[1]
    assert "decode_tile(tile, sc, a.batch)" not in sm90
    header = src.split("Knob setting:", 1)[1].split("#include", 1)[0]
    record = json.loads("\n".join(line[5:] for line in header.splitlines() if line.startswith("//   ")))
    assert record["wg_l2_sections"] == 16 and parse_knobs(json.dumps(record)) == k
    # Off (the gallery files): not recorded and not rendered.
    assert "wg_l2_sections" not in render(base) and "decode_tile_l2" not in render(base)


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
    sched = "struct Sched {" + src.split("struct Sched {", 1)[1].split("};", 1)[0] + "};\n"
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
    assert "const bool dyn = kTma && sc.tile_counter != nullptr;" in src
    # the host zeroes the counter on the stream for causal calls with more tiles than CTAs, and
    # asks for its 16 bytes (after the split partials) on every call that may use it
    assert "if (tma && a->causal && s.tiles > grid) {  // wg_scheduler=dynamic" in src
    assert "cudaMemsetAsync(s.tile_counter, 0, sizeof(unsigned int), stream)" in src
    assert "if (a->causal && s.tiles > num_sms()) return ((need + 15ull) & ~15ull) + 16;" in src
    assert "static constexpr size_t kSmem = size_t(kSlotOff + 16) + 1024;" in src
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
    sched = "struct Sched {" + src.split("struct Sched {", 1)[1].split("};", 1)[0] + "};\n"
    fn = src[src.index("inline int balanced_splits("):src.index("template <int D>\nSched plan_sm90(")]
    prog = tmp_path / "splits.cpp"
    prog.write_text("#include <algorithm>\nusing std::min; using std::max;\nint num_sms();\n"
                    "constexpr bool kCausalSkip = true;\nstruct float2 { float x, y; };\n"
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
    assert "const double combine = 4.0;" in planner and "if (n > 1) est += combine;" in planner
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


def test_split_combine_renders_one_combine_for_both_layers_and_serial_keeps_the_bytes() -> None:
    gallery = ROOT / "kernels" / "attention" / "gallery"
    for name in ("wgmma-tma-c", "fa2-mma-a"):
        base = parse_knobs(str(gallery / f"{name}.knobs.json"))
        assert render(base.replace(split_combine="serial")) == (gallery / f"{name}.cu").read_text()
        src = render(base.replace(split_combine="parallel"))
        assert not [str(f) for f in check_source(src) if f.blocking]
        assert src.count("__global__ void __launch_bounds__(128) attn_combine(") == 1
        assert "__shared__ float weight[4][kMaxSplits];" in src
        # every planner caps its splits at the combine's shared array (the Hopper layer has one)
        assert "want < 128" not in src
        assert src.count("want = want < kMaxSplits ? want : kMaxSplits;") == (2 if "wgmma" in name else 1)


def _few_rows_combine(value: str, kernel: str, threads: int, names: tuple[str, ...]) -> str:
    """split_combine=`value` on each gallery setting of `names`: the parallel combine stays for
    many rows, `kernel` is added beside it once, and every launch of a combine (one per planner)
    chooses by the row count. Returns the last rendering."""
    gallery = ROOT / "kernels" / "attention" / "gallery"
    src = ""
    for name in names:
        base = parse_knobs(str(gallery / f"{name}.knobs.json"))
        parallel = render(base.replace(split_combine="parallel"))
        src = render(base.replace(split_combine=value))
        assert not [str(f) for f in check_source(src) if f.blocking]
        assert src.count("__global__ void __launch_bounds__(128) attn_combine(") == 1
        assert src.count(f"__global__ void __launch_bounds__({threads}) {kernel}(") == 1
        assert parallel.split("attn_combine(")[1].split("\n}\n")[0] == src.split("attn_combine(")[1].split("\n}\n")[0]
        launches = 2 if "wgmma" in name else 1
        assert src.count(f"if (rows < 2LL * num_sms()) {{  // split_combine={value}") == launches
        assert src.count(f"{kernel}<D><<<int(rows), {threads}, 0, stream>>>(*a, s);") == launches
        assert src.count("attn_combine<D><<<") == launches
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
    assert "attn_combine_wide" not in src
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
    _spill_free(src, lambda name: "attn_combine_wide" in name, 3)  # d64, d128, d256
    src.write_text(render(parse_knobs(str(gallery / "wgmma-tma-j.knobs.json")).replace(split_combine="burst")))
    _spill_free(src, lambda name: "attn_combine_burst" in name, 3)


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
    assert "const bool stage_o = C::QS == 2 && sc.splits == 1;" in src
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
    maps = src.split("struct Sm90Maps {")[1].split("};")[0]
    assert "CUtensorMap o;" in maps and "int o_ok;" in maps
    # O's map is shaped as Q's, with a box of one consumer warpgroup's 64 rows; a call it cannot
    # describe (a pack that does not divide 64 rows, an unaligned pointer or stride) keeps the
    # tensor-map loads and stores O from the threads
    host = src.split("bool sm90_maps(")[1].split("\n}\n")[0]
    assert "const cuuint32_t ob[5] = {64, cuuint32_t(gp), cuuint32_t(64 / gp), 1, 1};" in host
    assert "m->o_ok = ok && 64 % gp == 0 && (reinterpret_cast<unsigned long long>(a->o) & 15) == 0;" in host
    assert "if (m->o_ok) m->o_ok = encode(&m->o, a->o, 5, qd, os, ob);" in host
    assert host.index("if (!ok) return false;") < host.index("const cuuint64_t os[4]")  # Q/K/V checked first
    # every thread fences its staged rows for the async proxy before the warpgroup meets; one thread
    # issues a store per 64-column panel and waits only until the engine has read the buffer; then
    # the buffer goes back to the producer
    consumer = src.split("const bool stage_o")[1]
    tma = consumer.split("if (stage_o && kTma && maps.o_ok) {")[1].split("} else if (stage_o) {")[0]
    order = ["fence_async_smem();", "bar.sync %0, 128;", "if ((tid & 127) == 0) {", "tma_store_5d(&maps.o,",
             "cp.async.bulk.commit_group;", "cp.async.bulk.wait_group.read 0;", "release_q_now();"]
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
    assert "const bool stage_o = (C::QS == 2 || (kTma && maps.o_ok)) && sc.splits == 1;" in src
    assert "const bool stage_o = C::QS == 2 && sc.splits == 1;" not in src
    # the staged tile keeps its Q buffer until the epilogue: the producer's next Q load waits on it
    assert "if (!stage_o) release_q_now();" in src


# -- wg_tile_decode=producer: the producer decodes each tile once --------------------------------


def test_the_gpu_tests_name_the_gallery_settings_they_say() -> None:
    # tests/gpu builds its leader variants from LEADER_E; a drift would test another kernel quietly
    from tests.gpu.test_family_gpu import LEADER_E, LEADER_F, LEADER_G, LEADER_H, LEADER_I, LEADER_J

    gallery = ROOT / "kernels" / "attention" / "gallery"
    e = parse_knobs(str(gallery / "wgmma-tma-e.knobs.json"))
    assert parse_knobs(LEADER_E) == e
    assert parse_knobs(LEADER_F) == parse_knobs(LEADER_E + ",wg_epilogue=tma,wg_tile_decode=producer")
    assert parse_knobs(LEADER_F) == parse_knobs(str(gallery / "wgmma-tma-f.knobs.json"))
    assert parse_knobs(LEADER_G) == parse_knobs(
        LEADER_F + ",wg_kv_order=k_ahead,wg_stages_d64=4,wg_full_order=m_fastest")
    assert parse_knobs(LEADER_G) == parse_knobs(str(gallery / "wgmma-tma-g.knobs.json"))
    assert parse_knobs(LEADER_H) == parse_knobs(LEADER_G + ",wg_kv_fence=cp_async,wg_split_cost=8")
    assert parse_knobs(LEADER_H) == parse_knobs(str(gallery / "wgmma-tma-h.knobs.json"))
    assert parse_knobs(LEADER_I) == parse_knobs(LEADER_H + ",wg_epilogue_one_q=true")
    assert parse_knobs(LEADER_I) == parse_knobs(str(gallery / "wgmma-tma-i.knobs.json"))
    assert parse_knobs(LEADER_J) == parse_knobs(LEADER_I + ",wg_l2_hint=kv_last")
    assert parse_knobs(LEADER_J) == parse_knobs(str(gallery / "wgmma-tma-j.knobs.json"))


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
    assert "static constexpr size_t kSmem = size_t(kSlotOff + 96) + 1024;" in src
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
    assert "tile_publish(bars + 8 * C::kBars + 48 * (tc & 1), tile, x);" in producer
    assert "if (dyn) {  // no tile left" not in producer
    assert "slot_store(bars + 8 * C::kBars + 48 * (tc & 1), sc.tiles);" in producer
    # the copy-engine consumers read it after the Q buffer's full barrier and never decode; the
    # cp.async build (no publishing producer thread) still does
    tma, cp_async = consumer.split("if constexpr (kTma) {")[1].split("} else {")
    assert tma.index("mbar_wait(q_full_bar(") < tma.index("tile = tile_read(bars + 8 * C::kBars + 48 * (tc & 1), x);")
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
    _spill_free(gallery / "wgmma-tma-j.cu", lambda name: name.startswith("_ZN3fam13attn_fwd_sm90"), 5)


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
    assert not [str(f) for f in check_source(src) if f.blocking]
    kmajor = src.split("__device__ __forceinline__ uint64_t desc_kmajor(")[1].split("\n}\n")[0]
    mnmajor = src.split("__device__ __forceinline__ uint64_t desc_mnmajor(")[1].split("\n}\n")[0]
    assert "wg_desc_at(tile, (kk >> 2) * (ROWS * 128) + row0 * 128 + (kk & 3) * 32, 16, 1024)" in kmajor
    assert "wg_desc_at(tile, kk * 2048, ROWS * 128, 1024)" in mnmajor
    assert "wg_desc(" not in kmajor + mnmajor
    assert "const int c = __shfl_sync(0xffffffffu, wg - 1, 0);" in src
    assert "const int c = wg - 1;" not in src


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
    import difflib

    gallery = ROOT / "kernels" / "attention" / "gallery"
    i = parse_knobs(str(gallery / "wgmma-tma-i.knobs.json"))
    k = i.replace(wg_desc="hoist")
    assert "-deschoist-" in k.slug() and k.recorded()["wg_desc"] == "hoist"
    src = render(k)
    assert not [str(f) for f in check_source(src) if f.blocking]
    # against the offset form (i): Q's descriptors move out of S = Q K^T's loop, nothing else changes
    diff = list(difflib.unified_diff(render(i).splitlines(), src.splitlines(), lineterm="", n=0))
    removed = [d[1:] for d in diff if d.startswith("-") and not d.startswith("---")]
    added = [d[1:] for d in diff if d.startswith("+") and not d.startswith("+++")]
    assert removed == ['//    "wg_desc": "offset",',
                       "        wgmma_ss<BN>(s, desc_kmajor<BM>(q_cur, c * 64, kk), "
                       "desc_kmajor<BN>(k_s + st * C::kKVBytes, 0, kk), kk > 0);"]
    assert added[0] == '//    "wg_desc": "hoist",'
    assert added[-1] == "        wgmma_ss<BN>(s, q_desc(kk), desc_kmajor<BN>(k_s + st * C::kKVBytes, 0, kk), kk > 0);"
    hoisted = "\n".join(added[1:-1])
    # formed before the block loop's lambdas, from the tile's Q buffer, at d64/d128 only (8 steps)
    assert "constexpr bool kHoistQ = KD <= 8;" in hoisted
    assert "for (int kk = 0; kk < KD; ++kk) qd[kk] = desc_kmajor<BM>(q_cur, c * 64, kk);" in hoisted
    assert "else return desc_kmajor<BM>(q_cur, c * 64, kk);" in hoisted  # d256: the loop's own
    assert src.index("uint64_t qd[kHoistQ ? KD : 1];") < src.index("auto issue_qk = [&](int j) {")
    # without the Q ring (wg_q_stages=1) the tile's Q buffer is the one buffer q_s
    plain = render(parse_knobs("mma=wgmma,wg_desc=hoist"))
    assert "qd[kk] = desc_kmajor<BM>(q_s, c * 64, kk);" in plain and "wgmma_ss<BN>(s, q_desc(kk), " in plain
    assert not [str(f) for f in check_source(plain) if f.blocking]


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
    assert len(_tensor_loads(plain)) == 2 and not [x for x in _tensor_loads(plain) if "cache_hint" in x]
    kv = i.replace(wg_l2_hint="kv_last").validate()
    assert kv.slug().endswith("-kvlast") and kv.recorded()["wg_l2_hint"] == "kv_last"
    src = render(kv)
    assert not [str(f) for f in check_source(src) if f.blocking]
    loads = {x.split(".")[4]: x for x in _tensor_loads(src)}  # 4d: K and V, 5d: Q
    assert loads["4d"].endswith(".L2::cache_hint ") and "cache_hint" not in loads["5d"]
    helper = src.split("void tma_load_4d(")[1].split("\n}\n")[0]
    assert '"l"(l2_policy_evict_last())' in helper and "[%6], %7;" in helper
    assert 'asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\\n" : "=l"(p));' in src
    assert "evict_first" not in src
    # every K and V copy of the producer goes through the helper: no other 4d load in the file
    producer = src.split("void sm90_produce_tma(")[1].split("\n}\n")[0]
    assert "tma_load_4d(" in producer and src.count("cp.async.bulk.tensor.4d") == 1
    both = render(i.replace(wg_l2_hint="kv_last_q_first", wg_cluster=2).validate())
    hinted = _tensor_loads(both)
    assert len(hinted) == 3 and all(x.endswith(".L2::cache_hint ") for x in hinted)  # K/V, multicast K/V, Q
    q_helper = both.split("void tma_load_5d(")[1].split("\n}\n")[0]
    assert '"l"(l2_policy_evict_first())' in q_helper and "[%7], %8;" in q_helper
    mc = both.split("void tma_load_4d_mc(")[1].split("\n}\n")[0]
    assert ".multicast::cluster.L2::cache_hint" in mc.replace('"\n      "', "") and "[%6], %7, %8;" in mc


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
    assert "CU_TENSOR_MAP_L2_PROMOTION_L2_256B," in encoder and base.count("CU_TENSOR_MAP_L2_PROMOTION") == 1
    for value, enum in ((128, "CU_TENSOR_MAP_L2_PROMOTION_L2_128B"), (0, "CU_TENSOR_MAP_L2_PROMOTION_NONE")):
        k = m.replace(wg_l2_promotion=value).validate()
        assert k.slug().endswith(f"-prom{value}") and k.recorded()["wg_l2_promotion"] == value
        src = render(k)
        assert not [str(f) for f in check_source(src) if f.blocking]
        # one encoder for Q, K, V and O: its one promotion changes, nothing else in the file
        assert f"CU_TENSOR_MAP_SWIZZLE_128B, {enum},  // wg_l2_promotion\n" in src
        assert src.count("CU_TENSOR_MAP_L2_PROMOTION") == 1
        for name in ("q", "k", "v", "o"):
            assert f"encode(&m->{name}, a->{name}, " in src
        changed = set(src.splitlines()) ^ set(base.splitlines())
        assert {line.strip() for line in changed} == {
            f'//    "wg_l2_promotion": {value}', '//    "wg_p_long_blocks": 64,', '//    "wg_p_long_blocks": 64',
            "CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,",
            f"CU_TENSOR_MAP_SWIZZLE_128B, {enum},  // wg_l2_promotion"}
    # the gallery's wgmma-tma-n is wgmma-tma-m with 128
    n = parse_knobs(str(gallery / "wgmma-tma-n.knobs.json"))
    assert n == m.replace(wg_l2_promotion=128) and render(n) == (gallery / "wgmma-tma-n.cu").read_text()


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
    assert "const bool idle = m0 + c * 64 >= sc.mtotal;" in kernel
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
    overlap_busy = busy.split("    } else {\n")[0]
    assert overlap_busy.count("turn_wait();") == 3 and overlap_busy.count("for (int j = 1; j < nb; ++j) {") == 1
    assert plain_idle.count("turn_wait();") == 2 and plain_idle.count("turn_pass();") == 2
    # each block's K and V released once, after its full barrier; the Q buffer after the last K
    for part, v in ((overlap_idle, "j - 1"), (plain_idle, "j")):
        assert "filled(k_full(slot(j)), j);\n" in part and part.count("release(k_empty(slot(j)));") == 1
        assert f"filled(v_full(slot({v})), {v});\n" in part and part.count(f"release(v_empty(slot({v})));") == 1
        assert part.index("release(k_empty(slot(j)));") < part.index("if (j == nb - 1) release_q();")
    assert "mbar_wait(bar, ((gb + uint32_t(j)) / S) & 1u);" in idle  # the block's fill phase
    # with clusters its releases reach the peer CTA's barriers too
    cl = render(k.replace(wg_cluster=2).validate())
    cl_idle = cl.split("    if (idle) {\n")[1].split("    } else if constexpr (kWgOverlap) {\n")[0]
    assert "release(k_empty(" not in cl_idle and cl_idle.count("release_kv(k_empty(slot(j)));") == 2


# -- wg_combine_pdl: the combine kernel as a programmatic dependent (stop 32) ---------------------


def test_wg_combine_pdl_launches_the_hopper_paths_combine_as_a_programmatic_dependent() -> None:
    assert KNOB_LAYER["wg_combine_pdl"] == "scheduling" and KNOB_SPACE["scheduling"]["wg_combine_pdl"] == (False, True)
    with pytest.raises(KnobError, match=r"wg_combine_pdl=True .* it needs split_kv"):
        parse_knobs("mma=wgmma,split_kv=off,wg_combine_pdl=true")
    gallery = ROOT / "kernels" / "attention" / "gallery"
    i = parse_knobs(str(gallery / "wgmma-tma-i.knobs.json"))
    assert "wg_combine_pdl" not in i.recorded() and "griddepcontrol" not in render(i)
    k = i.replace(wg_combine_pdl=True).validate()
    assert k.slug().endswith("-pdl") and k.recorded()["wg_combine_pdl"] is True
    src = render(k)
    assert not [str(f) for f in check_source(src) if f.blocking]  # a runtime launch, no driver call
    # every combine kernel waits for the attention grid's writes before its first read
    for name in ("attn_combine", "attn_combine_wide"):
        body = src.split(f"__launch_bounds__(128) {name}(const SocraticAttentionArgs a, const Sched sc) {{\n")[1]
        assert body.startswith('  asm volatile("griddepcontrol.wait;\\n" ::: "memory");'), name
    # the attention kernel lets its dependents launch from its start, in every instantiation
    kernel = src.split("attn_fwd_sm90(\n    const SocraticAttentionArgs a")[1].split("\n}\n")[0]
    assert kernel.index('asm volatile("griddepcontrol.launch_dependents;') < kernel.index("__syncthreads();")
    # the Hopper path launches both combines with programmatic stream serialization and returns
    # the launch's error; the mma.sync path keeps its ordinary launches (the wait returns at once)
    hopper = src.split("int launch_any(const SocraticAttentionArgs* a, cudaStream_t stream) {\n")[1].split("\n}\n")[0]
    assert "<<<" not in hopper.split("if (s.splits > 1) {")[-1]
    for call in ("launch_combine_pdl(attn_combine_wide<D>, int(rows), a, s, stream)",
                 "launch_combine_pdl(attn_combine<D>, int((rows + 3) / 4), a, s, stream)"):
        assert f"if (const cudaError_t pe = {call}; pe != cudaSuccess) return pe;" in hopper
    plain = src.split("int launch_cfg(const SocraticAttentionArgs* a, cudaStream_t stream, int gp) {\n")[1]
    assert "attn_combine_wide<D><<<int(rows), 128, 0, stream>>>(*a, s);" in plain.split("\n}\n")[0]
    # the same on the other Hopper settings: the cp.async producer with the default ring (whose
    # stage constant reads differently), one combine kernel (serial or parallel), no ping-pong
    for spec in ("mma=wgmma,wg_combine_pdl=true",
                 "mma=wgmma,persistent=true,split_combine=parallel,wg_combine_pdl=true",
                 "mma=wgmma,split_combine=serial,wg_pingpong=false,wg_combine_pdl=true,wg_idle_rows=skip"):
        other = render(parse_knobs(spec))
        assert other.count("griddepcontrol.launch_dependents;") == 1 and other.count("griddepcontrol.wait;") == 1
        assert "launch_combine_pdl(attn_combine<D>, int((rows + 3) / 4), a, s, stream)" in other
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
    _spill_free(src, lambda name: name.startswith("_ZN3fam13attn_fwd_sm90"), entries)


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
    assert not [str(f) for f in check_source(src) if f.blocking]
    use = src.split("bool use_sm90(const SocraticAttentionArgs* a, int gp) {")[1].split("\n}\n")[0]
    assert "return kDecodeRows > 0;" in use and "seqlen_q" not in use
    before = render(d).split("bool use_sm90(const SocraticAttentionArgs* a, int gp) {")[1].split("\n}\n")[0]
    assert "return (long long)a->seqlen_q * gp > kDecodeRows;" in before


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
    _spill_free(src, lambda name: name.startswith("_ZN3fam13attn_fwd_sm90ILi128E"), 2)


# -- scripts/variant_table.py --rounds: an arm read against its rounds and a null arm ------------


def test_rounds_table_prints_each_rounds_geomean_per_category(tmp_path: Path) -> None:
    import subprocess
    import sys

    def report(path: Path, ratios: dict[str, tuple[str, float]]) -> str:
        path.write_text(json.dumps({"scenarios": [
            {"scenario": name, "category": cat, "speedup_vs_baseline": x} for name, (cat, x) in ratios.items()]}))
        return str(path)

    r1 = report(tmp_path / "r1_A.json", {"p1": ("prefill", 1.0), "p2": ("prefill", 1.21), "d1": ("decode", 0.9)})
    r2 = report(tmp_path / "r2_A.json", {"p1": ("prefill", 1.0), "p2": ("prefill", 1.0), "d1": ("decode", 1.1)})
    n1 = report(tmp_path / "r1_N.json", {"p1": ("prefill", 1.0), "d1": ("decode", 1.0)})
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "variant_table.py"), "--rounds", f"N={n1}", f"A={r1},{r2}"],
        capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[1].split() == ["arm", "all", "decode", "prefill"]
    assert out[2].split() == ["N", "1.000", "1.000", "1.000"]
    # round 1: all = (1.0 * 1.21 * 0.9) ** (1/3), prefill = sqrt(1.21); round 2: 1.1 ** (1/3), 1.0
    assert out[3].split() == ["A", "1.029/1.032", "0.900/1.100", "1.100/1.000"]


def test_rounds_table_adds_a_column_per_head_dim_of_the_suites_scenarios(tmp_path: Path) -> None:
    import subprocess
    import sys

    # the reports carry no head dim: the table reads it from the suite by name, whatever the
    # category (gemma2-9b decodes at d256, a d128 prefill)
    rows = {"prefill-d64-s512-b32-h32-causal": ("prefill", 1.1), "prefill-d128-s1024-b16-h16-full": ("prefill", 0.9),
            "decode-gemma2-9b-tp1-q1-b128-k1024": ("decode", 1.2), "decode-llama3-8b-tp1-q4-b1-k32768": ("decode", 1.0)}
    path = tmp_path / "r1_A.json"
    path.write_text(json.dumps({"scenarios": [
        {"scenario": name, "category": cat, "speedup_vs_baseline": x} for name, (cat, x) in rows.items()]}))
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "variant_table.py"), "--rounds", f"A={path}"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[1].split() == ["arm", "all", "decode", "prefill", "d64", "d128", "d256"]
    # d128: the llama decode (1.0) and the d128 prefill (0.9), geomean 0.949
    assert out[2].split()[4:] == ["1.100", "0.949", "1.200"]


def test_kernel_spans_groups_each_calls_kernels_after_its_flush_and_reads_medians(
        capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("kernel_spans_gpu", ROOT / "scripts" / "kernel_spans_gpu.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    flush = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<unsigned char>>"
    attn, comb = "void fam::attn_fwd_sm90<128, true>", "void fam::attn_combine_burst<128>"
    records = [  # out of order, as the profiler may list them
        (120.0, 130.0, attn), (0.0, 60.0, flush), (100.0, 160.0, flush), (70.0, 80.0, attn),
        (81.0, 84.0, comb), (131.5, 134.5, comb),
        (200.0, 260.0, flush),  # a call whose kernels the profiler lost
        (300.0, 360.0, flush), (370.0, 380.0, attn),  # a call that ran the attention kernel only
        (400.0, 460.0, flush), (470.0, 481.0, attn), (482.0, 484.0, comb),
        # the kernel's own memset inside a call (a tile counter zeroed) is the call's, not a flush
        (500.0, 560.0, flush), (561.0, 562.0, "Memset (Device)"), (563.0, 573.0, attn),
    ]
    calls = mod.group_calls(records)
    assert [[n for n, _, _ in c] for c in calls] == [[attn, comb], [attn, comb], [attn], [attn, comb],
                                                     ["Memset (Device)", attn]]
    assert not mod.is_flush("Memset (Device)") and not mod.is_flush(comb)
    lines = mod.report("k", calls)
    # medians over the three calls with both kernels: spans 14, 14.5, 14; attention 10, 10, 11;
    # gaps 1, 1.5, 1; combine 3, 3, 2
    assert lines[0] == "  k: span 14.0 us over 3 calls, 2 calls with other kernels left out"
    assert lines[1] == f"        10.0 us  (gap before   0.0)  {attn}"
    assert lines[2] == f"         3.0 us  (gap before   1.0)  {comb}"
    assert mod.report("k", []) == ["  k: no call's kernels were recorded"]
    # a misspelled scenario or a missing kernel is refused by name before any GPU work
    assert mod.main(["missing.cu", "prefill-d64-s512-b32-h32-full"]) == 2
    assert "no kernel file 'missing.cu'" in capsys.readouterr().err
    assert mod.main([str(ROOT / "kernels" / "attention" / "baseline.cu"), "no-such-scenario"]) == 2
    assert "no scenario named 'no-such-scenario' in the suite" in capsys.readouterr().err


def test_ncu_ledger_groups_samples_by_execution_count_and_runs(tmp_path: Path) -> None:
    import subprocess
    import sys

    header = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
              "Instructions Executed", "stall_wait", "stall_long_sb", "stall_wait (Not Issued)"]
    rows = [  # a per-tile prologue (100 runs), a loop body (300), an epilogue (100)
        ["0x0", "IMAD R1, R2, R3, RZ", "10", "10", "100", "10", "0", "10"],
        ["0x10", "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ", "30", "30", "300", "30", "0", "30"],
        ["0x20", "@!P0  BRA 0x10", "30", "30", "300", "0", "30", "0"],
        ["0x30", "STG.E desc[UR14][R8.64], R91", "30", "30", "100", "0", "30", "0"],
    ]
    page = tmp_path / "src.csv"
    with page.open("w", newline="") as fh:
        w = csv.writer(fh, quoting=csv.QUOTE_ALL)
        w.writerow(["Kernel Name", "void k()"])
        w.writerow(header)
        w.writerows(rows)
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "ncu_ledger.py"), str(page), "--top", "2",
                          "--min-share", "20"], capture_output=True, text=True, check=True).stdout
    assert "instructions executed 800, samples 100" in out
    assert "stalls: long_sb 60.0%  wait 40.0%" in out  # "(Not Issued)" columns are not counted twice
    assert "executed       300:     2 instructions,  60.0% of samples,  75.0% of executed" in out
    assert "executed       100:     2 instructions,  40.0% of samples,  25.0% of executed" in out
    # runs break where the execution count changes: the prologue alone (10%) is under 20%
    assert "[    1-    2] executed      300 n=   2  60.0%  wait=30 long_sb=30  | HGMMAx1 BRAx1" in out
    assert "[    3-    3] executed      100 n=   1  30.0%" in out and "[    0-    0]" not in out
    bad = tmp_path / "not.csv"
    bad.write_text("ncu --help output\n")
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "ncu_ledger.py"), str(bad)],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "not an ncu --page source --csv export" in res.stderr


def test_ncu_drive_names_a_missing_scenario_before_it_touches_the_gpu() -> None:
    # scripts/ncu_pair_gpu.sh runs it under ncu on the device; a wrong name fails at once, here too
    import subprocess
    import sys

    script = str(ROOT / "scripts" / "ncu_drive.py")
    usage = subprocess.run([sys.executable, script], capture_output=True, text=True)
    assert usage.returncode == 2 and "KERNEL.cu|fa3 SCENARIO" in usage.stderr
    missing = subprocess.run([sys.executable, script, "fa3", "prefill-d999-nowhere"], capture_output=True,
                             text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert missing.returncode == 2 and "no scenario named 'prefill-d999-nowhere'" in missing.stderr


def test_clock_pair_refuses_bad_arguments_before_it_touches_the_gpu(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = str(ROOT / "scripts" / "clock_pair_gpu.py")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, script, *args], capture_output=True, text=True, cwd=ROOT, env=env)

    usage = run("3")
    assert usage.returncode == 2 and "SECONDS SCENARIO KERNEL.cu|fa3" in usage.stderr
    for bad in ("0", "-1", "soon"):
        r = run(bad, "prefill-d128-s1024-b16-h16-full", "fa3")
        assert r.returncode == 2 and f"SECONDS must be a positive number of seconds, not {bad!r}" in r.stderr
    gone = run("3", "prefill-d128-s1024-b16-h16-full", str(tmp_path / "gone.cu"))
    assert gone.returncode == 2 and "no kernel file" in gone.stderr and "gone.cu" in gone.stderr
    unknown = run("3", "prefill-d999-nowhere", "fa3")
    assert unknown.returncode == 2 and "no scenario named 'prefill-d999-nowhere'" in unknown.stderr


# -- wg_kv_order, wg_stages_d64/d128, wg_full_order, wg_cluster (stop 29) -------------------------


def _gallery_f() -> Knobs:
    gallery = ROOT / "kernels" / "attention" / "gallery"
    f = parse_knobs(str(gallery / "wgmma-tma-f.knobs.json"))
    assert render(f) == (gallery / "wgmma-tma-f.cu").read_text()  # each knob's default keeps f's bytes
    return f


def test_wg_kv_order_k_ahead_copies_the_next_blocks_k_before_this_blocks_v() -> None:
    assert KNOB_LAYER["wg_kv_order"] == "memory" and KNOB_SPACE["memory"]["wg_kv_order"] == ("kv", "k_ahead")
    with pytest.raises(KnobError, match=r"wg_kv_order=k_ahead .* it needs wg_load=tma"):
        parse_knobs("mma=wgmma,wg_kv_order=k_ahead")
    f = _gallery_f()
    k = f.replace(wg_kv_order="k_ahead").validate()
    assert k.slug().endswith("-kahead") and "wg_kv_order" not in f.recorded()
    src = render(k)
    assert not [str(x) for x in check_source(src) if x.blocking]
    producer = src.split("void sm90_produce_tma(")[1].split("\n}\n")[0]
    assert "tma_load_4d(k_s + st" not in producer  # the block-by-block loop is gone
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
    assert "if (gj >= uint32_t(S)) mbar_wait(empty, ph ^ 1u);" in producer


def test_wg_stages_per_head_dim_sizes_each_ring_and_its_q_buffers() -> None:
    assert KNOB_SPACE["memory"]["wg_stages_d64"] == (0, 3, 4) and KNOB_SPACE["memory"]["wg_stages_d128"] == (0, 3)
    f = _gallery_f()
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
    assert "static constexpr int S = WgStages<D>::value;" in src
    assert "kBarOff = QS * kQBytes + 2 * S * kKVBytes;" in src and "kBars = 2 * QS + 4 * S;" in src
    assert src.count("S = C::S") == 2 and "S = kWgStages" not in src  # consumers and the producer
    src128 = render(d128)
    assert "template <>\nstruct WgQRing<128> {\n  static constexpr int QS = 1;\n};" in src128
    assert "template <>\nstruct WgStages<128> {\n  static constexpr int value = 3;\n};" in src128


def test_wg_full_order_runs_a_kv_groups_m_blocks_side_by_side_without_the_causal_mask() -> None:
    assert KNOB_LAYER["wg_full_order"] == "scheduling"
    with pytest.raises(KnobError, match=r"wg_full_order=m_fastest .* it needs wg_l2_sections"):
        parse_knobs("mma=wgmma,wg_load=tma,wg_full_order=m_fastest")
    f = _gallery_f()
    src = render(f.replace(wg_full_order="m_fastest").validate())
    host = src.split("int launch_any(")[1].split("\n}\n")[0]
    line = "  if (!a->causal) s.l2_units = s.gp > 1 ? 1 : a->heads_q / a->heads_kv;  // wg_full_order=m_fastest\n"
    # after the sections are sized, before the grid: one section per K/V group, so the order's unit
    # (r % group) and m block (r / group) walk the group's tiles with its query heads fastest
    assert host.index("s.l2_units = l2_section_units(") < host.index(line) < host.index("int grid = s.tiles;")
    order = src.split("TileId decode_tile_l2(")[1].split("\n}\n")[0]
    assert "int u = sec * G + r % gs;" in order and "id.mb = s.m_blocks - 1 - r / gs;" in order


def test_wg_cluster_pairs_tiles_and_multicasts_each_kv_copy() -> None:
    assert KNOB_LAYER["wg_cluster"] == "memory" and KNOB_SPACE["memory"]["wg_cluster"] == (1, 2)
    f = _gallery_f()
    with pytest.raises(KnobError, match=r"wg_cluster=2 .* it needs wg_load=tma and wg_full_order=m_fastest"):
        f.replace(wg_cluster=2).validate()
    k = f.replace(wg_full_order="m_fastest", wg_cluster=2).validate()
    assert k.slug().endswith("-fullm-cl2") and k.recorded()["wg_cluster"] == 2
    for kv_order, loops in (("kv", 2), ("k_ahead", 1)):
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
        assert "mbar_init(k_empty(s), 4 * WgC<D>::HC * kCl);" in kernel
        assert kernel.index("__syncthreads();") < kernel.index("barrier.cluster.wait.acquire.aligned;")
        # every K/V release reaches the peer; the Q buffer's stays local
        assert "release(k_empty(" not in kernel and "release(v_empty(" not in kernel
        assert kernel.count("release_kv(k_empty(") >= 2 and kernel.count("release_kv(v_empty(") >= 2
        assert "mbar_arrive_peer(bar, peer);" in kernel and "release(q_empty_bar(" in kernel
        # launched as clusters of two only at d128/d256, without the causal mask, for tiles in pairs
        host = src.split("int launch_any(")[1].split("\n}\n")[0]
        assert "if constexpr (D >= 128) {" in host
        assert ("if (tma && !a->causal && s.tiles % 2 == 0 && (s.l2_units * s.m_blocks) % 2 == 0 && "
                "grid % 2 == 0) {") in host
        assert "attr[0].val.clusterDim.x = 2;" in host
        assert "cudaLaunchKernelEx(&cfg, attn_fwd_sm90<D, true, 2>, *a, s, maps);" in host
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
    consumer = src.split("// ---- consumer warpgroups")[1].split("// Epilogue:")[0]
    issue = {name: consumer.split(f"auto {name} = [&](int j) {{")[1].split("};")[0]
             for name in ("issue_qk", "issue_pv")}
    for name, bar in (("issue_qk", "k_full"), ("issue_pv", "v_full")):
        body = issue[name]
        # the wait, then the fence only in the cp.async instantiation, then the wgmmas
        assert body.index(f"mbar_wait({bar}(st)") < body.index("if constexpr (!kTma) fence_async_smem();")
        assert body.index("if constexpr (!kTma) fence_async_smem();") < body.index("wg_fence();")
        assert "\n      fence_async_smem();" not in body
    # the Q buffer keeps its fence (its tile may have staged the output there with generic stores)
    assert "mbar_wait(q_full_bar(bars, tc, C::QS, S), uint32_t(tc / C::QS) & 1u);\n    fence_async_smem();" in src
    gsrc = render(g)
    assert gsrc.count("      fence_async_smem();\n      wg_fence") == 2  # every block keeps it by default


def _hopper_knob_on_leader_j(name: str, values: tuple[str, ...], refused: str, rule: str) -> Knobs:
    """A memory-layer Hopper knob's contract: its values, refused without mma=wgmma and where
    `refused` breaks `rule`; the leader wgmma-tma-j's setting (which does not record it) returned."""
    assert KNOB_LAYER[name] == "memory" and KNOB_SPACE["memory"][name] == values
    with pytest.raises(KnobError, match=name):
        parse_knobs(f"{name}={values[1]}")  # a Hopper knob
    with pytest.raises(KnobError, match=rule):
        parse_knobs(refused)
    j = parse_knobs(str(ROOT / "kernels" / "attention" / "gallery" / "wgmma-tma-j.knobs.json"))
    assert name not in j.recorded()
    return j


def test_wg_v_release_moves_the_wait_for_the_previous_p_v_and_its_v_release_into_the_softmax() -> None:
    j = _hopper_knob_on_leader_j(
        "wg_v_release", ("after_softmax", "mid_softmax", "before_softmax"),
        "mma=wgmma,wg_overlap=false,wg_v_release=before_softmax",
        r"wg_v_release=before_softmax .* it needs wg_overlap=True")
    base = render(j)
    loop_of = lambda src: src.split("        for (int j = 1; j < nb; ++j) {\n")[1].split(  # noqa: E731
        "        turn_wait();\n        issue_pv(nb - 1);\n")[0]
    # the default: after the whole softmax, then O's rescale
    assert loop_of(base).index("softmax_any(j, alpha, any);") < loop_of(base).index(
        "release(v_empty(slot(j - 1)));") < loop_of(base).index("rescale(alpha, any);")
    for value, suffix in (("mid_softmax", "-vmid"), ("before_softmax", "-vbefore")):
        k = j.replace(wg_v_release=value).validate()
        assert k.slug().endswith(suffix) and k.recorded()["wg_v_release"] == value
        src = render(k)
        assert not [str(f) for f in check_source(src) if f.blocking]
        # only the consumers change: past the recorded setting, everything up to the producer's
        # call is j's
        head = "      if (tid == 0) sm90_produce_tma<D>(a, sc, maps, q_s, k_s, v_s, bars);\n"
        assert src.split(head)[0].split("\n#include", 1)[1] == base.split(head)[0].split("\n#include", 1)[1]
        loop = loop_of(src)
        assert loop.count("release(v_empty(slot(j - 1)));") == 1 and loop.count("wg_wait0();") == 1
        if value == "before_softmax":
            assert loop.index("wg_wait0();") < loop.index("release(v_empty(slot(j - 1)));") < loop.index(
                "softmax_any(j, alpha, any);") < loop.index("rescale(alpha, any);")
            continue
        # mid_softmax: the wait and the release are the callback the softmax runs after its first
        # row; a probe of the V stage's full barrier (passed already) comes first, and the first
        # row's probabilities before it
        callback = loop.split("softmax_any(j, alpha, any, [&] {")[1].split("          });\n")[0]
        order = ["wg_fence_regs(s);", "mbar_wait(v_full(slot(j - 1)), ((gb + uint32_t(j - 1)) / S) & 1u);",
                 "wg_wait0();", "wg_fence_regs(o);", "release(v_empty(slot(j - 1)));"]
        assert [callback.index(x) for x in order] == sorted(callback.index(x) for x in order)
        assert loop.index("});") < loop.index("rescale(alpha, any);")
        softmax = src.split("    auto softmax = [&](int j, float (&alpha)[2], bool& any_rescale, auto masked_tag, "
                            "auto mid) {\n")[1].split("\n    };\n")[0]
        assert softmax.endswith(
            "        l_run[h] = l_run[h] * al + rs;\n"
            "        if (h == 0) mid();  // wg_v_release=mid_softmax: between the two rows\n      }")
        # every call site passes a callback: the first block's and the plain loop's do nothing
        assert src.count("softmax_any(0, alpha, any, [] {});") == 1
        assert src.count("softmax_any(j, alpha, any, [] {});") == 1
        assert src.count("softmax(j, alpha, any_rescale, TrueTag{}, mid);") == 2
        # with clusters the release reaches the peer CTA's barrier too
        cl = loop_of(render(k.replace(wg_cluster=2).validate()))
        assert "release_kv(v_empty(slot(j - 1)));" in cl.split("softmax_any(j, alpha, any, [&] {")[1]


def _fragment_slots(src: str) -> dict[tuple[int, int], tuple[int, int]]:
    """Which two probabilities of s (fp32, the accumulator layout) each P fragment register
    (set index kk, register i) packs, as pack() writes them and as wg_p_buffers=2's softmax does:
    {(kk, i): (first, second)}, the C index expressions evaluated for every kk, nt and h."""
    kn = 8  # d128: BN = 128 keys, eight k16 steps of P V
    slots: dict[tuple[int, int], tuple[int, int]] = {}
    for i, a, b in re.findall(r"pf\[kk\]\[(\d)\] = pack_bf16\(s\[([^]]+)\], s\[([^]]+)\]\);", src):
        for kk in range(kn):
            slots[(kk, int(i))] = (eval(a, {"kk": kk}), eval(b, {"kk": kk}))
    return slots


def test_wg_p_buffers_packs_p_beside_the_exponentials_into_the_set_no_p_v_reads() -> None:
    assert KNOB_LAYER["wg_p_buffers"] == "math" and KNOB_SPACE["math"]["wg_p_buffers"] == (1, 2)
    with pytest.raises(KnobError, match="wg_p_buffers"):
        parse_knobs("wg_p_buffers=2")  # a Hopper knob
    for refused in ("mma=wgmma,wg_load=tma,wg_overlap=false,wg_p_buffers=2", "mma=wgmma,wg_p_buffers=2"):
        with pytest.raises(KnobError, match=r"wg_p_buffers=2 .* it needs wg_overlap=True and wg_load=tma"):
            parse_knobs(refused)
    for other in ("wg_v_release=mid_softmax", "wg_k_wait=before_turn"):
        with pytest.raises(KnobError, match=r"wg_p_buffers=2 rewrites the overlapped loop"):
            parse_knobs(f"mma=wgmma,wg_load=tma,wg_p_buffers=2,{other}")
    j = parse_knobs(str(ROOT / "kernels" / "attention" / "gallery" / "wgmma-tma-j.knobs.json"))
    assert "wg_p_buffers" not in j.recorded()
    k = j.replace(wg_p_buffers=2).validate()
    assert k.slug().endswith("-p2") and k.recorded()["wg_p_buffers"] == 2
    base, src = render(j), render(k)
    assert not [str(f) for f in check_source(src) if f.blocking]
    # only the consumers change: up to the producer's call, everything past the recorded setting is j's
    head = "      if (tid == 0) sm90_produce_tma<D>(a, sc, maps, q_s, k_s, v_s, bars);\n"
    assert src.split(head)[0].split("\n#include", 1)[1] == base.split(head)[0].split("\n#include", 1)[1]
    # the second set exists where registers allow it: d128 and d256 of the copy-engine build
    assert "    constexpr bool kTwoP = D >= 128 && kTma;\n    uint32_t pg[kTwoP ? KN : 1][4];\n" in src
    # the softmax packs each row's probabilities after its exponentials, into the fragment
    # registers pack() would have filled: the same layout, register for register
    softmax = src.split("auto masked_tag, uint32_t (*pn)[4]) {\n")[1].split("\n    };\n")[0]
    inline = softmax.split("if constexpr (kTwoP) {")[1]
    assert softmax.index("rs += pv;") < softmax.index("if constexpr (kTwoP) {") < softmax.index(
        "l_run[h] = l_run[h] * al + rs;")
    lhs, a, b = re.search(r"pn\[(.+?)\] = pack_bf16\(s\[([^]]+)\], s\[([^]]+)\]\);", inline).groups()
    kk_expr, i_expr = lhs.split("][")
    inline_slots = {}
    for nt in range(16):  # NT: BN / 8 column tiles of 8 keys
        for h in range(2):
            env = {"nt": nt, "h": h}
            key = (eval(kk_expr.replace("/", "//"), env), eval(i_expr, env))
            assert key not in inline_slots
            inline_slots[key] = (eval(a, env), eval(b, env))
    assert inline_slots == _fragment_slots(src) and len(inline_slots) == 32
    # the overlapped loop: two steps a turn of the loop, the sets alternating; each step issues P V
    # of block j - 1 from the set block j - 1's softmax filled, then block j's softmax fills the
    # other one, before the wait for that P V
    two = src.split("        if constexpr (kTwoP) {\n")[1].split("        } else {\n        pack();\n")[0]
    step = two.split("auto step = [&](int j, uint32_t (&pn)[KN][4], const uint32_t (&pp)[KN][4]) {\n")[1]
    step = step.split("          };\n")[0]
    order = ["issue_qk(j);", "issue_pv(j - 1, pp);", "turn_pass();", "softmax_any(j, alpha, any, pn);",
             "wg_wait0();", "release(v_empty(slot(j - 1)));", "rescale(alpha, any);"]
    assert [step.index(x) for x in order] == sorted(step.index(x) for x in order)
    loop = two.split("for (int j = 1; j < nb; j += 2) {")[1].split("          }\n")[0]
    assert [line.strip() for line in loop.strip().splitlines()[1:]] == [
        "step(j, pg, pf);", "if (j + 1 == nb) break;", "step(j + 1, pf, pg);"]
    # block 0 packs into pf, so block nb - 1's P is in pg exactly when nb - 1 is odd
    assert src.count("        softmax_any(0, alpha, any, pf);\n") == 1
    tail = two.split("          turn_wait();\n          if ((nb - 1) & 1) {\n")[1]
    assert tail.startswith("            issue_pv(nb - 1, pg);\n          } else {\n            issue_pv(nb - 1, pf);\n")
    # d64 and the cp.async build keep one set, packed once P V of block j - 1 is done
    one = src.split("        } else {\n        pack();\n")[1].split("        issue_pv(nb - 1, pf);\n")[0]
    assert one.index("issue_pv(j - 1, pf);") < one.index("softmax_any(j, alpha, any, pf);") < one.index(
        "wg_wait0();") < one.index("          pack();")
    # the block-by-block loop (no P V in flight in the softmax) packs inside it with two sets
    plain = src.split("    } else {\n      for (int j = 0; j < nb; ++j) {\n")[1]
    assert "        if constexpr (!kTwoP) pack();" in plain.split("issue_pv(j, pf);")[0]


def test_wg_p_long_blocks_sends_only_long_calls_to_the_two_set_instantiation() -> None:
    assert KNOB_LAYER["wg_p_long_blocks"] == "math" and KNOB_SPACE["math"]["wg_p_long_blocks"] == (0, 32, 64, 128)
    with pytest.raises(KnobError, match="wg_p_long_blocks"):
        parse_knobs("wg_p_long_blocks=64")  # a Hopper knob
    for refused in ("mma=wgmma,wg_load=tma,wg_p_long_blocks=64",  # one set: nothing to choose between
                    "mma=wgmma,wg_load=tma,wg_full_order=m_fastest,wg_l2_sections=32,wg_cluster=2,"
                    "wg_p_buffers=2,wg_p_long_blocks=64"):
        with pytest.raises(KnobError, match=r"wg_p_long_blocks=64 .* needs wg_p_buffers=2 .* wg_cluster=1"):
            parse_knobs(refused)
    leader = parse_knobs(str(ROOT / "kernels" / "attention" / "gallery" / "wgmma-tma-l.knobs.json"))
    assert "wg_p_long_blocks" not in leader.recorded()
    p2 = leader.replace(wg_p_buffers=2).validate()
    k = p2.replace(wg_p_long_blocks=64).validate()
    assert k.slug().endswith("-p2-solo-plong64") and k.recorded()["wg_p_long_blocks"] == 64
    base, src = render(p2), render(k)
    assert not [str(f) for f in check_source(src) if f.blocking]
    # the second set only in the kLong instantiation; the kernel and its prepare take the argument
    assert "    constexpr bool kTwoP = D >= 128 && kTma && kLong;" in src
    assert "    constexpr bool kTwoP = D >= 128 && kTma;\n" in base
    assert src.count("template <int D, bool kTma, bool kSolo = false, bool kLong = false>\n") == 2
    assert "cudaFuncSetAttribute(attn_fwd_sm90<D, kTma, kSolo, kLong>," in src
    assert "constexpr long long kPLongBlocks = 64;  // wg_p_long_blocks" in src
    # the host: a long call (head dims with two sets only) takes the kLong launch; decode's solo
    # launch comes first and stays one-set, every other call takes the ordinary one-set kernel
    launch = src.split("int launch_any(const SocraticAttentionArgs* a, cudaStream_t stream) {")[1].split("\n}\n")[0]
    assert launch.index("if (tma && s.mtotal <= 64) {") < launch.index(
        "} else if (tma && long_call<D>(a, s)) {") < launch.index("} else if (tma) {")
    assert ("    if constexpr (D >= 128) {\n      const int le = prepare_sm90<D, true, false, true>();\n"
            "      if (le != cudaSuccess) return le;\n"
            "      attn_fwd_sm90<D, true, false, true><<<grid, Sm90Cfg<D>::kThreads, Sm90Cfg<D>::kSmem, stream>>>"
            "(*a, s, maps);\n    }\n") in launch
    # the estimate: every tile's key blocks (as the kernel's tiles count them, causal blocks past
    # the diagonal skipped) over the SMs, against the knob; head dim 64 never
    rule = src.split("bool long_call(const SocraticAttentionArgs* a, const Sched& s) {")[1].split("\n}\n")[0]
    assert "if constexpr (D < 128) {" in rule and "return false;" in rule
    assert "if (kCausalSkip && a->causal) kv_hi = max(0, min(sk, qi_last + offset + 1));" in rule
    assert "return sum * s.heads_grid * a->batch >= (long long)kPLongBlocks * num_sms();" in rule
    # nothing else moves: lines added are the record's, the constant, the rule and the long launch
    # (six); lines changed are the two template heads, cudaFuncSetAttribute's argument and kTwoP
    changed = set(src.splitlines()) - set(base.splitlines())
    assert len(src.splitlines()) - len(base.splitlines()) == 1 + 1 + len(_P_LONG_RULE_LINES(src)) + 6
    assert all("kLong" in line or "long_call" in line or "wg_p_long_blocks" in line or "kPLongBlocks" in line
               or line in rule.splitlines() or line in launch.splitlines()
               or line == '//    "wg_solo_decode": true,' for line in changed)
    # without the one-consumer decode kernel the kernel has two template arguments before kLong
    plain = render(parse_knobs("mma=wgmma,wg_load=tma,wg_p_buffers=2,wg_p_long_blocks=32"))
    assert plain.count("template <int D, bool kTma, bool kLong = false>\n") == 2
    assert "attn_fwd_sm90<D, true, true><<<grid, Sm90Cfg<D>::kThreads," in plain
    assert "cudaFuncSetAttribute(attn_fwd_sm90<D, kTma, kLong>," in plain


def _P_LONG_RULE_LINES(src: str) -> list[str]:
    """The lines of long_call and its comment (what wg_p_long_blocks adds before plan_sm90)."""
    head = "// wg_p_long_blocks: whether a call is long enough"
    body = src.split(head)[1].split("template <int D>\nSched plan_sm90(")[0]
    return (head + body).splitlines()


def test_wg_solo_decode_launches_calls_of_one_warpgroup_of_rows_on_a_one_consumer_instantiation() -> None:
    assert KNOB_LAYER["wg_solo_decode"] == "tiling" and KNOB_SPACE["tiling"]["wg_solo_decode"] == (False, True)
    with pytest.raises(KnobError, match="wg_solo_decode"):
        parse_knobs("wg_solo_decode=true")  # a Hopper knob
    for refused in ("mma=wgmma,wg_decode=wgmma,wg_solo_decode=true",  # the cp.async producer
                    "mma=wgmma,wg_load=tma,wg_solo_decode=true",  # decode on the mma.sync tile
                    "mma=wgmma,wg_load=tma,wg_decode=wgmma,wg_full_order=m_fastest,wg_l2_sections=32,"
                    "wg_cluster=2,wg_solo_decode=true",
                    "mma=wgmma,wg_load=tma,wg_decode=wgmma,wg_consumers=1,wg_pingpong=false,wg_solo_decode=true"):
        with pytest.raises(KnobError, match=r"wg_solo_decode=True .* needs wg_load=tma and wg_decode=wgmma"):
            parse_knobs(refused)
    k = parse_knobs(str(ROOT / "kernels" / "attention" / "gallery" / "wgmma-tma-k.knobs.json"))
    assert "wg_solo_decode" not in k.recorded()
    solo = k.replace(wg_solo_decode=True).validate()
    assert solo.slug().endswith("-solo") and solo.recorded()["wg_solo_decode"] is True
    base, src = render(k), render(solo)
    assert not [str(f) for f in check_source(src) if f.blocking]
    kernel = src.split("__global__ void __launch_bounds__(kSolo ? 256 : Sm90Cfg<D>::kThreads, 1) attn_fwd_sm90(")[1]
    kernel = kernel.split("\n}\n")[0]
    assert src.count("template <int D, bool kTma, bool kSolo = false>\n") == 2  # the kernel and its prepare
    assert "  constexpr int HC = kSolo ? 1 : WgC<D>::HC;" in kernel
    # the empty barriers expect the launched consumers' warps; turns and register hand-over only
    # where a second consumer exists
    assert kernel.count(", 4 * HC);") == 4 and ", 4 * WgC<D>::HC);" in base
    assert kernel.count("if constexpr (HC > 1) asm volatile(\"setmaxnreg.") == 2
    assert kernel.count("if constexpr (kWgPingpong && HC > 1)") == 4 and "if constexpr (kWgPingpong) " not in kernel
    # the host: calls of at most 64 (packed) rows take the 256-thread launch, the rest the ordinary one
    launch = src.split("  if (tma && s.mtotal <= 64) {  // wg_solo_decode")[1].split("  cudaError_t e = ")[0]
    assert ("    const int se = prepare_sm90<D, true, true>();\n    if (se != cudaSuccess) return se;\n"
            "    attn_fwd_sm90<D, true, true><<<grid, 256, Sm90Cfg<D>::kSmem, stream>>>(*a, s, maps);\n"
            "  } else if (tma) {\n    attn_fwd_sm90<D, true><<<grid, Sm90Cfg<D>::kThreads,") in launch
    assert "cudaFuncSetAttribute(attn_fwd_sm90<D, kTma, kSolo>," in src
    # nothing else moves: the rest of the file is the leader's, line for line
    assert len(src.splitlines()) - len(base.splitlines()) == 6  # the record, HC, the launch
    # without three d64 consumers (wg_wide_d64) the count is kWgConsumers: the same edits
    plain = render(parse_knobs("mma=wgmma,wg_load=tma,wg_decode=wgmma,wg_solo_decode=true"))
    assert "  constexpr int HC = kSolo ? 1 : kWgConsumers;" in plain and plain.count(", 4 * HC);") == 3
    assert "if constexpr (kWgPingpong) " not in plain and "attn_fwd_sm90<D, true, true><<<grid, 256," in plain


def test_wg_v_ring_deeper_gives_v_a_stage_more_than_k_where_shared_memory_holds_it() -> None:
    from kernels.attention.family.space import MAX_SMEM_BYTES

    j = _hopper_knob_on_leader_j(
        "wg_v_ring", ("same", "deeper"), "mma=wgmma,wg_load=tma,wg_v_ring=deeper",
        r"wg_v_ring=deeper .* it needs wg_load=tma and wg_kv_order=k_ahead")
    for other in (dict(wg_cluster=2), dict(wg_idle_rows="skip"), dict(wg_kv_order="kv")):
        with pytest.raises(KnobError, match=r"wg_v_ring=deeper .* written for wg_cluster=1 and wg_idle_rows=compute"):
            j.replace(wg_v_ring="deeper", **other).validate()
    k = j.replace(wg_v_ring="deeper").validate()
    assert k.slug().endswith("-vdeep") and k.recorded()["wg_v_ring"] == "deeper"
    # d128 and d256 get a third V stage beside their Q buffers (two at d128, one at d256); d64 keeps
    # its four; none of it takes a Q buffer away, and the bytes are the layout's
    assert [(k.wg_stages_at(d), k.wg_v_stages_at(d), k.wg_q_buffers(d)) for d in (64, 128, 256)] == [
        (4, 4, 2), (2, 3, 2), (2, 3, 1)]
    assert k.wg_smem_bytes(128) == (2 * 128 + 5 * 128) * 128 * 2 + 8 * (2 * 2 + 4 * 3) + 96 + 1024
    assert k.wg_smem_bytes(256) == (128 + 5 * 64) * 256 * 2 + 8 * (2 + 4 * 3) + 96 + 1024
    assert k.wg_smem_bytes(128) <= MAX_SMEM_BYTES and k.wg_smem_bytes(256) <= MAX_SMEM_BYTES
    assert j.wg_smem_bytes(128) == k.wg_smem_bytes(128) - 128 * 128 * 2 - 8 * 4
    # where a fourth would not fit (three K stages and one Q buffer at d128), V's ring stays K's
    three = k.replace(wg_stages_d128=3).validate()
    assert (three.wg_stages_at(128), three.wg_v_stages_at(128), three.wg_q_buffers(128)) == (3, 3, 1)
    src = render(k)
    assert not [str(f) for f in check_source(src) if f.blocking]
    consts = src.split("// wg_v_ring=deeper: V stages per head_dim")[1].split("\n\n")[0]
    assert "struct WgVStages<128> {\n  static constexpr int value = 3;" in consts
    assert "struct WgVStages<256> {\n  static constexpr int value = 3;" in consts and "<64>" not in consts
    assert "  static constexpr int SK = WgStages<D>::value;" in src
    assert "  static constexpr int S = WgVStages<D>::value;" in src
    assert "kBarOff = QS * kQBytes + (SK + S) * kKVBytes;" in src and "kBars = 2 * QS + 4 * S;" in src
    # V's buffers follow K's SK stages; the barriers keep their spacing by S (K's use the first SK)
    assert "  const uint32_t v_s = k_s + SK * C::kKVBytes;\n" in src
    assert "auto k_full = [&](int s) { return bars + 8 * (2 + s); };" in src
    assert "auto k_empty = [&](int s) { return bars + 8 * (2 + 2 * S + s); };" in src
    # every place K's stage or phase is formed uses SK, every place V's is formed uses S
    producer = src.split("__device__ __forceinline__ void sm90_produce_tma(")[1].split("\n}\n")[0]
    assert ("const int st = int(is_k ? gj % SK : gj % S);" in producer
            and "const uint32_t ph = (is_k ? gj / SK : gj / S) & 1u;" in producer
            and "if (gj >= R) mbar_wait(empty, ph ^ 1u);" in producer
            and "const uint32_t R = is_k ? uint32_t(SK) : uint32_t(S);" in producer)
    kernel = src.split("__global__ void __launch_bounds__(Sm90Cfg<D>::kThreads, 1) attn_fwd_sm90(")[1]
    cp_async = kernel.split("const int p = tid;  // 0..127")[1].split("cp_async_wait<0>();")[0]
    assert "mbar_wait(k_empty(sk), ((gj / SK) & 1u) ^ 1u);" in cp_async and "cp_async_arrive(k_full(sk));" in cp_async
    assert "mbar_wait(v_empty(st), ph ^ 1u);" in cp_async and "const int st = int(gj % S);" in cp_async
    qk = kernel.split("auto issue_qk = [&](int j) {\n")[1].split("    };\n")[0]
    pv = kernel.split("auto issue_pv = [&](int j) {\n")[1].split("    };\n")[0]
    assert "% SK);" in qk and "/ SK) & 1u" in qk and "% S);" in pv and "/ S) & 1u" in pv and "SK" not in pv
    assert "k_empty(slot(" not in src and src.count("release(k_empty(kslot(") == 3
    assert "release(v_empty(slot(j - 1)));" in kernel and "v_empty(kslot(" not in src
    # with K waited for before the turn (wg_k_wait), that wait uses K's ring too
    kw = render(k.replace(wg_k_wait="before_turn").validate())
    assert "mbar_wait(k_full(int((gb + uint32_t(j)) % SK)), ((gb + uint32_t(j)) / SK) & 1u);" in kw
    # unset, the leader's text is untouched
    assert render(j) == (ROOT / "kernels" / "attention" / "gallery" / "wgmma-tma-j.cu").read_text()


def test_wg_k_wait_before_turn_waits_for_k_before_the_warpgroup_takes_its_turn() -> None:
    j = _hopper_knob_on_leader_j(
        "wg_k_wait", ("in_turn", "before_turn"), "mma=wgmma,wg_load=tma,wg_k_wait=before_turn,wg_kv_wait=first",
        r"wg_k_wait=before_turn .* it needs wg_kv_wait=each, not first")
    k = j.replace(wg_k_wait="before_turn").validate()
    assert k.slug().endswith("-kwait") and k.recorded()["wg_k_wait"] == "before_turn"
    for src in (render(k), render(k.replace(wg_overlap=False).validate()), render(k.replace(wg_cluster=2).validate()),
                render(parse_knobs("mma=wgmma,wg_k_wait=before_turn"))):
        assert not [str(f) for f in check_source(src) if f.blocking]
        issue_qk = src.split("    auto issue_qk = [&](int j) {\n")[1].split("    };\n")[0]
        assert "k_full" not in issue_qk and "wgmma_ss<BN>(s, " in issue_qk  # the turn issues only
        consumers = src.split("    auto issue_qk = [&](int j) {\n")[1].split("    // Epilogue:")[0]
        # every S = Q K^T of the computing loops: K waited for, then the turn, then the wgmmas
        issues = re.findall(r"\n( *)turn_wait\(\);\n\1issue_qk\((\w+)\);", consumers)
        assert len(issues) == 3 and all(
            f"{ind}wait_k({j});\n{ind}turn_wait();\n{ind}issue_qk({j});" in consumers for ind, j in issues)
        assert src.count("wait_k(") == 3 and src.count("auto wait_k = ") == 1  # three calls, one helper
        wait_k = src.split("    auto wait_k = [&](int j) { ")[1].split(" };\n")[0]
        assert wait_k == "mbar_wait(k_full(int((gb + uint32_t(j)) % S)), ((gb + uint32_t(j)) / S) & 1u);"
        # V's wait stays inside the turn, between the two products
        assert "mbar_wait(v_full(st), ((gb + uint32_t(j)) / S) & 1u);" in src.split(
            "    auto issue_pv = [&](int j) {\n")[1].split("    };\n")[0]


def test_wg_kv_wait_first_leaves_the_waits_to_the_first_warpgroup_in_the_turn_order() -> None:
    assert KNOB_LAYER["wg_kv_wait"] == "memory" and KNOB_SPACE["memory"]["wg_kv_wait"] == ("each", "first")
    with pytest.raises(KnobError, match=r"wg_kv_wait=first .* it needs wg_load=tma and wg_pingpong=True"):
        parse_knobs("mma=wgmma,wg_load=tma,wg_consumers=1,wg_pingpong=false,wg_kv_wait=first")
    with pytest.raises(KnobError, match=r"wg_kv_wait=first .* it needs wg_load=tma"):
        parse_knobs("mma=wgmma,wg_kv_wait=first")
    gallery = ROOT / "kernels" / "attention" / "gallery"
    g = parse_knobs(str(gallery / "wgmma-tma-g.knobs.json"))
    k = g.replace(wg_kv_fence="cp_async", wg_kv_wait="first").validate()
    assert k.slug().endswith("-nofence-waitfirst") and "wg_kv_wait" not in g.recorded()
    src = render(k)
    assert not [str(x) for x in check_source(src) if x.blocking]
    consumer = src.split("// ---- consumer warpgroups")[1].split("// Epilogue:")[0]
    for name, bar in (("issue_qk", "k_full"), ("issue_pv", "v_full")):
        body = consumer.split(f"auto {name} = [&](int j) {{")[1].split("};")[0]
        assert f"if (!kTma || c == 0) mbar_wait({bar}(st), ((gb + uint32_t(j)) / S) & 1u);" in body
    # consumer 0 takes the first turn, and every issue sits inside a turn, so the others issue a
    # block's wgmmas only after consumer 0 has waited for it
    assert "if (c == WgC<D>::HC - 1) asm volatile(\"bar.arrive 1, 256;\\n\" ::: \"memory\");" in consumer
    calls = re.findall(r"turn_wait\(\);|issue_qk\(\w+(?: - 1)?\);|issue_pv\(\w+(?: - 1)?\);|turn_pass\(\);",
                       consumer.split("if constexpr (kWgOverlap) {")[1])
    inside = False
    for call in calls:
        if call == "turn_wait();":
            inside = True
        elif call == "turn_pass();":
            inside = False
        else:
            assert inside, calls
    # the Q buffer's wait stays with every warpgroup (each reads its tile from the slot after it)
    assert consumer.count("mbar_wait(q_full_bar(bars, tc, C::QS, S), uint32_t(tc / C::QS) & 1u);") == 2



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

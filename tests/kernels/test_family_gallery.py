"""The gallery: each kernel renders from its knob file, its reports measured that kernel (the same
file, or one with the same PTX), every setting near it renders, and settings of the space build."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from harness.compile import compile_kernel
from harness.static_checks import check_source
from kernels.attention.family import (
    LAYERS,
    Knobs,
    default_knobs,
    neighbours,
    parse_knobs,
    render,
)
from kernels.attention.family.space import covering_sample
from tests.conftest import HAS_NVCC, ROOT

needs_nvcc = pytest.mark.skipif(not HAS_NVCC, reason="nvcc not installed")


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


TMA_GALLERY = ["wgmma-tma-a", "wgmma-tma-b", "wgmma-tma-c", "wgmma-tma-d", "wgmma-tma-e", "wgmma-tma-f",
               "wgmma-tma-g", "wgmma-tma-h", "wgmma-tma-i", "wgmma-tma-j", "wgmma-tma-k", "wgmma-tma-l",
               "wgmma-tma-m", "wgmma-tma-n"]


@pytest.mark.parametrize("name", TMA_GALLERY)
def test_tma_gallery_reports_were_measured_on_a_file_with_the_ptx_of_the_gallery_file(name: str) -> None:
    # A report names the sha256 of the strict build it measured. A gallery file re-rendered since
    # (the family's knobs became constants in its CUDA) has its own sha256; gallery_ptx.json, written
    # by `python3 -m kernels.attention.family.ptx_equivalence --record`, ties the two: the measured
    # file and today's compile to the same PTX.
    import hashlib

    gallery = ROOT / "kernels" / "attention" / "gallery"
    report = json.loads((gallery / f"{name}.json").read_text())
    source = (gallery / f"{name}.cu").read_text()
    strict = "#define SOCRATIC_SM90_TMA_STRICT 1\n" + source
    record = json.loads((ROOT / "kernels" / "attention" / "family" / "gallery_ptx.json").read_text())[name]
    measured = report["compile"]["source_sha256"]
    if measured != hashlib.sha256(strict.encode()).hexdigest():
        assert measured == record["measured_strict"]
        assert record["rendered"] == hashlib.sha256(source.encode()).hexdigest()
        assert record["ptx"] in ("identical", "identical (reordered)")
    assert report["verdict"]["status"] == "accepted"
    assert report["geomean"]["all"]["passed"] == report["geomean"]["all"]["scenarios"] == 182
    assert set(report["settings"]["peers"]) == {"cudnn", "flash", "fa3"}


def test_every_gallery_file_is_recorded_as_compiling_to_the_ptx_it_was_measured_with() -> None:
    import hashlib

    gallery = ROOT / "kernels" / "attention" / "gallery"
    record = json.loads((ROOT / "kernels" / "attention" / "family" / "gallery_ptx.json").read_text())
    for knob_file in sorted(gallery.glob("*.knobs.json")):
        name = knob_file.name.removesuffix(".knobs.json")
        source = (gallery / f"{name}.cu").read_text()
        assert record[name]["rendered"] == hashlib.sha256(source.encode()).hexdigest(), name
        assert record[name]["ptx"] in ("byte-identical", "identical", "identical (reordered)"), name


def test_every_setting_one_knob_from_a_gallery_kernel_renders() -> None:
    gallery = ROOT / "kernels" / "attention" / "gallery"
    count = 0
    for knob_file in sorted(gallery.glob("*.knobs.json")):
        base = parse_knobs(str(knob_file))
        for layer in LAYERS:
            for k in neighbours(base, layer):
                assert "extern \"C\"" in render(k), k.slug()
                count += 1
    assert count > 1000


def test_every_setting_one_knob_from_the_leader_passes_the_static_checks() -> None:
    leader = parse_knobs(str(ROOT / "kernels" / "attention" / "gallery" / "wgmma-tma-n.knobs.json"))
    for layer in LAYERS:
        for k in neighbours(leader, layer):
            assert not [str(f) for f in check_source(render(k)) if f.blocking], k.slug()


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
